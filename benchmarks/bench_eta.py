"""Benchmark: the ETA's history read (`asyncclient.eta.read_expected`) for 200 tests of 50
finished runs each, against the emulator in a process of its own, beside the flakiness
analysis reading the same tests' history (`AsyncSession.flakiness(tests=...)`), the other way
the package reads a history.

    .venv/bin/python benchmarks/bench_eta.py [--tests 200] [--runs 50] [--rounds 5]

Prints each way's wall time, client CPU and requests (medians of the rounds, the two ways in
turns, the order reversed every other round); exits 1 if a target is missed: one request per
test, under 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Emulator
from bench_flaky import KEY, seed

from asyncclient import AsyncSession
from asyncclient.eta import read_expected


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Counting(AsyncSession):
    """AsyncSession counting its list_runs calls (each one request here: no ids)."""

    calls = 0

    async def list_runs(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        return await super().list_runs(*args, **kwargs)


async def ours(url: str, tests: list[str]) -> dict[str, Any]:
    async with _Counting(KEY, url, proxy="direct") as session:
        await session.list_builds("p_bench")  # connect, outside the figures
        _Counting.calls = 0
        cpu, began = _cpu(), time.perf_counter()
        expected = await read_expected(session, tests)
        wall, used = time.perf_counter() - began, _cpu() - cpu
    learned = sum(1 for e in expected.values() if e.samples)
    return {"wall": wall, "cpu": used, "requests": _Counting.calls, "learned": learned}


async def flakiness(url: str, tests: list[str]) -> dict[str, Any]:
    async with AsyncSession(KEY, url, proxy="direct") as session:
        await session.list_builds("p_bench")
        cpu, began = _cpu(), time.perf_counter()
        report = await session.flakiness("p_bench", tests=tests)
        wall, used = time.perf_counter() - began, _cpu() - cpu
    return {"wall": wall, "cpu": used, "requests": report.requests, "learned": len(report.tests)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(
        f"bench_eta: Python {platform.python_version()}, {platform.machine()}; {args.tests} "
        f"tests x {args.runs} finished runs; rounds {args.rounds}; medians"
    )
    tests = [f"t_{t:03d}" for t in range(args.tests)]
    ways = [("read_expected() (the ETA)", ours), ("flakiness(tests=...)", flakiness)]
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in ways}
    with Emulator(seed=seed(args.tests, args.runs)) as emu:
        for round_no in range(args.rounds):
            for label, way in ways if round_no % 2 == 0 else ways[::-1]:
                results[label].append(asyncio.run(way(emu.url, tests)))
    print(f"  {'client':28} {'wall s':>8} {'CPU s':>8} {'requests':>9} {'tests learned':>14}")
    medians = {}
    for label, rows in results.items():
        wall = statistics.median(r["wall"] for r in rows)
        cpu = statistics.median(r["cpu"] for r in rows)
        medians[label] = (wall, cpu, rows[0]["requests"])
        print(
            f"  {label:28} {wall:8.2f} {cpu:8.2f} {rows[0]['requests']:9d} {rows[0]['learned']:14d}"
        )
    wall, cpu, requests = medians["read_expected() (the ETA)"]
    base_wall, base_cpu, base_requests = medians["flakiness(tests=...)"]
    print(
        f"  the ETA's read against the flakiness read: {base_wall / wall:.1f}x the speed, "
        f"{base_cpu / cpu:.1f}x less client CPU, {base_requests / requests:.1f}x fewer requests"
    )
    ok_requests, ok_time = requests <= args.tests, wall < 10.0
    print(
        f"  {requests} requests for {args.tests} tests (target: one per test): "
        f"{'PASS' if ok_requests else 'MISS'}; {wall:.2f} s (target < 10 s): "
        f"{'PASS' if ok_time else 'MISS'}"
    )
    return 0 if ok_requests and ok_time else 1


if __name__ == "__main__":
    sys.exit(main())
