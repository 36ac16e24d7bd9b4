"""Benchmark: `AsyncSession.flakiness` over a project of 60 tests x 200 runs (12,000 runs of two
weeks), against the emulator in a process of its own, beside the way a script without it reads
the same history: each test's listing, then every run's full view (`GET /runs/{id}`, which
carries the build the listing may not).

    .venv/bin/python benchmarks/bench_flaky.py [--tests 60] [--runs 200] [--rounds 5]

Prints each way's wall time, client CPU and requests (medians of the rounds, the two ways in
turns, the order reversed every other round) and their ratios; exits 1 if a target is missed:
the report under 10 s with at most 1 + 5 requests per test.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Emulator

from asyncclient import AsyncSession

KEY = "bench-run"
STATUSES = ("passed",) * 17 + ("failed", "error", "blocked")


def seed(tests: int, runs: int) -> dict[str, Any]:
    """`tests` app tests of one project, each with `runs` finished runs over 14 days on 10
    builds: a third stable, a third flaky (a failure now and then), a third broken lately."""
    rng = random.Random(7)
    made = []
    for t in range(tests):
        kind = t % 3
        history = []
        for r in range(runs):
            days_ago = 13.9 * (1 - r / runs)
            build = f"ab_b{r * 10 // runs}"
            if kind == 0:
                status = "passed"
            elif kind == 1:
                status = rng.choice(STATUSES)
            else:
                status = "failed" if r > runs * 0.6 else "passed"
            history.append({"daysAgo": round(days_ago, 4), "status": status, "build": build})
        made.append(
            {
                "id": f"t_{t:03d}",
                "project": "p_bench",
                "target": "android",
                "appId": "com.example.shop",
                "history": history,
            }
        )
    return {
        "projects": [{"id": "p_bench"}],
        "keys": [
            {"key": KEY, "capability": "run", "projects": ["p_bench"]},
            {"key": "bench-edit", "capability": "edit", "projects": ["p_bench"]},
        ],
        "tests": made,
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def ours(url: str) -> dict[str, Any]:
    async with AsyncSession(KEY, url, proxy="direct") as session:
        await session.list_builds("p_bench")  # connect, outside the figures
        cpu, began = _cpu(), time.perf_counter()
        report = await session.flakiness("p_bench")
        wall, used = time.perf_counter() - began, _cpu() - cpu
    states = {t.state for t in report.tests}
    return {"wall": wall, "cpu": used, "requests": report.requests, "tests": len(report.tests),
            "states": sorted(states)}  # fmt: skip


async def naive(url: str) -> dict[str, Any]:
    """What a script does without flakiness(): list the project's tests, each test's runs,
    then each run in full for its build (8 requests at a time)."""
    async with AsyncSession(KEY, url, proxy="direct") as session:
        await session.list_builds("p_bench")
        cpu, began = _cpu(), time.perf_counter()
        requests = 1
        newest = await session.list_runs(project_id="p_bench", limit=200)
        tests = sorted({r.test_id for r in newest if r.test_id})
        gate = asyncio.Semaphore(8)

        async def one_test(test_id: str) -> int:
            async with gate:
                listing = await session.list_runs(test_id=test_id, limit=200)

            async def full(run_id: str) -> None:
                async with gate:
                    await session.get_run(run_id)

            await asyncio.gather(*(full(r.id) for r in listing))
            return 1 + len(listing)

        requests += sum(await asyncio.gather(*(one_test(t) for t in tests)))
        wall, used = time.perf_counter() - began, _cpu() - cpu
    return {"wall": wall, "cpu": used, "requests": requests, "tests": len(tests), "states": []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=60)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(
        f"bench_flaky: Python {platform.python_version()}, {platform.machine()}, "
        f"{len(__import__('os').sched_getaffinity(0))} CPUs; {args.tests} tests x {args.runs} "
        f"runs; rounds {args.rounds}; medians"
    )
    results: dict[str, list[dict[str, Any]]] = {"flakiness()": [], "listing + GET each run": []}
    with Emulator(seed=seed(args.tests, args.runs)) as emu:
        for round_no in range(args.rounds):
            ways = [("flakiness()", ours), ("listing + GET each run", naive)]
            for label, way in ways if round_no % 2 == 0 else ways[::-1]:
                results[label].append(asyncio.run(way(emu.url)))
    print(f"  {'client':26} {'wall s':>8} {'CPU s':>8} {'requests':>9}")
    medians = {}
    for label, rows in results.items():
        wall = statistics.median(r["wall"] for r in rows)
        cpu = statistics.median(r["cpu"] for r in rows)
        requests = rows[0]["requests"]
        medians[label] = (wall, cpu, requests)
        print(f"  {label:26} {wall:8.2f} {cpu:8.2f} {requests:9d}")
    wall, cpu, requests = medians["flakiness()"]
    base_wall, base_cpu, base_requests = medians["listing + GET each run"]
    bound = 1 + 5 * args.tests
    ok_time, ok_requests = wall < 10.0, requests <= bound
    print(
        f"  flakiness() against the script: {base_wall / wall:.1f}x faster, "
        f"{base_cpu / cpu:.1f}x less client CPU, {base_requests / requests:.0f}x fewer requests"
    )
    print(
        f"  {args.tests * args.runs:,} runs analysed in {wall:.2f} s (target < 10 s): "
        f"{'PASS' if ok_time else 'MISS'}; {requests} requests (target <= 1 + 5 per test = "
        f"{bound}): {'PASS' if ok_requests else 'MISS'}; states seen: "
        f"{', '.join(results['flakiness()'][0]['states'])}"
    )
    return 0 if ok_time and ok_requests else 1


if __name__ == "__main__":
    sys.exit(main())
