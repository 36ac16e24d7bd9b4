"""Following runs to their end for `run --wait` and `watch`, and reporting them for CI.

The live progress (a rich table on a terminal, a line per change otherwise), what Ctrl-C leaves
to say, and the reports: a summary on stdout (or JSON with --json), JUnit XML (--junit) and the
GitHub step summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from asyncclient.cli._common import EXIT_NOT_PASSED, EXIT_OK, CommandError
from asyncclient.cli._output import Output, to_json

if TYPE_CHECKING:
    from types import TracebackType

    from asyncclient._session import AsyncSession
    from asyncclient.models import Run

DEFAULT_INTERVAL = 3.0  # asyncclient.watch.DEFAULT_INTERVAL, not imported to keep start-up light
DEFAULT_MAX_INTERVAL = 30.0


async def follow(
    session: AsyncSession,
    run_ids: list[str],
    args: argparse.Namespace,
    out: Output,
    *,
    stop_on_cancel: bool,
    report_name: str,
    skipped: Sequence[tuple[str, str]] = (),
    tests: Mapping[str, str] | None = None,
) -> int:
    """Watch the runs with live progress, then report; returns the exit code.

    tests: the test id of each run, when known from the start (shown before the first sweep).
    """
    from asyncclient.errors import UnknownRunsError, WatchTimeoutError
    from asyncclient.watch import RunWatcher

    interval = args.interval or DEFAULT_INTERVAL
    watcher = RunWatcher(
        session,
        run_ids,
        interval=interval,
        max_interval=max(DEFAULT_MAX_INTERVAL, interval),
        timeout=args.timeout,
        stop_on_timeout=args.stop_on_timeout,
        stop_on_cancel=stop_on_cancel,
    )
    timed_out: WatchTimeoutError | None = None
    note = _still_going_note(watcher, args) if stop_on_cancel else _no_note
    try:
        with out.note_on_forced_exit(note), Progress(out, run_ids, tests) as progress:
            async with watcher:
                async for run in watcher:
                    progress.update(run)
    except WatchTimeoutError as exc:
        timed_out = exc
    except asyncio.CancelledError:
        _tell_stopped(watcher.stopped, watcher.stop_errors, out)
        # A cancelled CI job still publishes what happened. With stop_on_cancel the watcher
        # read the runs again after stopping them, so the summary, the JUnit report and the
        # step summary show each run as the service now has it: a run it cancelled is
        # skipped, one still going is an error (not final). The exit code (130/143) fails
        # the job either way.
        seen = [watcher.runs[run_id] for run_id in run_ids if run_id in watcher.runs]
        with contextlib.suppress(CommandError, OSError):  # the interrupt is what matters now
            _report(seen, args, out, report_name, skipped)
        raise
    views = watcher.runs
    runs = [views[run_id] for run_id in run_ids if run_id in views]
    _report(runs, args, out, report_name, skipped)
    if watcher.unknown:
        raise UnknownRunsError(watcher.unknown, runs)
    if timed_out is not None:
        out.error(str(timed_out))
        _tell_stopped(watcher.stopped, watcher.stop_errors, out)
        return EXIT_NOT_PASSED
    return EXIT_OK if all(run.passed for run in runs) else EXIT_NOT_PASSED


def _no_note() -> list[str]:
    return []


def _still_going_note(watcher: Any, args: argparse.Namespace) -> Callable[[], list[str]]:
    """What a second Ctrl-C prints before exiting at once: the runs that may still be going
    (their stop not answered yet) and the command that stops them."""

    def note() -> list[str]:
        going = watcher.still_going
        if not going:
            return []
        ids = " ".join(going)
        # The address only when given as a flag: the variable is still set in this shell.
        where = f" --base-url {args.base_url}" if getattr(args, "base_url", None) else ""
        return [
            f"exiting before the service confirmed the stops: {len(going)} run(s) may still "
            f"be going: {ids}",
            f"stop them with: asyncclient{where} runs stop {ids}",
        ]

    return note


def _tell_stopped(stopped: Sequence[str], errors: dict[str, Any], out: Output) -> None:
    if stopped:
        print(f"stopped {len(stopped)} run(s): {' '.join(stopped)}", file=out.stderr, flush=True)
    for run_id, error in errors.items():
        print(f"could not stop {run_id}: {error}", file=out.stderr, flush=True)


def _report(
    runs: Sequence[Run],
    args: argparse.Namespace,
    out: Output,
    name: str,
    skipped: Sequence[tuple[str, str]],
) -> None:
    from asyncclient import _reports

    lines = _reports.summary_lines(runs)
    lines += [
        f"not started {test_id}: {reason or 'no reason given'}" for test_id, reason in skipped
    ]
    if out.json_mode:
        out.json([{**to_json(run), "summary": _reports.report_fields(run)} for run in runs])
        for line in lines:
            out.info(line)
    else:
        for line in lines:
            out.data(line)
    if args.junit:
        try:
            path = _reports.write_junit(args.junit, runs, name=name, skipped=skipped)
        except OSError as exc:
            raise CommandError(
                f"cannot write the JUnit report {args.junit}: {exc.strerror or exc}",
                EXIT_NOT_PASSED,
            ) from exc
        out.info(f"JUnit report: {path}")
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            _reports.append_step_summary(
                summary_path, _reports.step_summary_markdown(runs, heading=name, skipped=skipped)
            )
        except OSError as exc:
            # The step summary is a courtesy; the runs' result and the JUnit report stand.
            out.error(f"cannot append to GITHUB_STEP_SUMMARY ({summary_path}): {exc}")


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
            self._out.info(f"{run.id}  {run.test_id or '-'}  {run.status}")
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

        from asyncclient._reports import counts_text, duration_seconds, format_duration

        views = self._views
        caption = counts_text(self._counts)
        unseen = len(self._order) - len(views)
        if unseen:
            caption += f" ({unseen} not seen yet)"
        table = Table("run", "test", "status", "duration", caption=caption)
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
                table.add_row(Text(run_id), Text(""), Text("-", style="dim"), Text(""))
                continue
            status = str(run.status)
            table.add_row(
                Text(run.id),
                Text(run.test_id or ""),
                Text(status, style=self._STYLES.get(run.status_kind, "")),
                Text(format_duration(duration_seconds(run))),
            )
        if len(self._order) > len(shown):
            table.add_row("", Text(f"... {len(self._order) - len(shown)} more"), "", "")
        return table
