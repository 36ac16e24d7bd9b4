"""asyncclient.reruns: the re-run policy, against the emulator with a flaky test (fails its first
run), one that always fails and one that passes. Time is the emulator's manual clock, moved by
the watcher's injected sleep."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from clock_support import ManualTime

from asyncclient import AsyncSession, ValidationError, wait_with_retries
from asyncclient._core._checks import derived_key
from asyncclient.models import Run, RunStatus
from asyncclient.reruns import Attempts, Reruns, SuitePolicy, SuiteResult
from asyncclient.reruns._result import needs_rerun
from asyncclient.testing import FakeService

BUILD = "ab_b1"  # RERUN_BUILD of conftest.py
Seed = Callable[..., dict[str, Any]]


@pytest.fixture
async def svc(rerun_seed: Seed) -> AsyncIterator[FakeService]:
    async with FakeService(rerun_seed(), clock="manual") as service:
        yield service


@pytest.fixture
async def session(svc: FakeService) -> AsyncIterator[AsyncSession]:
    async with AsyncSession("ci-run", svc.url, backoff_base=0.0) as client:
        yield client


async def followed_on_build(svc: FakeService, client: AsyncSession, **policy: Any) -> SuiteResult:
    """The project's runs on BUILD, followed with `policy`'s re-runs on the service's clock."""
    start = await client.run_project("p_ci", build_id=BUILD)
    runs = [s.run_id for s in start.started]
    return await wait_with_retries(client, runs, **policy, **ManualTime(svc).options())


def runs_of(svc: FakeService, test_id: str) -> list[Any]:
    return [run for run in svc.backend.runs.values() if run.test.id == test_id]


async def test_only_what_did_not_pass_is_rerun_with_the_first_runs_build_and_mode(
    svc: FakeService, session: AsyncSession
) -> None:
    # The newest build is ab_b2: a re-run must keep ab_b1, the one the first run used.
    start = await session.run_project("p_ci", mode="cold", build_id=BUILD)
    time = ManualTime(svc)

    result = await wait_with_retries(
        session,
        [s.run_id for s in start.started],
        retry_failed=2,
        mode="cold",
        build_id=BUILD,
        **time.options(),
    )

    attempts = {t.test_id: t.attempts for t in result.tests}
    assert attempts == {"t_pass": 1, "t_flaky": 2, "t_broken": 3}
    for test_id, count in attempts.items():
        made = runs_of(svc, test_id)
        assert len(made) == count  # nothing started twice
        assert {run.mode for run in made} == {"cold"}
        assert {run.build.id for run in made} == {BUILD}
    outcomes = {t.test_id: t.outcome for t in result.tests}
    assert outcomes == {"t_pass": "passed", "t_flaky": "flaky", "t_broken": "failed"}
    assert not result.passed
    assert [t.test_id for t in result.flaky] == ["t_flaky"]
    assert [t.test_id for t in result.failed] == ["t_broken"]
    assert result.summary() == (
        "3 tests: 1 passed, 1 flaky (passed on attempt 2), 1 failed after 3 attempts"
    )
    flaky = next(t for t in result.tests if t.flaky)
    assert [r.status_kind for r in flaky.runs] == ["failed", "passed"]
    assert flaky.failed_attempts == flaky.runs[:1]
    assert flaky.runs[0].headline_text == "The next screen did not appear within the step's 10 s."
    assert len(result.runs) == 6


@pytest.mark.parametrize("fail_on_flaky", [False, True])
async def test_a_flaky_test_alone_passes_unless_flaky_counts_as_failed(
    fail_on_flaky: bool, rerun_seed: Seed
) -> None:
    async with (
        FakeService(rerun_seed(broken=False), clock="manual") as svc,
        AsyncSession("ci-run", svc.url, backoff_base=0.0) as client,
    ):
        result = await followed_on_build(svc, client, retry_failed=1, fail_on_flaky=fail_on_flaky)
    assert result.passed is not fail_on_flaky
    assert result.summary() == "2 tests: 1 passed, 1 flaky (passed on attempt 2)"


async def test_without_retries_nothing_is_rerun(svc: FakeService, session: AsyncSession) -> None:
    start = await session.run_project("p_ci", build_id=BUILD)
    result = await wait_with_retries(
        session, [s.run_id for s in start.started], **ManualTime(svc).options()
    )
    assert [t.attempts for t in result.tests] == [1, 1, 1]
    assert result.summary() == "3 tests: 1 passed, 2 failed"
    assert len(svc.requests_for("run_test")) == 0


