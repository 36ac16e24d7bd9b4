"""How many `GET /api/v1/runs?ids=<50 ids>` requests per second the emulator serves.

Starts the emulator in its own process, bulk-creates 10,000 runs that finish at spread-out times,
then polls with several concurrent aiohttp clients. Prints the median of 3 rounds.

    .venv/bin/python benchmarks/bench_emulator.py [--runs 10000] [--clients 8] [--seconds 3]
"""

import argparse
import asyncio
import contextlib
import multiprocessing
import random
import statistics
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import aiohttp

from asyncclient.testing import FakeService

KEY = "bench-key"
SEED: dict[str, Any] = {
    "projects": [{"id": "p_bench", "name": "Benchmark", "plan": "paid", "includedRuns": 1000}],
    "keys": [{"key": KEY, "capability": "run", "projects": ["p_bench"]}],
    "tests": [
        {
            "id": "t_bench",
            "project": "p_bench",
            "title": "Poll me",
            "target": "web",
            "url": "https://bench.example.com",
            "outcome": "passed",
            "requirements": [
                {"title": "The page loads", "result": "passed", "reason": "It loaded."},
                {"title": "The list has items", "result": "passed", "reason": "12 items."},
            ],
            "captures": {"items": 12, "title": "Bench"},
            "queuedSeconds": 5,
            "durationSeconds": 240,
            # Durations from 24 s to 456 s: at speed 60 runs finish all through the measurement.
            "durationJitter": 0.9,
        }
    ],
}


def _serve(conn: Connection) -> None:
    async def main() -> None:
        async with FakeService(SEED, speed=60.0) as svc:
            conn.send(svc.url)
            await asyncio.to_thread(conn.recv)  # any message (or EOF) stops the service

    with contextlib.suppress(EOFError):
        asyncio.run(main())


async def _round(
    url: str, ids: list[str], clients: int, seconds: float, rng: random.Random
) -> tuple[float, float]:
    """(requests per second, server CPU seconds per request) of one round."""
    headers = {"Authorization": f"Bearer {KEY}"}
    queries = [",".join(rng.sample(ids, 50)) for _ in range(2000)]
    sessions = [
        aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=4))
        for _ in range(clients // 2 or 1)
    ]
    count = 0
    stop = 0.0

    async def poll(session: aiohttp.ClientSession, worker: int) -> None:
        nonlocal count
        i = worker
        while time.perf_counter() < stop:
            async with session.get(
                "/api/v1/runs", params={"ids": queries[i % len(queries)]}, headers=headers
            ) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"status {response.status}")
            count += 1
            i += clients

    try:
        async with sessions[0].get("/_emulator/stats") as response:
            cpu_before = (await response.json())["cpuSeconds"]
        began = time.perf_counter()
        stop = began + seconds
        await asyncio.gather(*(poll(sessions[w % len(sessions)], w) for w in range(clients)))
        elapsed = time.perf_counter() - began
        async with sessions[0].get("/_emulator/stats") as response:
            cpu_after = (await response.json())["cpuSeconds"]
    finally:
        for session in sessions:
            await session.close()
    return count / elapsed, (cpu_after - cpu_before) / max(count, 1)


async def _bench(url: str, runs: int, clients: int, seconds: float) -> None:
    async with aiohttp.ClientSession(url) as session:
        ids: list[str] = []
        while len(ids) < runs:
            batch = min(5000, runs - len(ids))
            async with session.post(
                "/_emulator/runs", json={"testId": "t_bench", "count": batch}
            ) as response:
                response.raise_for_status()
                ids.extend((await response.json())["runIds"])
    rng = random.Random(7)
    rates = []
    cpu = []
    for n in range(3):
        rate, cpu_per_request = await _round(url, ids, clients, seconds, rng)
        rates.append(rate)
        cpu.append(cpu_per_request)
        print(f"round {n + 1}  {rate:7.0f} requests/s   server CPU {cpu_per_request * 1e6:4.0f} us")
    median = statistics.median(rates)
    per_request = statistics.median(cpu)
    print(f"GET /api/v1/runs?ids=<50 ids>, {runs} runs, {clients} concurrent clients:")
    print(f"served         {median:7.0f} requests/s  (median of 3; target >= 1000)")
    per_core = 1 / per_request
    print(
        f"server CPU     {per_request * 1e6:7.0f} us/request  ({per_core:.0f} requests/s per core)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child,), daemon=True)
    server.start()
    try:
        if not parent.poll(30):
            print("the emulator did not start", file=sys.stderr)
            return 1
        url = parent.recv()
        asyncio.run(_bench(url, args.runs, args.clients, args.seconds))
    finally:
        parent.send("stop")
        server.join(10)
        if server.is_alive():
            server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
