"""Flaky tests across jobs: the analysis as a pure function of runs, the history read from the
emulator with a bounded number of requests, and the quarantine file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from asyncclient import AsyncSession
from asyncclient._core._converter import converter
from asyncclient.errors import ValidationError
from asyncclient.flakiness import analyse
from asyncclient.models import Run
from asyncclient.quarantine import QuarantineEntry, load_quarantine, write_quarantine
from asyncclient.testing import FakeService

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def run(number: int, status: str, build: str | None, days_ago: float, test: str = "t_a") -> Run:
    created = NOW - timedelta(days=days_ago)
    data = {
        "id": f"j_{test}_{number}",
        "testId": test,
        "status": status,
        "final": status not in ("queued", "running"),
        "buildId": build,
        "createdAt": created.isoformat(),
        "durationMs": 30_000,
    }
    return converter.structure(data, Run)


def one(runs: list[Run], **options: Any) -> Any:
    (found,) = analyse(runs, **options)
    return found


# --- the definitions, as a pure function ------------------------------------------------------


def test_failed_then_passed_on_one_build_is_flaky_with_one_flaky_build() -> None:
    found = one([run(1, "failed", "ab_1", 2), run(2, "passed", "ab_1", 1.9)])
    assert (found.state, found.flaky_builds, found.builds) == ("flaky", 1, 1)
    assert (found.runs, found.not_passed, found.failure_rate) == (2, 1, 0.5)
    assert found.strip == "✗✓"
    assert found.last_flaky_at == NOW - timedelta(days=2)
    assert found.device_seconds_lost == 30.0


def test_an_infrastructure_failure_then_a_pass_is_not_flaky_and_is_counted_apart() -> None:
    # error and inconclusive are the infrastructure's (the built-in categories): left out.
    runs = [run(1, "error", "ab_1", 3), run(2, "inconclusive", "ab_1", 2)]
    runs += [run(3, "passed", "ab_1", 1)]
    found = one(runs)
    assert (found.state, found.runs, found.not_passed, found.infrastructure) == (
        "stable",
        1,
        0,
        2,
    )
    assert found.to_json()["infrastructure"] == 2


def test_a_category_file_decides_what_is_the_infrastructures(tmp_path: Path) -> None:
    from asyncclient.failures import load_categories

    where = tmp_path / "failure-categories.toml"
    where.write_text(
        '[[category]]\nname = "lost device"\nkind = "infrastructure"\n'
        'match = "LOST ITS CONNECTION"\nstatuses = ["failed"]\n'
        '[[category]]\nname = "crash reported as error"\nkind = "app"\nmatch = "crashed"\n'
    )
    categories = load_categories(where)
    lost = attrs_evolve(run(1, "failed", "ab_1", 3), "The device lost its connection.")
    crash = attrs_evolve(run(2, "error", "ab_2", 2), "The app crashed on launch.")
    runs = [lost, run(3, "passed", "ab_1", 2.5), crash, run(4, "passed", "ab_2", 1)]
    found = one(runs, categories=categories)
    # The lost device is left out (not flaky on ab_1); the crash is the app's (flaky on ab_2).
    assert (found.state, found.flaky_builds, found.infrastructure) == ("flaky", 1, 1)
    # Without the file: the failed run counts, the error is the infrastructure's.
    plain = one(runs)
    assert (plain.flaky_builds, plain.infrastructure) == (1, 1)
    assert plain.last_flaky_at == NOW - timedelta(days=3)


def test_a_test_whose_every_run_failed_for_the_infrastructure_is_not_judged() -> None:
    found = one([run(1, "error", "ab_1", 2), run(2, "error", "ab_2", 1)])
    assert (found.state, found.runs, found.infrastructure, found.recent) == ("stable", 0, 2, ())


def attrs_evolve(seen: Run, headline: str) -> Run:
    import attrs

    return attrs.evolve(seen, headline=headline)


def test_failing_on_each_of_the_last_three_builds_is_broken() -> None:
    runs = [run(1, "passed", "ab_1", 9), run(2, "passed", "ab_2", 8)]
    runs += [run(3, "failed", "ab_3", 5), run(4, "failed", "ab_4", 3)]
    runs += [run(5, "failed", "ab_5", 1), run(6, "failed", "ab_5", 0.5)]
    found = one(runs)
    assert found.state == "broken"
    assert found.strip == "✓✓✗✗✗✗"


def test_a_pass_on_one_of_the_last_three_builds_is_not_broken() -> None:
    runs = [run(1, "failed", "ab_1", 9), run(2, "passed", "ab_2", 5), run(3, "failed", "ab_3", 1)]
    assert one(runs).state == "stable"  # no build with both: not flaky either


def test_a_test_with_fewer_builds_is_broken_when_they_all_failed() -> None:
    assert one([run(1, "failed", "ab_1", 2), run(2, "failed", "ab_2", 1)]).state == "broken"


def test_cancelled_and_unfinished_runs_are_not_counted() -> None:
    runs = [run(1, "passed", "ab_1", 3), run(2, "cancelled", "ab_1", 2)]
    runs += [run(3, "running", "ab_1", 0.1)]
    found = one(runs)
    assert (found.runs, found.not_passed, found.state) == (1, 0, "stable")


def test_a_build_retried_ten_times_weighs_once() -> None:
    runs = [run(i, "failed" if i % 2 else "passed", "ab_1", 2 - i / 100) for i in range(10)]
    runs += [run(20, "passed", "ab_2", 1), run(21, "failed", "ab_2", 0.9)]
    found = one(runs)
    assert (found.flaky_builds, found.builds, found.runs) == (2, 2, 12)


def test_runs_without_a_build_count_as_one_build() -> None:
    found = one([run(1, "failed", None, 2), run(2, "passed", None, 1)])
    assert (found.builds, found.state) == (1, "flaky")


def test_the_window_leaves_older_runs_out() -> None:
    runs = [run(1, "failed", "ab_1", 20), run(2, "passed", "ab_1", 19), run(3, "passed", "ab_2", 1)]
    assert one(runs, since=NOW - timedelta(days=14)).state == "stable"
    assert one(runs, since=NOW - timedelta(days=30)).state == "flaky"


def test_what_hurts_most_comes_first() -> None:
    runs = [run(1, "passed", "ab_1", 3, "t_ok")]
    runs += [run(2, "failed", "ab_1", 3, "t_flaky1"), run(3, "passed", "ab_1", 2, "t_flaky1")]
    runs += [run(4, "failed", "ab_1", 3, "t_flaky2"), run(5, "passed", "ab_1", 2, "t_flaky2")]
    runs += [run(6, "failed", "ab_2", 1, "t_flaky2"), run(7, "passed", "ab_2", 0.5, "t_flaky2")]
    runs += [run(8, "failed", "ab_1", 1, "t_broken")]
    order = [(t.test_id, t.state) for t in analyse(runs)]
    assert order == [
        ("t_broken", "broken"),
        ("t_flaky2", "flaky"),
        ("t_flaky1", "flaky"),
        ("t_ok", "stable"),
    ]


# --- the history read from the emulator -----------------------------------------------------


def app_test(test_id: str, project: str, history: list[tuple[float, str, str]]) -> dict[str, Any]:
    return {
        "id": test_id,
        "project": project,
        "target": "android",
        "appId": "com.example.shop",
        "history": [{"daysAgo": d, "status": s, "build": b} for d, s, b in history],
    }


HISTORY_SEED: dict[str, Any] = {
    "projects": [{"id": "p_hist"}, {"id": "p_other"}],
    "keys": [{"key": "k", "capability": "edit", "projects": ["p_hist", "p_other"]}],
    "tests": [
        app_test("t_flaky", "p_hist", [(3, "failed", "ab_1"), (2.9, "passed", "ab_1")]),
        app_test(
            "t_broken",
            "p_hist",
            [
                (9, "passed", "ab_1"),
                (5, "failed", "ab_2"),
                (3, "failed", "ab_3"),
                (1, "failed", "ab_4"),
            ],
        ),
        app_test(
            "t_cancelled",
            "p_hist",
            [(3, "passed", "ab_1"), (2.5, "cancelled", "ab_1"), (2, "passed", "ab_1")],
        ),
        app_test(
            "t_old_flake",
            "p_hist",
            [(20, "failed", "ab_1"), (19.9, "passed", "ab_1"), (1, "passed", "ab_2")],
        ),
        app_test("t_elsewhere", "p_other", [(2, "failed", "ab_9"), (1.9, "passed", "ab_9")]),
    ],
}


@pytest.fixture
async def history() -> AsyncIterator[tuple[FakeService, AsyncSession]]:
    async with FakeService(HISTORY_SEED) as svc, AsyncSession("k", svc.url) as session:
        yield svc, session


async def test_the_history_says_each_state(history: tuple[FakeService, AsyncSession]) -> None:
    svc, session = history
    report = await session.flakiness("p_hist")
    states = {t.test_id: t.state for t in report.tests}
    assert states == {
        "t_flaky": "flaky",
        "t_broken": "broken",
        "t_cancelled": "stable",
        "t_old_flake": "stable",  # its flake is 20 days ago, outside the default 14
    }
    flaky = report.of("t_flaky")
    assert flaky is not None
    assert (flaky.flaky_builds, flaky.runs) == (1, 2)
    cancelled = report.of("t_cancelled")
    assert cancelled is not None
    assert cancelled.runs == 2  # the stopped run is not counted
    # Bounded: one listing to find the tests, then one per test (the emulator's listing
    # carries each run's build, so no ids= read is needed).
    assert svc.request_counts()["list_runs"] == 1 + 4
    assert report.requests == 5


async def test_categories_that_read_the_text_read_what_the_failures_said(
    history: tuple[FakeService, AsyncSession], tmp_path: Path
) -> None:
    from asyncclient.failures import load_categories

    svc, session = history
    where = tmp_path / "failure-categories.toml"
    where.write_text('[[category]]\nname = "x"\nkind = "infrastructure"\nmatch = "nothing"\n')
    report = await session.flakiness("p_hist", categories=load_categories(where))
    # The list view does not say what a run failed of: one ids= read more for each test with
    # runs in the window that did not pass (t_flaky, t_broken).
    assert svc.request_counts()["list_runs"] == 1 + 4 + 2
    assert report.requests == 7


async def test_a_wider_window_finds_the_older_flake(
    history: tuple[FakeService, AsyncSession],
) -> None:
    _, session = history
    report = await session.flakiness("p_hist", days=30)
    old = report.of("t_old_flake")
    assert old is not None
    assert (old.state, old.flaky_builds) == ("flaky", 1)


async def test_another_projects_runs_are_not_mixed_in(
    history: tuple[FakeService, AsyncSession],
) -> None:
    _, session = history
    report = await session.flakiness("p_hist")
    assert report.of("t_elsewhere") is None
    named = await session.flakiness("p_hist", tests=["t_elsewhere"])
    assert named.tests == ()  # its runs belong to p_other


async def test_named_tests_are_read_without_looking_for_the_others(
    history: tuple[FakeService, AsyncSession],
) -> None:
    svc, session = history
    report = await session.flakiness("p_hist", tests=["t_flaky", "t_flaky"])
    assert [t.test_id for t in report.tests] == ["t_flaky"]
    assert svc.request_counts()["list_runs"] == 1


async def test_a_listing_without_builds_is_completed_by_ids_reads(
    history: tuple[FakeService, AsyncSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service whose list view leaves the build out: the full views are read, 50 a request."""
    svc, session = history
    assert svc.request_counts().get("list_runs", 0) == 0
    real = session.list_runs

    async def listing_without_builds(*args: Any, **kwargs: Any) -> list[Run]:
        runs = await real(*args, **kwargs)
        if kwargs.get("ids") is not None or (args and args[0] is not None):
            return runs
        return [
            converter.structure(
                {**converter.unstructure(r), "buildId": None, "build": None, "platform": None}, Run
            )
            for r in runs
        ]

    monkeypatch.setattr(session, "list_runs", listing_without_builds)
    report = await session.flakiness("p_hist", tests=["t_broken"])
    broken = report.of("t_broken")
    assert broken is not None
    assert (broken.state, broken.builds) == ("broken", 4)
    assert report.requests == 2  # the listing, then one ids= read of its 4 runs


