"""Follow many test runs at once: batched `list_runs(ids=...)` sweeps with an adaptive pace.

RunWatcher (made by `session.watch_runs`) yields each status change; `session.wait_for_runs`
waits on one; the pace and the tracking are pure cores (_Pacer, _Tracker) beside it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Protocol, TypedDict, TypeVar

from asyncclient._core import _checks as checks
from asyncclient._core import _defaults as defaults
from asyncclient._core._checks import IDS_PER_REQUEST, CheckedIds, check_id_list
from asyncclient._core._converter import structure_hook
from asyncclient._core._retry import Sleep, classify
from asyncclient._core._wire import batched
from asyncclient._local._batches import each_batch
from asyncclient.errors import (
    ApiError,
    AsyncClientError,
    ConflictError,
    NotFoundError,
    ServerError,
    ValidationError,
    WatchTimeoutError,
)
from asyncclient.models import Run

__all__ = ["RunWatcher", "WatchOptions"]

log = logging.getLogger("asyncclient.watch")

DEFAULT_INTERVAL: Final = defaults.INTERVAL
"""Seconds between sweeps while runs keep changing (before jitter)."""
DEFAULT_MAX_INTERVAL: Final = defaults.MAX_INTERVAL
"""The longest pause between sweeps, reached while nothing changes."""
DEFAULT_CONCURRENCY: Final = defaults.WATCH_CONCURRENCY
"""List runs requests of one sweep in flight at once (10,000 runs are 200 requests)."""

T = TypeVar("T")
Clock = Callable[[], float]


class WatchOptions(TypedDict, total=False):
    """The less common RunWatcher settings, accepted by `watch_runs` and `wait_for_runs` too.

    Every key is optional; pass them as keyword arguments.

    Attributes:
        growth: How much the pause grows per sweep without a change (default 1.5).
        jitter: The pause is jittered by this fraction either way (default 0.2), so a fleet of
            CI jobs does not poll in lockstep.
        stop_on_cancel: Stop the runs still going when the task is cancelled (Ctrl-C), read
            them once more, then let the `CancelledError` through (default False).
        follow: Keep the iterator open for runs added later with `add()`, until `aclose()`
            (default False).
        unknown_after: Drop a run id the service leaves out of this many answers in a row
            (default 3); it is listed in `RunWatcher.unknown`.
        max_failed_sweeps: Raise the last error after this many failed sweeps in a row
            (default 10).
        concurrency: Requests of one sweep in flight at once (default 8).
        stop_concurrency: Stops in flight at once (default 8).
        stop_timeout: Seconds to wait for the stops (default 30).
        sleep: What waits between sweeps (default `asyncio.sleep`).
        clock: What tells the time (default `time.monotonic`).
        rng: The jitter's random source (default a new `random.Random`).
    """

    growth: float
    jitter: float
    stop_on_cancel: bool
    follow: bool
    unknown_after: int
    max_failed_sweeps: int
    concurrency: int
    stop_concurrency: int
    stop_timeout: float
    sleep: Sleep
    clock: Clock
    rng: random.Random


_structure_run: Final = structure_hook(Run)
# Each (status, final) pair once, shared: fewer objects.
_STATES: dict[tuple[Any, Any], tuple[tuple[Any, Any], bool]] = {}
_STATES_MAX: Final = 256
Raw = Mapping[str, Any]


def _state_of(pair: tuple[Any, Any]) -> tuple[tuple[Any, Any], bool]:
    """A run's (status, final) pair, shared, and whether it is final."""
    try:
        return _STATES[pair]
    except KeyError:
        remember = len(_STATES) < _STATES_MAX
    except TypeError:  # an unhashable status (an object): read it, do not remember it
        remember = False
    known = pair, _structure_run({"id": "j_", "status": pair[0], "final": pair[1]}).is_final
    if remember:
        _STATES[pair] = known
    return known


