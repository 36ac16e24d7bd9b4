"""Following runs to their end for `run --wait` and `watch`: rounds of the re-run policy
(--retry-failed), the live progress (a rich table on a terminal, a line per change otherwise)
and what Ctrl-C leaves to say. The reports at the end: asyncclient.cli._ci_reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from asyncclient._core import _defaults as defaults
from asyncclient.cli._ci_reports import report
from asyncclient.cli._common import EXIT_NOT_PASSED, EXIT_OK, CommandError
from asyncclient.cli._events import Events
from asyncclient.cli._output import Output

if TYPE_CHECKING:
    from types import TracebackType

    from asyncclient._client._session import AsyncSession
    from asyncclient._reports.model import SuiteReport
    from asyncclient.cli._options import Follow
    from asyncclient.errors import WatchTimeoutError
    from asyncclient.models import Run
    from asyncclient.reruns import SuiteResult

DEFAULT_INTERVAL = defaults.INTERVAL  # the watcher's, from the light module that defines it
DEFAULT_MAX_INTERVAL = defaults.MAX_INTERVAL


async def follow(
    session: AsyncSession,
    run_ids: list[str],
    options: Follow,
    out: Output,
    *,
    stop_on_cancel: bool,
    report_name: str,
    skipped: Sequence[tuple[str, str]] = (),
    tests: Mapping[str, str] | None = None,
    mode: str | None = None,
    build_id: str | None = None,
    idempotency_key: str | None = None,
    base_url: str | None = None,
    overage: Sequence[str] = (),
) -> int:
    """Watch the runs with live progress, re-run the tests that did not pass (--retry-failed,
    asyncclient.reruns), then report; returns the exit code.

    tests: the test id of each run, when known from the start (shown before the first sweep).
    mode, build_id, idempotency_key: how the first runs were started (their re-runs follow).
    base_url: the --base-url given, for the command a second Ctrl-C prints.
    overage: the runs whose start said they are beyond the plan's included runs.
    """
    from asyncclient.errors import UnknownRunsError, WatchTimeoutError
    from asyncclient.reruns import Reruns, remaining

    reruns = Reruns(
        options.retry_failed,
        mode=mode,
        build_id=build_id,
        idempotency_key=idempotency_key,
        fail_on_flaky=options.fail_on_flaky,
        quarantined=options.honoured(),
        fail_on_quarantined=options.fail_on_quarantined,
    )
    reruns.overage.update(overage)
    interval = options.interval or DEFAULT_INTERVAL
    deadline = None if options.timeout is None else time.monotonic() + options.timeout
    timed_out: WatchTimeoutError | None = None
    current: list[Any] = []  # the round's watcher, for the note of a second Ctrl-C
    note = _still_going_note(current, base_url) if stop_on_cancel else _no_note
    ids = run_ids
    told: set[str] = set()
    failed_for_good: set[str] = set()  # the tests that count against --max-failures
    stopped_fast = False
    events = _open_events(options.events)
    for run_id in run_ids:
        events.started(run_id, (tests or {}).get(run_id), 1, rerun=False)
    try:
        with out.note_on_forced_exit(note), Progress(out, run_ids, tests) as progress:
            while ids:
                # The first round has the whole timeout (its message names it); later ones
                # the rest.
                left = options.timeout if ids is run_ids else remaining(deadline)
                watcher = session.watch_runs(
                    ids,
                    interval=interval,
                    max_interval=max(DEFAULT_MAX_INTERVAL, interval),
                    timeout=left,
                    stop_on_timeout=options.stop_on_timeout,
                    stop_on_cancel=stop_on_cancel,
                )
                current[:] = [watcher]
                try:
                    async with watcher:
                        async for run in watcher:
                            progress.update(run)
                            events.changed(run, reruns.attempt_of(run.id))
                            if options.max_failures and reruns.failed_for_good(run):
                                failed_for_good.add(run.test_id or run.id)
                                if len(failed_for_good) >= options.max_failures:
                                    reruns.fail_fast.update(await watcher.stop())
                                    stopped_fast = True
                                    break
                except WatchTimeoutError as exc:
                    timed_out = exc
                except asyncio.CancelledError:
                    _tell_stopped(watcher.stopped, watcher.stop_errors, out)
                    # A cancelled CI job still publishes what happened. With stop_on_cancel
                    # the watcher read the runs again after stopping them, so the summary,
                    # the JUnit report and the step summary show each run as the service now
                    # has it: a run it cancelled is skipped, one still going is an error (not
                    # final). The exit code (130/143) fails the job either way.
                    reruns.record(watcher.runs[i] for i in ids if i in watcher.runs)
                    with contextlib.suppress(CommandError, OSError):  # the interrupt matters
                        await report(session, reruns, options, out, report_name, skipped)
                    events.interrupted()
                    raise
                views = watcher.runs
                reruns.record(views[i] for i in ids if i in views)
                if stopped_fast:
                    _tell_fail_fast(options.max_failures, failed_for_good, watcher, out)
                    events.emit(
                        "fail_fast", tests=sorted(failed_for_good), stopped=list(watcher.stopped)
                    )
                    break
                if watcher.unknown or timed_out is not None:
                    break
                started = await reruns.start(session, reruns.due())
                for test_id, error in reruns.start_errors.items():
                    if test_id not in told:
                        told.add(test_id)
                        out.error(f"could not re-run {test_id}: {error}")
                if started:
                    progress.add_attempts(started)
                for test_id, run_id, attempt in started:
                    events.started(run_id, test_id, attempt, rerun=True)
                ids = [run_id for _, run_id, _ in started]
        result = await report(session, reruns, options, out, report_name, skipped)
        told_report = _told(result, report_name, skipped, reruns.retry_failed)
        try:
            code = _verdict(result, current, timed_out, stopped_fast, out)
        except UnknownRunsError as exc:
            from asyncclient._core._wording import describe_error

            events.finished(told_report, describe_error(exc)[1])
            raise
        events.finished(told_report, code)
        return code
    finally:
        events.close()


def _open_events(target: str | None) -> Events:
    from asyncclient._core._wording import EXIT_LOCAL_IO

    try:
        return Events.open(target)
    except OSError as exc:
        raise CommandError(
            f"cannot write --events {target}: {exc.strerror or exc}", EXIT_LOCAL_IO
        ) from exc


def _told(
    result: SuiteResult, name: str, skipped: Sequence[tuple[str, str]], retry_failed: int
) -> SuiteReport:
    from asyncclient._reports.model import suite_report

    return suite_report(result, name=name, skipped=skipped, by_tests=bool(retry_failed))


def _verdict(
    result: SuiteResult,
    current: list[Any],
    timed_out: WatchTimeoutError | None,
    stopped_fast: bool,
    out: Output,
) -> int:
    """The exit code of a followed suite (its reports written)."""
    from asyncclient.errors import UnknownRunsError

    if not current:  # no run to follow (none started)
        return EXIT_OK if result.passed else EXIT_NOT_PASSED
    watcher = current[0]
    if watcher.unknown:
        raise UnknownRunsError(watcher.unknown, result.final_runs)
    if timed_out is not None:
        out.error(str(timed_out))
        _tell_stopped(watcher.stopped, watcher.stop_errors, out)
        return EXIT_NOT_PASSED
    if stopped_fast:
        return EXIT_NOT_PASSED
    return EXIT_OK if result.passed else EXIT_NOT_PASSED


def _tell_fail_fast(limit: int | None, tests: set[str], watcher: Any, out: Output) -> None:
    stopped = watcher.stopped
    done = (
        f"stopped the {len(stopped)} run(s) still going: {' '.join(stopped)}"
        if stopped
        else "no other run was still going"
    )
    out.error(
        f"fail-fast: {len(tests)} test(s) did not pass ({', '.join(sorted(tests))}; "
        f"--max-failures {limit}): {done}"
    )
    for run_id, error in watcher.stop_errors.items():
        out.always(f"could not stop {run_id}: {error}")


def _no_note() -> list[str]:
    return []


def _still_going_note(current: list[Any], base_url: str | None) -> Callable[[], list[str]]:
    """What a second Ctrl-C prints before exiting at once: the runs that may still be going
    (their stop not answered yet) and the command that stops them. `current`: the watcher of
    the round under way."""

    def note() -> list[str]:
        going = current[0].still_going if current else ()
        if not going:
            return []
        ids = " ".join(going)
        # The address only when given as a flag: the variable is still set in this shell.
        where = f" --base-url {base_url}" if base_url else ""
        return [
            f"exiting before the service confirmed the stops: {len(going)} run(s) may still "
            f"be going: {ids}",
            f"stop them with: asyncclient{where} runs stop {ids}",
        ]

    return note


def _tell_stopped(stopped: Sequence[str], errors: dict[str, Any], out: Output) -> None:
    if stopped:
        out.always(f"stopped {len(stopped)} run(s): {' '.join(stopped)}")
    for run_id, error in errors.items():
        out.always(f"could not stop {run_id}: {error}")


class Progress:
    """Live progress on stderr: a rich table on a terminal, one plain line per change otherwise,
    nothing with --quiet or when stderr is not for people (JSON output still shows lines).

    The table is drawn at most REFRESH_PER_SECOND times a second, however many changes come in
    (one sweep over 10,000 runs may bring thousands at once): a change within that time is
    drawn by a timer on the running loop, or on exit. Only the rows that fit are built.
    `tests`: the test id of each run known from its start (`run`, `demo`); those runs show
    from the first frame with their test, as queued until a sweep says otherwise.
    `clock` (default time.monotonic) may be replaced by tests.
    """

    REFRESH_PER_SECOND: ClassVar[float] = 4.0

    _STYLES: ClassVar[dict[str, str]] = {
        "passed": "green",
        "failed": "red",
        "blocked": "red",
        "error": "bold red",
        "inconclusive": "yellow",
        "cancelled": "dim",
        "queued": "dim",
        "running": "cyan",
    }

    def __init__(
        self,
        out: Output,
        run_ids: Sequence[str],
        tests: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out = out
        self._order = list(run_ids)
        self._views: dict[str, Run] = {}
        if tests:
            from asyncclient.models import Run, RunStatus

            # A run just started is queued: the service says so too until it picks it up.
            self._views = {
                run_id: Run(id=run_id, status=RunStatus.QUEUED, test_id=tests[run_id])
                for run_id in self._order
                if run_id in tests
            }
        # Kept as runs change, so that a frame costs the rows it shows, not the runs watched:
        # the counts by status, the runs still going (in order) and the latest to finish.
        from asyncclient._reports import status_of

        self._status_of = status_of  # imported once here, not on each of 100,000 updates
        self._counts: Counter[str] = Counter(status_of(run) for run in self._views.values())
        self._going: dict[str, None] = dict.fromkeys(self._order)
        self._finished: deque[str] = deque(maxlen=64)
        self._live: Any = None
        self._console: Any = None
        self._use_live = out.stderr_is_terminal and not out.quiet
        self._clock = clock
        self._attempts: dict[str, int] = {}  # run id -> attempt, for re-runs (2, 3, ...)
        self._drawn_at = 0.0
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None

    def __enter__(self) -> Progress:
        if self._use_live:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self._out.stderr)
            self._live = Live(
                self._render(), console=self._console, auto_refresh=False, transient=False
            )
            self._live.__enter__()
            self._drawn_at = self._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._live is not None:
            if self._dirty:
                self._draw()  # the final state, whatever the throttle held back
            self._live.__exit__(exc_type, exc, tb)

    def add_attempts(self, started: Sequence[tuple[str, str, int]]) -> None:
        """Re-runs just started: (test id, run id, attempt); shown queued from now on."""
        from asyncclient.models import Run, RunStatus

        for test_id, run_id, attempt in started:
            self._order.append(run_id)
            self._going[run_id] = None
            self._attempts[run_id] = attempt
            run = Run(id=run_id, status=RunStatus.QUEUED, test_id=test_id)
            self._views[run_id] = run
            self._counts[self._status_of(run)] += 1
            if self._live is None:
                self._out.info(f"{run_id}  {test_id}  re-run (attempt {attempt})")
        if self._live is not None:
            self._draw()

    def update(self, run: Run) -> None:
        status_of = self._status_of
        before = self._views.get(run.id)
        if before is not None:
            self._counts[status_of(before)] -= 1
        self._counts[status_of(run)] += 1
        self._views[run.id] = run
        if run.is_final and run.id in self._going:
            del self._going[run.id]
            self._finished.append(run.id)
        if self._live is None:
            attempt = self._attempts.get(run.id)
            shown = f"  (attempt {attempt})" if attempt else ""
            self._out.info(f"{run.id}  {run.test_id or '-'}  {run.status}{shown}")
            return
        self._dirty = True
        wait = self._drawn_at + 1.0 / self.REFRESH_PER_SECOND - self._clock()
        if wait <= 0:
            self._draw()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop to draw later: the next change or the exit draws it
            self._timer = loop.call_later(wait, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._dirty and self._live is not None:
            self._draw()

    def _draw(self) -> None:
        self._dirty = False
        self._live.update(self._render(), refresh=True)
        self._drawn_at = self._clock()

    def _render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        from asyncclient._core._untrusted import cell
        from asyncclient._reports import counts_text, duration_seconds, format_duration

        views = self._views
        caption = counts_text(self._counts)
        unseen = len(self._order) - len(views)
        if unseen:
            caption += f" ({unseen} not seen yet)"
        columns = ["run", "test", "status", "duration"]
        if self._attempts:
            columns.insert(2, "attempt")
        table = Table(*columns, caption=caption)
        # A terminal holds only so many rows: the runs still going come first, then the ones
        # that finished, and only the rows shown are built. When they all fit, the finished
        # ones in the order given; otherwise the latest to finish, newest first.
        height = self._console.height if self._console is not None else 40
        room = max(5, height - 8)
        if len(self._order) <= room:
            done: Any = (i for i in self._order if i not in self._going)
        else:
            done = reversed(self._finished)
        shown = list(itertools.islice(itertools.chain(self._going, done), room))
        for run_id in shown:
            run = views.get(run_id)
            if run is None:
                cells = [Text(run_id), Text(""), Text("-", style="dim"), Text("")]
            else:
                # The service's words through the one sanitiser (asyncclient._core._untrusted).
                cells = [
                    Text(cell(run.id)),
                    Text(cell(run.test_id)),
                    Text(cell(run.status), style=self._STYLES.get(run.status_kind, "")),
                    Text(format_duration(duration_seconds(run))),
                ]
            if self._attempts:
                cells.insert(2, Text(str(self._attempts.get(run_id, 1))))
            table.add_row(*cells)
        if len(self._order) > len(shown):
            more: list[Any] = ["", Text(f"... {len(self._order) - len(shown)} more"), "", ""]
            table.add_row(*more, *([""] if self._attempts else []))
        return table
