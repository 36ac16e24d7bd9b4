"""`asyncclient run test`, `run project` and `watch`: start runs, follow them, report for CI.

Reports: a summary on stdout (or JSON with --json), JUnit XML (--junit), GitHub step summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from asyncclient.cli._common import (
    EXIT_NOT_PASSED,
    EXIT_OK,
    CommandError,
    Output,
    add_command,
    add_group,
    open_session,
    to_json,
)

if TYPE_CHECKING:
    from types import TracebackType

    from asyncclient._session import AsyncSession
    from asyncclient.models import Run

_DEFAULT_INTERVAL = 3.0  # asyncclient.watch.DEFAULT_INTERVAL, not imported to keep start-up light
_DEFAULT_MAX_INTERVAL = 30.0

_TEST_EXAMPLES = """\
  asyncclient run test t_login                         # prints the run id
  asyncclient run test t_login --build ab_42 --mode cold --wait --junit report.xml
  asyncclient run test t_login --wait --timeout 900 --json > run.json
"""
_PROJECT_EXAMPLES = """\
  asyncclient run project p_123                        # prints one run id per line
  asyncclient run project p_123 --build ab_android --build ab_ios --wait --junit report.xml
  asyncclient run project p_123 --wait --timeout 1800 --stop-on-timeout --json > runs.json
  asyncclient run project p_123 --wait --allow-skipped   # green even if some tests could not start
"""
_WATCH_EXAMPLES = """\
  asyncclient watch j_1 j_2 j_3
  asyncclient run project p_123 | xargs asyncclient watch --junit report.xml
  asyncclient watch j_1 --timeout 600 --stop-on-timeout
"""
_EXIT_CODES = """
exit codes:
  0    {ok}
  1    {not_passed}
  2    bad input (nothing sent)
  3    the service refused (including 402 not_started and 400 empty: no test started)
  4    the service could not be reached
  130  interrupted (Ctrl-C)
  141  the reader of stdout went away (`| head`)"""
_NOT_PASSED = "a run did not pass, or --timeout hit"
_TEST_DESCRIPTION = """\
Start a run of one test. Without --wait print the run id; with --wait follow the
run until it is final, then print its verdict, headline, failed requirements and
link (and write the reports asked for). Ctrl-C during --wait stops the run.
""" + _EXIT_CODES.format(ok="the run started; with --wait: it passed", not_passed=_NOT_PASSED)
_PROJECT_DESCRIPTION = """\
Start a run of every test of a project. Without --wait print the run ids, one per
line (skipped tests and their reasons go to stderr); with --wait follow them until
final, then report. Ctrl-C during --wait stops the runs still going.