# Empty lists as (): plain dicts escape the collector.
_NO_ITEMS: Final = ()


def _restored(raw: Raw) -> Raw:
    if _NO_ITEMS not in raw.values():
        return raw
    return {key: [] if value is _NO_ITEMS else value for key, value in raw.items()}


class _Tracker:
    """Which runs are still polled, their latest views and what changed. No I/O, no clock."""

    def __init__(self, unknown_after: int) -> None:
        self.unknown_after = unknown_after
        self.order: dict[str, None] = {}  # every id ever watched, first-seen order
        # Raw JSON until read as a Run (view()).
        self.views: dict[str, Run | Raw] = {}
        self.pending: dict[str, None] = {}  # ids the next sweep asks for (a dict keeps order)
        self.missing: dict[str, int] = {}  # consecutive answers that left the id out
        self.unknown: dict[str, None] = {}
        self.states: dict[str, tuple[object, object]] = {}  # (status, final) last seen per run

    def add(self, run_ids: Iterable[str]) -> list[str]:
        """Watch these ids too; returns the ones that were new."""
        new = [run_id for run_id in dict.fromkeys(run_ids) if run_id not in self.order]
        for run_id in new:
            self.order[run_id] = None
            self.pending[run_id] = None
        return new

    def batches(self, size: int) -> list[CheckedIds]:
        """The ids still pending, `size` a batch (checked when they were added)."""
        return [CheckedIds(batch) for batch in batched(tuple(self.pending), size)]

    def record(self, batch: Sequence[str], runs: Iterable[Raw]) -> list[Raw]:
        """Take in one answer (the service's JSON runs) for `batch`; returns the JSON of the runs
        whose status changed, in batch order.

        A run seen for the first time counts as changed. No Run is built here: structuring is
        most of a sweep's CPU (and its objects most of the collector's work), so a Run is built
        when an event is handed out or a view is read (view()), and a run that changes twice
        between reads is built once. A final run leaves `pending`; so does an id the answer left
        out `unknown_after` times in a row, into `unknown`.
        """
        by_id = {raw["id"]: raw for raw in runs}
        pending, views, missing, states = self.pending, self.views, self.missing, self.states
        changed: list[Raw] = []
        for run_id in batch:
            if run_id not in pending:
                continue
            raw = by_id.get(run_id)
            if raw is None:
                misses = missing.get(run_id, 0) + 1
                missing[run_id] = misses
                if misses >= self.unknown_after:
                    del pending[run_id]
                    self.unknown[run_id] = None
                continue
            if missing:
                missing.pop(run_id, None)
            # status and final decide is_final.
            pair = (raw.get("status"), raw.get("final"))
            if states.get(run_id) == pair:
                continue
            state, final = _state_of(pair)
            states[run_id] = state
            raw = {k: _NO_ITEMS if v.__class__ is list and not v else v for k, v in raw.items()}
            views[run_id] = raw
            changed.append(raw)
            if final:
                del pending[run_id]
        return changed

    def view(self, run_id: str) -> Run:
        """The latest view of `run_id` as a Run (built once, then kept)."""
        view = self.views[run_id]
        if isinstance(view, Run):
            return view
        run = _structure_run(_restored(view))
        self.views[run_id] = run
        return run

    def as_run(self, raw: Raw) -> Run:
        """An event's run: the latest view when it is still that one (built once), else its own."""
        run_id = raw["id"]
        if self.views.get(run_id) is raw:
            return self.view(run_id)
        return _structure_run(_restored(raw))

    def latest(self) -> tuple[Run, ...]:
        """The latest view of every run seen, in the order the ids were added."""
        return tuple(self.view(run_id) for run_id in self.order if run_id in self.views)


