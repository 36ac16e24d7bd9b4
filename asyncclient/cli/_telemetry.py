"""A `--wait` job's trace and its export, set up from the standard OTEL_* variables (the OTLP
exporter over http/protobuf or grpc, or the console) unless an SDK is already set up. The
exports run in the SDK's threads; at the end the command waits at most EXPORT_BOUND, not at
all once the collector is found gone, and says in one line what could not be exported.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from asyncclient._core._untrusted import clip, line

if TYPE_CHECKING:
    from asyncclient.cli._output import Output
    from asyncclient.suite._trace import JobTrace

__all__ = ["EXPORT_BOUND", "Export", "asked", "job_telemetry", "start_export"]

EXPORT_BOUND: Final = 4.5
"""The longest the command waits at its end for the job's telemetry to be exported (s): with
ending the SDK and the process, a collector that never answers costs the job under 5 s."""

_ASKING: Final = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
)
_EXPORTERS: Final = ("otlp", "console", "none")
_PROTOCOLS: Final = ("http/protobuf", "grpc")
_LOG: Final = logging.getLogger("asyncclient.telemetry")


def asked(environ: Mapping[str, str]) -> str | None:
    """The variable that asks for an export (the first set of `_ASKING`), or None: with
    none of them, or OTEL_SDK_DISABLED=true, the command exports nothing."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    return next((name for name in _ASKING if environ.get(name, "").strip()), None)


def _endpoint(environ: Mapping[str, str], signal: str) -> str:
    """Where `signal` (traces, metrics) goes, as shown in a warning: scheme, host, port and
    path only."""
    from urllib.parse import urlsplit

    given = environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    if not given:
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
        given = base.rstrip("/") + f"/v1/{signal}"
    try:
        parts = urlsplit(given)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "the endpoint OTEL_EXPORTER_OTLP_ENDPOINT names (not a valid URL)"
    return clip(line(f"{parts.scheme}://{host}{port}{parts.path}"), 200)


_UNREACHABLE: Final = "the collector could not be reached"
_REFUSED: Final = "the collector could not be reached or refused the data"


class _Failures:
    """What went wrong while exporting: the first reason kept (for the one warning), and
    whether the latest request found the collector there (None: none made yet; False: the
    end does not wait for it)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.up: bool | None = None

    def note(self, reason: str) -> None:
        if self.reason is None or self.reason == _REFUSED:
            self.reason = reason

    def session(self) -> Any:
        """A requests session for the OTLP/HTTP exporters that notes whether the collector
        answered (a refused or broken connection: it is not there) and reads at most
        ANSWER_BYTES of each answer (a collector's answer is a few bytes; one sending a
        gigabyte cost a job 2 GiB of memory)."""
        import requests

        failures = self

        class Counting(requests.Session):
            def request(self, *args: Any, **kwargs: Any) -> Any:
                kwargs["stream"] = True
                try:
                    answer = super().request(*args, **kwargs)
                except requests.ConnectionError:
                    failures.up = False
                    failures.note(_UNREACHABLE)
                    raise
                failures.up = True
                return _bounded(answer)

        return Counting()


ANSWER_BYTES: Final = 64 << 10
"""The most of a collector's answer read (its status and a reason fit in far less)."""


def _bounded(answer: Any) -> Any:
    """`answer` with at most ANSWER_BYTES of its body read (decoded), its connection closed:
    what is left of the body is never read."""
    import requests

    try:
        body = answer.raw.read(ANSWER_BYTES, decode_content=True) or b""
    except Exception:  # a body cut or garbled: the status is what the exporter reads
        body = b""
    finally:
        answer.close()
    kept = requests.Response()
    kept.status_code, kept.headers, kept.url = answer.status_code, answer.headers, answer.url
    kept.reason, kept.encoding, kept.request = answer.reason, answer.encoding, answer.request
    kept.raw = io.BytesIO(body[:ANSWER_BYTES])
    return kept


_HEADER_VARIABLES: Final = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
)
_SHORTEST_SECRET: Final = 4  # shorter parts ("x", "=") are no secret, and are everywhere


def header_secrets(environ: Mapping[str, str]) -> tuple[str, ...]:
    """Every form an OTLP header's value can take in a message: as set, URL-decoded, each
    word of it (`Bearer TOKEN`: TOKEN), and each as Python's repr shows it; longest first."""
    from urllib.parse import unquote

    forms: set[str] = set()
    for name in _HEADER_VARIABLES:
        raw = environ.get(name, "")
        if not raw.strip():
            continue
        values = [raw, unquote(raw)]
        for pair in raw.split(","):
            value = pair.partition("=")[2]
            values += [value, unquote(value)]
        for value in values:
            forms.update((value, value.strip(), *value.split()))
    forms |= {repr(form)[1:-1] for form in forms}
    return tuple(sorted((f for f in forms if len(f) >= _SHORTEST_SECRET), key=len, reverse=True))


