"""Flaky tests across jobs, read from the service's run history, by the definitions of Google's
TAP, LUCI Analysis, Develocity, Datadog and Trunk: flaky builds, not flaky runs, and broken
tests never quarantined (the rules and the bounds: docs/reference/uploads-and-runs.md)."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

import attrs

from asyncclient._core._checks import is_id
from asyncclient._core._untrusted import TITLE_LIMIT, clip
from asyncclient.eta import RunLister
from asyncclient.failures._categories import DEFAULT_CATEGORIES, Categories
from asyncclient.failures._signature import failure_record
from asyncclient.models import Run

__all__ = [
    "BROKEN_BUILDS",
    "DEFAULT_DAYS",
    "FlakinessReport",
    "Slower",
    "TestFlakiness",
    "analyse",
    "fetch_flakiness",
]

State = Literal["broken", "flaky", "stable"]
DEFAULT_DAYS: Final = 14
"""The window, in days, of runs a flakiness report reads by default."""
BROKEN_BUILDS: Final = 3
"""A test whose runs on each of its last this many builds all did not pass is broken."""
RECENT_RUNS: Final = 20
"""How many of a test's newest counted runs its strip of marks shows."""
LISTING_LIMIT: Final = 200
_NO_BUILD: Final = ""  # the one "build" of every run without one (web tests)
_CONCURRENCY: Final = 8
_ORDER: Final[Mapping[str, int]] = {"broken": 0, "flaky": 1, "stable": 2}


@attrs.frozen
class TestFlakiness:
    """One test's history over the window.

    Attributes:
        test_id: The test.
        title: Its title, as its newest run gave it.
        state: `broken`, `flaky` or `stable` (see the module's definitions).
        runs: Its counted runs (final, not stopped).
        not_passed: Those that did not pass.
        builds: The builds it ran on.
        flaky_builds: The builds on which it both passed and did not pass.
        failure_rate: not_passed / runs (0.0 without runs).
        last_flaky_at: When its newest not-passed run on a flaky build was created.
        last_run_at: When its newest counted run was created.
        device_seconds_lost: The summed duration of its runs that did not pass.
        recent: The statuses of its newest counted runs (at most 20), oldest first.
        truncated: Its window holds more runs than one listing returns (200): the figures
            are of the newest 200.
        usual_seconds: The median duration of its counted runs, by mode (`cold`, `warm`,
            ...; `unknown` when a run did not say); empty when no run said its duration.
        slower: Its runs on its newest build took longer than on its earlier builds, in
            the same mode, by more than a fifth and 5 s (None: not slower, or nothing to
            compare).
        infrastructure: Its runs left out because they failed for the infrastructure.
    """

    __test__ = False  # not a pytest test class, whatever its name

    test_id: str
    title: str | None
    state: State
    runs: int
    not_passed: int
    builds: int
    flaky_builds: int
    failure_rate: float
    last_flaky_at: datetime | None
    last_run_at: datetime | None
    device_seconds_lost: float
    recent: tuple[str, ...]
    truncated: bool = False
    usual_seconds: Mapping[str, float] = attrs.field(factory=dict)
    slower: Slower | None = None
    infrastructure: int = 0

    @property
    def strip(self) -> str:
        """The recent runs as one mark each, oldest first: ✓ passed, ✗ failed, ! any other
        outcome (error, blocked, inconclusive)."""
        return "".join(_mark(status) for status in self.recent)

    def to_json(self) -> dict[str, object]:
        """The test as `asyncclient flaky --json` prints it (camelCase, times in ISO 8601)."""
        return {
            "testId": self.test_id,
            "title": self.title,
            "state": self.state,
            "runs": self.runs,
            "notPassed": self.not_passed,
            "builds": self.builds,
            "flakyBuilds": self.flaky_builds,
            "failureRate": round(self.failure_rate, 4),
            "lastFlakyAt": _iso(self.last_flaky_at),
            "lastRunAt": _iso(self.last_run_at),
            "deviceSecondsLost": round(self.device_seconds_lost, 3),
            "recent": list(self.recent),
            "truncated": self.truncated,
            "usualSeconds": {mode: round(s, 3) for mode, s in self.usual_seconds.items()},
            "slower": None if self.slower is None else self.slower.to_json(),
            "infrastructure": self.infrastructure,
        }


