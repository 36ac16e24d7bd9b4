"""A job whose change breaks 2 tests while 3 more fail on main's build too, followed with plain
re-runs and with re-runs plus the baseline (`--baseline`), side by side over many seeds.

Each seed is testing.baseline_seed: 7 tests, each with its own usual duration drawn from the
seed (30 to 90 service seconds) and every run varying by up to 20 % (drawn by the emulator from
the run's id); the same seed gives both sides the same tests. Both follow the change's build
with `--retry-failed 1 --retry-strategy at-once`; the second adds `--baseline auto`. It prints,
per side, the job's time (the service's: from the first run's creation to the last run's end,
every run of the job counted, the baseline's too), its device minutes, and how many tests the
report calls pre-existing (3 is right), then the ratio of the job times, seed by seed.

    .venv/bin/python benchmarks/bench_baseline.py [--seeds 20] [--speed 300]
"""

import argparse
import asyncio
import statistics
from typing import Any

from asyncclient import AsyncSession
from asyncclient.suite import SuitePolicy, SuiteRun
from asyncclient.testing import FakeService, baseline_seed

KEY = "shop-run-key"
POLL = 0.01


async def job(seed: int, baseline: bool, speed: float = 300.0) -> dict[str, Any]:
    data = baseline_seed(run_seconds=60.0, jitter=0.2, seed=seed)
    async with FakeService(data, speed=speed) as svc, AsyncSession(KEY, svc.url) as session:
        policy = SuitePolicy(
            retry_failed=1,
            retry_strategy="at-once",
            interval=POLL,
            baseline="auto" if baseline else None,
        )
        suite = SuiteRun.for_project(session, "p_shop", build_ids=["ab_shop_change"], policy=policy)
        report = await suite.wait()
        assert suite.result is not None
        ids = [r.id for r in suite.result.runs]
        ids += [i for t in suite.result.tests if t.baseline for i in t.baseline.runs]
        views = [
            v
            for at in range(0, len(ids), 50)
            for v in await session.list_runs(ids=ids[at : at + 50])
        ]
    began = min(v.created_at for v in views if v.created_at)
    ended = max(v.finished_at for v in views if v.finished_at)
    return {
        # The wire's times are on the wall: the job's service seconds are `speed` times more.
        "seconds": (ended - began).total_seconds() * speed,
        "minutes": report.cost.device_seconds / 60,
        "pre_existing": sum(1 for t in report.tests if t.pre_existing),
    }


async def main(args: argparse.Namespace) -> None:
    rows = []
    for seed in range(args.seeds):
        plain = await job(seed, baseline=False, speed=args.speed)
        based = await job(seed, baseline=True, speed=args.speed)
        rows.append((plain, based))
    print(f"{args.seeds} seeds: 7 tests, 5 failing on the change's build, 3 of them on main's too")
    print("--retry-failed 1 --retry-strategy at-once; service time, medians")
    print(f"{'':28}{'plain re-runs':>16}{'+ --baseline auto':>20}")
    for label, key, unit in (
        ("job time", "seconds", "s"),
        ("device minutes", "minutes", "min"),
        ("tests called pre-existing", "pre_existing", ""),
    ):
        a = statistics.median(p[key] for p, _ in rows)
        b = statistics.median(q[key] for _, q in rows)
        shown = ".0f" if key == "pre_existing" else ".1f"
        print(f"{label:28}{a:>13{shown}} {unit:3}{b:>17{shown}} {unit:3}".rstrip())
    ratios = [q["seconds"] / p["seconds"] for p, q in rows]
    right = sum(1 for _, q in rows if q["pre_existing"] == 3)
    print(
        f"job time with the baseline / without, by seed: median {statistics.median(ratios):.3f}, "
        f"worst {max(ratios):.3f}"
    )
    print(f"the 3 pre-existing found in {right} of {args.seeds} seeds")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--speed",
        type=float,
        default=300.0,
        help="service seconds a second (300: a 60 s run ends in 0.2 s; the client's own "
        "milliseconds stay small beside the service's time)",
    )
    asyncio.run(main(parser.parse_args()))
