"""`asyncclient flaky PROJECT`: which tests flake across jobs, from the service's run history
(asyncclient.flakiness), and the quarantine file that keeps them from failing jobs
(asyncclient.quarantine, `--write-quarantine`)."""

from __future__ import annotations

import argparse
from datetime import date
from typing import TYPE_CHECKING, Any, Final

import attrs

from asyncclient.cli._common import EXIT_OK, add_command, check_id, open_session
from asyncclient.cli._options import read
from asyncclient.cli._output import Output

if TYPE_CHECKING:
    from asyncclient.failures import Categories
    from asyncclient.flakiness import FlakinessReport, TestFlakiness

_EXAMPLES = """\
  asyncclient flaky p_123                            # the last 14 days, what hurts most first
  asyncclient flaky p_123 --days 30 --test t_login --test t_checkout
  asyncclient flaky p_123 --json | jq -r '.tests[] | select(.state == "flaky") | .testId'
  asyncclient flaky p_123 --write-quarantine quarantine.toml   # then review it in a pull request
"""

# Last runs all passed: a candidate to lift.
LIFT_AFTER: int = 20


@attrs.frozen(kw_only=True)
class HistoryOptions:
    """What `flaky` and `failures` read of a project's history (add_history_options)."""

    project_id: str
    tests: list[str] = attrs.field(factory=list)
    days: float = 14.0
    categories: str | None = None


@attrs.frozen(kw_only=True)
class FlakyOptions:
    """`flaky`'s own options."""

    write_quarantine: str | None = None


_HISTORY: Final = HistoryOptions(project_id="")


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "flaky",
        parents,
        handler="asyncclient.cli._flaky:flaky",
        help="which tests of a project flake across jobs, from its run history",
        description="Read a project's run history and say, per test, whether it is broken (its "
        "runs on each of its last 3 builds all did not pass), flaky (it both passed and did not "
        "pass on one build) or stable. Cancelled runs are not counted; a run did not pass when "
        "its status is anything but passed. Sorted by what hurts most: flaky builds, then "
        "device time lost.",
        examples=_EXAMPLES,
    )
    add_history_options(
        p, "a run that failed for the infrastructure is left out, and counted apart"
    )
    p.add_argument(
        "--write-quarantine",
        metavar="FILE",
        help="add the tests now flaky (never a broken one) to the quarantine file FILE, until 30 "
        "days ahead, keeping what it holds; and list its tests that passed their last 20 runs "
        "as candidates to lift",
    )


def add_history_options(p: argparse.ArgumentParser, categories: str) -> None:
    """PROJECT_ID, --days, --test and --categories: what `flaky` and `failures` read of a
    project's history (`categories`: what the categories do for the command)."""
    p.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    p.add_argument(
        "--days",
        type=float,
        default=_HISTORY.days,
        metavar="N",
        help="read the runs created in the last N days (default %(default)g)",
    )
    p.add_argument(
        "--test",
        action="append",
        default=[],
        metavar="ID",
        dest="tests",
        help="only this test (repeatable; default: every test the project's newest 200 runs name)",
    )
    p.add_argument(
        "--categories",
        metavar="FILE",
        help="the failure categories file (default: failure-categories.toml here when it "
        f"exists): {categories}",
    )


def history_options(args: argparse.Namespace) -> tuple[str, list[str], float, Categories]:
    """The project, the tests, the window and the categories add_history_options read,
    checked (the categories file read) before any request."""
    from asyncclient._core._checks import check_days
    from asyncclient.failures import find_categories

    given = read(HistoryOptions, args)
    project_id = check_id(given.project_id, "project")
    tests = [check_id(test, "test", "--test") for test in given.tests]
    return project_id, tests, check_days(given.days), find_categories(given.categories)


