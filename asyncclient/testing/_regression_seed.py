"""A seed with a regression to find: a project of one Android app with many builds in commit
order, and a test that flakes on every build before the one it broke at and fails on that one
and every later one (`asyncclient bisect`, its guide and benchmark)."""

from __future__ import annotations

import random
from typing import Any

__all__ = ["regression_seed"]


def regression_seed(
    builds: int = 64,
    broken_at: int = 41,
    flake_rate: float = 0.2,
    *,
    history_runs: int = 40,
    run_seconds: float = 120.0,
    seed: int = 0,
) -> dict[str, Any]:
    """The seed (a dict for FakeService, or saved as JSON for `asyncclient serve --seed`):
    project `p_shop` (run key `shop-run-key`), its builds labelled `seq=N commit=...` in commit
    order, and test `t_checkout`, which breaks at one of them.

    Args:
        builds: How many builds: `ab_shop_000` to `ab_shop_{builds - 1:03d}`.
        broken_at: The build the test breaks at (1 to builds - 1): every run of it or a later
            build fails.
        flake_rate: The share of runs that fail on the builds before it (drawn by the
            emulator from each run's start key).
        history_runs: Finished runs of the first build in the test's history, exactly
            `flake_rate` of them failed.
        run_seconds: How long a run takes, in the service's seconds.
        seed: Draws the labels' commits.

    Returns:
        The seed as a dict.
    """
    if not 1 <= broken_at < builds:
        raise ValueError("broken_at must be a build after the first one")
    rng = random.Random(seed)
    ids = [f"ab_shop_{n:03d}" for n in range(builds)]
    history = [
        {
            "daysAgo": round(3.0 - 2.0 * n / max(1, history_runs), 3),
            # Exactly flake_rate of them failed, spread evenly: the history tells the truth.
            "status": "failed" if int((n + 1) * flake_rate) > int(n * flake_rate) else "passed",
            "build": ids[0],
            "version": "1.0.0",
        }
        for n in range(history_runs)
    ]
    return {
        "projects": [{"id": "p_shop", "name": "Shop", "plan": "paid", "includedRuns": 100_000}],
        "keys": [
            {"key": "shop-run-key", "capability": "run", "projects": ["p_shop"]},
            {"key": "shop-edit-key", "capability": "edit", "projects": ["p_shop"]},
        ],
        "builds": [
            {
                "id": build_id,
                "project": "p_shop",
                "platform": "android",
                "appId": "com.example.shop",
                "appName": "Shop",
                "version": f"1.0.{n}",
                "versionCode": str(100 + n),
                "label": f"seq={n} commit={rng.getrandbits(40):010x}",
            }
            for n, build_id in enumerate(ids)
        ],
        "tests": [
            {
                "id": "t_checkout",
                "project": "p_shop",
                "title": "Check out a basket",
                "target": "android",
                "appId": "com.example.shop",
                "outcome": "passed",
                "durationSeconds": run_seconds,
                "queuedSeconds": 2,
                "flakyRate": flake_rate,
                "brokenFrom": ids[broken_at],
                "history": history,
            }
        ],
    }
