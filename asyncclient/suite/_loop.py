"""The suite loop: follows a suite's runs to each test's verdict, starting and stopping runs as
the policy says (re-runs in rounds or at once, copies, fail-fast, reuse, new tests, the ETA),
recording them in one Reruns and telling what happens as typed events that observers read.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from asyncclient._client import _telemetry
from asyncclient._core import _checks as checks
from asyncclient._core import _defaults as defaults
from asyncclient._local._batches import stop_runs
from asyncclient.errors import AsyncClientError, WatchTimeoutError
from asyncclient.reruns import Reruns, SuitePolicy
from asyncclient.reruns._state import remaining
from asyncclient.suite._baseline import BaselineRuns
from asyncclient.suite._events import (
    BaselineJudged,
    BaselineRunChanged,
    BaselineStarted,
    BudgetReached,
    CopiesStopped,
    Eta,
    FailFast,
    HistoryRead,
    JobFinished,
    NewTests,
    Notice,
    RunChanged,
    RunFinished,
    RunsStarted,
    RunStarted,
    StartRefused,
    SuiteEvent,
)
from asyncclient.suite._events import (
    Reused as ReusedEvent,
)
from asyncclient.suite._known import KnownFailures
from asyncclient.suite._start import ProjectStart

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient._reports.model import SuiteReport
    from asyncclient.eta import Expected, JobEta
    from asyncclient.flakiness import TestFlakiness
    from asyncclient.models import ProjectRunStart, Run
    from asyncclient.reruns import SuiteResult
    from asyncclient.spend.reuse import Started
    from asyncclient.suite._trace import JobTrace
    from asyncclient.watch import RunWatcher

__all__ = ["SuiteRun"]

Observer = Callable[[SuiteEvent], object]
_ETA_EVERY: Final = 1.0  # seconds between two ETA computations
_ETA_MOVED: Final = 0.1  # a new ETA is told when it moved by more than this share


class SuiteRun:
    """One suite followed to its verdicts: `async for event in suite_run` gives what happens
    (typed events, asyncclient.suite), `await suite_run.wait()` the report.

    Made by `SuiteRun.for_project(session, project_id, ...)` (starts the suite) or
    `SuiteRun(session, run_ids, ...)` (runs already started). The loop starts at the first
    `wait()`, iteration or `async with`; iterating several times replays every event from
    the first. Leaving `async with` before the end cancels the loop (and stops the runs still
    going when `stop_on_cancel`).

    Args:
        session: The session the loop calls the service with.
        run_ids: The suite's first runs, when already started.
        policy: How the suite is followed (default: no re-runs).
        start: What starts the suite (for_project's run_project call), instead of run_ids.
        tests: Each run's test id, when known from the start.
        mode: The mode the first runs were started in (re-runs and copies use it).
        build_id: Their build (default: each run's own).
        idempotency_key: The suite's key; each re-run's and copy's is derived from it.
        starts: Each run started, with its build and mode, for reuse, new tests and hedging
            (default: made of `tests`, `build_id` and `mode`).
        overage: The runs whose start said they are beyond the plan's included runs.
        skipped: The tests the service did not start, with why (for the report).
        name: The report's name.
        stop_on_cancel: Stop the runs still going when the loop is cancelled.
        watch_options: `WatchOptions` for each round's watcher.
        clock: What tells the time (the timeout, the ETA's pace).
    """

    def __init__(
        self,
        session: AsyncSession,
        run_ids: Sequence[str] = (),
        *,
        policy: SuitePolicy | None = None,
        start: Callable[[], Awaitable[ProjectRunStart]] | None = None,
        tests: Mapping[str, str] | None = None,
        mode: str | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
        starts: Sequence[Started] | None = None,
        overage: Sequence[str] = (),
        skipped: Sequence[tuple[str, str]] = (),
        name: str = "asyncclient",
        stop_on_cancel: bool = True,
        watch_options: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or SuitePolicy()
        self._session = session
        run_ids = checks.check_id_list("run", run_ids, "run_ids", unique=False)
        self._start = start
        self.run_ids: tuple[str, ...] = tuple(run_ids)
        self.tests: dict[str, str] = dict(tests or {})
        if starts is None:  # the runs of known tests, started with this build and mode
            from asyncclient.spend.reuse import Started

            starts = [Started(self.tests[i], i, build_id, mode) for i in run_ids if i in self.tests]
        self.starts: tuple[Started, ...] = tuple(starts)
        self.skipped: tuple[tuple[str, str], ...] = tuple(skipped)
        self.name = name
        self._stop_on_cancel = stop_on_cancel
        self._stopped_elsewhere: set[str] = set()
        self._watch_options = dict(watch_options or {})
        self._clock = clock
        p = self.policy
        self.reruns = Reruns(p, mode=mode, build_id=build_id, idempotency_key=idempotency_key)
        self.reruns.overage.update(overage)
        self.started: ProjectRunStart | None = None
        """The service's answer to the suite's start (for_project)."""
        self.report: SuiteReport | None = None
        """The report, once built (at the end, or what was known when the loop was cancelled)."""
        self.result: SuiteResult | None = None
        """Every test with every run, once the loop ended."""
        self.timed_out: WatchTimeoutError | None = None
        self.stopped_fast = False
        self.unknown: tuple[str, ...] = ()
        self.history: dict[str, list[Run]] = {}
        """Each test's earlier runs, newest first, once read."""
        self.expected: dict[str, Expected] | None = None
        """What each test's runs usually take (the ETA's), once the history was read."""
        self.deadline: float | None = None
        """The clock's time the timeout passes at (None: no timeout)."""
        self.watcher: RunWatcher | None = None
        """The watcher of the round under way."""
        self._observers: list[Observer] = []
        self._log: list[SuiteEvent] = []
        self._new = asyncio.Event()
        self._task: asyncio.Task[SuiteReport] | None = None
        self._inline = False
        self._ended = False
        self._error: Exception | None = None
        self._history_read = False
        self._known = KnownFailures(session, self.policy.categories, self.reruns, self._emit)
        self._baseline: BaselineRuns | None = None
        if p.baseline is not None:
            self._baseline = BaselineRuns(
                session, p.baseline, self.reruns.key, self.reruns, p.categories, ref=p.baseline_ref
            )
        self._views: dict[str, Run] = {}  # every run of the job, latest view (the ETA's)
        self._statuses: dict[str, str] = {}
        self._finished: set[str] = set()
        self._refused: set[str] = set()
        self._eta_at = -_ETA_EVERY
        self._eta_shown: JobEta | None = None
        self._failing: set[str] = set()  # the tests that failed for good (max_failures)
        self.trace_id: str | None = None
        """The job's OpenTelemetry trace id (32 hex digits), when traced."""

    # --- what a caller uses ---------------------------------------------------------------------

    @classmethod
    def for_project(
        cls,
        session: AsyncSession,
        project_id: str,
        *,
        build_id: str | None = None,
        build_ids: Sequence[str] | None = None,
        mode: str | None = None,
        policy: SuitePolicy | None = None,
        idempotency_key: str | None = None,
    ) -> SuiteRun:
        """Start every test of a project and follow them to their verdicts, as `policy` says
        (re-runs, at once or in rounds, copies of known-flaky tests, fail-fast, quarantine,
        reuse, a device-time budget).

        Nothing is sent until the suite is awaited or iterated: `await suite.wait()` gives
        the report (`SuiteReport`), `async for event in suite` what happens as it happens.

        Args:
            session: The session the loop calls the service with.
            project_id: The project (`p_...`).
            build_id: The build every app test runs (`ab_...`).
            build_ids: Builds each app test picks its own app's from.
            mode: `"auto"`, `"cold"` or `"warm"`; default: the service's.
            policy: How the suite is followed (default: no re-runs).
            idempotency_key: The start's key; each re-run's and copy's is derived from it.

        Raises:
            ValidationError: A bad id or option, before any request.

        Examples:
            ```python
            policy = SuitePolicy(retry_failed=2, retry_strategy="hedge")
            suite = SuiteRun.for_project(session, "p_checkout", build_id="ab_1", policy=policy)
            report = await suite.wait()
            ```
        """
        start = ProjectStart(session, project_id, build_id, build_ids, mode, idempotency_key)
        return cls(
            session,
            policy=policy,
            start=start,
            mode=start.mode,
            build_id=start.build_id,
            idempotency_key=start.key,
            name=start.project_id,
        )

    def observe(self, observer: Observer) -> None:
        """Call `observer(event)` with each event as it happens (before iterators see it).

        Args:
            observer: A function of one event; what it raises ends the loop.
        """
        self._observers.append(observer)

    @property
    def events(self) -> tuple[SuiteEvent, ...]:
        """Every event so far."""
        return tuple(self._log)

    @property
    def still_going(self) -> tuple[str, ...]:
        """The runs that may still be going: what a process that must exit now leaves."""
        return self.watcher.still_going if self.watcher is not None else ()

    def stopped_elsewhere(self, run_ids: Iterable[str]) -> None:
        """Runs of the suite another caller stopped or saw end (the fleet, for a superseded
        job): a cancel then does not stop them again (see RunWatcher.stopped_elsewhere).

        Args:
            run_ids: Runs another caller stopped or saw end.
        """
        ids = set(run_ids)
        self._stopped_elsewhere |= ids
        if self.watcher is not None:
            self.watcher.stopped_elsewhere(ids)

    async def wait(self) -> SuiteReport:
        """Follow the suite to its end (unless iteration already does) and return its report.

        Raises:
            ValidationError, ApiError, TransportError: as the session's calls raise them.
        """
        if self._task is None and not self._inline:
            self._inline = True
            return await self._guarded()
        if self._task is None:
            if not self._ended:
                raise RuntimeError("wait() is already being awaited in another task")
            if self._error is not None:
                raise self._error
            assert self.report is not None
            return self.report
        task = self._task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            raise

    def __aiter__(self) -> AsyncIterator[SuiteEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[SuiteEvent]:
        self._ensure_task()
        seen = 0
        while True:
            while seen < len(self._log):
                seen += 1
                yield self._log[seen - 1]
            if self._done():
                return
            waiting = self._new
            await waiting.wait()

    def _done(self) -> bool:
        return self._ended

    def _ensure_task(self) -> None:
        if self._task is None and not self._inline:
            self._task = asyncio.ensure_future(self._guarded())

    async def _guarded(self) -> SuiteReport:
        """The loop, its end told to every iterator however it ends; traced when an
        OpenTelemetry SDK is set up (in the command's job trace, else in one of its own)."""
        owned = self._traced()
        try:
            if owned is None:
                return await self._run()
            with owned:
                return await self._run()
        except Exception as exc:
            self._error = exc
            raise
        finally:
            self._ended = True
            self._wake()

    def _traced(self) -> JobTrace | None:
        """Follow the loop's events in the current job trace (the command's), else in a new
        one returned to be entered (None: no OpenTelemetry SDK is set up)."""
        if not _telemetry.ENABLED:
            return None
        from asyncclient.suite._trace import JobTrace

        job = JobTrace.current()
        owned = None
        try:
            if job is None:
                owned = job = JobTrace.open(self.name)
            if job is not None:
                job.follow(self)
                self.trace_id = job.trace_id
        except Exception:  # an SDK that fails: the suite runs untraced
            return None
        return owned

    async def __aenter__(self) -> SuiteRun:
        self._ensure_task()
        return self

    async def __aexit__(self, *exc: object) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # --- the loop -------------------------------------------------------------------------------

    def _emit(self, event: SuiteEvent) -> None:
        self._log.append(event)
        for observer in self._observers:
            observer(event)
        self._wake()

    def _wake(self) -> None:
        self._new.set()
        self._new = asyncio.Event()

    async def _run(self) -> SuiteReport:
        if self._start is not None:
            await self._start_suite()
        try:
            return await self._follow()
        except asyncio.CancelledError:
            if self._stop_on_cancel and self.watcher is None:
                await self._stop_started()  # cancelled before the first sweep: no watcher did it
            if self.report is None and self._views:
                # Before the first sweep: the runs reported as last known.
                self.reruns.record(self._ours(self._views.values()))
                self._conclude(with_flakiness=None)
            raise

    async def _stop_started(self) -> None:
        """Stop every run the suite has (cancelled before a watcher could), a few at once,
        within 30 s; a run that ended meanwhile is fine."""
        ids = [r for r in dict.fromkeys(self._views) if r not in self._stopped_elsewhere]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30.0):
                await stop_runs(self._session, ids)

    async def _follow(self) -> SuiteReport:
        policy, reruns = self.policy, self.reruns
        reruns.order(self.run_ids)
        for run_id in self.run_ids:
            test_id = self.tests.get(run_id)
            self._views[run_id] = _queued(run_id, test_id)
            self._emit(RunStarted(run_id, test_id, 1))
        self.deadline = None if policy.timeout is None else self._clock() + policy.timeout
        ids = list(self.run_ids)
        hedge = policy.retry_strategy == "hedge" and policy.retry_failed > 0
        spend = bool(self.starts) and bool(policy.reuse_passed or policy.new_test_runs or hedge)
        if policy.read_history and (self.tests or spend):
            await self._read_history()
            # The timeout counts the runs' time from after this read.
            self.deadline = None if policy.timeout is None else self._clock() + policy.timeout
            if spend:
                await self._spend()
            if hedge:
                ids += await self._hedge()
        if self.tests:
            await self._eta(force=True)
        first = True
        while ids:
            left = policy.timeout if first else remaining(self.deadline)
            first = False
            interval = policy.interval or defaults.INTERVAL
            options: dict[str, Any] = {
                "interval": interval,
                "max_interval": max(defaults.MAX_INTERVAL, interval),
                "stop_on_cancel": self._stop_on_cancel,
                **self._watch_options,
            }
            watcher = self._session.watch_runs(
                ids, timeout=left, stop_on_timeout=policy.stop_on_timeout, **options
            )
            watcher.stopped_elsewhere(self._stopped_elsewhere)
            self.watcher = watcher
            try:
                async with watcher:
                    async for run in watcher:
                        await self._seen(run, watcher)
                        if self.stopped_fast:
                            break
            except WatchTimeoutError as exc:
                self.timed_out = exc
            except asyncio.CancelledError:
                reruns.record(self._ours(watcher.runs.values()))
                self._conclude(with_flakiness=None)
                raise
            reruns.record(self._ours(watcher.runs.values()))
            if self.stopped_fast or watcher.unknown or self.timed_out is not None:
                self.unknown = watcher.unknown
                break
            await self._spare_known(reruns.due())
            started = await self._start_runs(reruns.due(), "rerun")
            repeats = await self._start_repeats()
            ids = [run_id for _, run_id, _ in (*started, *repeats)]
            if ids:
                await self._eta(force=True)
        flakiness = await self._flakiness_of_failures()
        report = self._conclude(with_flakiness=flakiness)
        self._emit(JobFinished(report))
        return report

    async def _start_suite(self) -> None:
        from asyncclient._reports import plain_text
        from asyncclient.spend.reuse import Started

        assert self._start is not None
        started = await self._start()
        self.started = started
        self.run_ids = tuple(s.run_id for s in started.started)
        self.tests = {s.run_id: s.test_id for s in started.started}
        self.skipped = tuple((s.test_id, plain_text(s.reason)) for s in started.skipped)
        mode = self.reruns.rerun_mode
        self.starts = tuple(Started(s.test_id, s.run_id, s.build_id, mode) for s in started.started)

    def _ours(self, runs: Iterable[Run]) -> list[Run]:
        """The runs of the job's own build (the baseline's are apart)."""
        baseline = self._baseline
        return [r for r in runs if baseline is None or not baseline.owns(r.id)]

    async def _seen(self, run: Run, watcher: RunWatcher) -> None:
        """One change of a run: record it, tell it, and act on it."""
        policy, reruns = self.policy, self.reruns
        baseline = self._baseline
        if baseline is not None and baseline.owns(run.id):
            await self._baseline_seen(baseline, run, watcher)
            return
        reruns.record([run])
        if run.id in reruns.foreign:  # another's: no verdict, never stopped (its test says why)
            watcher.forget(run.id)
            self._views.pop(run.id, None)
            return
        reruns.reckon(run)
        self._views[run.id] = run
        attempt = reruns.attempt_of(run.id)
        status = str(run.status)
        if self._statuses.get(run.id) != status and run.id not in self._finished:
            self._statuses[run.id] = status
            self._emit(RunChanged(run, attempt))
        if run.is_final and run.id not in self._finished:
            from asyncclient._reports.model import read_attempt

            self._finished.add(run.id)
            kind = reruns.kind_of(run.id)
            stopped_as = "copy" if run.id in reruns.stopped else None
            self._emit(RunFinished(read_attempt(run, attempt), kind, stopped_as))
            if baseline is not None and baseline.wants(run) and run.id not in reruns.foreign:
                await self._to_baseline(baseline, run, watcher)
            elif baseline is not None and run.passed and run.test_id:
                await baseline.stop(run.test_id)  # passed: the baseline is moot
        if run.is_final and policy.at_once:
            if run.passed:
                await self._stop_others(run)
            else:
                if reruns.due_at_once(run) is not None:
                    await self._spare_known([run])
                due = reruns.due_at_once(run)
                if due is not None:
                    started = await self._start_runs([due[0]], "rerun", count=due[1])
                    if started:
                        watcher.add(run_id for _, run_id, _ in started)
        await self._eta()
        if policy.max_failures and reruns.failed_for_good(run):
            self._failing.add(run.test_id or run.id)
            if len(self._failing) >= policy.max_failures:
                stopped = await watcher.stop()
                reruns.fail_fast.update(stopped)
                self.stopped_fast = True
                self._emit(
                    FailFast(
                        tuple(sorted(self._failing)),
                        tuple(stopped),
                        {k: str(v) for k, v in watcher.stop_errors.items()},
                        policy.max_failures,
                    )
                )

    async def _to_baseline(self, baseline: BaselineRuns, run: Run, watcher: RunWatcher) -> None:
        """A test failed on the job's build: run it on the baseline now, as many times as
        its flakiness asks (asyncclient.failures.exonerate.repeats_for)."""
        test = run.test_id or run.id
        rate = None
        if self.history.get(test):
            found = (await self._analyse([test])).get(test)
            rate = found.failure_rate if found is not None and found.state == "flaky" else None
        said = len(baseline.said)
        ids = await baseline.start(run, rate)
        for line in baseline.said[said:]:
            self._emit(Notice("info", line))
        if ids:
            watcher.add(ids)
            base = baseline.baseline_of(test) or ""
            self._emit(BaselineStarted(test, run.id, base, ids, len(ids)))
        elif test in baseline.errors:
            self._emit(Notice("warning", f"{test}: {baseline.errors[test]}"))

    async def _baseline_seen(self, baseline: BaselineRuns, run: Run, watcher: RunWatcher) -> None:
        """A baseline run changed: once the test's baseline runs tell, its verdict is said; a
        pass there (the failure is the change's) stops the others."""
        test = baseline.test_of(run.id)
        baseline.seen(run)
        if test is None or baseline.test_of(run.id) is None:  # not counted
            watcher.forget(run.id)
            return
        self._emit(BaselineRunChanged(run, test))
        verdict = baseline.newly_judged(test) if run.is_final else None
        if verdict is not None:
            if verdict.state == "new":
                await baseline.stop(test)
            self._emit(BaselineJudged(verdict))

    async def _stop_others(self, run: Run) -> None:
        """A run passed: its test's other runs still going are stopped (not counted). A run the
        service answered for a start here is stopped only once its view shows it is this
        job's (read now when the watcher has not seen it yet; unreadable: left alone)."""
        others = self.reruns.others_going(run)
        unseen = self.reruns.unverified(others)
        if unseen:
            with contextlib.suppress(AsyncClientError):
                self.reruns.record(await self._session.list_runs(ids=unseen, retries=0))
            watcher = self.watcher
            for run_id in unseen:
                if run_id in self.reruns.foreign and watcher is not None:
                    watcher.forget(run_id)  # another's: never polled, never stopped
            others = self.reruns.others_going(run)
            others = [r for r in others if r not in self.reruns.unverified(others)]
        if not others:
            return
        done = await stop_runs(self._session, others)
        self.reruns.stopped.update(done.stopped)
        errors = {r: str(exc) for r, exc in done.errors.items()}
        if done.stopped or errors:  # an ended one's verdict counts as it is
            self._emit(CopiesStopped(run.test_id or run.id, run.id, done.stopped, errors))

    async def _start_runs(
        self, due: Sequence[Run], kind: str, *, count: int = 1
    ) -> list[tuple[str, str, int]]:
        """Start `count` more runs of each test of `due`; tell each start and each refusal."""
        if not due:
            return []
        started = await self.reruns.start_many(
            self._session, [(run, count) for run in due], kind=kind
        )
        self._tell_started(started, kind)
        return started

    async def _start_repeats(self) -> list[tuple[str, str, int]]:
        repeats = await self.reruns.start_repeats(self._session, self.reruns.arrivals())
        self._tell_started(repeats, "repeat")
        return repeats

    def _tell_started(self, started: Sequence[tuple[str, str, int]], kind: str) -> None:
        for test_id, run_id, attempt in started:
            self._views[run_id] = _queued(run_id, test_id)
            self._emit(RunStarted(run_id, test_id, attempt, kind))
        if started:
            self._emit(RunsStarted(tuple(started), kind))
        for test_id, reason in self.reruns.start_errors.items():
            if test_id in self._refused:
                continue
            self._refused.add(test_id)
            if self.reruns.budget_refused(test_id):
                budget = self.policy.budget_seconds or 0.0
                self._emit(BudgetReached(test_id, budget, self.reruns.budget_used()))
            self._emit(StartRefused(test_id, reason))

    # --- failures known from before --------------------------------------------------------------

    async def _spare_known(self, due: Sequence[Run]) -> None:
        """Give no re-run to the app failures of `due` the history already knows (see
        KnownFailures), unless rerun_known."""
        if self.policy.rerun_known or not self.policy.read_history or not due:
            return
        await self._read_history()
        await self._known.spare(due, self.history)

    # --- the history, read once -----------------------------------------------------------------

    async def _read_history(self) -> None:
        """Each test's newest runs, read once (the tests known by then, at most
        eta.MAX_TESTS); a test whose listing failed is named and left out."""
        if self._history_read:
            return
        self._history_read = True
        from asyncclient.eta import MAX_TESTS, expected_of, read_history

        known = {run.test_id for run in self._views.values() if run.test_id}
        tests = sorted(known | set(self.tests.values()))[:MAX_TESTS]
        unread: dict[str, str] = {}
        # A fleet's shared history may be seconds old: a job that reuses passes reads its own.
        self.history = await read_history(
            self._session,
            tests,
            exclude=set(self.run_ids),
            unread=unread,
            shared=self.policy.reuse_passed is None,
        )
        modes = {run.test_id: run.mode for run in self._views.values() if run.test_id}
        self.expected = {
            test: expected_of(self.history.get(test, []), modes.get(test)) for test in tests
        }
        self.reruns.usual_seconds.update(
            {test: e.run_p50 for test, e in self.expected.items() if e.samples}
        )
        self._emit(HistoryRead(dict(self.expected), unread))

    async def _spend(self) -> None:
        """Before the first sweep: stop the runs an earlier pass on an identical build makes
        needless (reuse_passed), then find the new tests (new_test_runs)."""
        from asyncclient.spend.arrival import new_tests
        from asyncclient.spend.reuse import find_reusable, stop_reused

        policy, reruns = self.policy, self.reruns
        if policy.reuse_passed:
            found = await find_reusable(
                self._session, self.starts, days=policy.reuse_passed, history=self.history
            )
            stopped, errors = await stop_reused(self._session, found)
            reruns.reused.update(stopped)
            for reuse in stopped.values():
                self._emit(ReusedEvent(reuse))
            for run_id, error in errors.items():
                self._emit(
                    Notice("warning", f"could not stop {run_id} to reuse a pass: {error}; it runs")
                )
        if policy.new_test_runs:
            new = new_tests(self.history, [item.test_id for item in self.starts])
            reruns.new_tests.update(new)
            if new:
                self._emit(NewTests(tuple(sorted(new)), policy.new_test_runs))

    async def _hedge(self) -> list[str]:
        """The first round's copies of each known-flaky test (asyncclient.suite._flakiness
        says how many). Returns the copies' run ids."""
        from asyncclient.suite._flakiness import copies_due

        copies: list[tuple[str, str, int]] = []
        due = await copies_due(
            self._session,
            self.history,
            self._emit,
            self.policy,
            self.reruns,
            self.starts,
            _queued,
        )
        for first, count in due:
            copies += await self._start_runs([first], "copy", count=count)
        return [run_id for _, run_id, _ in copies]

    async def _analyse(self, tests: Sequence[str]) -> dict[str, TestFlakiness]:
        from asyncclient.suite._flakiness import analyse

        return await analyse(self._session, self.history, tests, self._emit)

    async def _flakiness_of_failures(self) -> dict[str, TestFlakiness | None] | None:
        """The flakiness of each test that did not pass (its history before this job)."""
        if not (self.policy.read_history and self.policy.explain_failures):
            return None
        from asyncclient.suite._flakiness import of_failures

        return await of_failures(self._session, self.history, self.reruns.result(), self._emit)

    def _conclude(
        self, *, with_flakiness: Mapping[str, TestFlakiness | None] | None
    ) -> SuiteReport:
        """The report, built once."""
        import attrs

        from asyncclient._reports.model import suite_report

        result = self.reruns.result(
            complete=self.timed_out is None and not self.unknown, unknown=self.unknown
        )
        if with_flakiness is not None:
            result = attrs.evolve(result, flakiness=dict(with_flakiness))
        if self._baseline is not None:
            verdicts = self._baseline.verdicts()
            tests = tuple(attrs.evolve(t, baseline=verdicts.get(t.test_id)) for t in result.tests)
            result = attrs.evolve(result, tests=tests)
        self.result = result
        self.report = suite_report(
            result,
            name=self.name,
            skipped=self.skipped,
            by_tests=bool(self.policy.retry_failed),
            expected=self.expected,
            history=self.history if self._history_read else None,
        )
        if self.trace_id is not None:
            self.report = attrs.evolve(self.report, trace_id=self.trace_id)
        return self.report

    # --- the ETA --------------------------------------------------------------------------------

    async def _eta(self, *, force: bool = False) -> None:
        """After runs changed: read the history once, then at most once a second the ETA,
        told when it moved by more than a tenth."""
        now = self._clock()
        if not force and now - self._eta_at < _ETA_EVERY:
            return
        self._eta_at = now
        if self.policy.read_history:
            await self._read_history()
        if self.expected is None:
            return
        from asyncclient.eta import job_eta

        eta = job_eta(self._views.values(), self.expected)
        if eta.p90 <= 0:
            return
        shown = self._eta_shown
        if shown is None or abs(eta.p50 - shown.p50) > _ETA_MOVED * max(shown.p50, 1.0):
            self._eta_shown = eta
            self._emit(Eta(eta))

    @property
    def eta(self) -> JobEta | None:
        """The job's ETA now, from the runs still going (None before the history was read)."""
        if self.expected is None:
            return None
        from asyncclient.eta import job_eta

        return job_eta(self._views.values(), self.expected)


def _queued(
    run_id: str,
    test_id: str | None,
    build_id: str | None = None,
    mode: str | None = None,
) -> Run:
    from asyncclient.models import Run, RunStatus

    return Run(id=run_id, status=RunStatus.QUEUED, test_id=test_id, build_id=build_id, mode=mode)