async def test_a_window_with_more_runs_than_one_listing_says_so() -> None:
    many = [(1 + i / 1000, "passed", "ab_1") for i in range(230)]
    seed = {**HISTORY_SEED, "tests": [app_test("t_busy", "p_hist", many)]}
    async with FakeService(seed) as svc, AsyncSession("k", svc.url) as session:
        report = await session.flakiness("p_hist")
    busy = report.of("t_busy")
    assert busy is not None
    assert (busy.truncated, busy.runs) == (True, 200)


async def test_bad_arguments_are_refused_before_any_request(
    history: tuple[FakeService, AsyncSession],
) -> None:
    svc, session = history
    with pytest.raises(ValidationError, match="days must be a number of days above 0"):
        await session.flakiness("p_hist", days=0)
    with pytest.raises(ValidationError, match="not a test id"):
        await session.flakiness("p_hist", tests=["j_1"])
    with pytest.raises(ValidationError, match="project ids start with p_"):
        await session.flakiness("t_flaky")
    assert svc.requests == []


async def test_the_demo_seed_shows_all_three_states() -> None:
    async with FakeService() as svc, AsyncSession(svc.run_key, svc.url) as session:
        report = await session.flakiness("p_demo")
    states = {t.test_id: t.state for t in report.tests}
    assert states == {
        "t_checkout": "broken",
        "t_onboarding": "flaky",
        "t_login": "stable",
        "t_search": "stable",
    }