@attrs.frozen
class Slower:
    """A test slower on its newest build than on its earlier ones, in one mode.

    Attributes:
        build: The newest build (None for a web test's runs, which have none).
        mode: The mode compared (`cold`, `warm`, ...; None when the runs did not say).
        seconds: The median duration of its runs on the newest build.
        usual_seconds: The median duration of its runs on the earlier builds.
    """

    build: str | None
    mode: str | None
    seconds: float
    usual_seconds: float

    def to_json(self) -> dict[str, object]:
        return {
            "build": self.build,
            "mode": self.mode,
            "seconds": round(self.seconds, 3),
            "usualSeconds": round(self.usual_seconds, 3),
        }

    def line(self, test_id: str) -> str:
        """`t_login is slower on ab_43 (cold): 48.0 s, usually 30.0 s`."""
        on = f" on {self.build}" if self.build else ""
        mode = f" ({self.mode})" if self.mode else ""
        return (
            f"{test_id} is slower{on}{mode}: {self.seconds:.1f} s, usually "
            f"{self.usual_seconds:.1f} s"
        )


SLOWER_SHARE: Final = 0.2
"""A test is slower when its newest build's runs take more than this share longer..."""
SLOWER_SECONDS: Final = 5.0
"""... and more than these seconds longer than its earlier builds' (in the same mode)."""


def _seconds(run: Run) -> float | None:
    return None if run.duration_ms is None else run.duration_seconds  # bounded


def _slower(latest: Sequence[Sequence[Run]]) -> Slower | None:
    """The newest build's runs (the last of `latest`) against the earlier builds', mode by
    mode (the newest build's own modes), by their median durations."""
    if len(latest) < 2:
        return None
    newest = latest[-1]
    for mode in dict.fromkeys(run.mode for run in newest):
        now = [s for r in newest if r.mode == mode and (s := _seconds(r)) is not None]
        before = [
            s
            for build_runs in latest[:-1]
            for r in build_runs
            if r.mode == mode and (s := _seconds(r)) is not None
        ]
        if not now or not before:
            continue
        took, usual = statistics.median(now), statistics.median(before)
        if took > usual * (1 + SLOWER_SHARE) and took - usual > SLOWER_SECONDS:
            build = newest[-1].used_build_id
            return Slower(build, mode, took, usual)
    return None


@attrs.frozen
class FlakinessReport:
    """What `AsyncSession.flakiness` found.

    Attributes:
        project_id: The project read.
        days: The window, in days.
        since: The window's start (runs created before it are not read).
        tests: One entry per test, what hurts most first: broken, then flaky (most flaky
            builds, then most device time lost), then stable.
        requests: How many requests the report took.
        asked: The tests whose history was read (None: not recorded).
        failed_runs: The counted runs that did not pass, as failure records (only when asked
            for: `failure_clusters` groups them by cause).
    """

    project_id: str
    days: float
    since: datetime
    tests: tuple[TestFlakiness, ...]
    requests: int = 0
    asked: frozenset[str] | None = None
    failed_runs: tuple[Run, ...] = attrs.field(default=(), repr=False)

    def of(self, test_id: str) -> TestFlakiness | None:
        """The entry of a test, if the window holds runs of it.

        Args:
            test_id: The test (`t_...`).
        """
        return next((t for t in self.tests if t.test_id == test_id), None)

    def to_json(self) -> dict[str, object]:
        return {
            "projectId": self.project_id,
            "days": self.days,
            "since": _iso(self.since),
            "tests": [test.to_json() for test in self.tests],
        }


def _mark(status: str) -> str:
    return "✓" if status == "passed" else "✗" if status == "failed" else "!"


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def counted(run: Run, since: datetime | None = None) -> bool:
    """Whether a run counts: final, not stopped, and (with `since`) created in the window.

    Args:
        run: The run.
        since: The window's start (None: no start).
    """
    if not run.is_final or run.status_kind == "cancelled":
        return False
    created = run.created_at
    return since is None or created is None or created >= since


