"""Fail closed against a service that merges run starts: keys a prefix cannot merge, and a run
answered twice, or a run of another test, is never a second verdict (issue: fail closed)."""

from __future__ import annotations

import unicodedata
import uuid
from typing import Any

import pytest
from front_support import merging_front
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncclient import AsyncSession, wait_with_retries
from asyncclient._core._checks import KEY_LENGTH, derived_key
from asyncclient.models import Run, RunStatus
from asyncclient.reruns import Reruns, SuitePolicy
from asyncclient.spend.verify import verify_fix
from asyncclient.testing import FakeService

KEY = "merge-run"


def seed() -> dict[str, Any]:
    web = {"project": "p_m", "target": "web", "url": "https://shop.example"}
    return {
        "projects": [{"id": "p_m", "name": "p_m", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": KEY, "capability": "run", "projects": ["p_m"]}],
        "tests": [
            {"id": "t_search", **web, "durationSeconds": 5, "queuedSeconds": 1},
            {"id": "t_checkout", **web, "durationSeconds": 5, "queuedSeconds": 1},
            {"id": "t_broken", **web, "durationSeconds": 5, "queuedSeconds": 1,
             "outcome": "failed"},
        ],
    }  # fmt: skip


def test_derived_keys_put_a_digest_of_the_whole_first_and_stay_within_64() -> None:
    base = "asyncclient-verify-" + str(uuid.UUID(int=7))  # 55 characters, as the old keys
    keys = [derived_key(base, "verify", t, str(n)) for t in ("t_search", "t_checkout")
            for n in range(1, 11)]  # fmt: skip
    assert len({k[:32] for k in keys}) == 20  # 32 characters tell all 20 apart
    assert all(len(k) <= KEY_LENGTH and k.isascii() and k.isprintable() for k in keys)
    assert keys[0].endswith("-verify/t_search/1")
    assert derived_key(base, "verify", "t_search", "1") == keys[0]  # the same start, the same key
    # A test id the service gave with odd characters is read as text in the readable part.
    odd = derived_key("k", "rerun", "t_\u00e9\n\x1b[31m", "2")
    assert odd.isascii()
    assert odd.isprintable()
    assert len(odd) <= KEY_LENGTH


async def test_verify_through_a_service_that_keeps_64_characters_of_a_key() -> None:
    """Before, the 20 keys differed only past character 63: the service answered one run for
    all, and both tests were "10 of 10 passed" and lifted. Now each start is its own."""
    async with FakeService(seed(), speed=5_000) as svc, merging_front(svc) as url:
        async with AsyncSession(KEY, url) as session:
            checks = await verify_fix(
                session, ["t_search", "t_checkout"], runs=10, interval=0.05,
                idempotency_key="asyncclient-verify-" + str(uuid.uuid4()),
            )  # fmt: skip
        started = [r for r in svc.backend.runs.values() if r.source == "test"]
    assert len(started) == 20
    assert [(c.test_id, c.counted, c.fixed) for c in checks] == [
        ("t_search", 10, True), ("t_checkout", 10, True)
    ]  # fmt: skip
    assert len({run.id for c in checks for run in c.runs}) == 20


@pytest.mark.parametrize("merge", ["per_test", "one_run", "swap"])
async def test_verify_counts_distinct_runs_of_the_test_only(merge: str) -> None:
    """A service that answers every start (of a test, or of any test) with one run, or starts
    another test: each run is counted once and only for its own test, so nothing is "fixed"
    and nothing is lifted."""
    async with (
        FakeService(seed(), speed=5_000) as svc,
        merging_front(svc, merge) as url,
        AsyncSession(KEY, url) as session,
    ):
        checks = await verify_fix(session, ["t_search", "t_checkout"], runs=10, interval=0.05)
    search, checkout = checks
    assert not checkout.fixed
    if merge == "swap":
        assert search.fixed  # its own ten runs
        assert checkout.counted == 0
        assert len(checkout.start_errors) == 10
        assert all(e.endswith("is of test t_search: not counted") for e in checkout.start_errors)
        return
    assert (search.counted, search.passed, search.fixed) == (1, 1, False)
    assert "for an earlier start too: not counted again" in search.start_errors[0]
    assert "9 of the 10 runs asked gave no verdict" in search.sentence()
    assert checkout.counted == (0 if merge == "one_run" else 1)
    if merge == "one_run":
        assert checkout.sentence() == "0 of 10 runs gave a verdict: nothing is proven"


async def test_a_rerun_answered_with_a_run_the_job_has_is_not_a_second_verdict() -> None:
    """t_broken's re-run is answered with its first run: the job reports the test failed once,
    with one line saying why, and counts no second attempt."""
    async with (
        FakeService(seed(), speed=5_000) as svc,
        merging_front(svc, "per_test") as url,
        AsyncSession(KEY, url) as session,
    ):
        first = await session.run_test("t_broken")
        result = await wait_with_retries(session, [first.run_id], retry_failed=2, interval=0.05)
    (test,) = result.tests
    assert test.attempts == 1
    assert test.outcome == "failed"
    assert test.start_error == (
        f"the service answered run {first.run_id} for a new start of t_broken, a run this "
        "job already has: not counted twice"
    )


def test_a_rerun_that_is_another_tests_run_is_dropped_with_the_reason() -> None:
    reruns = Reruns(SuitePolicy(retry_failed=1), idempotency_key="k")
    reruns.record([Run(id="j_1", status=RunStatus.FAILED, test_id="t_a", final=True)])
    # As if the re-run's start had been answered j_9, then seen to be t_b's run.
    reruns._entry_of["j_9"] = "j_1"
    reruns._entries["j_1"].append(Run(id="j_9", status=RunStatus.QUEUED, test_id="t_a"))
    reruns.record([Run(id="j_9", status=RunStatus.PASSED, test_id="t_b", final=True)])
    (test,) = reruns.result().tests
    assert [run.id for run in test.runs] == ["j_1"]
    assert test.outcome == "failed"
    assert test.start_error == (
        "the service answered run j_9 of test t_b for a start of t_a: not counted"
    )
    assert reruns.due() == []


def test_a_builds_size_and_an_eta_stay_within_sense() -> None:
    """A build's size sent as 310 digits is unknown (it raised OverflowError in `builds get`);
    an ETA past a day says so instead of "about 16666666666667 min left"."""
    from asyncclient._core._converter import converter
    from asyncclient.eta import JobEta
    from asyncclient.models import Build

    assert converter.structure({"id": "ab_1", "size": "9" * 310}, Build).size is None
    assert converter.structure({"id": "ab_1", "size": "\u00b2"}, Build).size is None
    assert converter.structure({"id": "ab_1", "size": "1048576"}, Build).size == 1 << 20
    assert JobEta(1e15, 1e15).text() == "over a day left"
    assert JobEta(600.0, 1e15).text() == "about 10 min to over a day left"
    assert JobEta(40.0, 55.0).text() == "about 40-55 s left"


@pytest.mark.parametrize(
    ("sent", "read"),
    [(1500, 1500), (1234.7, 1234), ("42", 42), (" 7 ", 7), (0, 0), (2**53 - 1, 2**53 - 1),
     (2**53, None), (-1, None), (-0.5, 0), (1e300, None), (float("nan"), None), ("1e3", None),
     ("\u00b2", None), ("\uff19", None), ("9" * 17, None), (True, None), (None, None), ([], None)],
)  # fmt: skip
def test_the_one_reader_of_counts(sent: object, read: int | None) -> None:
    from asyncclient._values._bounds import count

    assert count(sent) == read


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=60).filter(lambda t: t != "t_a"))
def test_another_tests_id_in_the_reason_is_one_safe_line(other: str) -> None:
    """The id a hostile service gives for the other test reaches the report as one line with no
    control character, however it was written."""
    reruns = Reruns(SuitePolicy(retry_failed=1), idempotency_key="k")
    reruns.record([Run(id="j_1", status=RunStatus.FAILED, test_id="t_a", final=True)])
    reruns._entry_of["j_9"] = "j_1"
    reruns._entries["j_1"].append(Run(id="j_9", status=RunStatus.QUEUED, test_id="t_a"))
    reruns.record([Run(id="j_9", status=RunStatus.PASSED, test_id=other, final=True)])
    (test,) = reruns.result().tests
    reason = test.start_error or ""
    assert reason.startswith("the service answered run j_9 of test ")
    assert "\n" not in reason
    assert "\r" not in reason
    assert not any(unicodedata.category(ch) == "Cc" for ch in reason)
    assert len(reason) < 200