async def flaky(args: argparse.Namespace, out: Output) -> int:
    project_id, tests, days, categories = history_options(args)
    opts = read(FlakyOptions, args)
    if opts.write_quarantine:
        from asyncclient._core._extras import require

        require("--write-quarantine", "cli", "tomlkit")  # before any request
    async with open_session(args) as session:
        report = await session.flakiness(
            project_id, days, tests=tests or None, categories=categories
        )
    shown = list(report.tests)
    if out.json_mode:
        out.json({**report.to_json(), "tests": [t.to_json() for t in shown]})
    else:
        _table(out, report, shown)
    for test in shown:
        if test.slower is not None:
            out.info(test.slower.line(test.test_id))
        if test.truncated:
            out.info(
                f"{test.test_id}: more runs in the last {days:g} days than one listing returns "
                "(200): these figures are of its newest 200"
            )
    if opts.write_quarantine:
        _write_quarantine(out, report, shown, opts.write_quarantine)
    return EXIT_OK


def _table(out: Output, report: FlakinessReport, tests: list[TestFlakiness]) -> None:
    from asyncclient.cli._output import format_time

    rows = [
        [
            t.test_id,
            t.state,
            f"{t.flaky_builds}/{t.builds}",
            f"{t.not_passed}/{t.runs}",
            f"{t.failure_rate:.0%}",
            _duration(t.device_seconds_lost),
            format_time(t.last_flaky_at) if t.last_flaky_at else "",
            t.strip,
        ]
        for t in tests
    ]
    out.table(
        ["TEST", "STATE", "FLAKY BUILDS", "NOT PASSED", "RATE", "LOST", "LAST FLAKY", "RECENT"],
        rows,
    )
    if not tests:
        out.info(f"no finished runs of {report.project_id} in the last {report.days:g} days")
        return
    counts = {state: sum(1 for t in tests if t.state == state) for state in ("broken", "flaky")}
    out.info(
        f"{len(tests)} tests over {report.days:g} days: {counts['broken']} broken, "
        f"{counts['flaky']} flaky (RECENT: oldest to newest; ✓ passed, ✗ failed, ! other)"
    )
    left_out = sum(t.infrastructure for t in tests)
    if left_out:
        out.info(
            f"{left_out} runs that failed for the infrastructure are left out (they make no "
            "test flaky): see `asyncclient failures`"
        )


def _duration(seconds: float) -> str:
    if seconds <= 0:
        return ""
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes >= 1 else f"{seconds:.0f} s"


def _write_quarantine(
    out: Output, report: FlakinessReport, tests: list[TestFlakiness], path: str
) -> None:
    from asyncclient.quarantine import (
        QuarantineEntry,
        load_quarantine,
        until_from,
        write_quarantine,
    )

    today = date.today()
    # Only the tests asked about (API-shaped ids).
    new = [
        QuarantineEntry(test.test_id, _reason(test, report.days), until_from(today))
        for test in tests
        if test.state == "flaky" and _asked(test.test_id, report)
    ]
    added = write_quarantine(path, new)
    for entry in added:
        out.info(f"quarantined {entry.test} until {entry.until.isoformat()} in {path}")
    if not added:
        out.info(f"{path}: no test to add")
    for test in tests:
        if test.state == "broken":
            out.info(f"{test.test_id} is broken, not flaky: not quarantined (fix or revert it)")
    quarantine = load_quarantine(path)
    by_id = {test.test_id: test for test in report.tests}
    for entry in quarantine.entries:
        known = by_id.get(entry.test)
        recent = known.recent if known is not None else ()
        if len(recent) >= LIFT_AFTER and all(s == "passed" for s in recent[-LIFT_AFTER:]):
            out.info(
                f"candidate to lift: {entry.test} passed its last {LIFT_AFTER} runs; remove its "
                f"entry from {path}"
            )


def _asked(test_id: str, report: FlakinessReport) -> bool:
    from asyncclient._core._checks import is_id

    return is_id("test", test_id) and (report.asked is None or test_id in report.asked)


def _reason(test: TestFlakiness, days: float) -> str:
    """A quarantine entry's reason, from the evidence."""
    last = f"; last flaked {test.last_flaky_at.date().isoformat()}" if test.last_flaky_at else ""
    return (
        f"flaky on {test.flaky_builds} of {test.builds} builds in {days:g} days "
        f"({test.not_passed} of {test.runs} runs did not pass{last})"
    )