def analyse(
    runs: Iterable[Run],
    *,
    since: datetime | None = None,
    truncated: Iterable[str] = (),
    categories: Categories | None = None,
) -> list[TestFlakiness]:
    """Each test's history from its runs (any order, any tests): a pure function.

    Args:
        runs: Runs with their test id, status, creation time and build (full views, or list
            views that carry the build).
        since: Runs created before it are left out (None: none is).
        truncated: Tests whose window holds more runs than were read.
        categories: The failure categories in force (default: the built-in ones); a run
            that failed for the infrastructure is left out, and counted apart.

    Returns:
        One entry per test with a counted run (or one left out), what hurts most first.
    """
    sort = categories or DEFAULT_CATEGORIES
    by_test: dict[str, list[Run]] = {}
    left_out: dict[str, list[Run]] = {}
    for run in runs:
        if run.test_id is not None and counted(run, since):
            into = left_out if sort.infrastructure(run) else by_test
            into.setdefault(run.test_id, []).append(run)
            by_test.setdefault(run.test_id, [])
    cut = set(truncated)
    found = [
        _one(test_id, test_runs, test_id in cut, left_out.get(test_id, []))
        for test_id, test_runs in by_test.items()
    ]
    return sorted(found, key=_hurt)


def _hurt(test: TestFlakiness) -> tuple[int, int, float, float, str]:
    return (
        _ORDER[test.state],
        -test.flaky_builds,
        -test.device_seconds_lost,
        -test.failure_rate,
        test.test_id,
    )


def _when(run: Run) -> float:
    return run.created_at.timestamp() if run.created_at is not None else 0.0


def _one(test_id: str, runs: list[Run], truncated: bool, left_out: list[Run]) -> TestFlakiness:
    if not runs:  # every run failed for infrastructure: nothing to judge
        title = max(left_out, key=_when).test_title
        return TestFlakiness(
            test_id=test_id,
            title=clip(title, TITLE_LIMIT) if isinstance(title, str) else None,
            state="stable",
            runs=0,
            not_passed=0,
            builds=0,
            flaky_builds=0,
            failure_rate=0.0,
            last_flaky_at=None,
            last_run_at=None,
            device_seconds_lost=0.0,
            recent=(),
            truncated=truncated,
            infrastructure=len(left_out),
        )
    runs = sorted(runs, key=_when)
    builds: dict[str, list[Run]] = {}
    for run in runs:
        builds.setdefault(run.used_build_id or _NO_BUILD, []).append(run)
    flaky = [
        build_runs
        for build_runs in builds.values()
        if any(r.passed for r in build_runs) and any(not r.passed for r in build_runs)
    ]
    # Builds in the test's last order; the last few decide.
    latest = sorted(builds.values(), key=lambda build_runs: _when(build_runs[-1]))
    broken = all(not r.passed for build_runs in latest[-BROKEN_BUILDS:] for r in build_runs)
    state: State = "broken" if broken else "flaky" if flaky else "stable"
    failing = [r for r in runs if not r.passed]
    flake_times = [r.created_at for b in flaky for r in b if not r.passed and r.created_at]
    lost = sum((r.duration_ms or 0) for r in failing) / 1000.0
    title = runs[-1].test_title
    durations: dict[str, list[float]] = {}
    for r in runs:
        seconds = _seconds(r)
        if seconds is not None:
            durations.setdefault(r.mode or "unknown", []).append(seconds)
    return TestFlakiness(
        test_id=test_id,
        title=clip(title, TITLE_LIMIT) if isinstance(title, str) else None,
        state=state,
        runs=len(runs),
        not_passed=len(failing),
        builds=len(builds),
        flaky_builds=len(flaky),
        failure_rate=len(failing) / len(runs),
        last_flaky_at=max(flake_times, default=None),
        last_run_at=runs[-1].created_at,
        device_seconds_lost=lost,
        recent=tuple(r.status_kind for r in runs[-RECENT_RUNS:]),
        truncated=truncated,
        usual_seconds={mode: statistics.median(found) for mode, found in sorted(durations.items())},
        slower=_slower(latest),
        infrastructure=len(left_out),
    )


# --- reading the history ------------------------------------------------------------------------


