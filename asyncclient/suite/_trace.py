"""A suite job as one OpenTelemetry trace by the CI/CD and test conventions, made from the
loop's events: the job's span (current while it runs), a span per test, a span per run under
its test with the requests made for that run under it (`_telemetry.PARENTS`). The service's
and the CI's text through the sanitiser, bounded (`_trace_attributes`). Without an SDK,
`JobTrace.open()` is None.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from asyncclient._client import _telemetry
from asyncclient._core._ci_run import ci_run, pipeline_attributes
from asyncclient.suite._trace_attributes import (
    VALUE_LIMIT,
    event_fields,
    run_attributes,
    test_attributes,
)
from asyncclient.suite._trace_attributes import text as _text

if TYPE_CHECKING:
    from asyncclient._reports.model import Attempt, SuiteReport
    from asyncclient.suite._events import SuiteEvent
    from asyncclient.suite._job_metrics import JobMeters


__all__ = ["ABORTED", "FAILURE", "SUCCESS", "TIMED_OUT", "VALUE_LIMIT", "JobTrace"]

_EVENTS_PER_SPAN: Final = 32  # a run's status changes shown, however many the service makes

# test.suite.run.status by the conventions, from how the job ended.
SUCCESS, FAILURE, TIMED_OUT, ABORTED = "success", "failure", "timed_out", "aborted"


class Followed(Protocol):
    """What the trace needs of a SuiteRun: its events, and whether its wait timed out."""

    timed_out: Any

    def observe(self, observer: Callable[[SuiteEvent], object]) -> None: ...


_LOG: Final = logging.getLogger("asyncclient.telemetry")

_CURRENT: contextvars.ContextVar[JobTrace | None] = contextvars.ContextVar(
    "asyncclient_job_trace", default=None
)


class JobTrace:
    """One job's trace and metrics, made from the suite loop's events.

    `with JobTrace.open(name) as job:` makes the job's span current and sends each run's
    requests under the run's span; `job.follow(suite)` reads a SuiteRun's events; the span
    ends when the block does, with the report's status (or how the block ended).
    """

    def __init__(
        self,
        tracer: Any,
        meters: JobMeters | None,
        name: str,
        *,
        project: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        import time

        from opentelemetry.trace import SpanKind

        environ = os.environ if environ is None else environ
        self._tracer = tracer
        self._meters = meters
        self._kind = SpanKind.INTERNAL
        self.name = _text(name)
        self.project = project
        self._pipeline = pipeline_attributes(ci_run(environ), environ)
        self._started = time.monotonic()
        self.job = tracer.start_span(
            "asyncclient.job",
            kind=self._kind,
            attributes={"test.suite.name": self.name, **self._pipeline},
        )
        self._tests: dict[str, Any] = {}
        self._runs: dict[str, Any] = {}
        self._changes: dict[str, int] = {}
        self._waiting: dict[str, tuple[int, int, str]] = {}  # runs whose test is not known yet
        self._status: str | None = None
        self._report: SuiteReport | None = None
        self._suite: Followed | None = None
        self._measured = False
        self._ended: set[int] = set()
        self._tokens: list[Any] = []
        self.exit_code: int | None = None
        """The command's exit code, when a command ran the job: not 0 fails the job even
        when every test passed (a test that did not start)."""

    @classmethod
    def open(
        cls,
        name: str,
        *,
        project: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> JobTrace | None:
        """A job trace when an SDK is set up (a tracer or a meter provider), else None."""
        if not _telemetry.ENABLED:
            return None
        tracer, meters = _telemetry.observers()
        if tracer is None and meters is None:
            return None
        if tracer is None:
            from opentelemetry import trace

            tracer = trace.NoOpTracer()  # metrics only: the spans are placeholders
        from asyncclient.suite._job_metrics import job_meters

        return cls(tracer, job_meters(), name, project=project, environ=environ)

    @staticmethod
    def current() -> JobTrace | None:
        """The job trace whose block this is in (the command's), if any."""
        return _CURRENT.get()

    @property
    def trace_id(self) -> str | None:
        """The trace's id as 32 hex digits (what a tracing backend searches by), or None
        when no span is recorded."""
        context = self.job.get_span_context()
        return f"{context.trace_id:032x}" if context.is_valid else None

    # --- the block --------------------------------------------------------------------------

    def __enter__(self) -> JobTrace:
        from opentelemetry import context, trace

        self._tokens = [
            context.attach(trace.set_span_in_context(self.job)),
            _telemetry.PARENTS.set(self._parent_for),
            _CURRENT.set(self),
        ]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        from opentelemetry import context

        parents_token, current_token = self._tokens[1], self._tokens[2]
        _CURRENT.reset(current_token)
        _telemetry.PARENTS.reset(parents_token)
        context.detach(self._tokens[0])
        if exc is not None and self._status is None:
            import asyncio

            cancelled = isinstance(exc, asyncio.CancelledError | KeyboardInterrupt)
            self._status = ABORTED if cancelled else FAILURE
            self.job.set_attribute("error.type", _telemetry.error_type(exc))
        try:
            self.end()
        except Exception:  # the trace is a courtesy: the job's own outcome stands
            _LOG.debug("the job's trace could not be ended", exc_info=True)

    def _parent_for(self, ids: Mapping[str, Any]) -> Any:
        run_id = ids.get("run_id")
        if run_id is not None:
            found = self._runs.get(run_id)
            if found is not None:
                return found
        test_id = ids.get("test_id")
        return None if test_id is None else self._tests.get(test_id)

    # --- the events -------------------------------------------------------------------------

    def follow(self, suite: Followed) -> None:
        """Read `suite`'s events from now on."""
        self._suite = suite
        suite.observe(self.observe)

    def observe(self, event: SuiteEvent) -> None:
        """One event of the suite loop, on the spans: the runs' start, changes and end make
        the run spans; another event (a re-run skipped or refused, copies stopped, reuse,
        fail-fast) is a span event on its run's, else its test's, else the job's span. Never
        raises: what the trace cannot say is left out, the job goes on (an observer's
        exception would end the loop)."""
        try:
            self._observe(event)
        except Exception:
            _LOG.debug("the job's trace left out %s", event.event, exc_info=True)

    def _observe(self, event: SuiteEvent) -> None:
        from asyncclient.suite import _events as kinds

        match event:
            case kinds.RunStarted():
                self._run_started(event.run_id, event.test_id, event.attempt, event.kind)
            case kinds.RunChanged():
                self._changed(event.run.id, event.run.test_id, str(event.run.status))
            case kinds.RunFinished():
                self._finished(event.read, event.kind, event.stopped_as)
            case kinds.JobFinished():
                self._job_finished(event.report)
            case _ if event.streamed:
                fields = event.fields()
                span = self._runs.get(fields.get("runId") or "") or self._tests.get(
                    fields.get("testId") or ""
                )
                if isinstance(event, kinds.Reused) and span is not None:
                    span.set_attribute("asyncclient.run.reused", True)
                (span or self.job).add_event(f"asyncclient.{event.event}", event_fields(fields))

    def _test_span(self, test_id: str) -> Any:
        from opentelemetry import trace

        span = self._tests.get(test_id)
        if span is None:
            span = self._tests[test_id] = self._tracer.start_span(
                "asyncclient.test",
                context=trace.set_span_in_context(self.job),
                kind=self._kind,
                attributes={"test.case.name": _text(test_id)},
            )
        return span

    def _end(self, span: Any) -> None:
        """End `span` once (the SDK warns of a second end)."""
        if id(span) not in self._ended:
            self._ended.add(id(span))
            span.end()

    def _run_started(self, run_id: str, test_id: str | None, attempt: int, kind: str) -> None:
        import time

        if run_id in self._runs:
            return
        if test_id is None:  # `watch`: its test is known at the first sweep
            self._waiting[run_id] = (time.time_ns(), attempt, kind)
            return
        self._open_run(run_id, test_id, attempt, kind, None)

    def _open_run(
        self, run_id: str, test_id: str, attempt: int, kind: str, start: int | None
    ) -> Any:
        from opentelemetry import trace

        parent = self._test_span(test_id)
        span = self._runs[run_id] = self._tracer.start_span(
            "asyncclient.run",
            context=trace.set_span_in_context(parent),
            kind=self._kind,
            attributes={
                "asyncclient.run.id": _text(run_id),
                "asyncclient.run.attempt": attempt,
                "asyncclient.run.kind": kind,
            },
            start_time=start,
        )
        return span

    def _changed(self, run_id: str, test_id: str | None, status: str) -> None:
        span = self._runs.get(run_id)
        if span is None:
            waiting = self._waiting.pop(run_id, None)
            if waiting is None:
                return
            start, attempt, kind = waiting
            span = self._open_run(run_id, test_id or run_id, attempt, kind, start)
        count = self._changes.get(run_id, 0)
        if count < _EVENTS_PER_SPAN:
            self._changes[run_id] = count + 1
            span.add_event("asyncclient.run.status", {"asyncclient.run.status": _text(status)})

    def _finished(self, read: Attempt, kind: str, stopped_as: str | None) -> None:
        run = read.run
        if run.id not in self._runs:
            self._changed(run.id, run.test_id, str(run.status))
        span = self._runs.get(run.id)
        if span is None:
            return
        self._describe_run(span, read, kind, stopped_as)
        if self.project is None and run.project_id:
            self.project = _text(run.project_id, 64)
        self._end(span)

    def _describe_run(self, span: Any, read: Attempt, kind: str, stopped_as: str | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attributes(run_attributes(read, kind, stopped_as))
        if read.outcome in ("failed", "error") and stopped_as is None:
            span.set_status(Status(StatusCode.ERROR, read.outcome))

    def _job_finished(self, report: SuiteReport) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._report = report
        for test in report.tests:
            span = self._test_span(test.test_id)
            span.set_attributes(test_attributes(test))
            if not test.final.passed and not test.excused:
                span.set_status(Status(StatusCode.ERROR, test.outcome))
            for attempt in test.attempts:  # a run not final when the wait ended
                open_run = self._runs.get(attempt.id)
                if open_run is not None and not attempt.final:
                    self._describe_run(open_run, attempt, attempt.kind, None)
                    open_run.set_attribute("asyncclient.run.final", False)
                    self._end(open_run)
            self._end(span)
        for test_id, reason in report.skipped:
            span = self._test_span(test_id)
            span.set_attributes(
                {
                    "asyncclient.test.outcome": "not_started",
                    "asyncclient.test.reason": _text(reason),
                }
            )
            self._end(span)
        cost = report.cost
        self.job.set_attributes(
            {
                "asyncclient.tests": len(report.tests) + len(report.skipped),
                "asyncclient.tests.failed": sum(not t.final.passed for t in report.tests),
                "asyncclient.tests.flaky": sum(t.flaky for t in report.tests),
                "asyncclient.runs": cost.runs,
                "asyncclient.device.seconds": round(cost.device_seconds, 3),
                "asyncclient.rerun.device.seconds": round(cost.extra_device_seconds, 3),
                "asyncclient.queue.seconds": round(cost.queue_seconds, 3),
            }
        )

    # --- the end ----------------------------------------------------------------------------

    def end(self) -> None:
        """End what is still open, the job last, and record the job's metrics."""
        import time

        from opentelemetry.trace import Status, StatusCode

        status = self._status
        if status is None:
            suite = self._suite
            if suite is not None and suite.timed_out is not None:
                status = TIMED_OUT
            elif self._report is None:
                status = ABORTED
            else:
                status = SUCCESS if self._report.passed else FAILURE
            if status == SUCCESS and self.exit_code not in (None, 0):
                status = FAILURE
        for span in (*self._runs.values(), *self._tests.values()):
            self._end(span)
        self.job.set_attribute("test.suite.run.status", status)
        if self.project:
            self.job.set_attribute("asyncclient.project.id", _text(self.project, 64))
        if status != SUCCESS:
            self.job.set_status(Status(StatusCode.ERROR, status))
        self._end(self.job)
        if self._meters is not None and not self._measured:
            from asyncclient.suite._job_metrics import record_job

            self._measured = True
            common: dict[str, str] = {}
            if self.project:
                common["asyncclient.project.id"] = _text(self.project, 64)
            pipeline = self._pipeline.get("cicd.pipeline.name")
            if pipeline:
                common["cicd.pipeline.name"] = pipeline
            seconds = time.monotonic() - self._started
            record_job(self._meters, self._report, status, seconds, common)
