"""How long runs still have to go, from each test's history: its finished runs' queue waits and
durations (p50 and p90 of the recent ones in the same mode), made smaller as a run goes."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final, Protocol

import attrs

from asyncclient._values import _bounds as bounds
from asyncclient.errors import AsyncClientError
from asyncclient.models import Run

__all__ = [
    "DEFAULT_QUEUE_SECONDS",
    "DEFAULT_RUN_SECONDS",
    "MAX_TESTS",
    "Expected",
    "JobEta",
    "expected_of",
    "job_eta",
    "read_expected",
    "remaining",
]

DEFAULT_QUEUE_SECONDS: Final = 30.0
"""The queue wait expected of a test with no finished run to learn from."""
DEFAULT_RUN_SECONDS: Final = 120.0
"""The duration expected of a test with no finished run to learn from."""
RECENT: Final = 20
"""The finished runs of a test its expectation is made of, newest first."""
HISTORY_RUNS: Final = 50
"""The newest runs of a test one history read takes (the API's default page)."""
MAX_TESTS: Final = 200
"""The most tests whose history one job reads (the ETA, reuse and new tests share the read)."""
_MIN_SAME_MODE: Final = 3  # fewer finished runs in the mode asked: all modes count


class RunLister(Protocol):
    """What the history needs of the service: AsyncSession.list_runs."""

    async def list_runs(
        self,
        ids: Iterable[str] | None = None,
        test_id: str | None = None,
        project_id: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[Run]: ...


@attrs.frozen
class Expected:
    """What a test's runs take, from its history.

    Attributes:
        queue_p50: Seconds queued before a device begins it, the median.
        queue_p90: Seconds queued, the 90th percentile.
        run_p50: Seconds it runs, the median.
        run_p90: Seconds it runs, the 90th percentile.
        samples: The finished runs it was made of (0: the defaults).
        pace: Wall seconds a second of run time takes: 1 where the service's clock is the
            wall's; below 1 on an emulator faster than real time, whose durations are the
            device's seconds and whose timestamps the wall's. The time left is on the wall.
    """

    queue_p50: float = DEFAULT_QUEUE_SECONDS
    queue_p90: float = DEFAULT_QUEUE_SECONDS
    run_p50: float = DEFAULT_RUN_SECONDS
    run_p90: float = DEFAULT_RUN_SECONDS
    samples: int = 0
    pace: float = 1.0


# Paces believed: a thousandth to ten.
_PACE: Final = (0.001, 10.0)


@attrs.frozen
class JobEta:
    """The time a job still has to go: that of its slowest run still going.

    Attributes:
        p50: Seconds left, if each run takes its usual time.
        p90: Seconds left, if each run takes as long as its slow tenth.
        slowest: The test ids of the runs still going, slowest first (by p50).
    """

    p50: float
    p90: float
    slowest: tuple[str, ...] = ()

    def span(self) -> str:
        """`4-6 min`, `40-55 s`: from p50 to p90."""
        return _span(self.p50, self.p90)

    def text(self) -> str:
        """`about 4-6 min left`, `about 40-55 s left`, `over a day left`, `done`."""
        if self.p90 <= 0:
            return "done"
        return f"about {self.span()} left" if self.p50 <= DAY else "over a day left"


DAY: Final = 86400.0


def _span(low: float, high: float) -> str:
    if not low <= DAY:
        return "over a day"
    if not high <= DAY:
        return f"{_span(low, low)} to over a day"
    if high < 90:
        first, last, unit = max(1, round(low)), max(1, round(high)), "s"
    else:
        first, last, unit = max(1, round(low / 60)), max(1, math.ceil(high / 60)), "min"
    return f"{first} {unit}" if first >= last else f"{first}-{last} {unit}"


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low, high = math.floor(at), math.ceil(at)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _timings(run: Run) -> tuple[float, float, float | None] | None:
    """(queue, duration, pace) of a finished run, when its fields say: the queue on the wall
    (its timestamps), the duration in the device's seconds, and the wall seconds each of
    those took (its timestamps' span over its duration; None when they do not say)."""
    if not run.is_final or run.status_kind == "cancelled":
        return None
    duration = run.duration_seconds  # bounded: None when unknown
    if duration is None:
        return None
    pace = None
    if run.started_at is not None and run.finished_at is not None and duration > 0:
        span = bounds.seconds((run.finished_at - run.started_at).total_seconds())
        pace = None if span is None else span / duration
    return run.queue_seconds or 0.0, duration, pace


def expected_of(runs: Iterable[Run], mode: str | None = None) -> Expected:
    """What a test's runs take, from its finished runs (newest first, the `RECENT` first
    count): those in `mode` when there are at least 3, else all; the defaults when none."""
    timed = [(run.mode, t) for run in runs if (t := _timings(run)) is not None][:RECENT]
    same = [t for m, t in timed if mode is not None and m == mode]
    chosen = same if len(same) >= _MIN_SAME_MODE else [t for _, t in timed]
    if not chosen:
        return Expected()
    queues, durations = [q for q, _, _ in chosen], [d for _, d, _ in chosen]
    paces = [p for _, _, p in chosen if p is not None]
    pace = min(max(_quantile(paces, 0.5), _PACE[0]), _PACE[1]) if paces else 1.0
    return Expected(
        _quantile(queues, 0.5),
        _quantile(queues, 0.9),
        _quantile(durations, 0.5),
        _quantile(durations, 0.9),
        len(chosen),
        1.0 if abs(pace - 1.0) < 0.1 else pace,  # rounding is no pace
    )


HISTORY_CONCURRENCY: Final = 4
"""Listings of the history read at once: each may be an answer of up to the 32 MiB cap, read
and parsed whole before it is cut to records, so four bound the read's peak memory."""
RECORD_TEXT: Final = 200
"""The most characters a history record keeps of a run's id, status, mode, link and build id."""


def slim(run: Run) -> Run:
    """What a job keeps of an earlier run: id, test, project, status, mode, times, duration,
    link and build (its id and sha256), each text cut to RECORD_TEXT characters; no title,
    checks, captures or files. About 1.5 KB a run, whatever the service sent."""
    sha = run.used_build_sha256
    build = _cut(run.used_build_id)
    return Run(
        id=run.id if len(run.id) <= RECORD_TEXT else run.id[:RECORD_TEXT],
        status=run.status if len(run.status) <= RECORD_TEXT else run.status[:RECORD_TEXT],
        test_id=_cut(run.test_id),
        project_id=_cut(run.project_id),
        mode=_cut(run.mode),
        final=run.final,
        link=_cut(run.link),
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        duration_ms=run.duration_ms,
        build_id=build,
        build={"id": build, "sha256": sha} if sha is not None else None,
    )


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= RECORD_TEXT else text[:RECORD_TEXT]


async def read_history(
    session: RunLister,
    tests: Iterable[str],
    *,
    exclude: Iterable[str] = (),
    concurrency: int = HISTORY_CONCURRENCY,
    unread: dict[str, str] | None = None,
    shared: bool = False,
) -> dict[str, list[Run]]:
    """Each test's newest runs, newest first: one listing (50, the API's default page) per
    test, `concurrency` at a time, only that test's runs kept; `exclude`: run ids left out
    (the job's own). A test whose listing could not be read is left out (none of its runs is
    known: not even that it has none), as is one whose listing holds other tests' runs only
    (the service ignored `testId`); `unread` gets why, by test. An empty listing, or one of
    the job's own runs only, is a test with no history. Each run is kept as a small record
    (`slim`), so the read holds at most HISTORY_RUNS records a test. `shared`: a session
    with a `test_history(test_id, limit)` (a fleet's SharedViews) answers each listing."""
    wanted = list(dict.fromkeys(tests))
    left_out = set(exclude)
    limit = asyncio.Semaphore(concurrency)
    why = {} if unread is None else unread
    history_of = getattr(session, "test_history", None) if shared else None

    async def one(test_id: str) -> tuple[str, list[Run] | None]:
        async with limit:
            try:
                if history_of is not None:
                    runs = await history_of(test_id, HISTORY_RUNS)
                else:
                    runs = await session.list_runs(test_id=test_id, limit=HISTORY_RUNS)
            except AsyncClientError as exc:
                why[test_id] = str(exc)
                return test_id, None
        kept = [slim(run) for run in runs if run.id not in left_out and run.test_id == test_id]
        others = sum(1 for run in runs if run.id not in left_out and run.test_id != test_id)
        del runs  # the whole views go now; the records stay
        if others and not kept:
            why[test_id] = f"its listing held {others} runs of other tests and none of its own"
            return test_id, None
        return test_id, kept[:HISTORY_RUNS]

    read = await asyncio.gather(*(one(test_id) for test_id in wanted))
    return {test_id: runs for test_id, runs in read if runs is not None}


async def read_expected(
    session: RunLister,
    tests: Iterable[str],
    *,
    modes: Mapping[str, str | None] | None = None,
    exclude: Iterable[str] = (),
    concurrency: int = HISTORY_CONCURRENCY,
) -> dict[str, Expected]:
    """The expectation of each test, from read_history(); the defaults for a test whose
    history cannot be read."""
    wanted = list(dict.fromkeys(tests))
    history = await read_history(session, wanted, exclude=exclude, concurrency=concurrency)
    return {
        test_id: expected_of(history.get(test_id, []), (modes or {}).get(test_id))
        for test_id in wanted
    }


def remaining(run: Run, expected: Expected, now: datetime | None = None) -> tuple[float, float]:
    """(p50, p90) seconds `run` still has to go: its queue left, then its duration left; 0 for
    a final run. A run past its usual time is given the time to its slow tenth's end, and at
    least a tenth of its usual duration."""
    if run.is_final:
        return 0.0, 0.0
    at = now or datetime.now(UTC)
    run_p50, run_p90 = expected.run_p50 * expected.pace, expected.run_p90 * expected.pace
    floor = run_p50 / 10
    if run.started_at is None:
        waited = max(0.0, (at - run.created_at).total_seconds()) if run.created_at else 0.0
        return (
            max(expected.queue_p50 - waited, 0.0) + run_p50,
            max(expected.queue_p90 - waited, 0.0) + run_p90,
        )
    ran = max(0.0, (at - run.started_at).total_seconds())
    p90 = max(run_p90 - ran, floor)
    return min(max(run_p50 - ran, floor), p90), p90


def job_eta(
    runs: Iterable[Run], expected: Mapping[str, Expected], now: datetime | None = None
) -> JobEta:
    """The time the job still has to go: that of its slowest run still going (a test with no
    expectation gets the defaults)."""
    at = now or datetime.now(UTC)
    going = [
        (remaining(run, expected.get(run.test_id or "", Expected()), at), run.test_id or run.id)
        for run in runs
        if not run.is_final
    ]
    if not going:
        return JobEta(0.0, 0.0)
    going.sort(key=lambda item: item[0][0], reverse=True)
    return JobEta(
        max(p50 for (p50, _), _ in going),
        max(p90 for (_, p90), _ in going),
        tuple(dict.fromkeys(test for _, test in going)),
    )