class _Pacer:
    """How long to wait before the next sweep. No I/O; randomness comes from `rng`.

    While runs change the pause is `interval`; each sweep without a change multiplies it by
    `growth` up to `max_interval`; a change snaps it back. Every pause is jittered by
    +-`jitter` (a fraction) so that a fleet of watchers started together drifts apart.
    """

    def __init__(
        self,
        interval: float,
        max_interval: float,
        growth: float,
        jitter: float,
        rng: random.Random,
    ) -> None:
        self.interval = interval
        self.max_interval = max_interval
        self.growth = growth
        self.jitter = jitter
        self.rng = rng
        self.current = interval

    def _jittered(self, seconds: float) -> float:
        if self.jitter:
            seconds *= self.rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return min(seconds, self.max_interval)

    def after_sweep(self, changed: bool) -> float:
        if changed:
            self.current = self.interval
        else:
            self.current = min(self.current * self.growth, self.max_interval)
        return self._jittered(self.current)

    def after_failure(self, failures: int) -> float:
        """The pause after `failures` failed sweeps in a row: doubling from `interval`."""
        return self._jittered(min(self.interval * 2.0 ** (failures - 1), self.max_interval))


class RunSource(Protocol):
    """What the watcher asks of the service: the operations of AsyncSession it calls (the
    watcher depends on them, not on the session's module, which makes watchers)."""

    @property
    def max_retry_after(self) -> float: ...

    async def list_run_views(
        self, run_ids: Sequence[str], *, retries: int | None = None
    ) -> list[Mapping[str, Any]]: ...

    async def stop_run(self, run_id: str) -> str: ...


def _check_ids(run_ids: Iterable[str]) -> list[str]:
    return check_id_list("run", run_ids, "run_ids")


