"""asyncclient.spend without the command: the failure-rate bound, the repeats' budget, the
reading of a run's build sha256, the verdicts of reused and repeated tests, and the bounded
history reads of reuse against a service that answers too much."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from asyncclient import AsyncSession
from asyncclient._values._lenient import build_sha256_of
from asyncclient.models import Run, RunStatus
from asyncclient.reruns import Attempts, SuitePolicy, SuiteResult
from asyncclient.spend import (
    Reuse,
    Started,
    failure_rate_bound,
    find_reusable,
    read_new_tests,
    repeats_for,
)
from asyncclient.spend.reuse import HISTORY_RUNS
from asyncclient.spend.verify import FixCheck
from asyncclient.testing import FakeService

SHA = "a" * 64


@pytest.mark.parametrize(
    ("failures", "runs", "bound"),
    [(0, 20, 0.1391), (0, 10, 0.2589), (0, 50, 0.0582), (1, 20, 0.2161), (2, 20, 0.2826)],
)
def test_the_bound_is_the_exact_binomial_one(failures: int, runs: int, bound: float) -> None:
    """Clopper-Pearson one-sided at 95 % (scipy's beta.ppf(0.95, k + 1, n - k) gives these)."""
    assert failure_rate_bound(failures, runs) == pytest.approx(bound, abs=1e-4)


def test_the_rule_of_three_approximates_the_bound_and_nothing_counted_proves_nothing() -> None:
    for runs in (30, 100, 300):
        assert failure_rate_bound(0, runs) < 3 / runs < failure_rate_bound(0, runs) * 1.1
    assert failure_rate_bound(0, 0) == 1.0
    assert failure_rate_bound(5, 5) == 1.0
    # More failures, a higher bound; more runs, a lower one.
    assert failure_rate_bound(1, 20) < failure_rate_bound(2, 20)
    assert failure_rate_bound(1, 40) < failure_rate_bound(1, 20)


def run(run_id: str, status: str, **fields: Any) -> Run:
    return Run(id=run_id, status=RunStatus(status), final=status not in ("queued", "running"),
               test_id=fields.pop("test_id", "t_a"), **fields)  # fmt: skip


def test_a_fix_check_counts_verdicts_only() -> None:
    runs = (run("j_1", "passed"), run("j_2", "cancelled"), run("j_3", "running"))
    check = FixCheck("t_a", 3, runs)
    assert (check.passed, check.failed, check.counted, check.not_counted) == (1, 0, 1, 2)
    assert not check.fixed
    assert check.sentence() == (
        "1 of 1 passed: its failure rate is below 95 % at 95 % confidence; 2 of the 3 runs "
        "asked gave no verdict"
    )
    whole = FixCheck("t_a", 20, tuple(run(f"j_{i}", "passed") for i in range(20)))
    assert whole.fixed
    assert whole.sentence() == "20 of 20 passed: its failure rate is below 14 % at 95 % confidence"
    assert FixCheck("t_a", 2, ()).sentence() == "0 of 2 runs gave a verdict: nothing is proven"
    broken = FixCheck("t_a", 3, (run("j_1", "failed"), run("j_2", "error"), run("j_3", "failed")))
    assert broken.sentence() == "0 of 3 passed: it still fails every run"


def test_repeats_shrink_for_long_tests_within_the_budget() -> None:
    wanted = 10
    got = {s: repeats_for(s, wanted) for s in (5.0, 20.0, 45.0, 120.0, 600.0)}
    assert got == {5.0: 10, 20.0: 10, 45.0: 6, 120.0: 2, 600.0: 1}
    assert repeats_for(None, 3) == 3  # an unknown duration: as asked
    assert repeats_for(30.0, 0) == 0
    assert repeats_for(30.0, 10, budget=60.0) == 2


def test_a_runs_build_sha256_is_read_leniently() -> None:
    assert build_sha256_of({"id": "ab_1", "sha256": SHA.upper()}) == SHA
    assert build_sha256_of({"id": "ab_1", "checksum": SHA}) == SHA
    assert build_sha256_of({"id": "ab_1", "sha256": "not-hex" * 10}) is None
    assert build_sha256_of({"id": "ab_1", "sha256": 42}) is None
    assert build_sha256_of("ab_1") is None
    assert build_sha256_of(None) is None


def test_verdicts_of_reused_and_repeated_tests() -> None:
    reuse = Reuse("t_a", "j_new", "j_old", None, "ab_1", SHA, None, 20.0)
    stopped = run("j_new", "cancelled")
    assert Attempts("t_a", (stopped,), reused=reuse).outcome == "reused"
    assert Attempts("t_a", (stopped,), reused=reuse).passed
    # The stop came too late: the run's own verdict stands.
    assert Attempts("t_a", (run("j_new", "failed"),), reused=reuse).outcome == "failed"
    agree = (run("j_1", "passed"), run("j_2", "passed"), run("j_3", "passed"))
    disagree = (run("j_1", "failed"), run("j_2", "passed"), run("j_3", "passed"))
    going = (run("j_1", "passed"), run("j_2", "running"))
    assert Attempts("t_a", agree, repeats=2).outcome == "passed"
    assert Attempts("t_a", disagree, repeats=2).outcome == "flaky_on_arrival"
    assert Attempts("t_a", going, repeats=1).outcome == "not_final"
    failing = (run("j_1", "failed"), run("j_2", "failed"))
    assert Attempts("t_a", failing, repeats=1).outcome == "failed"
    flaky = Attempts("t_a", disagree, repeats=2)
    assert not SuiteResult((flaky,)).passed
    assert SuiteResult((flaky,), SuitePolicy(new_test_runs=2, new_test_warn=True)).passed
    assert "1 flaky on arrival" in SuiteResult((flaky,)).summary()


def hostile_seed() -> dict[str, Any]:
    app = {"project": "p_h", "target": "android", "appId": "com.example.shop"}
    history = [{"daysAgo": 0.1 + i / 1000, "status": "passed", "build": "ab_gone"}
               for i in range(300)]  # fmt: skip
    return {
        "projects": [{"id": "p_h", "plan": "paid", "includedRuns": 100000}],
        "keys": [{"key": "h-run", "capability": "run", "projects": ["p_h"]}],
        "builds": [
            {"id": "ab_h", "project": "p_h", "platform": "android", "appId": "com.example.shop"}
        ],
        "tests": [{"id": "t_h", **app, "history": history}],
    }


async def test_reuse_reads_a_bounded_history_and_reuses_nothing_it_cannot_prove() -> None:
    """300 earlier passes on a build the service no longer has (no sha256 to compare): one
    listing of 50, one read of their views, one get_build of the gone build; nothing reused."""

    async with FakeService(hostile_seed()) as svc, AsyncSession("h-run", svc.url) as session:
        started = await session.run_test("t_h", build_id="ab_h")
        svc.reset_requests()
        found = await find_reusable(session, [Started("t_h", started.run_id, "ab_h")], days=7)
        counts = svc.request_counts()
        listing = svc.requests_for("list_runs")[0]
        new = await read_new_tests(session, ["t_h"], exclude=[started.run_id])
    assert found == {}
    # The history (its list view names the builds), then this job's run (the service's clock).
    assert counts.get("list_runs") == 2
    assert counts.get("get_build") == 2  # this job's build, then the gone one (404)
    assert listing.query == {"testId": "t_h", "limit": str(HISTORY_RUNS)}
    assert new == set()  # it has finished runs: not new


async def test_a_pass_older_than_the_days_is_not_reused() -> None:
    seed = hostile_seed()
    seed["tests"][0]["history"] = [{"daysAgo": 3, "status": "passed", "build": "ab_h"}]
    async with FakeService(seed) as svc, AsyncSession("h-run", svc.url) as session:
        started = await session.run_test("t_h", build_id="ab_h")
        item = [Started("t_h", started.run_id, "ab_h")]
        within = await find_reusable(session, item, days=7)
        older = await find_reusable(session, item, days=2)
        later = await find_reusable(
            session, item, days=7, now=datetime.now(UTC) + timedelta(days=5)
        )
        sha = svc.backend.builds["ab_h"].sha256
    assert set(within) == {started.run_id}
    assert within[started.run_id].sha256 == sha
    assert older == later == {}
    assert math.isclose(within[started.run_id].seconds or 0, 30.0, rel_tol=0.5)


async def test_the_newest_verdict_on_the_same_bytes_decides() -> None:
    """A pass 3 days ago, then a failure a day ago, both on this very build: the failure is
    the newest word on these bytes, so the test runs again (a flake is not hidden)."""
    seed = hostile_seed()
    seed["tests"][0]["history"] = [
        {"daysAgo": 3, "status": "passed", "build": "ab_h"},
        {"daysAgo": 1, "status": "failed", "build": "ab_h"},
        {"daysAgo": 0.5, "status": "cancelled", "build": "ab_h"},  # stopped: no verdict
    ]
    async with FakeService(seed) as svc, AsyncSession("h-run", svc.url) as session:
        started = await session.run_test("t_h", build_id="ab_h")
        found = await find_reusable(session, [Started("t_h", started.run_id, "ab_h")], days=7)
    assert found == {}


async def test_candidates_whose_list_view_names_no_build_are_read_in_full_once() -> None:
    """A service whose list view leaves the build out: one ids= read of those candidates, in
    full, newest first; each full view is checked again, and one that the read drops, or that
    no longer counts (another test, too old, another mode, another verdict), means no reuse:
    it may be the verdict that decides."""
    from asyncclient.spend.reuse import _Rule, _Window, _with_builds

    now = datetime.now(UTC)
    rule = _Rule("t_a", "p_1", set(), _Window(now - timedelta(days=7), now), "cold")

    def passed(run_id: str, hours: int, **fields: Any) -> Run:
        fields.setdefault("mode", "cold")
        return run(run_id, "passed", finished_at=now - timedelta(hours=hours), **fields)

    listed = [passed("j_1", 1), passed("j_2", 2, build_id="ab_2"), passed("j_3", 3)]
    full_3 = passed("j_3", 3, build={"id": "ab_3", "sha256": SHA})

    class Views:
        def __init__(self, *answer: Run) -> None:
            self.asked: list[list[str]] = []
            self.answer = answer

        async def list_runs(self, ids: list[str]) -> list[Run]:
            self.asked.append(list(ids))
            return list(self.answer)

    session = Views(passed("j_1", 1, build={"id": "ab_1", "sha256": SHA}), full_3)
    kept = await _with_builds(session, listed, rule)  # type: ignore[arg-type]
    assert session.asked == [["j_1", "j_3"]]
    assert kept is not None
    assert [(r.id, r.used_build_id, r.used_build_sha256) for r in kept] == [
        ("j_1", "ab_1", SHA),
        ("j_2", "ab_2", None),
        ("j_3", "ab_3", SHA),
    ]
    j_1 = {"build": {"id": "ab_1", "sha256": SHA}}
    for answer in (
        [full_3],  # j_1 dropped
        [passed("j_1", 1, test_id="t_other", **j_1), full_3],
        [passed("j_1", 24 * 400, **j_1), full_3],
        [passed("j_1", 1, mode="warm", **j_1), full_3],
        [run("j_1", "failed", finished_at=now, mode="cold", **j_1), full_3],
        [passed("j_1", 1, project_id="p_other", **j_1), full_3],
    ):
        assert await _with_builds(Views(*answer), listed, rule) is None, answer  # type: ignore[arg-type]


class _Service:
    """A session that answers get_build from a table (a missing build raises as a 503 after
    every retry would) and list_runs with nothing."""

    def __init__(self, builds: dict[str, tuple[str, str]]) -> None:
        self.builds = builds
        self.asked: list[str] = []

    async def get_build(self, build_id: str) -> Any:
        from asyncclient.errors import TransportError

        self.asked.append(build_id)
        if build_id not in self.builds:
            raise TransportError("503 after 4 attempts")
        sha, project = self.builds[build_id]
        return type("B", (), {"sha256": sha, "project_id": project})()

    async def list_runs(self, ids: list[str]) -> list[Run]:
        return []


@pytest.mark.parametrize(
    "case", ["newest_failure_unreadable", "pass_in_the_future", "another_project"]
)
async def test_reuse_fails_closed(case: str) -> None:
    """Each of these reused an older pass before: the newest verdict on the same bytes is a
    failure whose build cannot be read (503, deleted, past the cap); a pass dated 9999-12-31
    above a failure of a minute ago; a pass of another project's run."""
    now = datetime.now(UTC)
    builds = {"ab_job": (SHA, "p_1"), "ab_old": (SHA, "p_1")}
    old_pass = run("j_old", "passed", finished_at=now - timedelta(days=1), build_id="ab_old")
    history: list[Run]
    if case == "newest_failure_unreadable":
        failure = run("j_new", "failed", finished_at=now - timedelta(minutes=1), build_id="ab_gone")
        history = [failure, old_pass]
    elif case == "pass_in_the_future":
        future = run("j_future", "passed", build_id="ab_old",
                     finished_at=datetime(9999, 12, 31, tzinfo=UTC))  # fmt: skip
        failure = run("j_new", "failed", finished_at=now - timedelta(minutes=1), build_id="ab_old")
        history = [future, failure]
    else:
        history = [run("j_theirs", "passed", finished_at=now - timedelta(hours=1),
                       build_id="ab_old", project_id="p_other")]  # fmt: skip
    session = _Service(builds)
    found = await find_reusable(
        session,  # type: ignore[arg-type]
        [Started("t_a", "j_job", "ab_job")],
        days=7,
        now=now,
        history={"t_a": history},
    )
    assert found == {}
    # The control: the same history without the hostile run reuses the older pass.
    assert await find_reusable(
        _Service(builds),  # type: ignore[arg-type]
        [Started("t_a", "j_job", "ab_job")],
        days=7,
        now=now,
        history={"t_a": [old_pass]},
    )


async def test_a_listing_of_other_tests_runs_only_is_not_read_as_a_new_test() -> None:
    """A service that ignores testId answers every listing with another test's runs: that
    test's history is not readable (so it is not new and not repeated), said why; an empty
    listing, or one of the job's own runs only, is a new test."""
    from asyncclient.eta import read_history
    from asyncclient.spend.arrival import new_tests

    now = datetime.now(UTC)
    answers = {
        "t_ignored": [run("j_x", "passed", test_id="t_other", finished_at=now)],
        "t_empty": [],
        "t_own_only": [run("j_job", "queued", test_id="t_own_only")],
    }

    class Lister:
        async def list_runs(self, *, test_id: str, limit: int) -> list[Run]:
            return answers[test_id]

    unread: dict[str, str] = {}
    lister: Any = Lister()
    history = await read_history(lister, list(answers), exclude={"j_job"}, unread=unread)
    assert set(history) == {"t_empty", "t_own_only"}
    assert unread == {"t_ignored": "its listing held 1 runs of other tests and none of its own"}
    assert new_tests(history, list(answers)) == {"t_empty", "t_own_only"}


def test_a_history_record_keeps_no_title_and_cuts_long_text() -> None:
    from asyncclient.eta import RECORD_TEXT, slim

    build = {"id": "ab_1", "sha256": SHA, "notes": "z" * 100_000}
    link = "https://s/" + "y" * 10_000
    full = run("j_1", "passed", test_title="x" * 1_000_000, link=link, build=build, mode="cold")
    record = slim(full)
    assert record.test_title is None
    assert record.link is not None
    assert len(record.link) == RECORD_TEXT
    assert (record.used_build_id, record.used_build_sha256, record.mode) == ("ab_1", SHA, "cold")
    assert record.is_final