async def test_a_stopped_run_is_not_rerun(svc: FakeService, session: AsyncSession) -> None:
    start = await session.run_test("t_broken", build_id=BUILD)
    await session.stop_run(start.run_id)
    svc.reset_requests()
    result = await wait_with_retries(
        session, [start.run_id], retry_failed=3, **ManualTime(svc).options()
    )
    (test,) = result.tests
    assert test.outcome == "cancelled"
    assert test.attempts == 1
    assert svc.requests_for("run_test") == []


async def test_reruns_of_many_tests_are_watched_in_batches_of_fifty(rerun_seed: Seed) -> None:
    """1,000 tests, 300 of which fail: the re-runs go out together and each sweep over them is
    ceil(300 / 50) = 6 List runs requests, never one poll per run."""
    async with (
        FakeService(
            rerun_seed(flaky=False, broken=False, extra=1000, failing=300), clock="manual"
        ) as svc,
        AsyncSession("ci-run", svc.url, backoff_base=0.0) as client,
    ):
        start = await client.run_project("p_ci")
        first = [s.run_id for s in start.started if s.test_id != "t_pass"]
        time = ManualTime(svc)

        def on_rerun(started: list[tuple[str, str, int]]) -> None:
            assert len(started) == 300
            svc.reset_requests()  # from here on: the re-run round only

        result = await wait_with_retries(
            client, first, retry_failed=1, on_rerun=on_rerun, **time.options()
        )
        requests = svc.requests_for("list_runs")
        assert len(svc.requests_for("get_run")) == 0

    assert sum(t.attempts == 2 for t in result.tests) == 300
    assert len(result.failed) == 300
    # Each sweep of the re-run round: 6 requests of at most 50 ids, 300 ids in all.
    sizes = [len(r.query["ids"].split(",")) for r in requests]
    sweeps = len(sizes) // math.ceil(300 / 50)
    assert sweeps >= 2  # queued, then final
    assert len(sizes) == sweeps * 6
    assert all(size <= 50 for size in sizes)
    assert sum(sizes) == 300 * sweeps


async def test_each_rerun_has_its_own_key_derived_from_the_suites(
    svc: FakeService, session: AsyncSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str | None] = []
    real = session.run_test

    async def recording(test_id: str, **options: Any) -> Any:
        keys.append(options.get("idempotency_key"))
        return await real(test_id, **options)

    monkeypatch.setattr(session, "run_test", recording)
    start = await real("t_broken", build_id=BUILD)
    await wait_with_retries(
        session,
        [start.run_id],
        retry_failed=2,
        idempotency_key="ci-42",
        **ManualTime(svc).options(),
    )
    # A digest of the whole first, then the part to read; 64 characters at most.
    assert keys == [
        derived_key("ci-42", "rerun/t_broken/2"),
        derived_key("ci-42", "rerun/t_broken/3"),
    ]
    assert all(
        k is not None and k.endswith(f"-rerun/t_broken/{n}")
        for k, n in zip(keys, (2, 3), strict=True)
    )
    assert all(k is not None and len(k) <= 64 and k[:32] != keys[0][:32] for k in keys[1:])
    # The same suite key again: the service starts nothing new for the re-runs.
    before = len(svc.backend.runs)
    reruns = Reruns(SuitePolicy(retry_failed=2), idempotency_key="ci-42")
    reruns.record([Run(id=start.run_id, status=RunStatus.FAILED, test_id="t_broken", final=True)])
    await reruns.start(session, reruns.due())
    assert len(svc.backend.runs) == before


def test_which_runs_call_for_a_rerun() -> None:
    def run(status: str, final: bool = True) -> Run:
        return Run(id="j_1", status=status, test_id="t_1", final=final)

    for status in ("failed", "error", "inconclusive", "blocked", "crashed"):
        assert needs_rerun(run(status))
    for status in ("passed", "cancelled", "canceled", "stopped"):
        assert not needs_rerun(run(status))
    assert not needs_rerun(run("failed", final=False))


def test_the_summary_counts_tests_not_runs() -> None:
    def run(run_id: str, status: str) -> Run:
        return Run(id=run_id, status=status, test_id="t", final=True)

    result = SuiteResult(
        (
            Attempts("t_a", (run("j_1", "passed"),)),
            Attempts("t_b", (run("j_2", "failed"), run("j_3", "passed"))),
            Attempts("t_c", (run("j_4", "failed"), run("j_5", "error"), run("j_6", "failed"))),
            Attempts("t_d", (run("j_7", "passed"),)),
        )
    )
    assert result.summary() == (
        "4 tests: 2 passed, 1 flaky (passed on attempt 2), 1 failed after 3 attempts"
    )
    assert (
        SuiteResult(result.tests[:2], SuitePolicy(retry_failed=1, fail_on_flaky=True)).passed
        is False
    )
    assert SuiteResult(result.tests[:2]).passed is True


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValidationError, match="retry_failed 11 is out of range"):
        SuitePolicy(retry_failed=11)
    with pytest.raises(ValidationError, match="retry_failed True is out of range"):
        SuitePolicy(retry_failed=True)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="mode must be one of"):
        Reruns(SuitePolicy(retry_failed=1), mode="hot")


