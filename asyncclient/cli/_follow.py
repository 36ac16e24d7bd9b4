"""Following runs to their end for `run --wait` and `watch`: the suite loop (asyncclient.suite)
decides and acts; this shows its events (the live progress, asyncclient.cli._progress; the
lines on stderr; the --events stream) and writes the reports at the end
(asyncclient.cli._ci_reports), or what Ctrl-C leaves to say.
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
from asyncclient.cli._output import Output
from asyncclient.cli._progress import Progress

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.cli._options import Follow
    from asyncclient.eta import JobEta
    from asyncclient.fleet import FleetJob
    from asyncclient.spend.reuse import Started
    from asyncclient.suite import FailFast, SuiteEvent, SuiteRun

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
    fleet: FleetJob | None = None,
) -> int:
    """Follow the runs with the suite loop (asyncclient.suite) and live progress, then write
    the reports; returns the exit code. The loop decides and acts; this renders its events.

    tests: the test id of each run, when known from the start (shown before the first sweep).
    mode, build_id, idempotency_key: how the first runs were started (their re-runs follow).
    base_url: the --base-url given, for the command a second Ctrl-C prints.
    overage: the runs whose start said they are beyond the plan's included runs.
    starts: each run this command started, with its build and mode (reuse, new tests and
    hedging read them).
    fleet: this job in the fleet's ledger (asyncclient.fleet): every run the suite starts is
    held there, and a job the fleet ends (superseded, taken for dead) is cancelled: 130.
    """
    from asyncclient.errors import UnknownRunsError
    from asyncclient.suite import SuiteRun

    suite = SuiteRun(
        session,
        run_ids,
        policy=options.suite_policy or options.make_policy(),
        tests=tests,
        mode=mode,
        build_id=build_id,
        idempotency_key=idempotency_key,
        starts=starts,
        overage=overage,
        skipped=skipped,
        name=report_name,
        stop_on_cancel=stop_on_cancel,
    )
    note = _still_going_note(suite, base_url) if stop_on_cancel else _no_note
    events = _open_events(options.events)
    try:
        with out.note_on_forced_exit(note), Progress(out, run_ids, tests) as progress:
            suite.observe(_Shown(suite, progress, out, events, options))
            if fleet is not None:
                fleet.hold(run_ids)
                suite.observe(_held_in(fleet))
                fleet.waiting = _place_in(fleet, progress)
            try:
                job_report = await _until_fleet_ends(suite, fleet)
            except asyncio.CancelledError:
                watcher = suite.watcher
                if watcher is not None:
                    _tell_stopped(watcher.stopped, watcher.stop_errors, out)
                    for run in watcher.runs.values():
                        progress.update(run)  # its last frame: the runs as they ended
                # A cancelled job still reports the runs as they now are.
                if suite.report is not None and suite.result is not None:
                    with contextlib.suppress(CommandError, OSError):  # the interrupt matters
                        await report(session, suite.result, suite.report, options, out)
                events.interrupted()
                if fleet is not None and fleet.ended.is_set():
                    from asyncclient.cli._fleet import fleet_ended

                    return fleet_ended(fleet, out)
                raise
        assert suite.result is not None
        await report(session, suite.result, job_report, options, out)
        try:
            code = _verdict(suite, out)
        except UnknownRunsError as exc:
            from asyncclient._core._wording import describe_error

            events.finished(job_report, describe_error(exc)[1])
            raise
        events.finished(job_report, code)
        return code
    finally:
        events.close()


def _held_in(fleet: FleetJob) -> Callable[[SuiteEvent], None]:
    """An observer that holds each run the suite starts in the fleet's ledger, and gives its
    device slot back when it ends (a superseded job does not stop it then)."""
    from asyncclient.suite import _events as kinds

    def hold(event: SuiteEvent) -> None:
        if isinstance(event, kinds.RunStarted):
            fleet.hold([event.run_id])
        elif isinstance(event, kinds.BaselineStarted):
            fleet.hold(list(event.run_ids))
        elif isinstance(event, kinds.RunChanged | kinds.BaselineRunChanged) and event.run.is_final:
            fleet.finished([event.run.id])

    return hold


def _place_in(fleet: FleetJob, progress: Progress) -> Callable[[int, int], None]:
    """Where a re-run's start waiting for the fleet's device slots shows its place: the live
    table (its caption), or a line."""
    from asyncclient.cli._fleet import place_text

    def waiting(place: int, in_flight: int) -> None:
        progress.tell_wait(place_text(fleet, place, in_flight) if place >= 0 else None)

    return waiting


async def _until_fleet_ends(suite: SuiteRun, fleet: FleetJob | None) -> Any:
    """The suite's report; cancelled (as by Ctrl-C: its runs stopped) when the fleet ends the
    job first."""
    if fleet is None:
        return await suite.wait()
    following = asyncio.ensure_future(suite.wait())
    ended = asyncio.ensure_future(fleet.ended.wait())
    try:
        await asyncio.wait({following, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
        if fleet.ended.is_set():
            suite.stopped_elsewhere(fleet.not_going)  # stopped once, by the fleet
        if not following.done():
            following.cancel()  # its cleanup stops the runs still going: waited for
            await asyncio.gather(following, return_exceptions=True)
    return await following


class _Shown:
    """What the command shows of the loop's events: the live progress, the lines on stderr,
    the --events stream, and a --timeout the ETA will not fit."""

    def __init__(
        self, suite: SuiteRun, progress: Progress, out: Output, events: Events, options: Follow
    ) -> None:
        self._suite = suite
        self._progress = progress
        self._out = out
        self._events = events
        self._options = options
        self._warned = False

    def __call__(self, event: SuiteEvent) -> None:
        from asyncclient.suite import _events as kinds

        out, progress = self._out, self._progress
        if event.streamed:
            self._events.write(event)
        match event:
            case kinds.RunStarted(kind="run"):
                pass
            case kinds.RunStarted():
                progress.add_attempts(
                    [(event.test_id or "", event.run_id, event.attempt)], kind=event.kind
                )
            case kinds.RunChanged():
                progress.update(event.run)
            case kinds.HistoryRead():
                progress.expect(event.expected)
                self._tell_unread(event.unread)
            case kinds.Eta():
                progress.tell_eta(event.eta)
                self._check_timeout(event.eta)
            case kinds.Reused():
                from asyncclient._reports import format_duration

                reuse = event.reuse
                progress.reused([reuse.run_id])
                saved = format_duration(reuse.seconds)
                saved = f", {saved} of device time saved" if saved else ""
                out.info(
                    f"reused {reuse.test_id}: passed in {reuse.earlier_run_id} on an identical "
                    f"build (sha256 {reuse.sha256[:12]}); stopped {reuse.run_id}{saved}"
                )
            case kinds.NewTests():
                out.info(
                    f"new test(s), no finished run before: {', '.join(event.tests)}; each runs up "
                    f"to {event.repeats} more time(s) once its first run ends"
                )
            case kinds.RerunSkipped():
                out.info(
                    f"not re-running {event.test_id}: {event.reason} (--rerun-known re-runs it)"
                )
            case kinds.StartRefused():
                out.error(f"could not re-run {event.test_id}: {event.reason}")
            case kinds.CopiesStopped():
                if event.stopped:
                    out.info(
                        f"{event.test_id} passed in {event.passed_run_id}: stopped "
                        f"{len(event.stopped)} other run(s) of it, not counted: "
                        + " ".join(event.stopped)
                    )
                for run_id, error in event.errors.items():
                    out.warning(f"could not stop {run_id}: {error}; it runs on")
            case kinds.BaselineStarted():
                out.info(
                    f"{event.test_id} failed in {event.failed_run}: running it on the baseline "
                    f"{event.baseline} too ({' '.join(event.run_ids)}; {event.needed} failure(s) "
                    "the same way call it pre-existing)"
                )
            case kinds.BaselineJudged():
                verdict = event.verdict
                said = " is pre-existing: it" if verdict.pre_existing else ":"
                out.info(f"{verdict.test_id}{said} {verdict.why}")
            case kinds.FailFast():
                _tell_fail_fast(event, out)
            case kinds.Notice():
                getattr(out, event.level, out.info)(event.text)
            case _:
                pass

    def _tell_unread(self, unread: Mapping[str, str]) -> None:
        if not unread:
            return
        from asyncclient._core._untrusted import clip, line

        names = ", ".join(sorted(unread)[:3]) + (", ..." if len(unread) > 3 else "")
        count = f"{len(unread)} test{'' if len(unread) == 1 else 's'}"
        self._out.warning(
            f"the history of {count} could not be read ({names}): no ETA of their own, "
            f"no reuse, not taken as new; {clip(line(next(iter(unread.values()))), 300)}"
        )

    def _check_timeout(self, eta: JobEta) -> None:
        timeout, deadline = self._options.timeout, self._suite.deadline
        if self._warned or deadline is None or timeout is None:
            return
        left = deadline - time.monotonic()
        if eta.p50 <= left:
            return
        self._warned = True
        from asyncclient._reports import format_duration

        slowest = ", ".join(eta.slowest[:3])
        self._out.warning(
            f"the runs are expected to need about {eta.span()} more, past --timeout "
            f"{timeout:g} s ({format_duration(max(left, 0.0)) or '0.0 s'} left); the "
            f"slowest: {slowest}"
        )


def _open_events(target: str | None) -> Events:
    from asyncclient._core._wording import EXIT_LOCAL_IO

    try:
        return Events.open(target)
    except OSError as exc:
        raise CommandError(
            f"cannot write --events {target}: {exc.strerror or exc}", EXIT_LOCAL_IO
        ) from exc


def _verdict(suite: SuiteRun, out: Output) -> int:
    """The exit code of a followed suite (its reports written)."""
    from asyncclient.errors import UnknownRunsError

    assert suite.result is not None
    result = suite.result
    watcher = suite.watcher
    if watcher is None:  # no run to follow (none started)
        return EXIT_OK if result.passed else EXIT_NOT_PASSED
    if suite.unknown:
        raise UnknownRunsError(suite.unknown, result.final_runs)
    if suite.timed_out is not None:
        out.error(str(suite.timed_out))
        _tell_stopped(watcher.stopped, watcher.stop_errors, out)
        return EXIT_NOT_PASSED
    if suite.stopped_fast:
        return EXIT_NOT_PASSED
    if result.policy.pre_existing == "warn":
        for test in result.pre_existing_failures:
            out.warning(
                f"{test.test_id} failed, and fails on the baseline too: pre-existing, not "
                "failing the job (--pre-existing warn)"
            )
    return EXIT_OK if result.passed else EXIT_NOT_PASSED


def _tell_fail_fast(event: FailFast, out: Output) -> None:
    stopped = event.stopped
    done = (
        f"stopped the {len(stopped)} run(s) still going: {' '.join(stopped)}"
        if stopped
        else "no other run was still going"
    )
    out.error(
        f"fail-fast: {len(event.tests)} test(s) did not pass ({', '.join(event.tests)}; "
        f"--max-failures {event.limit}): {done}"
    )
    for run_id, error in event.errors.items():
        out.always(f"could not stop {run_id}: {error}")


def _no_note() -> list[str]:
    return []


def _still_going_note(suite: SuiteRun, base_url: str | None) -> Callable[[], list[str]]:
    """What a second Ctrl-C prints before exiting at once: the runs that may still be going
    (their stop not answered yet) and the command that stops them."""

    def note() -> list[str]:
        going = suite.still_going
        if not going:
            return []
        ids = " ".join(going)
        # The address only when given as a flag.
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
