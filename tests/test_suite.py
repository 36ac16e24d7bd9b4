"""asyncclient.suite: the suite loop in the library (AsyncSession.run_suite / follow_suite), its
retry strategies, the copies of known-flaky tests, the losers stopped, the budget and the
accounting. Where the order of the loop's action and the emulator's progress matters, the
emulator holds the runs (FakeService.hold) and an observer lets one go: no time window."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from report_support import ctrf_is_valid, junit_is_valid

from asyncclient import AsyncSession, SuitePolicy, UnauthenticatedError, ValidationError
from asyncclient.reruns._policy import runs_for
from asyncclient.suite import (
    BudgetReached,
    CopiesStopped,
    RunChanged,
    RunFinished,
    RunStarted,
    StartRefused,
    SuiteEvent,
    SuiteRun,
)
from asyncclient.testing import FakeService
from asyncclient.testing.dialects import Dialect

Seed = Callable[..., dict[str, Any]]
XSD = Path(__file__).resolve().parent / "data" / "surefire-test-report.xsd"
FAST = {"interval": 0.02}


def flaky_history(build: str = "ab_b1", runs: int = 10) -> list[dict[str, Any]]:
    """Half passed, half failed, on one build: flaky at 50 % per run."""
    return [
        {"daysAgo": 1 + i / 10, "status": "failed" if i % 2 else "passed", "build": build,
         "durationSeconds": 25}
        for i in range(runs)
    ]  # fmt: skip


@pytest.fixture
async def svc(rerun_seed: Seed) -> AsyncIterator[FakeService]:
    seed = rerun_seed(tests={"t_flaky": {"flakyRuns": 1, "history": flaky_history()}})
    async with FakeService(seed, speed=1000) as service:
        yield service


@pytest.fixture
async def session(svc: FakeService) -> AsyncIterator[AsyncSession]:
    async with AsyncSession("ci-run", svc.url, backoff_base=0.0) as client:
        yield client


def runs_of(svc: FakeService, test_id: str) -> list[Any]:
    return [run for run in svc.backend.runs.values() if run.test.id == test_id]


@pytest.mark.parametrize("strategy", ["rounds", "at-once"])
async def test_at_once_starts_every_re_run_of_a_test_together(
    strategy: str, svc: FakeService, session: AsyncSession
) -> None:
    policy = SuitePolicy(retry_failed=2, retry_strategy=strategy, **FAST)  # type: ignore[arg-type]
    suite = SuiteRun.for_project(session, "p_ci", build_id="ab_b1", policy=policy)
    order: list[tuple[str, str, int]] = []

    def seen(event: SuiteEvent) -> None:
        if isinstance(event, RunStarted) and event.test_id == "t_broken":
            order.append(("started", event.kind, event.attempt))
        if isinstance(event, RunFinished) and event.run.test_id == "t_broken":
            order.append(("finished", event.kind, event.read.number))

    suite.observe(seen)
    report = await suite.wait()

    broken = next(t for t in report.tests if t.test_id == "t_broken")
    assert broken.outcome == "failed"
    assert [a.kind for a in broken.attempts] == ["run", "rerun", "rerun"]
    assert len(runs_of(svc, "t_broken")) == 3  # 1 + retry_failed, never more
    if strategy == "at-once":  # both re-runs start as soon as the first run failed
        assert order[:4] == [
            ("started", "run", 1), ("finished", "run", 1),
            ("started", "rerun", 2), ("started", "rerun", 3),
        ]  # fmt: skip
    else:  # one round at a time
        assert order[:4] == [
            ("started", "run", 1), ("finished", "run", 1),
            ("started", "rerun", 2), ("finished", "rerun", 2),
        ]  # fmt: skip
    junit_is_valid(report)


async def test_the_first_pass_stops_the_other_re_runs_which_are_not_counted(
    svc: FakeService, session: AsyncSession
) -> None:
    # t_flaky's first run fails; its two re-runs start at once and are held running; one is
    # let go and passes: the other is stopped while it runs.
    hold: list[Any] = []

    def seen(event: SuiteEvent) -> None:
        if isinstance(event, RunFinished) and event.run.test_id == "t_flaky" and not hold:
            hold.append(svc.hold("t_flaky", state="running"))
        if isinstance(event, RunStarted) and event.test_id == "t_flaky" and event.attempt == 3:
            hold[0].release_run(hold[0].run_ids[0])

    policy = SuitePolicy(retry_failed=2, retry_strategy="at-once", **FAST)
    suite = SuiteRun.for_project(session, "p_ci", build_id="ab_b1", policy=policy)
    suite.observe(seen)
    try:
        report = await suite.wait()
    finally:
        hold[0].release()

    flaky = next(t for t in report.tests if t.test_id == "t_flaky")
    assert flaky.outcome == "flaky"
    assert [(a.kind, a.status, a.stopped) for a in flaky.attempts] == [
        ("run", "failed", False), ("rerun", "cancelled", True), ("rerun", "passed", False),
    ]  # fmt: skip
    assert flaky.final.number == 2  # the re-run let go first: attempt 2, as they started
    assert "1 flaky (passed on attempt 2)" in report.summary
    stopped = next(a.id for a in flaky.attempts if a.stopped)
    assert svc.backend.runs[stopped].status_at(svc.backend.now()) == "cancelled"
    stops = [e for e in suite.events if isinstance(e, CopiesStopped)]
    assert [(e.test_id, len(e.stopped)) for e in stops] == [("t_flaky", 1)]
    assert report.cost.stopped_runs == 1
    assert "1 stopped once another run of its test passed" in report.cost.line()
    case = next(c for c in junit_is_valid(report) if c.get("classname") == "t_flaky")
    # Passed in the end, its failed run a flakyFailure; the stopped one is no failure at all.
    assert [child.tag for child in case] == ["flakyFailure", "system-out"]


async def test_hedge_starts_copies_of_a_known_flaky_test_and_stops_them_once_it_passes(
    svc: FakeService, session: AsyncSession
) -> None:
    # t_flaky's history: 50 % per run. For a 0.95 chance of a pass: 1 - 0.5^k >= 0.95 needs
    # k = 5 runs, at most 1 + retry_failed = 3: its run and two copies, held running until
    # the first run is let go (t_flaky's own first run fails in the seed: flakyRuns 1, so the
    # seed is given no flaky run here).
    svc.backend.tests["t_flaky"].seed = _without_first_failure(svc.backend.tests["t_flaky"].seed)
    hold = svc.hold("t_flaky", state="running")
    copies: list[str] = []
    running: set[str] = set()

    def seen(event: SuiteEvent) -> None:
        # The first run is let go once both copies are seen running (held there): a copy
        # stopped while still queued would never have run, and would cost nothing.
        if isinstance(event, RunStarted) and event.kind == "copy":
            copies.append(event.run_id)
        elif (
            isinstance(event, RunChanged)
            and event.run.id in copies
            and event.run.status == "running"
            and len(running) < 2
        ):
            running.add(event.run.id)
            if len(running) == 2:
                first = next(i for i in hold.run_ids if i not in copies)
                hold.release_run(first)

    policy = SuitePolicy(retry_failed=2, retry_strategy="hedge", **FAST)
    suite = SuiteRun.for_project(session, "p_ci", build_id="ab_b1", policy=policy)
    suite.observe(seen)
    try:
        report = await suite.wait()
    finally:
        hold.release()

    flaky = next(t for t in report.tests if t.test_id == "t_flaky")
    assert flaky.outcome == "passed"  # its first run passed: not flaky in this job
    assert sorted((a.kind, a.status, a.stopped) for a in flaky.attempts) == [
        ("copy", "cancelled", True), ("copy", "cancelled", True), ("run", "passed", False),
    ]  # fmt: skip
    assert flaky.final.kind == "run"
    # Only the known-flaky test got copies: t_pass and t_broken have no history.
    assert {t.test_id: len(t.attempts) for t in report.tests} == {
        "t_pass": 1, "t_flaky": 3, "t_broken": 3,
    }  # fmt: skip
    assert report.cost.copy_runs == 2
    assert report.cost.stopped_runs == 2
    assert report.cost.fields()["copyRuns"] == 2
    assert "copies: 2 runs" in report.cost.line()
    from asyncclient._reports.text import summary_lines

    said = "\n".join(summary_lines(report))
    assert "passed on attempt 1 (others: " in said
    assert said.count("(stopped: another run passed)") == 2
    assert "flaky: passed on attempt 1" not in said
    junit_is_valid(report)
    ctrf = ctrf_is_valid(report)
    entry = next(t for t in ctrf["results"]["tests"] if t["testId"] == "t_flaky")
    assert entry["retries"] == 0  # stopped copies are no retries
    assert entry["flaky"] is False
    # One key per copy, derived from the suite's: a retried start starts nothing twice.
    keys = [r.idempotency_key for r in svc.requests_for("run_test")]
    assert len(set(keys)) == len(keys) == 4
    assert None not in keys


def _without_first_failure(seed: Any) -> Any:
    import attrs

    return attrs.evolve(seed, flaky_runs=0)


async def test_a_broken_or_quarantined_test_gets_no_copies(
    rerun_seed: Seed,
) -> None:
    broken = [{"daysAgo": 1 + i, "status": "failed", "build": f"ab_o{i}"} for i in range(4)]
    seed = rerun_seed(
        tests={"t_broken": {"history": broken}, "t_flaky": {"history": flaky_history()}}
    )
    async with (
        FakeService(seed, speed=1000) as svc,
        AsyncSession("ci-run", svc.url, backoff_base=0.0) as session,
    ):
        policy = SuitePolicy(
            retry_failed=2, retry_strategy="hedge", quarantined={"t_flaky": "known"}, **FAST
        )
        report = await SuiteRun.for_project(session, "p_ci", build_id="ab_b1", policy=policy).wait()
    kinds = {t.test_id: [a.kind for a in t.attempts] for t in report.tests}
    assert "copy" not in kinds["t_broken"]
    assert "copy" not in kinds["t_flaky"]


async def test_the_budget_caps_the_device_time_of_re_runs(
    svc: FakeService, session: AsyncSession
) -> None:
    # Each re-run is reckoned at its test's usual duration: t_flaky's history says 25 s, so
    # its two re-runs fit one minute; t_broken has no history (120 s): it gets none, and the
    # report says why.
    policy = SuitePolicy(retry_failed=2, retry_strategy="at-once", retry_budget=1.0, **FAST)
    suite = SuiteRun.for_project(session, "p_ci", build_id="ab_b1", policy=policy)
    report = await suite.wait()
    broken = next(t for t in report.tests if t.test_id == "t_broken")
    assert len(broken.attempts) == 1
    assert broken.start_error is not None
    assert "re-run budget of 1.0 min is spent" in broken.start_error
    reached = [e for e in suite.events if isinstance(e, BudgetReached)]
    assert [e.test_id for e in reached] == ["t_broken"]
    assert reached[0].fields()["budgetSeconds"] == 60.0
    assert [e.test_id for e in suite.events if isinstance(e, StartRefused)] == ["t_broken"]
    assert len(runs_of(svc, "t_broken")) == 1
    flaky = next(t for t in report.tests if t.test_id == "t_flaky")
    assert [a.kind for a in flaky.attempts].count("rerun") >= 1
    assert flaky.outcome == "flaky"


async def test_events_are_replayed_to_each_iterator_and_end_with_the_job(
    svc: FakeService, session: AsyncSession
) -> None:
    suite = SuiteRun.for_project(session, "p_ci", build_id="ab_b1", policy=SuitePolicy(**FAST))
    names = [event.event async for event in suite]
    again = [event.event async for event in suite]
    report = await suite.wait()
    assert names == again
    assert names[:3] == ["run_started"] * 3
    assert names[-1] == "job_finished"
    assert names.count("run_finished") == 3
    assert report is suite.report
    assert report.name == "p_ci"


def test_runs_for_is_the_fewest_runs_that_reach_the_target() -> None:
    assert runs_for(0.5, 0.95, 10) == 5  # 1 - 0.5^5 = 0.969
    assert runs_for(0.5, 0.95, 3) == 3  # capped by 1 + retry_failed
    assert runs_for(0.9, 0.95, 10) == 2  # 1 - 0.1^2 = 0.99
    assert runs_for(0.95, 0.95, 10) == 1
    assert runs_for(0.0, 0.95, 4) == 4
    assert runs_for(1.0, 0.95, 4) == 1


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"retry_strategy": "sometimes"}, "retry_strategy 'sometimes' is not one of"),
        ({"hedge_target": 1.0}, "hedge_target 1 is out of range"),
        ({"retry_budget": 0}, "retry_budget 0 is out of range"),
        ({"retry_failed": 11}, "retry_failed 11 is out of range"),
        ({"fail_on_flaky": True}, "fail_on_flaky needs retry_failed"),
    ],
)
def test_a_bad_policy_is_refused_when_made(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        SuitePolicy(**options)


async def test_result_again_returns_the_same_report_and_an_error_ends_iteration(
    svc: FakeService, session: AsyncSession
) -> None:
    suite = SuiteRun(session, ["j_000000000001"], policy=SuitePolicy(**FAST))
    # An unknown run: the loop ends (the watcher gives it up), the report says so.
    report = await suite.wait()
    assert await suite.wait() is report
    assert suite.unknown == ("j_000000000001",)
    assert [event.event async for event in suite][-1] == "job_finished"

    broken = AsyncSession("not-a-key", svc.url, backoff_base=0.0)  # 401: the watch ends at once
    async with broken:
        failing = SuiteRun(broken, ["j_000000000002"], policy=SuitePolicy(**FAST))
        seen = [event.event async for event in failing]  # ends with the loop, however it ends
        with pytest.raises(UnauthenticatedError):
            await failing.wait()
        with pytest.raises(UnauthenticatedError):
            await failing.wait()
    assert "job_finished" not in seen


@pytest.mark.parametrize("leave_on", ["run_started", "run_status"])
async def test_leaving_the_suite_early_stops_its_runs(
    leave_on: str, svc: FakeService, session: AsyncSession
) -> None:
    """A caller that goes away (a web client disconnects) leaves `async with suite`: the loop is
    cancelled and the suite's runs are stopped, before its first sweep (during the history
    read) as well as while it watches. The runs are held queued: none can end on its own."""
    with svc.hold("t_pass", "t_flaky", "t_broken"):
        policy = SuitePolicy(retry_failed=1, **FAST)
        suite = SuiteRun.for_project(session, "p_ci", build_id="ab_b1", policy=policy)
        async with suite:
            async for event in suite:
                if event.event == leave_on:
                    break
        now = svc.backend.now()
        ran = [svc.backend.runs[i] for i in suite.run_ids]
        assert len(ran) == 3
        assert {run.status_at(now) for run in ran} == {"cancelled"}


class _NoDurations(Dialect):
    """A service that says when a run was created, not when it began or ended, nor how long."""

    name = "no-durations"

    def timing(self, run: Any, now: float) -> dict[str, Any]:
        return {"createdAt": self.timestamp(run.created_at)}


async def test_a_rerun_of_unknown_length_counts_as_its_usual_time_against_the_budget() -> None:
    """A 1.5-minute budget, t_broken usually 60 s (its history's durations are sent), its
    re-runs' durations not sent: one re-run fits (60 s), a second would not (120 s). The
    unknown length counted as 0 s before, and three re-runs went."""
    app = {"project": "p_u", "target": "web", "url": "https://shop.example"}
    history = [{"daysAgo": d, "status": "failed", "durationSeconds": 60} for d in (1, 2, 3)]
    seed = {
        "projects": [{"id": "p_u", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "u-run", "capability": "run", "projects": ["p_u"]}],
        "tests": [{"id": "t_broken", **app, "outcome": "failed", "durationSeconds": 60,
                   "queuedSeconds": 1, "history": history}],
    }  # fmt: skip

    class HistoryTimed(_NoDurations):
        name = "history-timed"

        def timing(self, run: Any, now: float) -> dict[str, Any]:
            if run.outcome is not None:  # the seed's history: how it ended is known
                return Dialect.timing(self, run, now)
            return super().timing(run, now)

    policy = SuitePolicy(retry_failed=3, retry_budget=1.5, rerun_known=True, **FAST)
    async with (
        FakeService(seed, speed=1000, dialect=HistoryTimed) as svc,
        AsyncSession("u-run", svc.url) as session,
    ):
        report = await SuiteRun.for_project(session, "p_u", policy=policy).wait()
        runs = [run for run in svc.backend.runs.values() if run.outcome is None]
    (broken,) = report.tests
    assert len(broken.attempts) == 2, [a.kind for a in broken.attempts]
    assert len(runs) == 2
    assert broken.start_error is not None
    assert "budget" in broken.start_error
