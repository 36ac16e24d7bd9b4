"""Seeds with regressions: one to find (`regression_seed`: many builds in commit order, a test
that flakes before the build it broke at and fails from it on; `asyncclient bisect`), and one
to tell from failures that were there before (`baseline_seed`: `--baseline`)."""

from __future__ import annotations

import random
from typing import Any

__all__ = ["baseline_seed", "regression_seed"]


def _shop() -> dict[str, Any]:
    """Project p_shop and its two keys, new for each seed (a caller may change its seed)."""
    return {
        "projects": [{"id": "p_shop", "name": "Shop", "plan": "paid", "includedRuns": 100_000}],
        "keys": [
            {"key": "shop-run-key", "capability": "run", "projects": ["p_shop"]},
            {"key": "shop-edit-key", "capability": "edit", "projects": ["p_shop"]},
        ],
    }


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
        **_shop(),
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


_BASELINE_TESTS = (  # test, title, the build it broke at ("main": before the change), why
    ("t_login", "Log in", None, ""),
    ("t_search", "Search the catalogue", None, ""),
    ("t_checkout", "Check out a basket", "main", "The checkout button is gone from the cart page."),
    ("t_profile", "Edit the profile", "main", "The profile page says 'Something went wrong'."),
    ("t_orders", "List the orders", "main", "The orders list never finishes loading."),
    ("t_coupon", "Apply a coupon", "change", "The coupon field refuses a valid code."),
    ("t_wishlist", "Add to the wishlist", "change", "The wishlist heart does nothing."),
)


def baseline_seed(
    *, run_seconds: float = 60.0, jitter: float = 0.0, seed: int | None = None
) -> dict[str, Any]:
    """A seed where a change's build fails 5 tests and main's build fails 3 of them the same
    way (`--baseline`, its guide and benchmark): project `p_shop` (run key `shop-run-key`),
    main's build `ab_shop_main` labelled `ref=main commit=...` and the change's newer build
    `ab_shop_change` labelled `ref=feature/cart commit=...`, the same file (shop 1.0.0).
    t_checkout, t_profile and t_orders fail on both; t_coupon and t_wishlist on the change's
    only; t_login and t_search pass.

    Args:
        run_seconds: How long a run takes, in the service's seconds.
        jitter: Each run's duration varies by up to this share either way (drawn by the
            emulator from the run's id).
        seed: With one, each test's usual duration is drawn from it (0.5 to 1.5 times
            run_seconds).

    Returns:
        The seed as a dict.
    """
    rng = random.Random(seed)
    builds = {"main": "ab_shop_main", "change": "ab_shop_change"}
    labels = {
        "main": "ref=main commit=4f1c2a9e0b7d3c5a8e6f1b2d4c6a8e0f2b4d6c8a",
        "change": "ref=feature/cart commit=9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b",
    }
    tests = []
    for test_id, title, broken, why in _BASELINE_TESTS:
        test: dict[str, Any] = {
            "id": test_id,
            "project": "p_shop",
            "title": title,
            "target": "android",
            "appId": "com.example.shop",
            "outcome": "passed",
            "durationSeconds": run_seconds * (1.0 if seed is None else rng.uniform(0.5, 1.5)),
            "durationJitter": jitter,
            "queuedSeconds": 2,
        }
        if broken is not None:
            test.update(brokenFrom=builds[broken], brokenReason=why)
        tests.append(test)
    return {
        **_shop(),
        "builds": [
            {
                "id": builds[name],
                "project": "p_shop",
                "platform": "android",
                "appId": "com.example.shop",
                "appName": "Shop",
                "version": "1.0.0",
                "versionCode": str(100 + n),
                "label": labels[name],
            }
            for n, name in enumerate(("main", "change"))
        ],
        "tests": tests,
    }
