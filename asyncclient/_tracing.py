"""OpenTelemetry, when `opentelemetry-api` is importable (the `otel` extra): each operation is a
span named after it (`asyncclient.get_build`, `asyncclient.upload_build`, ...) with the ids it
touched, its attempts, the answer's status and the error's type; every request carries the W3C
`traceparent` of its span through the global propagator. Without the package every function
here is a no-op that costs one check of ENABLED.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any, Final, ParamSpec, TypeVar

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed: nothing is traced
    ENABLED: Final = False
else:
    ENABLED = True  # type: ignore[misc]

__all__ = ["ENABLED", "active", "inject", "record_call", "span", "traced"]

_TRACER_NAME: Final = "asyncclient"


_tracers: dict[int, Any] = {}
_UNKNOWN: Final = object()


def _tracer() -> Any:
    """asyncclient's tracer from the global provider, or None while that provider is the API's
    own placeholder (no SDK set up): then spans and propagation cost nothing."""
    # The API's own global, read directly: get_tracer_provider() looks at the environment on
    # every call until a provider is set, a cost on every request (bench_session).
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    tracer = _tracers.get(id(provider))
    if tracer is None:
        from asyncclient._version import __version__

        tracer = _tracers[id(provider)] = provider.get_tracer(_TRACER_NAME, __version__)
    return tracer


def active() -> bool:
    """Whether spans are being recorded: OpenTelemetry with a provider set up."""
    return ENABLED and _tracer() is not None


@contextlib.contextmanager
def span(name: str, ids: Mapping[str, Any] | None = None, *, client: bool = False) -> Iterator[Any]:
    """A span `asyncclient.NAME` around the block (None without OpenTelemetry or a provider);
    ids become `asyncclient.<name>` attributes; an exception sets the span's error status."""
    tracer = _tracer() if ENABLED else None
    if tracer is None:
        yield None
        return
    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with tracer.start_as_current_span(
        f"asyncclient.{name}", kind=kind, record_exception=True, set_status_on_exception=False
    ) as current:
        if current.is_recording():
            current.set_attribute("asyncclient.operation", name)
            for key, value in (ids or {}).items():
                if isinstance(value, str | int | float | bool):
                    current.set_attribute(f"asyncclient.{key}", value)
        try:
            yield current
        except BaseException as exc:
            if current.is_recording():
                current.set_attribute("error.type", type(exc).__name__)
                current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def record_call(current: Any, status: int, attempts: int) -> None:
    """The answer's status and the attempts made, on the operation's span."""
    if current is None or not current.is_recording():
        return
    if status:
        current.set_attribute("http.response.status_code", status)
    current.set_attribute("asyncclient.attempts", attempts)


def inject(headers: Mapping[str, str]) -> Mapping[str, str]:
    """`headers` with the current span's `traceparent` (and whatever else the global
    propagator writes); the same mapping when there is nothing to add."""
    if not ENABLED or _tracer() is None:
        return headers
    carrier: MutableMapping[str, str] = {}
    propagate.inject(carrier)
    return {**headers, **carrier} if carrier else headers


P = ParamSpec("P")
R = TypeVar("R")


def traced(
    name: str, *id_args: str
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """A span around an async method of the session; `id_args`: the keyword or positional
    arguments (after self) whose values are recorded as ids."""

    def wrap(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        if not ENABLED:
            return method
        names = list(inspect.signature(method).parameters)[1:]

        @functools.wraps(method)
        async def traced_method(*args: P.args, **kwargs: P.kwargs) -> R:
            ids = {key: kwargs.get(key) for key in id_args}
            for index, key in enumerate(names[: len(args) - 1]):
                if key in id_args:
                    ids[key] = args[index + 1]
            with span(name, ids):
                return await method(*args, **kwargs)

        return traced_method

    return wrap