def test_a_test_fails_for_good_only_when_no_re_run_follows() -> None:
    """--max-failures counts a test once its last run did not pass and nothing will follow:
    out of re-runs, stopped, or its re-run refused; never a quarantined test."""
    from asyncclient.models import Run, RunStatus

    def final(run_id: str, test_id: str, status: str) -> Run:
        return Run(id=run_id, status=RunStatus(status), test_id=test_id, final=True)

    reruns = Reruns(SuitePolicy(retry_failed=1, quarantined={"t_q": "known"}))
    first = final("j_1", "t_a", "failed")
    assert not reruns.failed_for_good(first)  # a re-run is due
    reruns.record([first])
    assert reruns.failed_for_good(final("j_2", "t_b", "cancelled"))  # stopped: never re-run
    assert not reruns.failed_for_good(final("j_3", "t_q", "failed"))  # quarantined
    assert not reruns.failed_for_good(final("j_4", "t_c", "passed"))
    assert not reruns.failed_for_good(Run(id="j_5", status=RunStatus.RUNNING, test_id="t_d"))
    assert Reruns(0).failed_for_good(final("j_6", "t_e", "error"))  # no re-runs at all


def test_a_test_that_passed_on_a_copy_reads_so() -> None:
    """A known-flaky test's copy is no attempt of its own: `passed on copy 1`."""
    from asyncclient.reruns import Attempts

    first = Run(id="j_first0000001", test_id="t_x", status="failed", final=True)
    copy = Run(id="j_copy00000001", test_id="t_x", status="passed", final=True)
    test = Attempts("t_x", (first, copy), kinds=("run", "copy"), at_once=True, decided_on=2)
    assert test.passed_as == "copy 1"
    # At once, the deciding run goes last whatever its place: the second of two copies.
    other = Run(id="j_copy00000002", test_id="t_x", status="failed", final=True)
    test = Attempts(
        "t_x", (first, other, copy), kinds=("run", "copy", "copy"), at_once=True, decided_on=3
    )
    assert test.passed_as == "copy 2"
    rerun = Attempts("t_x", (first, copy), kinds=("run", "rerun"))
    assert rerun.passed_as == "attempt 2"


async def test_a_web_tests_rerun_in_a_job_given_a_build_goes_without_it(rerun_seed: Seed) -> None:
    """The job's --build is for app tests: a failed web test's re-run is started without it
    (the service refuses a build for a web test: before, the re-run never started)."""
    async with (
        FakeService(
            rerun_seed(flaky=False, broken=False, extra=1, failing=1), clock="manual"
        ) as svc,
        AsyncSession("ci-run", svc.url, backoff_base=0.0) as client,
    ):
        result = await followed_on_build(svc, client, retry_failed=1, build_id=BUILD)
        web = runs_of(svc, "t_0000")
        refused = [r for r in svc.requests_for("run_test") if r.status >= 400]
    assert {t.test_id: t.attempts for t in result.tests} == {"t_pass": 1, "t_0000": 2}
    assert [run.build for run in web] == [None, None]
    assert refused == []


def test_the_policy_is_one_record_that_the_others_read() -> None:
    """Every decision of a suite lives in SuitePolicy, checked once: the re-runs' state takes
    it whole, and a suite's result reads its fields through it, copying none."""
    import inspect

    import attrs

    decisions = {field.name for field in attrs.fields(SuitePolicy)}
    assert decisions.isdisjoint(field.name for field in attrs.fields(SuiteResult))
    assert list(inspect.signature(Reruns).parameters) == [
        "policy",
        "mode",
        "build_id",
        "idempotency_key",
    ]
    policy = SuitePolicy(retry_failed=1, quarantined={"t_q": "old OS"}, fail_on_quarantined=True)
    reruns = Reruns(policy)
    assert reruns.policy is policy
    assert reruns.result().policy is policy
    assert reruns.result().policy.quarantined == {"t_q": "old OS"}
    assert not hasattr(reruns.result(), "quarantined")  # read once, through the policy