With --wait, a test the service skipped (did not start: no matching build, ...)
fails the command like a failed run, so that a CI job does not go green when part
of the suite never ran. --allow-skipped accepts skipped tests: exit 0 when every
run that started passed. A start with no run at all exits 1 even then.
""" + _EXIT_CODES.format(
    ok="the runs started; with --wait: every test started and every run passed",
    not_passed=_NOT_PASSED + ", or with --wait: a test was skipped (unless"
    "\n       --allow-skipped) or none started",
)
_WATCH_DESCRIPTION = """\
Follow runs until every one is final, then print each verdict and exit 0 when all
passed. Ctrl-C stops watching; with --stop-on-interrupt it stops the runs too.
""" + _EXIT_CODES.format(ok="every run passed", not_passed=_NOT_PASSED)


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    run = add_group(
        sub,
        "run",
        parents,
        help="start a test or every test of a project",
        examples=_TEST_EXAMPLES.splitlines(keepends=True)[1] + _PROJECT_EXAMPLES,
    )

    test = add_command(
        run,
        "test",
        parents,
        handler="asyncclient.cli._run:run_test",
        help="start a run of one test",
        description=_TEST_DESCRIPTION,
        examples=_TEST_EXAMPLES,
    )
    test.add_argument("test_id", metavar="TEST_ID", help="the test to run (t_...)")
    _add_mode(test)
    test.add_argument(
        "--build", metavar="BUILD_ID", help="run this build (ab_...); default: the newest ready one"
    )
    _add_idempotency_key(test)
    _add_follow_options(test, wait_flag=True)

    project = add_command(
        run,
        "project",
        parents,
        handler="asyncclient.cli._run:run_project",
        help="start a run of every test of a project (a suite)",
        description=_PROJECT_DESCRIPTION,
        examples=_PROJECT_EXAMPLES,
    )
    project.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    _add_mode(project)
    project.add_argument(
        "--build",
        metavar="BUILD_ID",
        action="append",
        help="a build to run (ab_...); repeat it for several apps: each app test runs the "
        "build of its own app",
    )
    _add_idempotency_key(project)
    _add_follow_options(project, wait_flag=True).add_argument(
        "--allow-skipped",
        action="store_true",
        help="with --wait, exit 0 even when the service skipped some tests (did not start "
        "them), provided every run that started passed; without it a skipped test exits 1",
    )

    watch = add_command(
        sub,
        "watch",
        parents,
        handler="asyncclient.cli._run:watch",
        help="follow runs until they are final and report",
        description=_WATCH_DESCRIPTION,
        examples=_WATCH_EXAMPLES,
    )
    watch.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="runs to follow (j_...)")
    _add_follow_options(watch, wait_flag=False)
    watch.add_argument(
        "--stop-on-interrupt",
        action="store_true",
        help="on Ctrl-C stop the runs still going (run --wait always does, for its own runs)",
    )


def _add_mode(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mode",
        choices=("auto", "cold", "warm"),
        help="auto (service default): replay the learned path when fresh; cold: explore anew; "
        "warm: only replay",
    )


def _add_idempotency_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a key that makes re-running this command safe: the same key starts nothing new "
        "(for example the CI job id)",
    )


def _add_follow_options(parser: argparse.ArgumentParser, *, wait_flag: bool) -> Any:
    """The --wait/--timeout/... group; returned so that a command can add its own to it."""
    group = parser.add_argument_group("waiting and reports")
    if wait_flag:
        group.add_argument(
            "--wait", action="store_true", help="follow the runs until final, then report"
        )
    group.add_argument(
        "--timeout", type=float, metavar="S", help="give up after S seconds (exit 1)"
    )
    group.add_argument(
        "--interval",
        type=float,
        metavar="S",
        help=f"seconds between polls while runs change (default {_DEFAULT_INTERVAL:g}; "
        f"grows to {_DEFAULT_MAX_INTERVAL:g} while nothing changes)",
    )
    group.add_argument("--junit", metavar="PATH", help="write a JUnit XML report to PATH")
    group.add_argument(
        "--stop-on-timeout",
        action="store_true",
        help="when --timeout hits, stop the runs still going before exiting",
    )
    return group


# --- checks before any request -------------------------------------------------------------------


def _seconds(flag: str, value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise CommandError(f"{flag} {value:g} must be a number of seconds above 0")


def _check_follow_options(args: argparse.Namespace, *, waiting: bool) -> None:
    if not waiting:
        given = [
            flag
            for flag, value in (
                ("--timeout", args.timeout),
                ("--interval", args.interval),
                ("--junit", args.junit),
                ("--stop-on-timeout", args.stop_on_timeout),
                ("--allow-skipped", getattr(args, "allow_skipped", False)),
            )
            if value
        ]
        if given:
            raise CommandError(
                f"{', '.join(given)} need --wait: without it the command exits once the runs "
                "have started"
            )
        return
    _seconds("--timeout", args.timeout)
    _seconds("--interval", args.interval)
    if args.stop_on_timeout and args.timeout is None:
        raise CommandError("--stop-on-timeout needs --timeout S")
    if args.junit:
        target = Path(args.junit)
        parent = target.parent
        if target.is_dir():
            raise CommandError(f"--junit {args.junit} is a directory: give a file name")
        if not parent.is_dir():
            raise CommandError(f"--junit {args.junit}: the directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise CommandError(f"--junit {args.junit}: the directory {parent} is not writable")


def _check_ids(kind: str, values: Sequence[str], flag: str) -> list[str]:
    from asyncclient._protocol import check_id

    return list(dict.fromkeys(check_id(kind, value, flag) for value in values))


# --- handlers ------------------------------------------------------------------------------------


async def run_test(args: argparse.Namespace, out: Output) -> int:
    _check_ids("test", [args.test_id], "TEST_ID")
    if args.build:
        _check_ids("build", [args.build], "--build")
    _check_follow_options(args, waiting=args.wait)
    async with open_session(args) as session:
        start = await session.run_test(
            args.test_id,
            mode=args.mode,
            build_id=args.build,
            idempotency_key=args.idempotency_key,
        )
        if not args.wait:
            if out.json_mode:
                out.json(to_json(start))
            else:
                out.data(start.run_id)
            return EXIT_OK
        overage = "  (beyond the plan's included runs)" if start.overage else ""
        out.info(f"started {start.run_id}  {args.test_id}  mode {start.mode or '?'}{overage}")
        return await _follow(
            session,
            [start.run_id],
            args,
            out,
            stop_on_cancel=True,
            report_name=args.test_id,
            tests={start.run_id: args.test_id},
        )


async def run_project(args: argparse.Namespace, out: Output) -> int:
    from asyncclient._reports import plain_text

    _check_ids("project", [args.project_id], "PROJECT_ID")
    builds = _check_ids("build", args.build or [], "--build")
    _check_follow_options(args, waiting=args.wait)
    async with open_session(args) as session:
        result = await session.run_project(
            args.project_id,
            mode=args.mode,
            build_id=builds[0] if len(builds) == 1 else None,
            build_ids=builds if len(builds) > 1 else None,
            idempotency_key=args.idempotency_key,
        )
        # Skipped tests are part of the answer, not progress: shown even with --quiet.
        for skipped in result.skipped:
            print(
                f"skipped {skipped.test_id}: {plain_text(skipped.reason) or 'no reason given'}",
                file=out.stderr,
                flush=True,
            )
        if not args.wait:
            if out.json_mode:
                out.json(to_json(result))
            else:
                for started in result.started:
                    out.data(started.run_id)
            return EXIT_OK
        for started in result.started:
            out.info(f"started {started.run_id}  {started.test_id}  mode {started.mode or '?'}")
        code = await _follow(
            session,
            [started.run_id for started in result.started],
            args,
            out,
            stop_on_cancel=True,
            report_name=args.project_id,
            skipped=[(s.test_id, plain_text(s.reason)) for s in result.skipped],
            tests={started.run_id: started.test_id for started in result.started},
        )
    if code != EXIT_OK:
        return code
    # all() of no runs is True: a suite that did not (fully) run must not pass a CI job.
    if not result.started:
        out.error(f"no test of {args.project_id} started: nothing ran")
        return EXIT_NOT_PASSED
    if result.skipped and not args.allow_skipped:
        out.error(
            f"{len(result.skipped)} test(s) of {args.project_id} did not start (see above); "
            "pass --allow-skipped to accept that"
        )
        return EXIT_NOT_PASSED
    return EXIT_OK


async def watch(args: argparse.Namespace, out: Output) -> int:
    run_ids = _check_ids("run", args.run_ids, "RUN_ID")
    _check_follow_options(args, waiting=True)
    async with open_session(args) as session:
        return await _follow(
            session,
            run_ids,
            args,
            out,
            stop_on_cancel=args.stop_on_interrupt,
            report_name="asyncclient watch",
        )


# --- following and reporting ---------------------------------------------------------------------


async def _follow(
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

    interval = args.interval or _DEFAULT_INTERVAL
    watcher = RunWatcher(
        session,
        run_ids,
        interval=interval,
        max_interval=max(_DEFAULT_MAX_INTERVAL, interval),
        timeout=args.timeout,
        stop_on_timeout=args.stop_on_timeout,
        stop_on_cancel=stop_on_cancel,
    )
    timed_out: WatchTimeoutError | None = None
    note = _still_going_note(watcher, args) if stop_on_cancel else _no_note
    try:
        with out.note_on_forced_exit(note), _Progress(out, run_ids, tests) as progress:
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


class _Progress:
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
        self._live: Any = None
        self._console: Any = None
        self._use_live = out.stderr_is_terminal and not out.quiet
        self._clock = clock
        self._drawn_at = 0.0
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None

    def __enter__(self) -> _Progress:
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
        self._views[run.id] = run
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

        from asyncclient._reports import counts_line, duration_seconds, format_duration

        views = self._views
        seen = [views[run_id] for run_id in self._order if run_id in views]
        caption = counts_line(seen)
        unseen = len(self._order) - len(seen)
        if unseen:
            caption += f" ({unseen} not seen yet)"
        table = Table("run", "test", "status", "duration", caption=caption)
        # A terminal holds only so many rows: the runs still going come first, and only the
        # rows shown are built.
        height = self._console.height if self._console is not None else 40
        room = max(5, height - 8)
        going = (i for i in self._order if i not in views or not views[i].is_final)
        done = (i for i in self._order if i in views and views[i].is_final)
        shown = list(itertools.islice(itertools.chain(going, done), room))
        for run_id in shown:
            run = views.get(run_id)
            if run is None:
                table.add_row(Text(run_id), Text(""), Text("-", style="dim"), Text(""))
                continue
            status = str(run.status)
            table.add_row(
                Text(run.id),
                Text(run.test_id or ""),
                Text(status, style=self._STYLES.get(status, "")),
                Text(format_duration(duration_seconds(run))),
            )
        if len(self._order) > len(shown):
            table.add_row("", Text(f"... {len(self._order) - len(shown)} more"), "", "")
        return table
