"""Client CPU per call: AsyncSession.get_build against bare aiohttp doing the same request.
The emulator runs in a separate process, so time.process_time() here measures only the client.

    .venv/bin/python benchmarks/bench_session.py [--calls 5000] [--rounds 5] [--concurrency 8]

Both sides send the same headers over a connector with the same limit, read the body and parse
the JSON; the session also validates the id, runs its retry wrapper and builds a Build. Rounds
alternate which side goes first; the figure is the median CPU per call over the rounds.
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp

from asyncclient import AsyncSession

SERVER = """
import asyncio, sys
from asyncclient.testing import FakeService

async def main():
    async with FakeService(port=0) as svc:
        print(svc.url, svc.run_key, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


async def _drive(call: Callable[[], Awaitable[object]], calls: int, concurrency: int) -> float:
    """CPU seconds per call for `calls` calls made by `concurrency` workers."""
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    started = time.process_time()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return (time.process_time() - started) / calls


async def bench_session(
    url: str, key: str, build_id: str, calls: int, concurrency: int, limit: int
) -> float:
    async with AsyncSession(key, url, connection_limit=limit) as session:
        for _ in range(50):  # warm the connections and code paths
            await session.get_build(build_id)
        return await _drive(lambda: session.get_build(build_id), calls, concurrency)


async def bench_bare(
    url: str, key: str, build_id: str, calls: int, concurrency: int, limit: int, agent: str
) -> float:
    headers = {"Authorization": f"Bearer {key}", "User-Agent": agent, "Accept": "application/json"}
    target = f"{url}/api/v1/builds/{build_id}"
    timeout = aiohttp.ClientTimeout(total=30.0, connect=10.0)
    connector = aiohttp.TCPConnector(limit=limit)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def one() -> object:
            async with http.get(target, headers=headers, allow_redirects=False) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"bare aiohttp got {resp.status}")
                return json.loads(body)["build"]

        for _ in range(50):
            await one()
        return await _drive(one, calls, concurrency)


async def measure(args: argparse.Namespace, url: str, key: str) -> None:
    async with AsyncSession(key, url) as probe:
        build_id = args.build_id or (await probe.list_builds("p_demo")).builds[0].id
        agent = probe._t.headers["User-Agent"]  # the bare side sends the very same headers
    ours: list[float] = []
    bare: list[float] = []
    for round_no in range(args.rounds):
        order = ("bare", "ours") if round_no % 2 == 0 else ("ours", "bare")
        for side in order:
            if side == "bare":
                bare.append(
                    await bench_bare(
                        url, key, build_id, args.calls, args.concurrency, args.limit, agent
                    )
                )
            else:
                ours.append(
                    await bench_session(
                        url, key, build_id, args.calls, args.concurrency, args.limit
                    )
                )
        print(
            f"round {round_no + 1}: bare {bare[-1] * 1e6:7.1f} us/call   "
            f"AsyncSession {ours[-1] * 1e6:7.1f} us/call"
        )
    bare_median = statistics.median(bare)
    ours_median = statistics.median(ours)
    print(
        f"\n{args.calls} get_build calls x {args.rounds} rounds, concurrency "
        f"{args.concurrency}, connection limit {args.limit} (client CPU, median of rounds)"
    )
    print(f"bare aiohttp   {bare_median * 1e6:7.1f} us/call")
    print(f"AsyncSession   {ours_median * 1e6:7.1f} us/call")
    print(f"ratio          {ours_median / bare_median:7.2f}x  (target <= 1.30x)")


def main(args: argparse.Namespace) -> None:
    if args.url:
        asyncio.run(measure(args, args.url, args.key))
        return
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url, key = server.stdout.readline().split()
        asyncio.run(measure(args, url, key))
    finally:
        assert server.stdin is not None
        server.stdin.close()  # the emulator process stops when its stdin closes
        server.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--limit", type=int, default=64, help="connection limit of both sides")
    parser.add_argument("--url", help="measure against this running service instead")
    parser.add_argument("--key", default="demo-run", help="API key for --url")
    parser.add_argument("--build-id", help="build to fetch (default: the newest of p_demo)")
    main(parser.parse_args())