def test_a_rerun_created_before_the_jobs_runs_is_not_this_jobs() -> None:
    """A re-run answered with a run of the same build the service dated a day before this job's
    first run: not counted, and the test's own failure stands."""
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    reruns = Reruns(SuitePolicy(retry_failed=1), idempotency_key="k", build_id="ab_1")
    first = Run(id="j_1", status=RunStatus.FAILED, test_id="t_a", final=True, created_at=now,
                build_id="ab_1")  # fmt: skip
    reruns.record([first])
    # As if the re-run's start, asked on ab_1, had been answered j_9.
    reruns._entry_of["j_9"] = "j_1"
    reruns._kind["j_9"] = "rerun"
    reruns._asked["j_9"] = "ab_1"
    reruns._entries["j_1"].append(Run(id="j_9", status=RunStatus.QUEUED, test_id="t_a"))
    old = Run(id="j_9", status=RunStatus.PASSED, test_id="t_a", final=True, build_id="ab_1",
              created_at=now - timedelta(days=1))  # fmt: skip
    reruns.record([old])
    reruns.record([old])  # seen again (the round's last record): still not counted
    (test,) = reruns.result().tests
    assert [run.id for run in test.runs] == ["j_1"]
    assert test.outcome == "failed"
    assert test.start_error == (
        "not counted: the service answered run j_9, created 86400 s before this job's runs"
    )
    assert reruns.foreign == {"j_9": test.start_error}
    assert reruns.others_going(first) == []


@given(st.text(min_size=1, max_size=200), st.text(min_size=1, max_size=200))
@settings(max_examples=100)
def test_a_foreign_runs_reason_is_one_safe_line(run_id: str, build: str) -> None:
    reruns = Reruns(SuitePolicy(retry_failed=1), idempotency_key="k", build_id="ab_1")
    reruns.record([Run(id="j_1", status=RunStatus.FAILED, test_id="t_a", final=True)])
    reruns._entry_of[run_id] = "j_1"
    reruns._kind[run_id] = "rerun"
    reruns._asked[run_id] = "ab_1" if build != "ab_1" else "ab_2"
    reruns._entries["j_1"].append(Run(id=run_id, status=RunStatus.QUEUED, test_id="t_a"))
    reruns.record([Run(id=run_id, status=RunStatus.PASSED, test_id="t_a", final=True,
                       build_id=build)])  # fmt: skip
    (test,) = reruns.result().tests
    assert test.start_error is not None
    reason = test.start_error
    assert reason.startswith("not counted: the service answered run ")
    assert not any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in reason)
    assert len(reason) < 250