# --- the quarantine file ----------------------------------------------------------------------


def test_writing_keeps_what_a_person_wrote(tmp_path: Path) -> None:
    path = tmp_path / "quarantine.toml"
    path.write_text(
        "# Reviewed by the mobile team.\n\n[[quarantine]]\n"
        'test = "t_old"  # the login flake\nreason = "x"\nuntil = 2026-12-01\n'
    )
    added = write_quarantine(
        path,
        [
            QuarantineEntry("t_old", "again", date(2027, 1, 1)),
            QuarantineEntry("t_new", "flaky on 2 of 3 builds", date(2026, 12, 26), owner="qa"),
        ],
    )
    assert [e.test for e in added] == ["t_new"]
    text = path.read_text()
    assert text.startswith("# Reviewed by the mobile team.\n")
    assert 'test = "t_old"  # the login flake' in text
    assert '\n\n[[quarantine]]\ntest = "t_new"' in text
    read = load_quarantine(path)
    assert [(e.test, e.until, e.owner) for e in read.entries] == [
        ("t_old", date(2026, 12, 1), None),
        ("t_new", date(2026, 12, 26), "qa"),
    ]
    assert read.honoured(date(2026, 12, 2)).keys() == {"t_new"}
    assert [e.test for e in read.expired(date(2026, 12, 2))] == ["t_old"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[[quarantine]]\ntest = 't_a'\nreason = 'x'\nuntil = '2026-12-01'\n", "a TOML date"),
        ("[[quarantine]]\ntest = 't_a'\nreason = 'x'\n", "until is required"),
        ("[[quarantine]]\ntest = 'j_a'\nreason = 'x'\nuntil = 2026-12-01\n", "not a test id"),
        (
            "[[quarantine]]\ntest = 't_a'\nreason = 'x'\nuntil = 2026-12-01\nwho = 'me'\n",
            "unknown key 'who'",
        ),
        ("[[quarantine]]\ntest = 't_a'\nreason = 'x'\nuntil = 2026-12-01\n" * 2, "listed twice"),
        ("quarantine = 3\n", "array of tables"),
        ("[[quarantine]\n", "not valid TOML"),
    ],
)
def test_a_bad_quarantine_file_is_one_line_naming_it(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "q.toml"
    path.write_text(text)
    with pytest.raises(ValidationError, match=words) as caught:
        load_quarantine(path)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_quarantine_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="--write-quarantine"):
        load_quarantine(tmp_path / "none.toml")


