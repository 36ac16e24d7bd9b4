"""OpenTelemetry by the HTTP client conventions, when `opentelemetry-api` is there and an SDK
is set up: an INTERNAL span per operation (`asyncclient.get_build`), a CLIENT span per attempt
carrying its own `traceparent`, `http.client.request.duration` and `asyncclient.client.retries`;
in a traced job (`PARENTS`) an operation's span goes under the run or test it served. With no
SDK every function is a no-op that costs a check of a module global.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any, Final, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

try:
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed: nothing is traced or measured
    ENABLED: Final = False
else:
    ENABLED = True  # type: ignore[misc]

__all__ = [
    "DURATION",
    "ENABLED",
    "PARENTS",
    "RETRIES",
    "Instruments",
    "end_attempt",
    "error_type",
    "inject",
    "instruments",
    "made_for_meters",
    "observers",
    "operation",
    "start_attempt",
    "traced",
    "tracer",
    "url_full",
]

_NAME: Final = "asyncclient"
DURATION: Final = "http.client.request.duration"
RETRIES: Final = "asyncclient.client.retries"
# The conventions' advice for http.client.request.duration (seconds).
_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_UNKNOWN: Final = object()

# Made once per provider, kept beside it: ids get reused.
_tracers: dict[int, tuple[Any, Any]] = {}

PARENTS: contextvars.ContextVar[Callable[[Mapping[str, Any]], Any] | None] = contextvars.ContextVar(
    "asyncclient_parents", default=None
)
"""While a job is traced (asyncclient.suite._trace): the span an operation with these ids
belongs under (a run's, a test's), or None for the current one (the job's)."""
_made: dict[tuple[int, Any], tuple[Any, Any]] = {}


def _provider_set(module: Any, global_name: str, env: str) -> bool:
    """Whether the application set a provider (or names one in the environment): reading the
    API's own global directly, since get_*_provider() looks at the environment on every call
    until one is set, a cost on every request (bench_session)."""
    return getattr(module, global_name, _UNKNOWN) is not None or _in_environ(env)


_environ_size = -1
_environ_names: frozenset[str] = frozenset()


def _in_environ(*names: str) -> bool:
    """Whether any of `names` is in os.environ, from the names as they were when the
    environment last changed size (a variable set or removed): os.environ's own test raises
    and catches a KeyError, 2.3 us, twice a request while no provider is set."""
    global _environ_size, _environ_names
    size = len(os.environ)
    if size != _environ_size:
        _environ_names, _environ_size = frozenset(os.environ), size
    return not _environ_names.isdisjoint(names)


_NOBODY: Final = (None, None)
# The API's two globals, read directly.
_GLOBALS_KNOWN: Final = ENABLED and all(
    hasattr(module, name)
    for module, name in ((trace, "_TRACER_PROVIDER"), (metrics._internal, "_METER_PROVIDER"))
)


def observers() -> tuple[Any, Instruments | None]:
    """The tracer and the metric instruments of a call, each None while no SDK is set up:
    one look at both providers on every request."""
    if not ENABLED:
        return _NOBODY
    if (
        _GLOBALS_KNOWN
        and trace._TRACER_PROVIDER is None
        and metrics._internal._METER_PROVIDER is None
        and not _in_environ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")
    ):
        return _NOBODY
    return tracer(), instruments()


def tracer() -> Any:
    """asyncclient's tracer from the global provider, or None while no SDK is set up."""
    if not ENABLED or not _provider_set(trace, "_TRACER_PROVIDER", "OTEL_PYTHON_TRACER_PROVIDER"):
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    known = _tracers.get(id(provider))
    if known is None or known[0] is not provider:
        from asyncclient._version import __version__

        known = _tracers[id(provider)] = (provider, provider.get_tracer(_NAME, __version__))
    return known[1]


class Instruments:
    """The two instruments, made once per meter provider."""

    __slots__ = ("duration", "retries")

    def __init__(self, meter: Any) -> None:
        try:
            self.duration = meter.create_histogram(
                DURATION,
                unit="s",
                description="Duration of HTTP client requests.",
                explicit_bucket_boundaries_advisory=list(_BUCKETS),
            )
        except TypeError:  # an API before 1.23 takes no advice on buckets
            self.duration = meter.create_histogram(
                DURATION, unit="s", description="Duration of HTTP client requests."
            )
        self.retries = meter.create_counter(
            RETRIES,
            unit="{retry}",
            description="Requests of the session sent again, by operation and reason.",
        )


def instruments() -> Instruments | None:
    """The metric instruments of the global meter provider, or None while no SDK is set up."""
    return made_for_meters(Instruments)


M = TypeVar("M")


def made_for_meters(kind: Callable[[Any], M]) -> M | None:
    """`kind(meter)` of the global meter provider, made once per provider (the session's
    Instruments, a job's JobMeters), or None while no SDK is set up."""
    if not ENABLED or not _provider_set(
        metrics._internal, "_METER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER"
    ):
        return None
    provider = metrics.get_meter_provider()
    if isinstance(provider, metrics.NoOpMeterProvider):
        return None
    key = (id(provider), kind)
    known = _made.get(key)
    if known is None or known[0] is not provider:
        from asyncclient._version import __version__

        known = _made[key] = (provider, kind(provider.get_meter(_NAME, __version__)))
    made: M = known[1]
    return made


def error_type(failure: BaseException) -> str:
    """`error.type` of a failure: the HTTP status of an API error, as a string ("503"), else
    the exception's fully-qualified type (`aiohttp.client_exceptions.ServerDisconnectedError`)."""
    status = getattr(failure, "status", None)
    if isinstance(status, int) and status >= 400:
        return str(status)
    kind = type(failure)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def url_full(url: str, query: str) -> str:
    """The request's absolute URL for `url.full`: any user name and password in it replaced by
    REDACTED, as the conventions ask (the API key travels in a header, never in the URL)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "REDACTED:REDACTED@" + netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _without_query(value: str) -> str:
    """An id attribute that may be a link (a run file's signed URL): no query string, no
    fragment, no credentials, as `url.full` of the same request (a signature is a secret)."""
    if "://" in value:
        return url_full(value, "")
    return value.split("?", 1)[0].split("#", 1)[0]


@contextlib.contextmanager
def operation(found: Any, name: str, ids: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """An INTERNAL span `asyncclient.NAME` around the block, made by `found` (what tracer()
    gave); ids become `asyncclient.<name>` attributes; an exception sets `error.type` and the
    error status."""
    parents = PARENTS.get()
    parent = None if parents is None or not ids else parents(ids)
    with found.start_as_current_span(
        f"asyncclient.{name}",
        context=None if parent is None else trace.set_span_in_context(parent),
        kind=SpanKind.INTERNAL,
        record_exception=True,
        set_status_on_exception=False,
    ) as current:
        if current.is_recording():
            current.set_attribute("asyncclient.operation", name)
            for key, value in (ids or {}).items():
                if isinstance(value, str):
                    value = _without_query(value)
                if isinstance(value, str | int | float | bool):
                    current.set_attribute(f"asyncclient.{key}", value)
        try:
            yield current
        except BaseException as exc:
            if current.is_recording():
                kind = error_type(exc)
                current.set_attribute("error.type", kind)
                current.set_status(Status(StatusCode.ERROR, kind))
            raise


def start_attempt(found: Any, method: str, url: str, host: str, port: int, attempt: int) -> Any:
    """The CLIENT span of one attempt, started (not made current: the request carries it by
    inject(headers, span)); `attempt` counts from 1, so a resend's count is attempt - 1."""
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.full": url,
        "server.address": host,
        "server.port": port,
    }
    if attempt > 1:
        attributes["http.request.resend_count"] = attempt - 1
    return found.start_span(method, kind=SpanKind.CLIENT, attributes=attributes)


def end_attempt(span: Any, status: int, error: str | None) -> None:
    """The attempt's answer on its span, which ends: the status (0: none came) and the error
    type, with the error status when there is one (4xx and 5xx are errors of a client)."""
    if span.is_recording():
        if status:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR))
    span.end()


def inject(headers: Mapping[str, str], span: Any) -> Mapping[str, str]:
    """`headers` with the `traceparent` of `span` (and whatever else the global propagator
    writes); the same mapping when there is nothing to add."""
    carrier: MutableMapping[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return {**headers, **carrier} if carrier else headers


P = ParamSpec("P")
R = TypeVar("R")


def traced(
    name: str, *id_args: str
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """An operation span around an async method of the session; `id_args`: the keyword or
    positional arguments (after self) whose values are recorded as ids."""

    def wrap(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        if not ENABLED:
            return method
        names = list(inspect.signature(method).parameters)[1:]

        @functools.wraps(method)
        async def traced_method(*args: P.args, **kwargs: P.kwargs) -> R:
            found = tracer()
            if found is None:
                return await method(*args, **kwargs)
            ids = {key: kwargs.get(key) for key in id_args}
            for index, key in enumerate(names[: len(args) - 1]):
                if key in id_args:
                    ids[key] = args[index + 1]
            with operation(found, name, ids):
                return await method(*args, **kwargs)

        return traced_method

    return wrap
