"""`asyncclient quarantine verify`: prove a quarantined test fixed before lifting it. Runs each
test N times together, says what the runs support (the failure rate's bound at 95 %
confidence, asyncclient.spend.verify), and with --lift removes the entry from the quarantine
file only when every run passed."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient.cli._common import (
    EXIT_NOT_PASSED,
    EXIT_OK,
    CommandError,
    add_command,
    add_global_options,
    add_group,
    open_session,
)
from asyncclient.cli._options import read
from asyncclient.cli._output import Output

if TYPE_CHECKING:
    from asyncclient.models import Run
    from asyncclient.spend.verify import FixCheck

_GROUP_EXAMPLES = """\
  asyncclient quarantine verify t_login --lift quarantine.toml
"""
_VERIFY_EXAMPLES = """\
  asyncclient quarantine verify t_login                       # 20 runs, and what they prove
  asyncclient quarantine verify t_login t_search --runs 30 --build ab_42 --lift quarantine.toml
  asyncclient quarantine verify t_login --runs 10 --json | jq .[0].sentence
"""
_VERIFY_DESCRIPTION = """\
Run each test N times together (on --build, or each test's newest build) and say
what the runs support: "20 of 20 passed: its failure rate is below 14 % at 95 %
confidence" (the exact binomial bound; a stopped run, or one still going at
--timeout, gives no verdict and is not counted). With --lift FILE, the entry of
each test whose every run passed is removed from the quarantine file; a test
with a failure, or with runs that gave no verdict, keeps its entry.

exit codes:
  0    every run of every test passed (with --lift: their entries removed)
  1    a run did not pass or gave no verdict (the entry kept)
  2    bad input, or a test --lift FILE does not list (nothing sent)
  3    the service refused
  4    the service could not be reached
  5    the quarantine file could not be written
  130  interrupted (Ctrl-C): the runs still going are stopped"""


@attrs.frozen(kw_only=True)
class VerifyOptions:
    """`quarantine verify`'s options, read once from its parsed line."""

    tests: list[str]
    runs: int  # the parser gives it (spend.verify.DEFAULT_RUNS)
    build: str | None = None
    mode: str | None = None
    lift: str | None = None
    timeout: float | None = None
    interval: float | None = None
    idempotency_key: str | None = None


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    from asyncclient.spend.verify import DEFAULT_RUNS, MAX_RUNS, MAX_TESTS

    # --timeout here bounds the whole wait, as `run --wait`'s does.
    waiting = argparse.ArgumentParser(add_help=False)
    add_global_options(waiting, suppress=True, timeout_alias=False)
    group = add_group(
        sub,
        "quarantine",
        [waiting],
        help="prove quarantined tests fixed before lifting them",
        examples=_GROUP_EXAMPLES,
    )
    verify = add_command(
        group,
        "verify",
        [waiting],
        handler="asyncclient.cli._quarantine:verify",
        help="run tests N times and say what the runs prove; --lift removes proven entries",
        description=_VERIFY_DESCRIPTION,
        examples=_VERIFY_EXAMPLES,
    )
    verify.add_argument(
        "tests", nargs="+", metavar="TEST_ID", help=f"the tests (t_...), at most {MAX_TESTS}"
    )
    verify.add_argument(
        "--runs",
        type=int,
        metavar="N",
        default=DEFAULT_RUNS,
        help=f"runs of each test (1 to {MAX_RUNS}; default %(default)s: 20 of 20 bound the "
        "failure rate below 14 %%, 50 of 50 below 6 %%)",
    )
    verify.add_argument(
        "--build", metavar="BUILD_ID", help="run this build (ab_...); default: the newest one"
    )
    verify.add_argument(
        "--mode",
        choices=("auto", "cold", "warm"),
        help="auto (service default), cold (explore anew) or warm (only replay)",
    )
    verify.add_argument(
        "--lift",
        metavar="FILE",
        help="the quarantine file: remove the entry of each test whose every run passed",
    )
    verify.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="stop waiting after S seconds: the runs still going are stopped, not counted",
    )
    verify.add_argument(
        "--interval", type=float, metavar="S", help="seconds between polls at first (default 3)"
    )
    verify.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a key that makes running this command again safe: the same key starts no new run",
    )


