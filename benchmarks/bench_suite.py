"""Benchmark: what a flaky test costs a job under each retry strategy (rounds, at-once, hedge),
beside the same suite with no flaky test.

The suite: 20 web tests of 60 s (service time), each queued 5 s before it starts; 5 of them
fail 30 % to 50 % of their runs (drawn per run by the emulator), with two weeks of history that
says so (the other 15 passed every earlier run). Every job runs `--retry-failed 2`. Each
strategy gets a fresh emulator (in a process of its own, `--speed` service seconds a wall
second) with the same seed, and runs --jobs jobs one after another (each job's history holds
the ones before it, as a CI fleet's does).

Printed side by side: each strategy's job time in service minutes (p50, p95, mean), its device
minutes (mean), how many jobs passed, and the client's CPU per job (the loop's own cost: the
emulator's CPU is its own process's); then the targets, each with its figure and ratio.
Exits 1 if a target is missed.

    .venv/bin/python benchmarks/bench_suite.py                 # 20 jobs a strategy, ~4 min
    .venv/bin/python benchmarks/bench_suite.py --jobs 5        # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import math
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Emulator

from asyncclient import AsyncSession, SuitePolicy, SuiteRun

KEY = "bench-run"
PROJECT = "p_bench"
TESTS = 20
FLAKY = {"t_00": 0.3, "t_01": 0.35, "t_02": 0.4, "t_03": 0.45, "t_04": 0.5}  # fail rate per run
RUN_SECONDS = 60.0
QUEUE_SECONDS = 5.0
HISTORY_DAYS = 14
HISTORY_RUNS = 28  # two a day


def seed(*, flaky: bool) -> dict[str, Any]:
    tests = []
    for i in range(TESTS):
        test_id = f"t_{i:02d}"
        rate = FLAKY.get(test_id, 0.0) if flaky else 0.0
        history = [
            {
                "daysAgo": HISTORY_DAYS * (n + 0.5) / HISTORY_RUNS,
                # The history's failures at the test's rate, spread evenly.
                "status": "failed"
                if rate and math.floor((n + 1) * rate) > math.floor(n * rate)
                else "passed",
                "durationSeconds": RUN_SECONDS,
                "queuedSeconds": QUEUE_SECONDS,
            }
            for n in range(HISTORY_RUNS)
        ]
        tests.append(
            {
                "id": test_id,
                "project": PROJECT,
                "target": "web",
                "url": "https://shop.example",
                "durationSeconds": RUN_SECONDS,
                "queuedSeconds": QUEUE_SECONDS,
                "flakyRate": rate,
                "history": history,
            }
        )
    return {
        "projects": [{"id": PROJECT, "plan": "paid", "includedRuns": 1_000_000}],
        "keys": [
            {"key": KEY, "capability": "run", "projects": [PROJECT]},
            {"key": "bench-edit", "capability": "edit", "projects": [PROJECT]},
        ],
        "tests": tests,
    }


async def jobs(
    url: str, strategy: str, count: int, speed: float, interval: float
) -> list[dict[str, float]]:
    """`count` jobs one after another: each one's service minutes, device minutes, whether it
    passed, and the client's CPU seconds. Job j's key is the same for every strategy, and the
    emulator draws a flaky run from its start's key (the job's, then `rerun/TEST/N` for the
    N-th run of a test, copy or re-run alike): attempt N of a test fails in job j whatever
    the strategy. The same seeds."""
    found = []
    async with AsyncSession(KEY, url) as session:
        for j in range(count):
            policy = SuitePolicy(
                retry_failed=2,
                retry_strategy=strategy,
                interval=interval,  # type: ignore[arg-type]
            )
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.monotonic()
            suite = SuiteRun.for_project(
                session, PROJECT, policy=policy, idempotency_key=f"bench-job-{j}"
            )
            report = await suite.wait()
            took = time.monotonic() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            found.append(
                {
                    "minutes": took * speed / 60.0,
                    "device": report.cost.device_seconds / 60.0,
                    "passed": 1.0 if report.passed else 0.0,
                    "cpu": cpu,
                }
            )
    return found


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs per strategy (default 20)")
    parser.add_argument("--speed", type=float, default=200.0, help="service s per wall s")
    parser.add_argument(
        "--interval", type=float, default=0.01, help="the watcher's pace, wall seconds"
    )
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {}
    plan = [("no flaky test", "rounds", False)] + [
        (strategy, strategy, True) for strategy in ("rounds", "at-once", "hedge")
    ]
    for label, strategy, flaky in plan:
        with Emulator(seed=seed(flaky=flaky), speed=args.speed) as emulator:
            rows[label] = asyncio.run(
                jobs(emulator.url, strategy, args.jobs, args.speed, args.interval)
            )
        print(f"  {label}: {args.jobs} jobs done", file=sys.stderr)

    print(
        f"{TESTS} tests of {RUN_SECONDS:g} s, {len(FLAKY)} flaky at 30-50 % per run, "
        f"--retry-failed 2, {args.jobs} jobs each (service minutes; speed {args.speed:g})"
    )
    print(f"{'':16} {'p50':>7} {'p95':>7} {'mean':>7} {'device':>8} {'passed':>7} {'CPU/job':>8}")
    figures: dict[str, dict[str, float]] = {}
    for label, found in rows.items():
        minutes = [job["minutes"] for job in found]
        figures[label] = {
            "p50": statistics.median(minutes),
            "p95": p(minutes, 0.95),
            "mean": statistics.fmean(minutes),
            "device": statistics.fmean(job["device"] for job in found),
            "passed": sum(job["passed"] for job in found),
            "cpu": statistics.median(job["cpu"] for job in found),
        }
        f = figures[label]
        print(
            f"{label:16} {f['p50']:7.2f} {f['p95']:7.2f} {f['mean']:7.2f} {f['device']:8.1f} "
            f"{int(f['passed']):4d}/{len(found):<2} {f['cpu']:7.2f}s"
        )
    base, rounds, hedge = figures["no flaky test"], figures["rounds"], figures["hedge"]
    checks = [
        ("hedge p95 / no-flaky p95", hedge["p95"] / base["p95"], 1.25),
        ("hedge mean / rounds mean", hedge["mean"] / rounds["mean"], 0.7),
        ("hedge device / rounds device", hedge["device"] / rounds["device"], 1.5),
        ("rounds p95 / no-flaky p95 (for scale)", rounds["p95"] / base["p95"], math.inf),
        ("client CPU per job, seconds", max(f["cpu"] for f in figures.values()), 1.0),
    ]
    missed = 0
    print()
    for name, value, bound in checks:
        ok = value <= bound
        missed += not ok
        target = "" if math.isinf(bound) else f"  target <= {bound:g}  {'ok' if ok else 'MISSED'}"
        print(f"{name:40} {value:6.2f}{target}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
