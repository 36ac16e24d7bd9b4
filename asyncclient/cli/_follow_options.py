"""The options of following runs (`run ... --wait` and `watch`): --timeout, --interval, the
reports (--junit, --html), the re-runs (--retry-failed, --fail-on-flaky), the evidence
(--download-failed); their checks before any request; and the run ids `watch -` reads."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncclient.cli._common import CommandError
from asyncclient.cli._follow import DEFAULT_INTERVAL, DEFAULT_MAX_INTERVAL
from asyncclient.reruns import MAX_RETRY_FAILED

if TYPE_CHECKING:
    from asyncclient.cli._output import Output

__all__ = ["add_follow_options", "check_follow_options", "ids_from_text"]


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
        help="give up waiting after S seconds (exit 1); one request's limit is --request-timeout",
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
        "--retry-failed",
        type=int,
        metavar="N",
        default=0,
        help="re-run each test whose run did not pass (not a stopped one) up to N more times, "
        "with the same build and mode; a test that passes on a re-run is flaky and passes "
        f"(0 to {MAX_RETRY_FAILED}; default 0)",
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
        "--html",
        metavar="PATH",
        help="write a self-contained HTML report to PATH (one row per test with its attempts, "
        "and the --download-failed evidence)",
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


# --- checks before any request -------------------------------------------------------------------


def _seconds(flag: str, value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise CommandError(f"{flag} {value:g} must be a number of seconds above 0")


def check_follow_options(
    args: argparse.Namespace, *, waiting: bool, out: Output | None = None
) -> None:
    """Refuse options that do not go together, before any request; read the quarantine file
    (args.quarantine_file) and warn (on `out`) of its entries past their until."""
    if not waiting:
        given = [
            flag
            for flag, value in (
                ("--timeout", args.timeout),
                ("--interval", args.interval),
                ("--junit", args.junit),
                ("--retry-failed", args.retry_failed),
                ("--fail-on-flaky", args.fail_on_flaky),
                ("--download-failed", args.download_failed),
                ("--html", args.html),
                ("--stop-on-timeout", args.stop_on_timeout),
                ("--allow-skipped", getattr(args, "allow_skipped", False)),
                ("--quarantine", args.quarantine),
                ("--fail-on-quarantined", args.fail_on_quarantined),
                ("--no-history", args.no_history),
            )
            if value
        ]
        if given:
            raise CommandError(
                f"{', '.join(given)} need --wait: without it the command exits once the runs "
                "have started"
            )
        return
    _seconds("--timeout", args.timeout)
    _seconds("--interval", args.interval)
    if args.stop_on_timeout and args.timeout is None:
        raise CommandError("--stop-on-timeout needs --timeout S")
    if not 0 <= args.retry_failed <= MAX_RETRY_FAILED:
        raise CommandError(
            f"--retry-failed {args.retry_failed} is out of range: give 0 to {MAX_RETRY_FAILED}"
        )
    if args.fail_on_flaky and not args.retry_failed:
        raise CommandError(
            "--fail-on-flaky needs --retry-failed N: without re-runs no test is flaky"
        )
    for flag, value in (("--junit", args.junit), ("--html", args.html)):
        if value:
            _check_report_path(flag, value)
    if args.download_failed:
        folder = Path(args.download_failed)
        if folder.exists() and not folder.is_dir():
            raise CommandError(f"--download-failed {folder} is a file: give a folder")
    if args.fail_on_quarantined and not args.quarantine:
        raise CommandError("--fail-on-quarantined needs --quarantine FILE")
    if args.quarantine:
        from asyncclient.quarantine import load_quarantine

        # Read now, before any run starts: a file that is not right fails the command here.
        quarantine = args.quarantine_file = load_quarantine(args.quarantine)
        for entry in quarantine.expired():
            if out is not None:
                out.warning(
                    f"the quarantine of {entry.test} ended on {entry.until.isoformat()} "
                    f"({args.quarantine}): it is not honoured; extend its until or remove it"
                )


def _check_report_path(flag: str, value: str) -> None:
    target = Path(value)
    parent = target.parent
    if target.is_dir():
        raise CommandError(f"{flag} {value} is a directory: give a file name")
    # A missing folder is made when the report is written (as pytest's --junitxml does):
    # what must hold now is that the nearest folder that exists can take it.
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
