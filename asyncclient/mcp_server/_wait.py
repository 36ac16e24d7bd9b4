"""The result of wait_for_runs, whatever the number of runs: counts by status, then the runs that
did not pass with their reasons and failed requirements, then the runs still going, then the
passed ones in one short line each, cut at the budget with a note of what was left out.

Pure: it renders the report model (asyncclient._reports.model), as the CLI's reports do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Final, NotRequired

import attrs
from typing_extensions import TypedDict

from asyncclient import _reports
from asyncclient._reports.model import (
    Attempt,
    Cause,
    TestReport,
    causes,
    read_attempt,
    suite_report,
)
from asyncclient.eta import JobEta
from asyncclient.mcp_server import _budget
from asyncclient.mcp_server._base import Bounded
from asyncclient.models import Run, RunStatus
from asyncclient.reruns import Attempts, SuiteResult

__all__ = ["FailedRequirement", "RunVerdict", "WaitResult", "failed", "verdict", "wait_result"]

STATUS_ORDER: Final = [status.value for status in RunStatus]
# A failing run shows 400 characters, 10 requirements.
VERDICT_LEVEL: Final = (400, 10)
LINE_CHARS: Final = 160
# Room the notes of what was left out may take.
NOTES_ROOM: Final = 900


class FailedRequirement(TypedDict):
    id: str
    title: str
    reason: str


class RunVerdict(TypedDict):
    id: str
    testId: str | None
    testTitle: str | None
    status: str
    outcome: str
    final: bool
    verdict: str | None
    headline: str | None
    durationMs: int | None
    failedRequirements: list[FailedRequirement]
    error: dict[str, str] | None
    link: str | None


class Eta(TypedDict):
    seconds: float
    p90Seconds: float
    text: str


class WaitResult(Bounded):
    done: bool
    summary: str
    counts: dict[str, int]
    notPassed: list[RunVerdict]
    pending: list[str]
    unknown: list[str]
    passed: list[str]
    flaky: NotRequired[list[str]]
    causes: NotRequired[list[str]]
    eta: NotRequired[Eta]


def failed(attempt: Attempt) -> list[FailedRequirement]:
    # title: the check's words; id: its id, when given.
    return [
        {"id": check.name if check.title else "", "title": check.title or check.name,
         "reason": check.reason}
        for check in attempt.checks
    ]  # fmt: skip


def verdict(attempt: Attempt) -> RunVerdict:
    """A run that did not pass (or is still going), in full: the report model's attempt."""
    run = attempt.run
    code, message = attempt.error or ("", "")
    return {
        "id": run.id,
        "testId": run.test_id,
        "testTitle": run.test_title,
        "status": attempt.status,
        "outcome": attempt.outcome,
        "final": attempt.final,
        "verdict": attempt.verdict or None,
        "headline": attempt.headline or None,
        "durationMs": run.duration_ms,
        "failedRequirements": failed(attempt),
        "error": {"code": code, "message": message} if code or message else None,
        "link": attempt.link,
    }


def line(attempt: Attempt) -> str:
    """One short line: `j_1 passed t_login "Log in": Logged in (30.1 s)`."""
    run = attempt.run
    parts = [run.id, attempt.status]
    if run.test_id:
        parts.append(run.test_id)
    text = " ".join(parts)
    if run.test_title:
        text += f' "{run.test_title}"'
    if attempt.headline:
        text += f": {attempt.headline}"
    if run.duration_ms is not None:
        text += f" ({run.duration_ms / 1000:.1f} s)"
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + _budget.ELLIPSIS


def _causes(runs: Sequence[Run], suite: SuiteResult | None) -> tuple[Cause, ...]:
    """The failures grouped by cause (the report model's), when there are two or more."""
    if suite is None:
        suite = SuiteResult(tuple(Attempts(run.test_id or run.id, (run,)) for run in runs))
    grouped = causes(suite)
    return grouped if grouped and grouped[0].failures > 1 else ()


