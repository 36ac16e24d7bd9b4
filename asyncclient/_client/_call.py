"""One logical request and its attempts: a `Call` holds what every attempt sends, set once (its
operation's row of the table, the URL, body, headers, hooks, the telemetry looked up once);
each attempt is an `Exchange` of its own (its number, where it was, the answer's status and
headers, or the failure). The transport (`_transport`) makes and runs them; a download makes one
with its own hooks."""

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp

from asyncclient._client import _telemetry
from asyncclient._core import _wire as wire
from asyncclient._core._operations import Operation
from asyncclient._local._bodies import Body

__all__ = ["Call", "Exchange"]


class Exchange:
    """One attempt of a call, as far as it got: its number, where it was (our own session
    only), the answer's status and headers, or the transport failure (aiohttp's exception, a
    timeout). A new one per attempt: nothing of an earlier attempt is reset or carried over."""

    __slots__ = ("failure", "headers", "number", "phase", "status")

    def __init__(self, number: int) -> None:
        self.number = number
        self.phase: str | None = None
        self.status = 0
        # Read for the request id only when wanted.
        self.headers: Mapping[str, str] | None = None
        self.failure: BaseException | None = None

    @property
    def request_id(self) -> str | None:
        """The service's id of the answer (X-Request-Id and the like), if it gave one."""
        return wire.request_id_of(self.headers)


_NOT_YET: Exchange = Exchange(0)  # read, never written: what a call is before its attempts


class Call:
    """One logical request: what every attempt sends, set once (its operation's row, the URL,
    body, headers, hooks and the telemetry looked up once), and its attempts: how many were
    made and the last one's Exchange."""

    __slots__ = (
        "attempts",
        "consume",
        "data",
        "headers",
        "last",
        "meters",
        "method",
        "operation",
        "params",
        "path",
        "prepare",
        "retries",
        "tracer",
        "transfer",
        "url",
    )

    def __init__(
        self,
        operation: Operation,
        url: str,
        path: str,
        params: Mapping[str, str] | None,
        data: Body,
        headers: Mapping[str, str],
        *,
        prepare: "Callable[[Mapping[str, str]], Awaitable[Mapping[str, str]]] | None" = None,
        consume: "Callable[[aiohttp.ClientResponse], Awaitable[Any]] | None" = None,
        retries: int | None = None,
    ) -> None:
        self.operation = operation
        self.method = operation.method
        # A part upload or download: timed by idle time.
        self.transfer = operation.streams
        self.url = url
        self.path = path
        self.params = params
        self.data = data
        self.headers = headers
        self.prepare = prepare
        self.consume = consume
        self.retries = retries
        # OpenTelemetry's tracer and instruments when an SDK is set up (_telemetry).
        self.tracer: Any
        self.meters: _telemetry.Instruments | None
        self.tracer, self.meters = _telemetry.observers()
        self.attempts = 0
        self.last = _NOT_YET  # each attempt makes its own

    @property
    def op(self) -> str:
        return self.operation.name

    @property
    def idempotent(self) -> bool:
        return self.operation.retry_safe

    @property
    def request_id(self) -> str | None:
        """The service's id of the last answer, if it gave one."""
        return self.last.request_id

    def describe(self) -> str:
        """`METHOD path?query`, for logs (no secrets live in either)."""
        return f"{self.method} {self.target()}"

    def target(self) -> str:
        """Path and query, for logs and messages (no secrets live in either)."""
        path = urlsplit(self.url).path
        if self.params:
            return f"{path}?{self.query()}"
        return path

    def query(self) -> str:
        return urlencode(self.params, safe=",") if self.params else ""