class RunWatcher:
    """An async iterator over the status changes of many runs, polled in batched sweeps.

    Each sweep asks only for the runs not final yet, at most 50 ids per `list_runs` request,
    the requests of one sweep in flight `concurrency` at a time. It yields a `Run` the first
    time a run is seen and each time its status changes; a run's last yield is its final view.
    Iteration ends when every run is final or unknown (with `follow=True`, only at `aclose()`).

    Pace: `interval` seconds (default 3) between sweeps, jittered by +-`jitter` (default 0.2);
    x`growth` (default 1.5) per sweep without a change, up to `max_interval` (default 30);
    back to `interval` on a change. An answer that asks to wait (Retry-After on a 429, a 503,
    ...) pauses the whole watcher for exactly that long, but never longer than the session's
    `max_retry_after` (default 60 s), so a `Retry-After: 86400` cannot stall a watch.

    Errors: transport errors and 5xx are retried on the next sweep with a doubling pause (or
    the Retry-After pause, if longer); after `max_failed_sweeps` (default 10) failed sweeps in a
    row the last error is raised; a 429 is not a failure. Any other ApiError (401, 403, ...)
    ends the watch at once.

    A run id the service leaves out of `unknown_after` (default 3) answers in a row is
    dropped from the sweeps and listed in `unknown`; nothing is yielded for it.

    `timeout` (seconds, default none): when it passes with runs still going, one last sweep
    is made (unless a 429 pause is on) and WatchTimeoutError is raised, carrying the latest
    views; with `stop_on_timeout=True` the runs still going are stopped first (`stop_run`,
    `stop_concurrency` at a time, default 8; a run that ended meanwhile is fine) and their
    views fetched again. `stop_on_cancel=True` does the same stopping when the task iterating
    is cancelled (Ctrl-C), fetches them again (so `runs` holds what the service now says,
    `cancelled` for a run it stopped), then lets the CancelledError through. Stopping gives up
    after `stop_timeout` seconds (default 30); what could not be stopped is in `stop_errors`,
    and `still_going` names the runs not known to be final or stopped (while stopping: those
    whose stop the service has not answered yet).

    `sleep` and `clock` (default asyncio.sleep and time.monotonic) and `rng` may be replaced,
    for example by tests that drive a manual clock.

    Args:
        session: The session to call the service with.
        run_ids: The runs to follow (`j_...`); more can be added with `add()`.
        interval: Seconds between sweeps at first.
        max_interval: The longest pause between sweeps.
        growth: How much the pause grows per sweep without a change.
        jitter: The fraction the pause is jittered by, either way.
        timeout: Seconds before giving up with `WatchTimeoutError`; default: no limit.
        stop_on_timeout: Stop the runs still going when `timeout` passes.
        stop_on_cancel: Stop the runs still going when the task is cancelled.
        follow: Keep iterating for runs added later, until `aclose()`.
        unknown_after: Answers in a row without a run before it counts as unknown.
        max_failed_sweeps: Failed sweeps in a row before the last error is raised.
        concurrency: Requests of one sweep in flight at once.
        stop_concurrency: Stops in flight at once.
        stop_timeout: Seconds to wait for the stops.
        sleep: What waits between sweeps.
        clock: What tells the time.
        rng: The jitter's random source.

    Raises:
        ValidationError: A bad run id or option, when the watcher is made.
    """

    def __init__(
        self,
        session: RunSource,
        run_ids: Iterable[str] = (),
        *,
        interval: float = 3.0,
        max_interval: float = 30.0,
        growth: float = 1.5,
        jitter: float = 0.2,
        timeout: float | None = None,
        stop_on_timeout: bool = False,
        stop_on_cancel: bool = False,
        follow: bool = False,
        unknown_after: int = 3,
        max_failed_sweeps: int = 10,
        concurrency: int = 8,
        stop_concurrency: int = 8,
        stop_timeout: float = 30.0,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        interval = checks.check_seconds("interval", interval)
        max_interval = checks.check_seconds("max_interval", max_interval)
        if max_interval < interval:
            raise ValidationError(
                f"max_interval ({max_interval:g}) must be at least interval ({interval:g})"
            )
        if isinstance(growth, bool) or not isinstance(growth, int | float) or not growth >= 1:
            raise ValidationError(f"growth must be a number of at least 1; got {growth!r}")
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter < 1:
            raise ValidationError(f"jitter must be a fraction from 0 to below 1; got {jitter!r}")
        self._timeout = None if timeout is None else checks.check_seconds("timeout", timeout)
        self._session = session
        self._tracker = _Tracker(checks.check_count("unknown_after", unknown_after))
        self._pacer = _Pacer(
            interval, max_interval, float(growth), float(jitter), rng or random.Random()
        )
        self._stop_on_timeout = stop_on_timeout
        self._stop_on_cancel = stop_on_cancel
        self._follow = follow
        self._max_failed_sweeps = checks.check_count("max_failed_sweeps", max_failed_sweeps)
        self._concurrency = checks.check_count("concurrency", concurrency)
        self._stop_concurrency = checks.check_count("stop_concurrency", stop_concurrency)
        self._stop_timeout = checks.check_seconds("stop_timeout", stop_timeout)
        self._sleep = sleep
        self._clock = clock
        self._tracker.add(_check_ids(run_ids))

        self._events: deque[Raw] = deque()  # the JSON of each change not yet handed out
        self._started = False
        self._finished = False
        self._closed = False
        self._deadline: float | None = None
        self._next_sweep_at = 0.0
        self._paused_until = 0.0  # a Retry-After pause: no sweep before this, not even the last
        self._last_sweep_done = False  # the one sweep made once the deadline passed
        self._failures = 0
        self._stopping_done = False
        self._stop_answered: set[str] = set()  # stops the service answered (or found final)
        self._wake = asyncio.Event()  # set by add() and aclose(): re-plan the wait at once
        self._close_event = asyncio.Event()

        self.sweeps = 0
        """Sweeps made so far."""
        self.requests = 0
        """List runs requests sent so far (not counting stop_run)."""
        self.stopped: tuple[str, ...] = ()
        """Runs this watcher stopped (on timeout or cancel)."""
        self.stop_errors: dict[str, AsyncClientError] = {}
        """Runs that could not be stopped, and why."""

    # --- public state ---------------------------------------------------------------------------

    @property
    def runs(self) -> dict[str, Run]:
        """The latest view of each run seen, by id, in the order the ids were added."""
        return {run.id: run for run in self._tracker.latest()}

    @property
    def pending(self) -> tuple[str, ...]:
        """The ids still polled: not final and not given up as unknown."""
        return tuple(self._tracker.pending)

    @property
    def still_going(self) -> tuple[str, ...]:
        """Runs that may still be going on the service: not seen final, not given up as
        unknown, and not stopped by this watcher (a stop in flight does not count until the
        service answers it). What a process that must exit now leaves behind."""
        answered = self._stop_answered
        return tuple(run_id for run_id in self._tracker.pending if run_id not in answered)

    @property
    def unknown(self) -> tuple[str, ...]:
        """Ids the service did not return in `unknown_after` answers in a row."""
        return tuple(self._tracker.unknown)

    @property
    def run_ids(self) -> tuple[str, ...]:
        """Every id watched, in the order added (without duplicates)."""
        return tuple(self._tracker.order)

    @property
    def closed(self) -> bool:
        """Whether aclose() was called (or the watcher's context ended)."""
        return self._closed

    # --- control --------------------------------------------------------------------------------

    def add(self, run_ids: Iterable[str]) -> None:
        """Watch more runs; they are asked for from the next sweep on, which comes sooner.

        Raises RuntimeError once the watcher is closed or has ended (every run final, without
        `follow=True`).

        Args:
            run_ids: More runs to follow (`j_...`); ids already followed are ignored.

        Raises:
            ValidationError: A bad run id.
        """
        ids = _check_ids(run_ids)
        if self._closed:
            raise RuntimeError("the watcher is closed: start a new one for these runs")
        if self._finished:
            raise RuntimeError(
                "the watcher has ended (every run was final): use follow=True to keep it open "
                "for runs added later"
            )
        if self._tracker.add(ids):
            # New runs deserve a prompt look: back to the base interval.
            delay = self._pacer.after_sweep(True)
            if self._started:
                self._next_sweep_at = min(self._next_sweep_at, self._clock() + delay)
            self._wake.set()

    def forget(self, run_id: str) -> None:
        """Follow `run_id` no more: it is not polled again and never stopped by this watcher
        (fail-fast, a timeout, a cancel): a run the service answered that is not the caller's.

        Args:
            run_id: A run this watcher follows (another id is ignored).
        """
        self._tracker.pending.pop(run_id, None)

    def stopped_elsewhere(self, run_ids: Iterable[str]) -> None:
        """Runs known elsewhere not to be going (the fleet stopped a superseded job's runs,
        or found them ended): no longer `still_going`, and a stop by this watcher (timeout,
        cancel) leaves them alone while still reading their views with the rest.

        Args:
            run_ids: Runs another caller stopped or saw end.
        """
        self._stop_answered.update(r for r in run_ids if r in self._tracker.pending)

    async def stop(self) -> tuple[str, ...]:
        """Stop every run still going, read them again, and end the watch (a fail-fast: the
        caller has seen enough). The stops go out `stop_concurrency` at a time within
        `stop_timeout`; what could not be stopped is in `stop_errors`.

        Returns:
            The ids of the runs stopped (also in `stopped`); their views in `runs` are as the
            service answered after the stop.
        """
        if not self._stopping_done:
            await self._stop_pending(refresh=True)
        await self.aclose()
        return self.stopped

    async def aclose(self) -> None:
        """Stop watching (the runs themselves go on). A waiting iteration ends at once."""
        self._closed = True
        self._close_event.set()
        self._wake.set()

    async def __aenter__(self) -> RunWatcher:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if (
            isinstance(exc, asyncio.CancelledError)
            and self._stop_on_cancel
            and not self._stopping_done
        ):
            # Cancelled while the consumer held a yielded run.
            await self._stop_pending(refresh=True)
        await self.aclose()

    def __aiter__(self) -> RunWatcher:
        return self

    async def __anext__(self) -> Run:
        return self._tracker.as_run(await self._advance())

    async def wait(self) -> dict[str, Run]:
        """Follow until every run is final (or the watch ends as iterating it would: a timeout,
        a fatal error), without handing out each change; returns `runs`. Builds a Run only for
        the views it returns, so it is the cheap way to wait for thousands of runs."""
        while True:
            try:
                await self._advance()
            except StopAsyncIteration:
                break
            self._events.clear()
        return self.runs

    async def _advance(self) -> Raw:
        if self._events:
            return self._events.popleft()
        if self._finished or self._closed:
            raise StopAsyncIteration
        try:
            return await self._next_event()
        except asyncio.CancelledError:
            self._finished = True
            if self._stop_on_cancel and not self._stopping_done:
                await self._stop_pending(refresh=True)
            raise
        except BaseException:  # StopAsyncIteration, WatchTimeoutError, a fatal ApiError
            self._finished = True
            raise

    # --- the loop -------------------------------------------------------------------------------

    async def _next_event(self) -> Raw:
        if not self._started:
            self._started = True
            now = self._clock()
            self._next_sweep_at = now
            if self._timeout is not None:
                self._deadline = now + self._timeout
        while True:
            if self._closed:
                raise StopAsyncIteration
            if not self._tracker.pending:
                if not self._follow:
                    raise StopAsyncIteration
                self._wake.clear()
                await self._interruptible(self._wake.wait(), self._close_event)
                continue
            now = self._clock()
            if self._deadline is not None and now >= self._deadline:
                if self._last_sweep_done or now < self._paused_until:
                    await self._time_out()
                self._last_sweep_done = True
            else:
                due = self._next_sweep_at
                if self._deadline is not None:
                    due = min(due, self._deadline)
                if due > now:
                    self._wake.clear()
                    await self._interruptible(self._sleep(due - now), self._wake)
                    continue
            await self._sweep()
            if self._events:
                return self._events.popleft()

    async def _interruptible(self, awaitable: Awaitable[T], event: asyncio.Event) -> T | None:
        """Await `awaitable` unless `event` is set first (then None). Cancels the loser."""
        if event.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            return None
        main = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({main, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (main, waiter):
                if not task.done():
                    task.cancel()
        if main.done() and not main.cancelled():
            return main.result()
        # Let the cancelled task finish unwinding before going on.
        await asyncio.gather(main, return_exceptions=True)
        return None

    async def _fetch(self, batches: Sequence[Sequence[str]]) -> list[list[Raw] | AsyncClientError]:
        """One List runs request per batch, `concurrency` at a time. Each answer is recorded as
        soon as it is decoded, so a sweep never holds every batch's JSON at once (10,000 decoded
        runs kept alive together would only feed Python's GC); per batch comes back the runs
        that changed, or the error, in batch order."""
        record = self._tracker.record

        async def fetch(batch: Sequence[str]) -> list[Raw] | AsyncClientError:
            self.requests += 1
            try:
                # retries=0: a 429 pauses every batch.
                raw = await self._session.list_run_views(batch, retries=0)
            except AsyncClientError as exc:
                return exc  # every batch's outcome is wanted: the error as a value
            return record(batch, raw)

        return await each_batch(batches, fetch, self._concurrency)

    async def _sweep(self) -> None:
        batches = self._tracker.batches(IDS_PER_REQUEST)
        results = await self._interruptible(self._fetch(batches), self._close_event)
        if results is None:  # closed while the requests were in flight
            return
        self.sweeps += 1
        changed = False
        retry_after: float | None = None
        transient: AsyncClientError | None = None
        fatal: AsyncClientError | None = None
        for result in results:
            if isinstance(result, list):
                changed = changed or bool(result)
                self._events.extend(result)
                continue
            if classify(result) == "permanent":
                fatal = fatal or result
                continue
            wait = result.retry_after if isinstance(result, ApiError) else None
            if wait is not None:
                retry_after = max(retry_after or 0.0, wait)
            # 429 with Retry-After: a pause; 5xx: a failure.
            if wait is None or isinstance(result, ServerError):
                transient = result
        if fatal is not None:
            self._events.clear()
            raise fatal
        now = self._clock()
        if retry_after is not None:
            # Capped as the session caps its own retries.
            retry_after = min(retry_after, self._session.max_retry_after)
            log.debug("asked to wait: every batch waits %.3f s", retry_after)
            self._paused_until = now + retry_after
        if transient is not None:
            self._failures += 1
            if self._failures >= self._max_failed_sweeps:
                self._events.clear()
                raise transient
            delay = self._pacer.after_failure(self._failures)
            log.debug(
                "sweep failed (%s), %d in a row; next in %.3f s", transient, self._failures, delay
            )
            self._next_sweep_at = max(now + delay, self._paused_until)
        elif retry_after is not None:
            self._next_sweep_at = self._paused_until
        else:
            self._failures = 0
            self._next_sweep_at = now + self._pacer.after_sweep(changed)
        log.debug(
            "sweep %d: %d requests, %d changed, %d pending",
            self.sweeps,
            len(batches),
            len(self._events),
            len(self._tracker.pending),
        )

    async def _time_out(self) -> None:
        pending = list(self._tracker.pending)
        if self._stop_on_timeout:
            await self._stop_pending(refresh=True)
        count = len(pending)
        first = ", ".join(pending[:5]) + (", ..." if count > 5 else "")
        assert self._timeout is not None
        stopped = f"; stopped {len(self.stopped)}" if self.stopped else ""
        raise WatchTimeoutError(
            f"{count} run(s) not final after {self._timeout:g} s ({first}){stopped}",
            self._tracker.latest(),
        )

    async def _stop_pending(self, *, refresh: bool) -> None:
        """Stop every run still going, `stop_concurrency` at a time; optionally fetch them again."""
        self._stopping_done = True
        ids = list(self._tracker.pending)
        if not ids:
            return
        semaphore = asyncio.Semaphore(self._stop_concurrency)
        stopped: list[str] = []

        async def stop(run_id: str) -> None:
            async with semaphore:
                try:
                    await self._session.stop_run(run_id)
                except (ConflictError, NotFoundError):
                    # It ended (or went away) meanwhile: nothing left to stop.
                    self._stop_answered.add(run_id)
                    return
                except AsyncClientError as exc:
                    self.stop_errors[run_id] = exc
                    log.warning("could not stop run %s: %s", run_id, exc)
                    return
                self._stop_answered.add(run_id)
                stopped.append(run_id)

        answered = set(self._stop_answered)  # stopped already: read, not stopped again
        try:
            async with asyncio.timeout(self._stop_timeout):
                await asyncio.gather(*(stop(run_id) for run_id in ids if run_id not in answered))
                if refresh:
                    await self._refresh(ids)
        except TimeoutError:
            for run_id in ids:
                if run_id not in stopped and run_id not in answered:
                    self.stop_errors.setdefault(
                        run_id,
                        AsyncClientError(f"not stopped within {self._stop_timeout:g} s"),
                    )
        done = set(stopped)
        self.stopped = tuple(run_id for run_id in ids if run_id in done)

    async def _refresh(self, ids: Sequence[str]) -> None:
        """Fetch the latest views of `ids` (after stopping them); failures keep the old views."""
        await self._fetch(
            list(batched(ids, IDS_PER_REQUEST))
        )  # each answer updates the views; errors keep the old ones