def _counts(runs: Sequence[Run]) -> dict[str, int]:
    found = Counter(_reports.status_of(run) for run in runs)
    known = {status: found.pop(status) for status in STATUS_ORDER if status in found}
    return {**known, **dict(sorted(found.items()))}


def flaky_line(test: TestReport) -> str:
    """`t_search passed on attempt 2 (earlier: j_1 failed: The device ...)`, bounded."""
    earlier = "; ".join(
        f"{attempt.id} {attempt.status}" + (f": {attempt.headline}" if attempt.headline else "")
        for attempt in test.earlier
    )
    text = f"{test.test_id} passed on {test.passed_as} (earlier: {earlier})"
    return text if len(text) <= 2 * LINE_CHARS else text[: 2 * LINE_CHARS - 1] + _budget.ELLIPSIS


def wait_result(
    runs: Sequence[Run],
    unknown: Sequence[str],
    *,
    done: bool,
    seconds: float,
    budget: int,
    suite: SuiteResult | None = None,
    eta: JobEta | None = None,
) -> WaitResult:
    """What wait_for_runs answers for `runs` (in the order asked), within `budget` characters.
    suite: with re-runs, the tests and their attempts (`runs` are then their last runs): the
    summary counts tests, and `flaky` lists the tests that passed only on a re-run. eta: how
    long the runs still going have to go (asyncclient.eta), in a partial result."""
    pending = [run.id for run in runs if not run.is_final]
    not_passed = [run for run in runs if run.is_final and _reports.run_result(run) != "passed"]
    passed = [run for run in runs if run.is_final and _reports.run_result(run) == "passed"]
    # Runs enter the report model only as they fit.
    summary = _reports.counts_line(runs) if suite is None else suite.summary()
    if unknown:
        summary += f"; {len(unknown)} unknown"
    if pending:
        summary += f"; still going after {seconds:g} s: {len(pending)}"
        if eta is not None and eta.p90 > 0:
            summary += f" ({eta.text()})"
    result: WaitResult = {
        "done": done and not pending,
        "summary": summary,
        "counts": _counts(runs),
        "notPassed": [],
        "pending": [],
        "unknown": [],
        "passed": [],
    }
    if pending and eta is not None and eta.p90 > 0:
        result["eta"] = {
            "seconds": round(eta.p50, 1),
            "p90Seconds": round(eta.p90, 1),
            "text": eta.text(),
        }
    room = budget - _budget.size(result) - NOTES_ROOM
    notes: list[str] = []
    cuts = _budget.Cuts()  # what was cut inside the items shown

    def fill(key: str, items: Iterable[Any], total: int, share: int, advice: str) -> None:
        nonlocal room
        shown, inside = _budget.fit_items(items, VERDICT_LEVEL, key, max(min(room, share), 0))
        result[key] = shown  # type: ignore[literal-required]
        cuts.merge(inside)
        room -= _budget.size(shown)
        if len(shown) < total:
            notes.append(f"{key}: {len(shown):,} of {total:,} shown; {advice}")

    # Unknown ids going first, then failures, then passes.
    again = "call wait_for_runs again with the same run_ids (final runs come back at once)"
    fill("pending", pending, len(pending), room // 4, again)
    fill("unknown", unknown, len(unknown), room // 4, "the service knows none of these ids")
    every = "get_run gives any run in full"
    grouped = _causes(runs, suite)
    if grouped:
        result["causes"] = []
        fill("causes", (cause.line() for cause in grouped), len(grouped), room // 4, every)
    if suite is not None:
        flaky = suite_report(attrs.evolve(suite, tests=suite.flaky)).tests
        result["flaky"] = []
        fill("flaky", (flaky_line(test) for test in flaky), len(flaky), room // 4, every)
    fill(
        "notPassed",
        (verdict(read_attempt(run)) for run in not_passed),
        len(not_passed),
        room,
        every,
    )
    fill("passed", (line(read_attempt(run)) for run in passed), len(passed), room, every)
    notes.extend(cuts.notes())
    if notes:
        result["leftOut"] = notes[: _budget.NOTES_MAX]
    return result
