"""`asyncclient bisect PROJECT TEST --good BUILD --bad BUILD`: the first build a test fails on,
with a confidence a flaky test cannot fool (asyncclient.failures.bisect)."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from asyncclient.cli._common import (
    EXIT_NOT_PASSED,
    EXIT_OK,
    CommandError,
    add_command,
    open_session,
)
from asyncclient.cli._options import read
from asyncclient.cli._output import Output

_EXAMPLES = """\
  asyncclient bisect p_123 t_checkout --good ab_100 --bad ab_164
  asyncclient bisect p_123 t_checkout --good ab_100 --bad ab_164 --confidence 0.99 --budget 60
  asyncclient bisect p_123 t_checkout --good ab_100 --bad ab_164 --json | jq -r .firstBad
"""


@attrs.frozen(kw_only=True)
class BisectOptions:
    project_id: str
    test_id: str
    good: str
    bad: str
    confidence: float = 0.95
    flake_rate: float | None = None
    budget: float | None = None
    mode: str | None = None
    interval: float = 3.0
    idempotency_key: str | None = None


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "bisect",
        parents,
        handler="asyncclient.cli._bisect:bisect",
        help="find the first build a test fails on, with a stated confidence",
        description="Run TEST on the builds between --good (it passes there) and --bad (it "
        "fails there), halving the range each step, and print the first build it fails on. "
        "A pass calls a build good; a build is called bad only after as many failures in a "
        "row as the test's flake rate (from its history) needs for --confidence. Builds are "
        "ordered by the seq=N of their labels, else by when they were made.",
        examples=_EXAMPLES,
    )
    p.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    p.add_argument("test_id", metavar="TEST_ID", help="the test that broke (t_...)")
    p.add_argument("--good", required=True, metavar="BUILD", help="a build the test passes on")
    p.add_argument("--bad", required=True, metavar="BUILD", help="a build the test fails on")
    p.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="the least chance the answer is right (0.5 to 0.999; default %(default)s)",
    )
    p.add_argument(
        "--flake-rate",
        type=float,
        metavar="RATE",
        help="how often the test fails on good builds (0 to 0.9); default: from its history, "
        "else 0.2",
    )
    p.add_argument(
        "--budget",
        type=float,
        metavar="MINUTES",
        help="device minutes the search may spend; it stops with the range it narrowed",
    )
    p.add_argument("--mode", choices=("auto", "cold", "warm"), help="the runs' mode")
    p.add_argument(
        "--interval", type=float, default=3.0, help="seconds between polls (default %(default)s)"
    )
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="the search's key: the same search asked again with it starts no new runs",
    )


async def bisect(args: argparse.Namespace, out: Output) -> int:
    from asyncclient.failures.bisect import BisectStep
    from asyncclient.failures.bisect import bisect as search

    opts = read(BisectOptions, args)
    if not opts.interval > 0:
        raise CommandError("--interval must be a positive number of seconds")

    def said(step: BisectStep) -> None:
        tally = f"{step.passed} passed, {step.failed} failed"
        if step.not_counted:
            tally += f", {step.not_counted} not counted"
        out.info(f"{step.build_id}  {step.verdict:7s}  ({tally})")

    async with open_session(args) as session:
        result = await search(
            session,
            opts.project_id,
            opts.test_id,
            good=opts.good,
            bad=opts.bad,
            confidence=opts.confidence,
            flake_rate=opts.flake_rate,
            budget_minutes=opts.budget,
            mode=opts.mode,
            idempotency_key=opts.idempotency_key,
            interval=opts.interval,
            on_step=said,
        )
    if out.json_mode:
        out.json(result.to_json())
    for build_id, why in result.left_out.items():
        out.info(f"left out {build_id}: {why}")
    spent = f"{result.runs} runs, {result.device_minutes:.1f} device minutes"
    rule = (
        f"a build is bad after {result.repeats} failure(s) in a row; flake rate "
        f"{result.flake_rate:.0%} ({result.flake_source})"
    )
    if result.first_bad is None:
        out.error(f"not found: {result.stopped}; {spent}")
        return EXIT_NOT_PASSED
    if not out.json_mode:
        out.data(result.first_bad)
    out.info(
        f"first bad build: {result.first_bad} (last good {result.last_good}), "
        f"{result.confidence:.1%} confidence; {spent}; {rule}"
    )
    return EXIT_OK
