"""The options of following runs (`run ... --wait` and `watch`): --timeout, --interval, the
reports (--junit, --ctrf, --html), the re-runs (--retry-failed, --fail-on-flaky), the evidence
(--download-failed); their checks before any request; and the run ids `watch -` reads."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient._core._config_keys import COMMAND_KEYS
from asyncclient.cli._common import CommandError
from asyncclient.cli._follow import DEFAULT_INTERVAL, DEFAULT_MAX_INTERVAL
from asyncclient.cli._options import Follow, Globals, read
from asyncclient.errors import ValidationError
from asyncclient.reruns._policy import DEFAULT_HEDGE_TARGET, MAX_RETRY_FAILED, RETRY_STRATEGIES

if TYPE_CHECKING:
    from asyncclient.cli._output import Output

__all__ = ["add_follow_options", "add_spending_options", "check_follow_options", "ids_from_text"]

_DEFAULTS = attrs.fields(Follow)  # each option's default, written once in its record
_ALLURE_HELP = "write Allure results into DIR (re-runs as retries)"
_FOLDERS = ("--download-failed", "--allure-results")  # options naming a folder


def add_follow_options(parser: argparse.ArgumentParser, *, wait_flag: bool) -> Any:
    """The --wait/--timeout/... group; returned so that a command can add its own to it."""
    group = parser.add_argument_group("waiting and reports")
    if wait_flag:
        group.add_argument(
            "--wait", action="store_true", help="follow the runs until final, then report"
        )
    group.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="give up waiting after S seconds (exit 1)",
    )
    group.add_argument(
        "--interval",
        type=float,
        metavar="S",
        help=f"seconds between polls while runs change (default {DEFAULT_INTERVAL:g}; "
        f"grows to {DEFAULT_MAX_INTERVAL:g} while nothing changes)",
    )
    group.add_argument("--junit", metavar="PATH", help="write a JUnit XML report to PATH")
    group.add_argument(
        "--ctrf",
        metavar="PATH",
        help="write a CTRF report (JSON: re-runs, flaky tests, files, device time) to PATH",
    )
    group.add_argument("--allure-results", metavar="DIR", help=_ALLURE_HELP)
    group.add_argument(
        "--retry-failed",
        type=int,
        metavar="N",
        default=_DEFAULTS.retry_failed.default,
        help="re-run a test that did not pass up to N more times, same build and mode; one "
        f"that passes on a re-run is flaky (0 to {MAX_RETRY_FAILED}; default "
        f"{_DEFAULTS.retry_failed.default})",
    )
    group.add_argument(
        "--retry-strategy",
        choices=RETRY_STRATEGIES,
        default=_DEFAULTS.retry_strategy.default,
        help="how --retry-failed re-runs go: rounds (once every run of the round ended; the "
        "default), at-once (all of a test's re-runs start as soon as its run does not pass; "
        "the first pass stops the others) or hedge (at-once, plus copies at the start of each "
        "test its history shows flaky, enough for --hedge-target)",
    )
    group.add_argument(
        "--hedge-target",
        type=float,
        metavar="P",
        help="with --retry-strategy hedge: the chance of a pass a known-flaky test's copies are "
        f"started for (0.5 to 0.999; default {DEFAULT_HEDGE_TARGET:g})",
    )
    group.add_argument(
        "--retry-budget",
        type=float,
        metavar="MINUTES",
        help="the device time re-runs and copies may take, in minutes (each reckoned at its "
        "test's usual duration, then at what it took); past it a test gets no more",
    )
    group.add_argument(
        "--max-failures",
        type=int,
        metavar="N",
        help="fail fast: once N tests have not passed for good (after their re-runs; a "
        "quarantined test never counts), stop the runs still going and exit 1",
    )
    group.add_argument(
        "--fail-on-flaky",
        action="store_true",
        help="with --retry-failed: a test that passed only on a re-run fails the command",
    )
    group.add_argument(
        "--download-failed",
        metavar="DIR",
        help="download the video and screenshots of every run that did not pass (flaky tests' "
        "failed attempts too) into DIR/RUN_ID/; a failed download is named on stderr and does "
        "not change the exit code",
    )
    group.add_argument(
        "--events",
        metavar="PATH",
        help="write what happens as JSON Lines, as it happens (run_started, run_status, "
        "run_finished, rerun_started, copy_started, copies_stopped, eta, fail_fast, "
        "job_finished); - for standard output",
    )
    group.add_argument(
        "--html",
        metavar="PATH",
        help="write a self-contained HTML report to PATH",
    )
    group.add_argument(
        "--stop-on-timeout",
        action="store_true",
        help="when --timeout hits, stop the runs still going before exiting",
    )
    group.add_argument(
        "--quarantine",
        metavar="FILE",
        help="the quarantine file (TOML, [[quarantine]] test/reason/until): a listed test still "
        "runs and is re-run, but if it finally does not pass the command does not fail for it; "
        "an entry past its until is not honoured (a warning names it)",
    )
    group.add_argument(
        "--categories",
        metavar="FILE",
        help="the failure categories file (TOML, [[category]] name/kind/match or regex/statuses; "
        "default: failure-categories.toml here when it exists): each failure is named by the "
        "first category it matches; an infrastructure failure is re-run and never makes a test "
        "flaky",
    )
    group.add_argument(
        "--rerun-known",
        action="store_true",
        help="with --retry-failed: re-run an app failure even when it fails the same way as the "
        "test's newest runs on the same build (by default it is not re-run, and the report "
        "says why)",
    )
    group.add_argument(
        "--baseline",
        metavar="BUILD|auto",
        help="run each test that fails at once on this build too (main's, say), beside its "
        "re-runs and within --retry-budget; one that fails there the same way is reported "
        "pre-existing. auto: the newest ready build of the same file labelled ref=BRANCH "
        "(uploads in CI write that label)",
    )
    group.add_argument(
        "--baseline-ref",
        metavar="BRANCH",
        help="the branch --baseline auto looks for (default: the pull or merge request's "
        "target, else main)",
    )
    group.add_argument(
        "--pre-existing",
        choices=("fail", "pass", "warn"),
        default="fail",
        help="what a pre-existing failure does to the exit code: fail (default: nothing is "
        "hidden unless asked), pass, or warn (pass, with a warning line)",
    )
    group.add_argument(
        "--fail-on-quarantined",
        action="store_true",
        help="with --quarantine: a quarantined test that did not pass fails the command again",
    )
    group.add_argument(
        "--no-history",
        action="store_true",
        help="do not read the history of the tests that did not pass (by default each is told "
        "a new failure, a known flake or a known breakage, one listing per test)",
    )
    return group


def add_spending_options(parser: argparse.ArgumentParser) -> None:
    """`run`'s own: device time spent where it tells something (asyncclient.spend)."""
    from asyncclient.spend.arrival import BUDGET_SECONDS, MAX_NEW_TEST_RUNS
    from asyncclient.spend.reuse import MAX_DAYS

    group = parser.add_argument_group("device time (with --wait)")
    group.add_argument(
        "--reuse-passed",
        type=float,
        metavar="DAYS",
        help="stop at once each started run whose test passed within DAYS, in the same mode, "
        "on a build with the same sha256 (the same file uploaded again counts): reported as "
        f"passed, reused from that run (above 0, at most {MAX_DAYS:g}; off by default)",
    )
    group.add_argument(
        "--new-test-runs",
        type=int,
        metavar="N",
        default=_DEFAULTS.new_test_runs.default,
        help="run a new test (no finished run in its history) N more times on the same build "
        "and mode; if its runs disagree it is flaky on arrival and fails the command (0 to "
        f"{MAX_NEW_TEST_RUNS}; fewer repeats for long tests, see --new-test-budget)",
    )
    group.add_argument(
        "--new-test-budget",
        type=float,
        metavar="S",
        help="the device seconds a new test's repeats may take, reckoned from its first run's "
        f"duration; at least one repeat runs (default {BUDGET_SECONDS:g})",
    )
    group.add_argument(
        "--new-test-warn",
        action="store_true",
        help="with --new-test-runs: a test flaky on arrival is told, but does not fail the command",
    )


