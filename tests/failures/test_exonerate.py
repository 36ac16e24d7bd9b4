"""Is it my change? asyncclient.failures.exonerate's rules alone, and the suite loop's baseline
runs against the emulator with failures that were there before the change
(testing.baseline_seed): 3 of 5 failing tests fail on main's build the same way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncclient import AsyncSession
from asyncclient.failures.exonerate import (
    ci_label,
    exonerate,
    find_baseline,
    judge,
    read_label,
    repeats_for,
)
from asyncclient.models import Run
from asyncclient.suite import SuitePolicy, SuiteRun
from asyncclient.testing import FakeService, baseline_seed

KEY = "shop-run-key"
BEFORE = {"t_checkout", "t_profile", "t_orders"}  # broken on main's build already
NEW = {"t_coupon", "t_wishlist"}  # broken by the change


@pytest.fixture
async def shop() -> AsyncIterator[FakeService]:
    async with FakeService(baseline_seed(), speed=6000) as service:
        yield service


@pytest.fixture
async def session(shop: FakeService) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(KEY, shop.url) as s:
        yield s


def _run(run_id: str, status: str, reason: str = "") -> Run:
    checks = [{"title": "Check out", "result": "failed", "reason": reason}] if reason else []
    return Run(id=run_id, test_id="t_checkout", status=status, final=True, requirements=checks)


def test_a_flaky_test_needs_its_failure_more_than_once_on_the_baseline() -> None:
    assert repeats_for(None) == repeats_for(0.0) == 1  # not flaky: once
    assert repeats_for(0.2) == 2  # 0.2**2 = 4 % <= 5 %
    assert repeats_for(0.3) == 3  # 0.3**2 = 9 %; 0.3**3 = 2.7 %
    assert repeats_for(0.5) == 5
    assert repeats_for(0.9) == 5  # the most: its rate is said with the verdict


def test_the_ci_label_reads_back_and_a_cut_one_reads_as_none() -> None:
    label = ci_label("main", "4F1C2A9E0B7D")
    assert label == "ref=main commit=4f1c2a9e0b7d"
    assert read_label(label) == ("main", "4f1c2a9e0b7d")
    assert read_label(f"nightly {label}") == ("main", "4f1c2a9e0b7d")
    assert read_label("ref=main commit=4f1c2a") is None  # cut short by the service
    assert read_label("ref=main") is None
    assert read_label(None) is None
    assert ci_label("my branch", "4f1c2a9e") is None
    assert ci_label("my\u2003branch", "4f1c2a9e") is None
    assert ci_label("main", "not-hex") is None


@given(st.text(max_size=300), st.text(max_size=80))
def test_any_label_reads_as_a_whole_ref_and_commit_or_none(label: str, ref: str) -> None:
    found = read_label(label)
    if found is not None:
        assert not any(ch.isspace() for ch in found[0])
        assert 7 <= len(found[1]) <= 64
        assert all(ch in "0123456789abcdef" for ch in found[1])
    made = ci_label(ref, "4f1c2a9e0b7d")
    if made is not None:  # a label the step writes reads back as it was given
        assert read_label(made) == (ref, "4f1c2a9e0b7d")


def test_the_verdict_same_cause_pre_existing_a_pass_or_another_cause_new() -> None:
    failure = _run("j_fail01", "failed", "The checkout button is gone (order 1234).")
    same = _run("j_base01", "failed", "The checkout button is gone (order 98765).")
    other = _run("j_base02", "failed", "The payment page never loads.")
    passed = _run("j_base03", "passed")
    stopped = _run("j_base04", "cancelled")
    verdict = judge(failure, [same], baseline="ab_main", needed=1)
    assert (verdict.state, verdict.same_cause) == ("pre-existing", 1)
    assert verdict.why.startswith("fails on the baseline ab_main too (1 of 1 runs, same cause)")
    assert judge(failure, [same, passed], baseline="ab_main", needed=2).state == "new"
    assert judge(failure, [other], baseline="ab_main", needed=1).state == "new"
    assert judge(failure, [same], baseline="ab_main", needed=2).state == "undecided"
    assert judge(failure, [stopped], baseline="ab_main", needed=1).state == "undecided"


async def test_auto_finds_mains_newest_build_of_the_same_file(
    shop: FakeService, session: AsyncSession
) -> None:
    found, said = await find_baseline(session, "ab_shop_change", "main")
    assert found == "ab_shop_main"
    assert "commit 4f1c2a9e0b7d" in said
    found, said = await find_baseline(session, "ab_shop_change", "release")
    assert found is None
    assert "no ready build" in said


async def test_labels_the_service_dropped_give_no_baseline_never_a_wrong_one() -> None:
    seed = baseline_seed()
    for build in seed["builds"]:
        build["label"] = build["label"][:22]  # "ref=main commit=4f1c2a": cut
    async with FakeService(seed, speed=6000) as service, AsyncSession(KEY, service.url) as s:
        found, said = await find_baseline(s, "ab_shop_change", "main")
    assert found is None
    assert "no build of the project carries a label" in said


async def _suite(session: AsyncSession, build: str, **policy: Any) -> SuiteRun:
    suite = SuiteRun.for_project(
        session,
        "p_shop",
        build_ids=[build],
        policy=SuitePolicy(retry_failed=1, retry_strategy="at-once", interval=0.02, **policy),
    )
    await suite.wait()
    return suite


async def test_three_of_five_failures_are_pre_existing_and_fail_the_job_unless_asked(
    shop: FakeService, session: AsyncSession
) -> None:
    suite = await _suite(session, "ab_shop_change", baseline="auto")
    result = suite.result
    assert result is not None
    assert {t.test_id for t in result.failed} == BEFORE | NEW
    assert {t.test_id for t in result.pre_existing_failures} == BEFORE
    assert not result.passed  # --pre-existing fail: nothing hidden
    states = {t.test_id: t.baseline.state for t in result.tests if t.baseline is not None}
    assert states == {**dict.fromkeys(BEFORE, "pre-existing"), **dict.fromkeys(NEW, "new")}
    # One baseline run a failed test (not flaky), on main's build, none counted as an attempt.
    keys = [r.idempotency_key or "" for r in shop.requests_for("run_test")]
    assert sum("baseline" in key for key in keys) == 5
    ids = [run_id for t in result.tests if t.baseline for run_id in t.baseline.runs]
    assert {r.used_build_id for r in await session.list_runs(ids=ids)} == {"ab_shop_main"}
    assert all(len(t.runs) <= 2 for t in result.tests)  # the run and its one re-run
    assert "3 pre-existing: they fail on the baseline too" in result.summary()
    assert suite.report is not None
    assert {t.test_id for t in suite.report.tests if t.pre_existing} == BEFORE
    cost = suite.report.cost  # the baseline's runs are the job's device time too
    assert (cost.baseline_runs, cost.baseline_device_seconds) == (5, 300.0)
    assert "on the baseline: 5 runs, 5 min 00 s" in cost.line()


async def test_a_job_whose_every_failure_is_pre_existing_passes_with_pass_or_warn(
    shop: FakeService, session: AsyncSession
) -> None:
    """Main's own build against the change's: its 3 failures fail there too, the same way."""
    for mode in ("fail", "pass", "warn"):
        suite = await _suite(session, "ab_shop_main", baseline="ab_shop_change", pre_existing=mode)
        assert suite.result is not None
        assert {t.test_id for t in suite.result.pre_existing_failures} == BEFORE
        assert suite.result.passed is (mode != "fail"), mode


async def test_baseline_runs_that_do_not_fit_the_budget_are_not_started(
    shop: FakeService, session: AsyncSession
) -> None:
    suite = await _suite(session, "ab_shop_change", baseline="auto", retry_budget=0.5)
    assert suite.result is not None
    judged = [t.baseline for t in suite.result.tests if t.baseline is not None]
    assert judged
    assert all(v.state == "undecided" for v in judged)
    assert any("budget" in v.why for v in judged)
    assert not suite.result.pre_existing_failures


async def test_exonerate_runs_a_failed_run_on_the_baseline_by_itself(
    shop: FakeService, session: AsyncSession
) -> None:
    start = await session.run_test("t_profile", build_id="ab_shop_change")
    async with session.watch_runs([start.run_id], interval=0.02) as watcher:
        async for _ in watcher:
            pass
    verdict = await exonerate(session, start.run_id, "ab_shop_main")
    assert verdict.state == "pre-existing"
    assert verdict.runs
    assert all(r.startswith("j_") for r in verdict.runs)
    new = await session.run_test("t_coupon", build_id="ab_shop_change")
    async with session.watch_runs([new.run_id], interval=0.02) as watcher:
        async for _ in watcher:
            pass
    assert (await exonerate(session, new.run_id, "ab_shop_main")).state == "new"


@pytest.mark.parametrize("build", ["ab_shop_main", "ab_shop_change"])
async def test_a_baseline_start_answered_with_a_run_not_this_jobs_is_not_counted(
    shop: FakeService, session: AsyncSession, build: str
) -> None:
    """The service answers t_orders' baseline start with a failed run of t_orders the job did
    not start: an old one on main's build (created 10 minutes before the job), or one on the
    change's build. Neither is evidence: t_orders is undecided, never pre-existing; the other
    tests are judged as ever."""
    from front_support import answering_front

    old = await session.run_test("t_orders", build_id=build)
    await session.wait_for_runs([old.run_id], interval=0.02)
    shop.advance(600 * 6000)  # ten minutes of the wall (the wire's clock) at x6000
    async with (
        answering_front(shop, "t_orders", old.run_id) as url,
        AsyncSession(KEY, url) as fronted,
    ):
        judged = await _suite(fronted, "ab_shop_change", baseline="auto")
    assert judged.result is not None
    verdicts = {t.test_id: t.baseline for t in judged.result.tests if t.baseline is not None}
    orders = verdicts["t_orders"]
    assert orders is not None
    assert orders.state == "undecided"
    assert "not counted: the service answered run" in orders.why
    assert {t.test_id for t in judged.result.pre_existing_failures} == BEFORE - {"t_orders"}


async def test_a_baseline_start_answered_with_the_jobs_own_run_is_refused() -> None:
    """The service answers the baseline start with the very run that failed on the job's
    build: it is the job's, not the baseline's, and says so; nothing is followed."""
    from asyncclient.failures._categories import DEFAULT_CATEGORIES
    from asyncclient.models import RunStart
    from asyncclient.reruns import Reruns, SuitePolicy
    from asyncclient.suite._baseline import BaselineRuns

    failed = _run("j_fail01", "failed", "The orders list never loads.")
    reruns = Reruns(SuitePolicy())
    reruns.record([failed])

    class Answering:
        async def run_test(self, *args: Any, **kwargs: Any) -> RunStart:
            return RunStart(run_id="j_fail01", mode="cold")

    baseline = BaselineRuns(Answering(), "ab_main", "key", reruns, DEFAULT_CATEGORIES)  # type: ignore[arg-type]
    assert baseline.wants(failed)
    assert await baseline.start(failed, None) == ()
    assert not baseline.owns("j_fail01")
    verdict = baseline.verdict("t_checkout")
    assert verdict is not None
    assert verdict.state == "undecided"
    assert "the service answered a run of this job (j_fail01): not counted" in verdict.why


def test_exonerate_counts_no_run_it_did_not_start_on_the_baseline() -> None:
    """A view that names no build (a service may leave it out) is not taken on trust: the
    failed run itself, or a run created before it, is no evidence; a new one is."""
    from datetime import UTC, datetime, timedelta

    from asyncclient.failures.exonerate import _not_started_here

    at = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)
    failure = Run(id="j_fail01", test_id="t_x", status="failed", final=True, created_at=at)
    itself = Run(id="j_fail01", test_id="t_x", status="failed", final=True, created_at=at)
    old = Run(id="j_old001", test_id="t_x", status="failed", created_at=at - timedelta(hours=1))
    new = Run(id="j_new001", test_id="t_x", status="failed", created_at=at + timedelta(minutes=1))
    other = Run(id="j_new002", test_id="t_x", status="failed", build={"id": "ab_other"})
    assert _not_started_here(itself, failure, "ab_main")
    assert _not_started_here(old, failure, "ab_main")
    assert _not_started_here(other, failure, "ab_main")
    assert not _not_started_here(new, failure, "ab_main")


async def test_exonerate_refuses_a_run_with_no_build() -> None:
    from asyncclient.errors import ValidationError

    class Web:
        async def get_run(self, run_id: str) -> Run:
            return Run(id=run_id, test_id="t_web", status="failed", final=True, platform="web")

    with pytest.raises(ValidationError, match="ran on no build"):
        await exonerate(Web(), "j_web0001", "ab_shop_main")
