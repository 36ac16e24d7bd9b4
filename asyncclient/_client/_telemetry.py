"""OpenTelemetry by the HTTP client conventions, when an SDK is set up (the command's through
use_providers, else the API's global one): a span per operation and per attempt (its own
`traceparent`), `http.client.request.duration` and `asyncclient.client.retries`. With no SDK
imported, each function costs a look at sys.modules; only the API's public names are read.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import sys
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
    "use_providers",
]

_NAME: Final = "asyncclient"
DURATION: Final = "http.client.request.duration"
RETRIES: Final = "asyncclient.client.retries"
# The conventions' advice for http.client.request.duration (seconds).
_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)

# Made once per provider, kept beside it: ids get reused.
_tracers: dict[int, tuple[Any, Any]] = {}

PARENTS: contextvars.ContextVar[Callable[[Mapping[str, Any]], Any] | None] = contextvars.ContextVar(
    "asyncclient_parents", default=None
)
"""While a job is traced (asyncclient.suite._trace): the span an operation with these ids
belongs under (a run's, a test's), or None for the current one (the job's)."""
_made: dict[tuple[int, Any], tuple[Any, Any]] = {}


_OWN: contextvars.ContextVar[tuple[Any, Any]] = contextvars.ContextVar(
    "asyncclient_providers", default=(None, None)
)
"""The command's tracer and meter providers (use_providers), ahead of the API's globals, which
it never sets: an embedding program keeps its own."""


@contextlib.contextmanager
def use_providers(tracer_provider: Any, meter_provider: Any) -> Iterator[None]:
    """asyncclient's spans and metrics in this context (the tasks started within it too) go
    to these providers (either may be None: the global one); the API's globals are untouched."""
    token = _OWN.set((tracer_provider, meter_provider))
    try:
        yield
    finally:
        _OWN.reset(token)


def _sdk_possible() -> bool:
    """Whether any provider but the API's own can be set: the SDK is imported, or the
    environment names a provider class. Neither: no global lookup is made at all."""
    return "opentelemetry.sdk" in sys.modules or _in_environ(
        "OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER"
    )


def _api_own(provider: Any) -> bool:
    """Whether `provider` is the API's own no-op or proxy (no SDK behind it): its class is
    defined by the API package."""
    return type(provider).__module__.startswith(("opentelemetry.trace", "opentelemetry.metrics"))


_environ_size = -1
_environ_names: frozenset[str] = frozenset()


def _in_environ(*names: str) -> bool:
    """Whether any of `names` is in os.environ, from the names as they were when the
    environment last changed size (a variable set or removed): cheaper than os.environ's own
    test, which raises and catches a KeyError."""
    global _environ_size, _environ_names
    size = len(os.environ)
    if size != _environ_size:
        _environ_names, _environ_size = frozenset(os.environ), size
    return not _environ_names.isdisjoint(names)


_NOBODY: Final = (None, None)


def observers() -> tuple[Any, Instruments | None]:
    """The tracer and the metric instruments of a call, each None while no SDK is set up:
    with none imported, one look at sys.modules on every request."""
    if not ENABLED or (_OWN.get() == _NOBODY and not _sdk_possible()):
        return _NOBODY
    return tracer(), instruments()


def tracer() -> Any:
    """asyncclient's tracer (the command's provider, else the global one), or None while no
    SDK is set up."""
    if not ENABLED:
        return None
    provider = _OWN.get()[0]
    if provider is None:
        if not _sdk_possible():
            return None
        provider = trace.get_tracer_provider()
        if _api_own(provider):
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
    """The metric instruments of the meter provider in use, or None while no SDK is set up."""
    return made_for_meters(Instruments)


M = TypeVar("M")


def made_for_meters(kind: Callable[[Any], M]) -> M | None:
    """`kind(meter)` of the command's meter provider, else the global one, made once per
    provider (the session's Instruments, a job's JobMeters), or None while no SDK is set up."""
    if not ENABLED:
        return None
    provider = _OWN.get()[1]
    if provider is None:
        if not _sdk_possible():
            return None
        provider = metrics.get_meter_provider()
        if _api_own(provider):
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