def scrubbed(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with each of `secrets` replaced by `***`."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


class _ToDebug(logging.Handler):
    """The SDK's log records (an exporter's retries and failures): to asyncclient.telemetry
    at DEBUG, never on stderr by themselves, the OTLP headers' values scrubbed in every form;
    an exporter's warning or worse counts as a failure."""

    def __init__(self, failures: _Failures, secrets: tuple[str, ...] = ()) -> None:
        super().__init__(logging.DEBUG)
        self._failures = failures
        self._secrets = secrets

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            message = clip(line(scrubbed(record.getMessage(), self._secrets)), 300)
            if record.levelno >= logging.WARNING and "export" in record.name:
                self._failures.note(_REFUSED)
            _LOG.debug("%s: %s", record.name, message)


def _watched_spans(inner: Any, failures: _Failures) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Watched(SpanExporter):
        def export(self, spans: Any) -> Any:
            try:
                result = inner.export(spans)
            except Exception as exc:  # an exporter that raises: the job goes on
                failures.note(f"the exporter failed ({type(exc).__name__})")
                return SpanExportResult.FAILURE
            if result != SpanExportResult.SUCCESS:
                failures.note(_REFUSED)
            return result

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return Watched()


def _watched_metrics(inner: Any, failures: _Failures) -> Any:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class Watched(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=inner._preferred_temporality,
                preferred_aggregation=inner._preferred_aggregation,
            )

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            try:
                result = inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:
                failures.note(f"the exporter failed ({type(exc).__name__})")
                return MetricExportResult.FAILURE
            if result != MetricExportResult.SUCCESS:
                failures.note(_REFUSED)
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(inner.force_flush(timeout_millis=timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    return Watched()


def _choice(environ: Mapping[str, str], names: tuple[str, ...], default: str) -> str:
    for name in names:
        value = environ.get(name, "").strip().lower()
        if value:
            return value.split(",")[0].strip()
    return default


def _exporter(
    signal: str, environ: Mapping[str, str], failures: _Failures
) -> tuple[Any, str | None]:
    """The exporter of `signal` (traces, metrics) the environment names, or None, with the
    reason when the one named cannot be made."""
    kind = _choice(environ, (f"OTEL_{signal.upper()}_EXPORTER",), "otlp")
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    if kind == "none":
        return None, None
    if kind not in _EXPORTERS:
        shown = clip(line(kind), 40)
        return None, f"{variable}={shown} is not one asyncclient sets up: otlp, console or none"
    if kind == "console":  # stderr: standard output is the command's answer
        if signal == "traces":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            return ConsoleSpanExporter(out=sys.stderr), None
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stderr), None
    protocol = _choice(
        environ,
        (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        "http/protobuf",
    )
    if protocol not in _PROTOCOLS:
        return None, (
            f"OTEL_EXPORTER_OTLP_PROTOCOL={clip(line(protocol), 40)} is not one asyncclient "
            "exports with: http/protobuf or grpc"
        )
    package = "http" if protocol == "http/protobuf" else "grpc"
    module = f"opentelemetry.exporter.otlp.proto.{package}"
    which = "trace_exporter" if signal == "traces" else "metric_exporter"
    name = "OTLPSpanExporter" if signal == "traces" else "OTLPMetricExporter"
    try:
        import importlib

        found = getattr(importlib.import_module(f"{module}.{which}"), name)
    except ImportError:
        fix = (
            "pip install 'asyncclient[otel]'"
            if package == "http"
            else "pip install opentelemetry-exporter-otlp-proto-grpc"
        )
        return None, f"the OTLP {protocol} exporter is not installed: {fix}"
    try:
        return (found(session=failures.session()) if package == "http" else found()), None
    except Exception as exc:  # a bad OTEL_* value the exporter refuses
        said = (
            f"{type(exc).__name__}: {clip(line(scrubbed(str(exc), header_secrets(environ))), 200)}"
        )
        return None, f"the OTLP exporter could not be set up ({said})"


class Export:
    """The SDK set up from the environment; `close()` ends it within EXPORT_BOUND."""

    def __init__(
        self,
        tracer_provider: Any,
        meter_provider: Any,
        failures: _Failures,
        handler: logging.Handler,
        endpoint: str,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self._failures = failures
        self._handler = handler
        self.endpoint = endpoint

    @property
    def providers(self) -> tuple[Any, Any]:
        """(tracer provider, meter provider): asyncclient's, never the API's globals."""
        return self.tracer_provider, self.meter_provider

    async def close(self, out: Output) -> None:
        """Export what is left (waiting at most EXPORT_BOUND seconds), put the global
        providers back, and say in one line when anything could not be exported."""
        import asyncio

        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def shut() -> None:
            try:
                for provider in (self.tracer_provider, self.meter_provider):
                    if provider is not None:
                        with contextlib.suppress(Exception):
                            provider.shutdown()
            finally:
                # Only now: a late exporter's records stay on DEBUG.
                sdk_logger = logging.getLogger("opentelemetry")
                sdk_logger.removeHandler(self._handler)
                sdk_logger.propagate = True
            with contextlib.suppress(RuntimeError):  # the loop closed: no one waits now
                loop.call_soon_threadsafe(done.set)

        # Not waited for: a silent collector costs EXPORT_BOUND.
        threading.Thread(target=shut, name="asyncclient-otel-exit", daemon=True).start()
        timed_out = False
        deadline = loop.time() + EXPORT_BOUND
        while not done.is_set() and self._failures.up is not False:
            left = deadline - loop.time()
            if left <= 0:
                timed_out = True
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.05)):
                    await done.wait()
        reason = self._failures.reason
        if timed_out and reason != _UNREACHABLE:
            reason = f"no answer within {EXPORT_BOUND:g} s"
        if reason is not None:
            out.warning(
                f"the job's OpenTelemetry data could not all be exported to {self.endpoint} "
                f"({reason}); the job's result and reports are unchanged"
            )


def start_export(out: Output, environ: Mapping[str, str] | None = None) -> Export | None:
    """The SDK set up as the environment asks (None: it asks for nothing, an application set
    up its own, or it cannot be set up: then one warning line says why)."""
    environ = os.environ if environ is None else environ
    variable = asked(environ)
    if variable is None:
        return None
    from asyncclient._client import _telemetry

    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        out.warning(
            f"{variable} is set but the OpenTelemetry SDK is not installed: pip install "
            "'asyncclient[otel]'; the job runs without its trace"
        )
        return None
    assert _telemetry.ENABLED

    if _telemetry.tracer() is not None:
        return None  # the application's (opentelemetry-instrument's) SDK exports
    failures = _Failures()
    handler = _ToDebug(failures, header_secrets(environ))
    sdk_logger = logging.getLogger("opentelemetry")
    sdk_logger.addHandler(handler)
    sdk_logger.propagate = False  # its records never reach stderr by themselves
    try:
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "asyncclient"}))
    except Exception as exc:  # a malformed OTEL_RESOURCE_ATTRIBUTES
        _LOG.debug("resource: %s", type(exc).__name__)
        resource = Resource({"service.name": "asyncclient"})
    problems: list[str] = []
    tracer_provider = meter_provider = None
    spans, problem = _exporter("traces", environ, failures)
    if problem:
        problems.append(problem)
    if spans is not None:
        tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        tracer_provider.add_span_processor(BatchSpanProcessor(_watched_spans(spans, failures)))
    points, problem = _exporter("metrics", environ, failures)
    if problem and problem not in problems:
        problems.append(problem)
    if points is not None:
        reader = PeriodicExportingMetricReader(_watched_metrics(points, failures))
        meter_provider = MeterProvider(
            resource=resource, metric_readers=[reader], shutdown_on_exit=False
        )
    for problem in problems[:1]:
        out.warning(f"{problem}; the job runs without exporting it")
    if tracer_provider is None and meter_provider is None:
        sdk_logger.removeHandler(handler)
        sdk_logger.propagate = True
        return None
    return Export(tracer_provider, meter_provider, failures, handler, _endpoint(environ, "traces"))


@contextlib.asynccontextmanager
async def job_telemetry(
    out: Output, name: str, *, project: str | None = None, waiting: bool = True
) -> AsyncIterator[JobTrace | None]:
    """A `--wait` job's trace (and its export, when the environment asks), the job's span
    current inside; yields the JobTrace (None: nothing is traced, as when not `waiting`).
    The caller gives it the command's exit code (`JobTrace.exit_code`)."""
    if not waiting:
        yield None
        return
    try:
        export = start_export(out)
    except Exception as exc:  # an SDK that fails to start: run as is
        out.warning(f"OpenTelemetry could not be set up ({type(exc).__name__}): no trace")
        export = None
    try:
        from asyncclient._client import _telemetry

        providers = (None, None) if export is None else export.providers
        with _telemetry.use_providers(*providers):
            job = None
            if _telemetry.ENABLED:
                from asyncclient.suite._trace import JobTrace

                with contextlib.suppress(Exception):
                    job = JobTrace.open(name, project=project)
            if job is None:
                yield None
            else:
                with job:
                    yield job
    finally:
        if export is not None:
            await export.close(out)
