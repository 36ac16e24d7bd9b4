"""Reusing a pass on an identical build (`run ... --reuse-passed DAYS`): each started run whose
test passed within DAYS on a build with the same sha256, in the mode asked, is stopped at once
and the earlier pass reused; the newest verdict on those bytes decides."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from asyncclient._core import _checks as checks
from asyncclient.errors import AsyncClientError, ConflictError, ValidationError
from asyncclient.eta import HISTORY_RUNS, MAX_TESTS

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import Run

__all__ = [
    "HISTORY_RUNS",
    "MAX_BUILDS",
    "MAX_TESTS",
    "Reuse",
    "Started",
    "find_reusable",
    "stop_reused",
]

MAX_BUILDS: Final = 100
"""The most builds whose sha256 one job asks the service for."""
MAX_DAYS: Final = 365.0
_CONCURRENCY: Final = 8
_EPOCH: Final = dt.datetime.min.replace(tzinfo=dt.UTC)
MAX_CLOCK_SKEW: Final = dt.timedelta(days=1)
"""How far past now a run's time may be (the service's clock and ours disagree); a test with a
run dated later than that reuses nothing."""
_SHA256: Final = re.compile(r"[0-9a-fA-F]{64}")


def check_days(days: float) -> float:
    """`days` if it is a number of days above 0 and at most MAX_DAYS, else ValidationError."""
    if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days <= MAX_DAYS:
        raise ValidationError(
            f"reuse_passed {days!r} is out of range: give the days (above 0, at most "
            f"{MAX_DAYS:g}) an earlier pass may be reused from"
        )
    return float(days)


@attrs.frozen
class Started:
    """A run this job started: its test, its id, the build it runs (None when the start did
    not say: the run's own view is read then) and the mode the job asked for (None: auto)."""

    test_id: str
    run_id: str
    build_id: str | None = None
    mode: str | None = None


@attrs.frozen
class Reuse:
    """A run of this job that an earlier pass makes needless.

    Attributes:
        test_id: The test.
        run_id: This job's run of it, stopped.
        earlier_run_id: The earlier run that passed on the identical build.
        earlier_link: That run's page, as the service sent it.
        earlier_build_id: The build it ran (its file has the same sha256 as this job's).
        sha256: The builds' sha256.
        finished_at: When the earlier run ended.
        seconds: What the earlier run took: the device time reuse saves.
    """

    test_id: str
    run_id: str
    earlier_run_id: str
    earlier_link: str | None
    earlier_build_id: str | None
    sha256: str
    finished_at: dt.datetime | None
    seconds: float | None

    def fields(self) -> dict[str, object]:
        """Its shape in `--json` and the events."""
        return {
            "earlierRunId": self.earlier_run_id,
            "earlierLink": self.earlier_link,
            "earlierBuildId": self.earlier_build_id,
            "sha256": self.sha256,
            "finishedAt": None if self.finished_at is None else self.finished_at.isoformat(),
            "savedSeconds": self.seconds,
        }


class _Builds:
    """The sha256 and project of each build, asked once each, at most MAX_BUILDS asked in all;
    a build the service cannot show (deleted, another project's, past the cap) has neither."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._known: dict[str, asyncio.Task[tuple[str | None, str | None]]] = {}

    async def read(self, build_id: str | None) -> tuple[str | None, str | None]:
        """(sha256, project id) of the build; (None, None) when it cannot be read."""
        if build_id is None:
            return None, None
        task = self._known.get(build_id)
        if task is None:
            if len(self._known) >= MAX_BUILDS:
                return None, None
            task = asyncio.ensure_future(self._read(build_id))
            self._known[build_id] = task
        return await task

    async def _read(self, build_id: str) -> tuple[str | None, str | None]:
        try:
            build = await self._session.get_build(build_id)
        except (AsyncClientError, ValidationError):
            return None, None
        found = build.sha256
        sha = found.lower() if isinstance(found, str) and _SHA256.fullmatch(found) else None
        return sha, build.project_id if isinstance(build.project_id, str) else None

    def close(self) -> None:
        for task in self._known.values():
            task.cancel()


def _utc(moment: dt.datetime | None) -> dt.datetime | None:
    return moment.replace(tzinfo=dt.UTC) if moment is not None and moment.tzinfo is None else moment


def _when(run: Run) -> dt.datetime | None:
    return _utc(run.finished_at or run.created_at)


def _same_mode(earlier: str | None, asked: str | None) -> bool:
    """Whether a pass in mode `earlier` (the mode it ran in) answers a job that asked for
    `asked`: cold only by a cold pass, warm only by a warm one; auto (or none) by either, since
    auto runs whichever of the two the service picks."""
    if asked is None or asked.lower() == "auto":
        return True
    return (earlier or "").lower() == asked.lower()


async def find_reusable(
    session: AsyncSession,
    started: Iterable[Started],
    *,
    days: float,
    now: dt.datetime | None = None,
    history: Mapping[str, Sequence[Run]] | None = None,
) -> dict[str, Reuse]:
    """The started runs an earlier pass makes needless, by run id (see the module's docstring).

    Args:
        session: The session to read the service with.
        started: The runs this job started.
        days: How old (days, by the earlier run's end) a pass may be.
        now: The moment `days` counts back from; default: the service's clock (service_now).
        history: Each test's newest runs, this job's left out (asyncclient.eta.read_history),
            when already read; a test missing from it reuses nothing. Default: read here.

    Returns:
        Each reusable run's `Reuse`, by this job's run id. A test whose history or builds
        cannot be read reuses nothing, nor does one whose newest verdict cannot be told to be
        on the same bytes (its build deleted or unreadable, the cap reached), nor one with a
        run dated more than MAX_CLOCK_SKEW past `now`.
    """
    days = check_days(days)
    ours = [item for item in started if checks.is_id("test", item.test_id)][:MAX_TESTS]
    job_runs = {item.run_id for item in ours}
    if history is None:
        from asyncclient.eta import read_history

        history = await read_history(session, [item.test_id for item in ours], exclude=job_runs)
    views = await _own_views(session, ours)
    now = now or service_now(views.values())
    window = _Window(now - dt.timedelta(days=days), now + MAX_CLOCK_SKEW)
    builds = _Builds(session)
    limit = asyncio.Semaphore(_CONCURRENCY)
    try:

        async def one(item: Started) -> Reuse | None:
            view = views.get(item.run_id)
            build_id = item.build_id or (view.used_build_id if view is not None else None)
            async with limit:
                sha, project = await builds.read(build_id)
                if sha is None:
                    return None
                runs = history.get(item.test_id, ())
                rule = _Rule(item.test_id, project, job_runs, window, item.mode)
                candidates = rule.verdicts(runs)
                if not candidates:
                    return None
                checked = await _with_builds(session, candidates, rule)
            # Newest first; a verdict whose bytes are unknown ends the search.
            for earlier in checked or ():
                theirs = earlier.used_build_sha256
                theirs_project = None
                if theirs is None:
                    theirs, theirs_project = await builds.read(earlier.used_build_id)
                if theirs is None or theirs_project not in (None, project):
                    return None
                if theirs.lower() == sha:
                    return _reuse(item, earlier, sha) if earlier.passed else None
            return None

        found = await asyncio.gather(*(one(item) for item in ours))
    finally:
        builds.close()
    return {reuse.run_id: reuse for reuse in found if reuse is not None}


@attrs.frozen
class _Window:
    since: dt.datetime
    latest: dt.datetime  # now, and the clocks' disagreement


@attrs.frozen
class _Rule:
    """Which earlier runs of a test may decide its reuse: its own (test, project), not this
    job's, final and not stopped, within the window, in a mode that answers the job's."""

    test_id: str
    project_id: str | None
    job_runs: set[str]
    window: _Window
    mode: str | None

    def counts(self, run: Run) -> bool:
        when = _when(run)
        return (
            run.test_id == self.test_id
            and (run.project_id is None or run.project_id == self.project_id)
            and run.id not in self.job_runs
            and run.is_final
            and run.status_kind != "cancelled"
            and checks.is_id("run", run.id)
            and when is not None
            and self.window.since <= when
            and _same_mode(run.mode, self.mode)
        )

    def verdicts(self, runs: Sequence[Run]) -> list[Run]:
        """The runs that count, newest first; none when not one of them passed, or when one is
        dated past the window (a date in the future is not newer than now: nothing is reused)."""
        runs = runs[:HISTORY_RUNS]
        if any((when := _when(run)) is not None and when > self.window.latest for run in runs):
            return []
        kept = [run for run in runs if self.counts(run)]
        return kept if any(run.passed for run in kept) else []


def _reuse(item: Started, earlier: Run, sha: str) -> Reuse:
    build = earlier.used_build_id
    return Reuse(
        test_id=item.test_id,
        run_id=item.run_id,
        earlier_run_id=earlier.id,
        earlier_link=earlier.link,
        earlier_build_id=build if checks.is_id("build", build) else None,
        sha256=sha,
        finished_at=_when(earlier),
        seconds=earlier.duration_seconds,
    )


def service_now(own: Iterable[Run]) -> dt.datetime:
    """The service's clock now: the newest creation time of this job's own runs (the service
    dated them as it started them), else ours. Its history is dated by that clock, which may
    run ahead of ours (an emulator faster than real time) or behind."""
    times = [when for run in own if (when := _utc(run.created_at)) is not None]
    return max(times, default=None) or dt.datetime.now(dt.UTC)


async def _own_views(session: AsyncSession, items: Sequence[Started]) -> dict[str, Run]:
    """This job's runs: their views say when the service started them, and the build of
    those whose start did not name it."""
    if not items:
        return {}
    try:
        runs = await session.list_runs(ids=[item.run_id for item in items])
    except AsyncClientError:
        return {}
    return {run.id: run for run in runs}


async def _with_builds(
    session: AsyncSession, candidates: Sequence[Run], rule: _Rule
) -> list[Run] | None:
    """The candidates, newest first, each with its build: the full views (one ids= read) of
    those whose list view names none, each checked again by `rule`. None (no reuse) when a
    full view cannot be read, or no longer counts: it may be the verdict that decides."""
    missing = [run.id for run in candidates if run.used_build_id is None]
    views: dict[str, Run] = {}
    if missing:
        try:
            read = await session.list_runs(ids=missing)
        except AsyncClientError:
            return None
        views = {view.id: view for view in read if view.id in set(missing)}
    kept = []
    for run in candidates:
        view = views.get(run.id) if run.used_build_id is None else run
        if view is None or view.used_build_id is None or not rule.counts(view):
            return None
        if view.status_kind != run.status_kind:
            return None  # the two views disagree on the verdict
        kept.append(view)
    return sorted(kept, key=lambda v: _when(v) or _EPOCH, reverse=True)


async def stop_reused(
    session: AsyncSession, found: Mapping[str, Reuse]
) -> tuple[dict[str, Reuse], dict[str, str]]:
    """Stop each reusable run; returns (the reuses whose run is stopped or was already, the
    runs that could not be stopped with why). A run that ended before the stop keeps its own
    verdict: the caller attaches a reuse only to a run that ended cancelled."""
    limit = asyncio.Semaphore(_CONCURRENCY)
    stopped: dict[str, Reuse] = {}
    errors: dict[str, str] = {}

    async def one(reuse: Reuse) -> None:
        async with limit:
            try:
                await session.stop_run(reuse.run_id)
            except ConflictError:
                pass  # already over: stopped earlier, or ended
            except AsyncClientError as exc:
                errors[reuse.run_id] = str(exc)
                return
        stopped[reuse.run_id] = reuse

    await asyncio.gather(*(one(reuse) for reuse in found.values()))
    return stopped, errors