def test_a_test_slower_on_its_newest_build_is_flagged_and_a_steady_one_is_not() -> None:
    """Ten builds at 30 s, then 48 s on the newest: slower, with both figures; 5 % noise is
    not; the comparison is within one mode."""
    from datetime import UTC, datetime, timedelta

    from asyncclient.flakiness import analyse
    from asyncclient.models import Run, RunStatus

    start = datetime(2026, 11, 1, tzinfo=UTC)

    def run(i: int, test: str, seconds: float, mode: str = "cold") -> Run:
        return Run(
            id=f"j_{test}{i}", status=RunStatus.PASSED, final=True, test_id=test, mode=mode,
            created_at=start + timedelta(hours=i), duration_ms=round(seconds * 1000),
            build={"id": f"ab_{i}"},
        )  # fmt: skip

    runs = [run(i, "t_login", 30) for i in range(10)] + [run(10, "t_login", 48)]
    noise = [29.0, 30.5, 31.5, 28.5, 30.0, 31.0, 29.5, 30.0, 28.7, 31.3, 31.4]
    runs += [run(i, "t_steady", s) for i, s in enumerate(noise)]
    # Slower in warm mode only: cold runs are not compared with warm ones.
    runs += [run(i, "t_modes", 10, "warm") for i in range(5)] + [run(5, "t_modes", 40, "cold")]
    found = {t.test_id: t for t in analyse(runs)}
    slower = found["t_login"].slower
    assert slower is not None
    assert (slower.build, slower.mode, slower.seconds, slower.usual_seconds) == (
        "ab_10",
        "cold",
        48.0,
        30.0,
    )
    assert slower.line("t_login") == "t_login is slower on ab_10 (cold): 48.0 s, usually 30.0 s"
    assert found["t_login"].to_json()["slower"] == {
        "build": "ab_10", "mode": "cold", "seconds": 48.0, "usualSeconds": 30.0,
    }  # fmt: skip
    assert found["t_steady"].slower is None
    assert found["t_steady"].to_json()["slower"] is None
    assert found["t_steady"].usual_seconds == {"cold": 30.0}
    assert found["t_modes"].usual_seconds == {"cold": 40.0, "warm": 10.0}
    assert found["t_modes"].to_json()["usualSeconds"] == {"cold": 40.0, "warm": 10.0}
    assert found["t_modes"].slower is None