# --- checks before any request -------------------------------------------------------------------


def _checked_baseline(options: Follow) -> Follow:
    """--baseline as a build id or auto (its branch from the CI's variables when not given);
    --baseline-ref and --pre-existing only with it."""
    if options.baseline is None:
        if options.baseline_ref is not None or options.pre_existing != "fail":
            flag = "--baseline-ref" if options.baseline_ref is not None else "--pre-existing"
            raise CommandError(f"{flag} needs --baseline BUILD|auto: it says what to compare with")
        return options
    if options.baseline != "auto":
        from asyncclient._core._checks import check_id

        check_id("build", options.baseline, "--baseline")
    ref = options.baseline_ref
    if ref is None:
        import os

        from asyncclient._core._ci_run import baseline_ref

        ref = baseline_ref(os.environ)
    from asyncclient.failures.exonerate import is_branch

    if not is_branch(ref):
        raise CommandError(f"--baseline-ref {ref!r} is not a branch name: give one such as main")
    return attrs.evolve(options, baseline_ref=ref)


def check_follow_options(
    args: argparse.Namespace, *, waiting: bool, out: Output | None = None
) -> Follow:
    """The options of following runs, read from the line once and checked before any request:
    refuses options that do not go together, reads the quarantine file and warns (on `out`) of
    its entries past their until."""
    options = read(Follow, args)
    if not waiting:
        given = [
            flag
            for flag, value in (
                ("--timeout", options.timeout),
                ("--interval", options.interval),
                ("--junit", options.junit),
                ("--ctrf", options.ctrf),
                ("--allure-results", options.allure_results),
                ("--events", options.events),
                ("--retry-failed", options.retry_failed),
                ("--retry-strategy", options.retry_strategy != "rounds"),
                ("--hedge-target", options.hedge_target is not None),
                ("--retry-budget", options.retry_budget is not None),
                ("--max-failures", options.max_failures),
                ("--fail-on-flaky", options.fail_on_flaky),
                ("--download-failed", options.download_failed),
                ("--html", options.html),
                ("--stop-on-timeout", options.stop_on_timeout),
                ("--allow-skipped", options.allow_skipped),
                ("--quarantine", options.quarantine),
                ("--fail-on-quarantined", options.fail_on_quarantined),
                ("--no-history", options.no_history),
                ("--categories", options.categories),
                ("--rerun-known", options.rerun_known),
                ("--baseline", options.baseline),
                ("--baseline-ref", options.baseline_ref),
                ("--pre-existing", options.pre_existing != "fail"),
                ("--reuse-passed", options.reuse_passed),
                ("--new-test-runs", options.new_test_runs),
                ("--new-test-budget", options.new_test_budget),
                ("--new-test-warn", options.new_test_warn),
            )
            if value
        ]
        if given:
            raise CommandError(
                f"{', '.join(given)} need --wait: without it the command exits once the runs "
                "have started"
            )
        return options
    if options.hedge_target is not None and options.retry_strategy != "hedge":
        raise CommandError("--hedge-target needs --retry-strategy hedge")
    options = _checked_baseline(options)
    from asyncclient.failures import find_categories

    # Read before any run: a bad file fails here.
    options = attrs.evolve(options, categorised=find_categories(options.categories))
    if options.html:
        from asyncclient._core._extras import require
        from asyncclient.errors import MissingExtraError

        try:
            require("the HTML report (--html)", "cli", "jinja2")
        except MissingExtraError as exc:
            raise CommandError(str(exc)) from None
    events = None if options.events == "-" else options.events
    files = {"--junit": options.junit, "--ctrf": options.ctrf, "--events": events}
    for flag, value in {**files, "--html": options.html}.items():
        if value:
            _check_report_path(flag, value)
    if options.events == "-" and read(Globals, args).json:
        raise CommandError(
            "--events - and --json both write to standard output: give --events a file"
        )
    folders = (options.download_failed, options.allure_results)
    for flag, folder in zip(_FOLDERS, folders, strict=True):
        if folder and Path(folder).exists() and not Path(folder).is_dir():
            raise CommandError(f"{flag} {folder} is a file: give a folder")
    if options.fail_on_quarantined and not options.quarantine:
        raise CommandError("--fail-on-quarantined needs --quarantine FILE")
    if options.quarantine:
        from asyncclient.quarantine import load_quarantine

        # Read before any run: a bad file fails here.
        quarantine = load_quarantine(options.quarantine)
        for entry in quarantine.expired():
            if out is not None:
                out.warning(
                    f"the quarantine of {entry.test} ended on {entry.until.isoformat()} "
                    f"({options.quarantine}): it is not honoured; extend its until or remove it"
                )
        options = attrs.evolve(options, quarantined=quarantine)
    # The policy checks its own rules, once; its words are the flags' here.
    try:
        return attrs.evolve(options, suite_policy=options.make_policy())
    except ValidationError as exc:
        raise CommandError(_in_flags(str(exc))) from None


