"""Benchmark: 10,000 failures grouped by cause (`asyncclient.failures.cluster`), beside a plain
`Counter` of their raw headlines, the grouping a script would write first.

The failures: 12 causes (an outage, a device farm losing devices, expired tokens, a staging
service answering 503, app bugs with amounts, codes, pages and times), each failure written with
its own numbers, ids, hex, times, URLs and quoted values, as a service writes them, in a seeded
random order; each failure's cause is its label. For both groupings: the time (the median of
--repeat rounds, in one process, one after the other), the groups found, and how well they agree
with the labels (purity, adjusted Rand index). Exits 1 if `cluster` takes 1 s or more, or its
adjusted Rand index is under 0.95.

    .venv/bin/python benchmarks/bench_failures.py                  # 10,000 failures, ~10 s
    .venv/bin/python benchmarks/bench_failures.py --failures 1000  # a quick look
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from asyncclient.failures import cluster, general
from asyncclient.failures._agreement import adjusted_rand_index, purity
from asyncclient.models import Run

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
TARGET_SECONDS = 1.0
TARGET_ARI = 0.95


def _hex(r: random.Random, n: int) -> str:
    return "".join(r.choice("0123456789abcdef") for _ in range(n))


def _time(r: random.Random) -> str:
    return f"{r.randrange(24):02d}:{r.randrange(60):02d}:{r.randrange(60):02d}"


# Each cause: its status, and how one of its failures reads (headline, error, failed check).
Cause = Callable[[random.Random], dict[str, Any]]
CAUSES: dict[str, tuple[str, Cause]] = {
    "outage": (
        "error",
        lambda r: {
            "headline": f"The tester could not reach the app: connection refused by "
            f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(256)}:8443 after "
            f"{r.randrange(20, 40)} s.",
            "error": {"code": "run_error", "message": "The run ended in an error."},
        },
    ),
    "device lost": (
        "error",
        lambda r: {
            "headline": f"The device farm lost the device at {_time(r)} "
            f"(node n-{r.randrange(40)}).",
        },
    ),
    "token expired": (
        "failed",
        lambda r: {
            "headline": "The login step was refused.",
            "check": (
                "Sign in",
                f"POST https://auth.example.com/oauth/token?client={_hex(r, 8)} answered 401: "
                f"token {_hex(r, 32)} expired at 2026-11-{r.randrange(1, 28):02d}T{_time(r)}Z.",
            ),
        },
    ),
    "staging 503": (
        "failed",
        lambda r: {
            "headline": f"The catalogue did not load after {r.randrange(5, 60)} s.",
            "check": (
                "The catalogue loads",
                f"GET https://staging.example.com/api/v2/items?page={r.randrange(1, 9)} answered "
                f"503 (request req_{_hex(r, 12)}).",
            ),
        },
    ),
    "voucher total": (
        "failed",
        lambda r: {
            "headline": "The voucher was accepted but the total did not change.",
            "check": (
                "A voucher code reduces the total",
                f"The voucher {r.choice(['SAVE', 'VIP', 'SPRING'])}{r.randrange(5, 50)} was "
                f"accepted, but the total stayed ${r.randrange(10, 200)}.{r.randrange(100):02d} "
                f"instead of ${r.randrange(10, 200)}.{r.randrange(100):02d}.",
            ),
        },
    ),
    "no continue": (
        "failed",
        lambda r: {
            "headline": f"Onboarding stopped on page {r.randrange(1, 5)} of 4.",
            "check": (
                "Finish onboarding",
                f"Page {r.randrange(1, 5)} showed no Continue button after {r.randrange(5, 30)} s.",
            ),
        },
    ),
    "wrong greeting": (
        "failed",
        lambda r: {
            "headline": "The home screen did not greet the user by name.",
            "check": (
                "The home screen greets the user",
                f"Expected \u201cWelcome back, {r.choice(['Dana', 'Ali', 'Kim', 'Jo'])}\u201d, "
                f"saw \u201cWelcome back, {r.choice(['null', 'undefined', ''])}\u201d.",
            ),
        },
    ),
    "search empty": (
        "failed",
        lambda r: {
            "headline": f"Searching '{r.choice(['lamp', 'chair', 'desk', 'rug'])}' found nothing.",
            "check": ("Search lists products", f"0 of {r.randrange(5, 90)} expected results."),
        },
    ),
    "blocked by dialog": (
        "blocked",
        lambda r: {
            "headline": "A system dialog blocked the tester.",
            "check": (
                "Open the cart",
                f"The dialog \u2018Allow notifications?\u2019 stayed for {r.randrange(3, 20)} s.",
            ),
        },
    ),
    "inconclusive video": (
        "inconclusive",
        lambda r: {
            "headline": f"The tester could not tell: the video stopped at {_time(r)}.",
        },
    ),
    "crash": (
        "failed",
        lambda r: {
            "headline": "The app crashed.",
            "check": (
                "Check out",
                f"Fatal exception in thread main at 0x{_hex(r, 12)} "
                f"(pid {r.randrange(1000, 9999)}).",
            ),
        },
    ),
    "slow payment": (
        "failed",
        lambda r: {
            "headline": "The payment took too long.",
            "check": (
                "Pay with a card",
                f"The payment confirmation took {r.randrange(31, 90)}.{r.randrange(10)} s (at "
                f"most 30 s) for order {r.randrange(10000, 99999)}.",
            ),
        },
    ),
}


def failures(count: int, seed: int = 7) -> tuple[list[Run], list[str]]:
    """`count` failures and their labels, in a seeded random order."""
    r = random.Random(seed)
    names = list(CAUSES)
    weights = [2 ** -(i / 3) for i in range(len(names))]  # a few wide causes, a long tail
    runs, labels = [], []
    for n in range(count):
        label = r.choices(names, weights)[0]
        status, write = CAUSES[label]
        said = write(r)
        checks = []
        if "check" in said:
            title, reason = said["check"]
            checks = [{"id": "r1", "title": title, "result": "failed", "reason": reason}]
        runs.append(
            Run(
                id=f"j_{n:010d}",
                test_id=f"t_{r.randrange(200):03d}",
                status=status,
                final=True,
                headline=said.get("headline", ""),
                error=said.get("error"),
                requirements=checks,
                created_at=T0 + timedelta(seconds=n),
            )
        )
        labels.append(label)
    return runs, labels


def timed(work: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median seconds of `repeat` rounds, and the last round's result."""
    seconds, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    runs, labels = failures(args.failures)

    def ours_once() -> Any:
        general.cache_clear()  # each round from nothing: no text made general before
        return cluster(runs)

    ours_seconds, found = timed(ours_once, args.repeat)
    of_run = {run_id: c.id for c in found for run_id in c.run_ids}
    ours = [of_run[run.id] for run in runs]
    raw_seconds, counted = timed(lambda: Counter(run.headline_text for run in runs), args.repeat)
    raw = [run.headline_text for run in runs]

    rows = [
        ("asyncclient.failures.cluster", ours_seconds, len(found), ours),
        ("Counter(raw headline)", raw_seconds, len(counted), raw),
    ]
    print(f"{args.failures:,} failures of {len(set(labels))} causes (median of {args.repeat})")
    print(f"{'':30} {'seconds':>8} {'groups':>7} {'purity':>7} {'ARI':>6}")
    for name, seconds, groups, assigned in rows:
        print(
            f"{name:30} {seconds:8.3f} {groups:7,} {purity(labels, assigned):7.3f} "
            f"{adjusted_rand_index(labels, assigned):6.3f}"
        )
    ari = adjusted_rand_index(labels, ours)
    print(
        f"cluster: {ours_seconds:.3f} s (target under {TARGET_SECONDS:g} s), "
        f"{ours_seconds / raw_seconds:.0f}x the Counter's time, {len(counted) / len(found):.0f}x "
        f"fewer groups; ARI {ari:.3f} (target at least {TARGET_ARI})"
    )
    missed = ours_seconds >= TARGET_SECONDS or ari < TARGET_ARI
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
