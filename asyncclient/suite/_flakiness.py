"""The suite's tests' flakiness from their history (read once by the loop): for hedging, the
baseline's repeats, and the failing tests' notes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from asyncclient.errors import AsyncClientError
from asyncclient.reruns._policy import runs_for
from asyncclient.suite._events import Notice, SuiteEvent

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.flakiness import TestFlakiness
    from asyncclient.models import Run
    from asyncclient.reruns import Reruns, SuitePolicy, SuiteResult
    from asyncclient.spend.reuse import Started

__all__ = ["analyse", "copies_due", "of_failures"]


async def analyse(
    session: AsyncSession,
    history: dict[str, list[Run]],
    tests: Sequence[str],
    emit: Callable[[SuiteEvent], None],
) -> dict[str, TestFlakiness]:
    """The flakiness of each test from its `history`: per build, as `asyncclient flaky` says
    it. The builds of the runs whose list view did not carry one are read in full (50 a
    request, only for tests with both a pass and not), and kept in `history`."""
    from asyncclient.eta import slim
    from asyncclient.flakiness import DEFAULT_DAYS, analyse, counted

    wanted = [t for t in dict.fromkeys(tests) if history.get(t)]
    missing: list[str] = []
    for test in wanted:
        runs = [r for r in history[test] if counted(r)]
        if any(r.passed for r in runs) and any(not r.passed for r in runs):
            missing += [r.id for r in runs if r.used_build_id is None and r.platform != "web"]
    if missing:
        try:
            full = {
                run.id: slim(run)
                for start in range(0, len(missing), 50)
                for run in await session.list_runs(ids=missing[start : start + 50])
            }
        except AsyncClientError as exc:
            emit(Notice("warning", f"could not read the builds of earlier runs: {exc}"))
            full = {}
        for test in wanted:
            history[test] = [
                full[r.id] if r.id in full and full[r.id].test_id == test else r
                for r in history[test]
            ]
    since = datetime.now(UTC) - timedelta(days=DEFAULT_DAYS)
    found = analyse((run for test in wanted for run in history[test]), since=since)
    return {test.test_id: test for test in found}


async def of_failures(
    session: AsyncSession,
    history: dict[str, list[Run]],
    result: SuiteResult,
    emit: Callable[[SuiteEvent], None],
) -> dict[str, TestFlakiness | None] | None:
    """The flakiness of each test of `result` that did not pass (its history before this
    job): from `history`; a test not in it (not read) is read now, one listing each."""
    failing = [t.test_id for t in result.tests if t.outcome == "failed"]
    if not failing:
        return None
    known = [t for t in failing if t in history]
    found: dict[str, TestFlakiness | None] = {}
    if known:
        analysed = await analyse(session, history, known, emit)
        found.update({t: analysed.get(t) for t in known})
    rest = [t for t in failing if t not in history]
    if rest:
        from asyncclient.flakiness import fetch_flakiness

        project = next((run.project_id for run in result.runs if run.project_id), None)
        try:
            report = await fetch_flakiness(
                session, project, tests=rest, exclude={run.id for run in result.runs}
            )
        except AsyncClientError as exc:
            why = f"could not read the history of the tests that did not pass: {exc}"
            emit(Notice("error", why))
            return found or None
        found.update({t: report.of(t) for t in rest})
    return found


async def copies_due(
    session: AsyncSession,
    history: dict[str, list[Run]],
    emit: Callable[[SuiteEvent], None],
    policy: SuitePolicy,
    reruns: Reruns,
    starts: Sequence[Started],
    queued: Callable[[str, str | None, str | None, str | None], Run],
) -> list[tuple[Run, int]]:
    """The first round's copies of each known-flaky test: its first run (recorded in
    `reruns`) and how many copies give enough runs in all for a pass with the chance
    hedge_target, at its pass rate on its recent builds (at most 1 + retry_failed runs)."""
    candidates = [
        item
        for item in starts
        if item.test_id not in policy.quarantined
        and item.test_id not in reruns.new_tests
        and item.run_id not in reruns.reused
    ]
    flakiness = await analyse(session, history, [item.test_id for item in candidates], emit)
    due: list[tuple[Run, int]] = []
    for item in candidates:
        found = flakiness.get(item.test_id)
        if found is None or found.state != "flaky" or not found.runs:
            continue
        runs = runs_for(1.0 - found.failure_rate, policy.hedge_target, 1 + policy.retry_failed)
        if runs <= 1:
            continue
        first = queued(item.run_id, item.test_id, item.build_id, item.mode)
        reruns.record([first])
        due.append((first, runs - 1))
    return due