def _in_flags(message: str) -> str:
    """A policy's message with each field it names written as the flag that sets it."""
    keys = {**COMMAND_KEYS["watch"], **COMMAND_KEYS["run"]}
    for name in sorted(keys, key=len, reverse=True):
        flag = keys[name].flag
        if flag is not None:
            message = re.sub(rf"(?<![\w-]){name}\b", flag, message)
    return message


def _check_report_path(flag: str, value: str) -> None:
    target = Path(value)
    parent = target.parent
    if target.is_dir():
        raise CommandError(f"{flag} {value} is a directory: give a file name")
    # Made when written; the nearest folder must take it.
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise CommandError(f"{flag} {value}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK):
        raise CommandError(f"{flag} {value}: the directory {existing} is not writable")


def ids_from_text(text: str) -> list[str]:
    """Run ids from what `watch -` reads: ids one per line (or separated by spaces), or the
    --json output of `run test`, `run project` or of a `--wait`/`watch` (runs)."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return stripped.split()
    try:
        data = json.loads(stripped)
    except RecursionError:
        raise CommandError("standard input is JSON nested too deeply to hold run ids") from None
    except ValueError as exc:
        raise CommandError(f"standard input is not JSON nor run ids: {exc}") from None
    found: list[str] = []

    def visit(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            if isinstance(value.get("runId"), str):
                found.append(value["runId"])
            elif isinstance(value.get("started"), list):
                visit(value["started"])
            elif isinstance(value.get("id"), str):
                found.append(value["id"])
            elif isinstance(value.get("runs"), list):
                visit(value["runs"])

    visit(data)
    if not found:
        raise CommandError(
            "no run id in the JSON on standard input: give the --json output of asyncclient "
            "run (runId, started[].runId) or a list of runs"
        )
    return found
