"""Finding the build that broke a flaky test, three ways, over many seeds: `asyncclient bisect`
(a build is bad after as many failures in a row as the flake rate needs for 95 %), a plain
binary search (one run a step: a failure is a bad build), and a linear scan from the good build
up (with bisect's rule at each build).

Each seed is a history of 64 builds (testing.regression_seed) where the test broke at a build
drawn from the seed and fails 20 % of its runs on every build before it (the emulator draws
each flake from the run's start key). It prints, per way: how often it named the right build,
its runs and device minutes (mean and worst), and its steps.

    .venv/bin/python benchmarks/bench_bisect.py [--seeds 100] [--builds 64] [--flake 0.2]
"""

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from asyncclient import AsyncSession
from asyncclient.failures.bisect import _Search, bisect, repeats_needed
from asyncclient.testing import FakeService, regression_seed

KEY = "shop-run-key"
SPEED = 60_000.0  # service seconds a second: a 120 s run ends in 2 ms
POLL = 0.005


async def linear(session: AsyncSession, builds: int, flake: float, key: str) -> dict[str, Any]:
    """From the first build after the good one up, each with bisect's rule, to the first bad."""
    steps = builds - 1
    repeats = repeats_needed(flake, steps, 0.95)
    search = _Search(session, "t_checkout", repeats, key, None, None, POLL)
    found = None
    taken = 0
    for n in range(1, builds):
        taken += 1
        step = await search.step(f"ab_shop_{n:03d}")
        if step.verdict == "bad":
            found = f"ab_shop_{n:03d}"
            break
    return {"found": found, "runs": search.started, "minutes": search.spent / 60, "steps": taken}


async def one_seed(seed: int, builds: int, flake: float) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    broken_at = rng.randint(1, builds - 1)
    answer = f"ab_shop_{broken_at:03d}"
    data = regression_seed(builds, broken_at, flake, seed=seed)
    out: dict[str, dict[str, Any]] = {}
    async with FakeService(data, speed=SPEED) as svc, AsyncSession(KEY, svc.url) as session:
        last = f"ab_shop_{builds - 1:03d}"
        for name, rate in (("bisect", None), ("plain binary", 0.0)):
            found = await bisect(
                session, "p_shop", "t_checkout", good="ab_shop_000", bad=last,
                flake_rate=rate, interval=POLL, idempotency_key=f"{name}-{seed}",
            )  # fmt: skip
            out[name] = {
                "found": found.first_bad,
                "runs": found.runs,
                "minutes": found.device_minutes,
                "steps": len(found.steps),
                "repeats": found.repeats,
                "confidence": found.confidence,
            }
        out["linear scan"] = await linear(session, builds, flake, f"linear-{seed}")
    for result in out.values():
        result["right"] = result["found"] == answer
    return out


async def main_async(seeds: int, builds: int, flake: float) -> dict[str, list[dict[str, Any]]]:
    by_way: dict[str, list[dict[str, Any]]] = {}
    for seed in range(seeds):
        for way, result in (await one_seed(seed, builds, flake)).items():
            by_way.setdefault(way, []).append(result)
    return by_way


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--builds", type=int, default=64)
    parser.add_argument("--flake", type=float, default=0.2)
    args = parser.parse_args()
    began = time.monotonic()
    by_way = asyncio.run(main_async(args.seeds, args.builds, args.flake))
    steps = (args.builds - 1).bit_length()
    rule = repeats_needed(args.flake, steps, 0.95)
    print(
        f"{args.seeds} seeds, {args.builds} builds, the test flakes {args.flake:.0%} before its "
        f"break; bisect's rule: {rule} failures in a row (log2 steps {steps}, so at most "
        f"{steps * rule} runs on failing builds) when the flake rate is known; from the "
        f"history it uses the rate's upper 95 % bound ({time.monotonic() - began:.0f} s)\n"
    )
    print(
        f"{'':14s}{'right':>8s}{'runs mean':>11s}{'runs max':>10s}{'device min mean':>17s}"
        f"{'steps max':>11s}"
    )
    for way, results in by_way.items():
        right = sum(r["right"] for r in results)
        runs = [r["runs"] for r in results]
        minutes = [r["minutes"] for r in results]
        print(
            f"{way:14s}{right:>5d}/{len(results):<3d}{statistics.mean(runs):>10.1f}"
            f"{max(runs):>10d}{statistics.mean(minutes):>17.1f}"
            f"{max(r['steps'] for r in results):>11d}"
        )
    ours = by_way["bisect"]
    print(
        f"\nbisect: stated confidence median {statistics.median(r['confidence'] for r in ours):.1%}"
        f", observed {sum(r['right'] for r in ours) / len(ours):.0%} right; repeats "
        f"{sorted({r['repeats'] for r in ours})}"
    )


if __name__ == "__main__":
    main()
