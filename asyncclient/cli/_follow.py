"""Following runs to their end for `run --wait` and `watch`: rounds of the re-run policy
(--retry-failed), fail-fast (--max-failures), the event stream (--events), the ETA, reuse of
passes on an identical build (--reuse-passed), a new test's repeats (--new-test-runs), and what
Ctrl-C leaves to say. The live progress: asyncclient.cli._progress; the reports at the end:
asyncclient.cli._ci_reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from asyncclient._core import _defaults as defaults
from asyncclient.cli._ci_reports import report
from asyncclient.cli._common import EXIT_NOT_PASSED, EXIT_OK, CommandError
from asyncclient.cli._events import Events
from asyncclient.cli._job_eta import EtaWatch
from asyncclient.cli._output import Output
from asyncclient.cli._progress import Progress

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient._reports.model import SuiteReport
    from asyncclient.cli._options import Follow
    from asyncclient.errors import WatchTimeoutError
    from asyncclient.models import Run
    from asyncclient.reruns import Reruns, SuiteResult
    from asyncclient.spend.reuse import Started

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
    starts: Sequence[Started] = (),
) -> int:
    """Watch the runs with live progress, re-run the tests that did not pass (--retry-failed,
    asyncclient.reruns), then report; returns the exit code.

    tests: the test id of each run, when known from the start (shown before the first sweep).
    mode, build_id, idempotency_key: how the first runs were started (their re-runs follow).
    base_url: the --base-url given, for the command a second Ctrl-C prints.
    overage: the runs whose start said they are beyond the plan's included runs.
    starts: each run this command started, with its build and mode (--reuse-passed and
    --new-test-runs read them).
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
        new_test_runs=options.new_test_runs,
        new_test_budget=options.new_test_budget,
        new_test_warn=options.new_test_warn,
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
        events.started(run_id, (tests or {}).get(run_id), 1)
    try:
        with out.note_on_forced_exit(note), Progress(out, run_ids, tests) as progress:
            eta = EtaWatch(
                session,
                progress,
                out,
                events,
                timeout=options.timeout,
                deadline=deadline,
                exclude=run_ids,
            )
            if tests or (starts and (options.reuse_passed or options.new_test_runs)):
                # The history the ETA reads anyway (one listing per test) serves reuse and
                # the new tests too. --timeout counts the runs' time from after this read.
                history = await eta.read_history()
                deadline = None if options.timeout is None else time.monotonic() + options.timeout
                eta.start_timeout(deadline)
                if starts and (options.reuse_passed or options.new_test_runs):
                    await _spend(session, reruns, options, starts, out, events, history)
                    progress.reused(reruns.reused)
            if tests:  # the tests known from the start: the ETA before the first sweep
                await eta.update(force=True)
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
                            await eta.update()
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
                repeats = await reruns.start_repeats(session, reruns.arrivals())
                for test_id, error in reruns.start_errors.items():
                    if test_id not in told:
                        told.add(test_id)
                        out.error(f"could not re-run {test_id}: {error}")
                if started:
                    progress.add_attempts(started)
                if repeats:
                    progress.add_attempts(repeats, repeat=True)
                for test_id, run_id, attempt in started:
                    events.started(run_id, test_id, attempt, kind="rerun")
                for test_id, run_id, attempt in repeats:
                    events.started(run_id, test_id, attempt, kind="repeat")
                if started or repeats:
                    await eta.update(force=True)
                ids = [run_id for _, run_id, _ in (*started, *repeats)]
        result = await report(
            session,
            reruns,
            options,
            out,
            report_name,
            skipped,
            expected=progress.expected,
            history=eta.history,
        )
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


async def _spend(
    session: AsyncSession,
    reruns: Reruns,
    options: Follow,
    starts: Sequence[Started],
    out: Output,
    events: Events,
    history: Mapping[str, Sequence[Run]],
) -> None:
    """Before the first sweep: stop the runs an earlier pass on an identical build makes
    needless (--reuse-passed), then find the new tests (--new-test-runs); both from `history`,
    the tests' newest runs the job read once."""
    from asyncclient._reports import format_duration
    from asyncclient.spend.arrival import new_tests
    from asyncclient.spend.reuse import find_reusable, stop_reused

    if options.reuse_passed:
        found = await find_reusable(session, starts, days=options.reuse_passed, history=history)
        stopped, errors = await stop_reused(session, found)
        reruns.reused.update(stopped)
        for reuse in stopped.values():
            saved = format_duration(reuse.seconds)
            saved = f", {saved} of device time saved" if saved else ""
            out.info(
                f"reused {reuse.test_id}: passed in {reuse.earlier_run_id} on an identical build "
                f"(sha256 {reuse.sha256[:12]}); stopped {reuse.run_id}{saved}"
            )
            events.emit("reused", runId=reuse.run_id, testId=reuse.test_id, **reuse.fields())
        for run_id, error in errors.items():
            out.warning(f"could not stop {run_id} to reuse a pass: {error}; it runs")
    if options.new_test_runs:
        new = new_tests(history, [item.test_id for item in starts])
        reruns.new_tests.update(new)
        if new:
            out.info(
                f"new test(s), no finished run before: {', '.join(sorted(new))}; each runs up to "
                f"{options.new_test_runs} more time(s) once its first run ends"
            )
            events.emit("new_tests", tests=sorted(new), repeats=options.new_test_runs)


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