async def fetch_flakiness(
    session: RunLister,
    project_id: str | None,
    *,
    days: float = DEFAULT_DAYS,
    tests: Sequence[str] | None = None,
    now: datetime | None = None,
    exclude: Collection[str] = (),
    categories: Categories | None = None,
    keep_runs: bool = False,
) -> FlakinessReport:
    """Read the project's history and analyse it (see AsyncSession.flakiness): the tests
    named, or (None) those the project's newest 200 runs name. `exclude`: run ids left out
    (a job's own runs, when it asks what came before them); project_id None: the tests'
    runs wherever they are (the named tests only). `categories`: the failure categories in
    force. `keep_runs`: the report keeps the runs that did not pass (`failed_runs`, for
    asyncclient.failures)."""
    since = (now or datetime.now(UTC)) - timedelta(days=days)
    requests = 0
    if tests is None:
        if project_id is None:
            raise ValueError("name the tests, or the project to find them in")
        requests += 1
        newest = await session.list_runs(project_id=project_id, limit=LISTING_LIMIT)
        # Only API-shaped ids: text is never a test.
        wanted = list(
            dict.fromkeys(
                r.test_id
                for r in newest[:LISTING_LIMIT]
                if r.test_id is not None and is_id("test", r.test_id)
            )
        )
        del newest
    else:
        wanted = list(dict.fromkeys(tests))
    wanted = wanted[:LISTING_LIMIT]
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def one(test_id: str) -> tuple[list[TestFlakiness], int]:
        async with gate:
            runs, truncated, count = await _history(
                session, project_id, test_id, since, exclude, read_text=read_text
            )
            if keep_runs:  # a small record each: bounded
                kept.extend(failure_record(run) for run in runs if not run.passed)
            # Analysed at once; only the result is kept. Categories that read the text match
            # in a worker thread: never on the loop that serves requests.
            cut = [test_id] if truncated else []
            if read_text and categories is not None and categories.read_text:
                return await asyncio.to_thread(
                    analyse, runs, since=since, truncated=cut, categories=categories
                ), count
            return analyse(runs, since=since, truncated=cut, categories=categories), count

    kept: list[Run] = []
    read_text = keep_runs or (categories is not None and categories.read_text)
    found = await asyncio.gather(*(one(test_id) for test_id in wanted))
    requests += sum(count for _, count in found)
    return FlakinessReport(
        project_id=project_id or "",
        days=days,
        since=since,
        tests=tuple(sorted((test for tested, _ in found for test in tested), key=_hurt)),
        requests=requests,
        asked=frozenset(wanted),
        failed_runs=tuple(kept),
    )


async def _history(
    session: RunLister,
    project_id: str | None,
    test_id: str,
    since: datetime,
    exclude: Collection[str] = (),
    *,
    read_text: bool = False,
) -> tuple[list[Run], bool, int]:
    """One test's counted runs in the window: one listing, then the full views of the runs
    whose listing left out their build, and (`read_text`) of the runs that did not pass whose
    listing left out what they failed of (50 a request). Also whether the listing was full
    with runs still inside the window, and the requests made."""
    listing = (await session.list_runs(test_id=test_id, limit=LISTING_LIMIT))[:LISTING_LIMIT]
    inside = [
        r
        for r in listing
        if r.test_id == test_id
        and (project_id is None or r.project_id in (None, project_id))
        and r.id not in exclude
        and counted(r, since)
    ]
    oldest = listing[-1].created_at if listing else None
    truncated = len(listing) >= LISTING_LIMIT and (oldest is None or oldest >= since)
    unknown = [
        r.id
        for r in inside
        if (r.used_build_id is None and r.platform != "web")
        or (read_text and not r.passed and _no_text(r))
    ]
    requests = 1
    if unknown:
        full = {run.id: run for run in await session.list_runs(ids=unknown)}
        requests += -(-len(unknown) // 50)
        inside = [run for run in (full.get(r.id, r) for r in inside) if run.test_id == test_id]
    return inside, truncated, requests


def _no_text(run: Run) -> bool:
    """Whether a run's view says nothing of what it failed of (a list view)."""
    return run.headline is None and run.error is None and run.requirements is None