def _check(opts: VerifyOptions) -> list[str]:
    """The tests, every option checked and the quarantine file read: before any request."""
    import math

    from asyncclient.errors import ValidationError
    from asyncclient.spend.verify import MAX_RUNS, check_verify

    if not 1 <= opts.runs <= MAX_RUNS:
        raise CommandError(f"--runs {opts.runs} is out of range: give 1 to {MAX_RUNS}")
    try:
        tests = check_verify(opts.tests, opts.runs)
    except ValidationError as exc:
        raise CommandError(str(exc)) from None
    if opts.build:
        from asyncclient._core._checks import check_id

        check_id("build", opts.build, "--build")
    for flag, value in (("--timeout", opts.timeout), ("--interval", opts.interval)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise CommandError(f"{flag} {value:g} must be a number of seconds above 0")
    if opts.lift:
        from asyncclient._core._extras import require
        from asyncclient.quarantine import check_liftable, load_quarantine

        require("--lift", "cli", "tomlkit")

        listed = {entry.test for entry in load_quarantine(opts.lift).entries}
        try:
            check_liftable(opts.lift)
        except (ValidationError, OSError) as exc:
            raise CommandError(str(exc)) from None
        missing = [test for test in tests if test not in listed]
        if missing:
            raise CommandError(
                f"{', '.join(missing)} not in the quarantine file {opts.lift}: nothing to lift; "
                "verify without --lift, or name the file that quarantines it"
            )
    return tests


async def verify(args: argparse.Namespace, out: Output) -> int:
    from asyncclient.spend.verify import verify_fix

    opts = read(VerifyOptions, args)
    tests = _check(opts)
    total = len(tests) * opts.runs
    finished: set[str] = set()

    def started(test_id: str, run_id: str, number: int) -> None:
        out.info(f"started {run_id}  {test_id}  run {number} of {opts.runs}")

    def changed(run: Run) -> None:
        if run.is_final and run.id not in finished:
            finished.add(run.id)
            out.info(f"{run.id}  {run.test_id or ''}  {run.status}  ({len(finished)}/{total})")

    def stopped(run_ids: Sequence[str]) -> None:
        out.always(f"stopped {len(run_ids)} run(s), not counted: {' '.join(run_ids)}")

    async with open_session(args) as session:
        checks = await verify_fix(
            session,
            tests,
            runs=opts.runs,
            build_id=opts.build,
            mode=opts.mode,
            idempotency_key=opts.idempotency_key,
            timeout=opts.timeout,
            interval=opts.interval or 3.0,
            on_start=started,
            on_run=changed,
            on_stopped=stopped,
        )
    lifted = _lift(opts.lift, checks, out) if opts.lift else []
    if out.json_mode:
        out.json([{**check.fields(), "lifted": check.test_id in lifted} for check in checks])
    else:
        for check in checks:
            out.data(f"{check.test_id}: {check.sentence()}")
            for error in check.start_errors:
                out.always(f"  could not start a run of {check.test_id}: {error}")
    return EXIT_OK if all(check.fixed for check in checks) else EXIT_NOT_PASSED


def _lift(path: str, checks: list[FixCheck], out: Output) -> list[str]:
    from asyncclient._core._wording import EXIT_LOCAL_IO
    from asyncclient.errors import ValidationError
    from asyncclient.quarantine import lift_quarantine

    proven = [check.test_id for check in checks if check.fixed]
    for check in checks:
        if not check.fixed:
            out.warning(
                f"{check.test_id} keeps its quarantine in {path}: "
                f"{check.failed} failed, {check.not_counted} gave no verdict"
            )
    if not proven:
        return []
    try:
        lifted = lift_quarantine(path, proven)
    except ValidationError as exc:
        raise CommandError(str(exc), EXIT_LOCAL_IO) from None
    for test in lifted:
        out.info(f"lifted the quarantine of {test} in {path}")
    return lifted
