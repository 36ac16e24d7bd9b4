"""AsyncSession: every operation of the service over one aiohttp session, validated, retried, typed.
All requests go through one _request() with `backoff`; PartBody streams a file slice as a body."""

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Literal, Self, TypeVar, Unpack
from urllib.parse import unquote, urlencode, urlsplit

import aiofiles
import aiofiles.os
import aiohttp
import aiohttp.payload
import backoff
import orjson
from aiofiles.threadpool.binary import AsyncBufferedReader

from asyncclient import _protocol as proto
from asyncclient._converter import converter, structure_hook, structure_list, structure_status
from asyncclient._opening import open_unleaked
from asyncclient._version import __version__
from asyncclient.errors import (
    ApiError,
    ConflictError,
    NotFoundError,
    TransportError,
    ValidationError,
    error_from_response,
)
from asyncclient.models import (
    Build,
    BuildList,
    Endpoint,
    ProjectRunStart,
    Run,
    RunStart,
    UploadedPart,
    UploadStart,
)

if TYPE_CHECKING:
    from asyncclient.upload import ItemLike, UploadResult
    from asyncclient.watch import RunWatcher, WatchOptions

__all__ = ["AsyncSession", "PartBody"]

logger = logging.getLogger("asyncclient")

T = TypeVar("T")

CHUNK_SIZE: Final = 1 << 20
#: A transfer's body goes out in slices of at most this size; each slice written re-arms its idle
#: timer. Each slice costs a socket write and a drain (64 KiB slices cost ~0.2 s of CPU per GB);
#: at 256 KiB only a link slower than 256 KiB per `timeout` (8.7 kB/s at 30 s) counts as stalled.
TRANSFER_SLICE: Final = 256 << 10
#: How many `ids` batches of list_runs are fetched at once.
LIST_RUNS_CONCURRENCY: Final = 8

_DEBUG: Final = logging.DEBUG
# orjson decodes run views about twice as fast as the stdlib: most of a watcher's CPU.
_loads: Final = orjson.loads
_dumps: Final = orjson.dumps

# aiohttp failures worth another attempt; TLS and fingerprint failures will not heal by retrying.
_RETRYABLE_TRANSPORT: Final = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    aiohttp.UploadAbortedError,
    TimeoutError,
)
_PERMANENT_TRANSPORT: Final = (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch)
# Failures where the request surely never reached the service: it could not even connect.
_NEVER_SENT: Final = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# Stands in for the idle timer of a transfer's body on every other request.
_NO_DEADLINE: Final = contextlib.nullcontext()


class PartBody:
    """A slice of a file (path, offset, length) sent as a request body.

    Each attempt sends the slice from the file anew: on a plain TCP connection the kernel copies
    it from the page cache (sendfile); otherwise it is read through aiofiles in `chunk_size`
    pieces. A part is never held in memory whole, and a retry sends it again from its start.
    `progress`, if given, is called with the number of bytes handed to the connection, and with
    a negative number winding back what a failed attempt had sent.

    `file`, if given, is `path` already open for reading in binary mode, which the parts of one
    upload can share: an attempt then sends from it without opening the file (sendfile takes
    explicit offsets) and only opens `path` if it has to read. Its owner closes it once the
    parts are done.
    """

    __slots__ = ("_sent", "chunk_size", "file", "length", "offset", "path", "progress")

    def __init__(
        self,
        path: str | os.PathLike[str],
        offset: int,
        length: int,
        *,
        chunk_size: int = CHUNK_SIZE,
        progress: Callable[[int], object] | None = None,
        file: BinaryIO | None = None,
    ) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError("PartBody offset must be a whole number of bytes, 0 or more")
        proto.check_size(length, "PartBody length")
        proto.check_size(chunk_size, "PartBody chunk_size")
        self.path = os.fspath(path)
        self.offset = offset
        self.length = length
        self.chunk_size = chunk_size
        self.progress = progress
        self.file = file
        self._sent = 0

    def __repr__(self) -> str:
        return f"PartBody(path={self.path!r}, offset={self.offset}, length={self.length})"

    def _rewind(self) -> None:
        """A new attempt: wind progress back over what the last one had sent."""
        if self._sent:
            if self.progress is not None:
                self.progress(-self._sent)
            self._sent = 0

    def _advance(self, count: int) -> None:
        """`count` more bytes were handed to the connection."""
        self._sent += count
        if self.progress is not None:
            self.progress(count)

    async def open(self) -> AsyncBufferedReader:
        """The file, opened for one attempt (the caller closes it)."""
        return await _open_binary(self.path)


class _PartPayload(aiohttp.payload.Payload):
    """One attempt at sending a PartBody, as aiohttp's request body.

    On a plain TCP connection the kernel sends the slice from the page cache (`loop.sendfile`):
    the bytes never pass through Python, which saves reading them into buffers and writing
    those into the socket, about 0.3 s of CPU per GB. Where the loop or the connection cannot
    (TLS, uvloop, no os.sendfile), the rest of the slice is read with aiofiles in `chunk_size`
    pieces and written through aiohttp. Either way it goes out in TRANSFER_SLICE pieces, with
    `timer` pushed `idle` seconds ahead before each, so a body that stops moving times out.

    The attempt's owner passes `handle` (the file it opened) unless the part has a shared
    `file`, and calls `release()` when the attempt is over. A body still going out then (a
    timeout, an early answer) is cancelled and waited for first, so no file is closed under a
    pending sendfile.
    """

    def __init__(
        self,
        part: PartBody,
        handle: AsyncBufferedReader | None,
        timer: asyncio.Timeout,
        idle: float,
    ) -> None:
        super().__init__(part, content_type="application/octet-stream")
        self._size = part.length
        self._part = part
        self._handle = handle  # closed by release(); opened on demand for reads
        self._timer = timer
        self._idle = idle
        self._writer: asyncio.Task[Any] | None = None

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("a file part is bytes, not text")

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        await self.write(writer)  # the Content-Length is the part's length: nothing to cut

    async def write(self, writer: Any) -> None:
        self._writer = asyncio.current_task()  # aiohttp's task writing the body
        try:
            await self._send(writer)
        finally:
            self._writer = None

    async def release(self) -> None:
        task = self._writer
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            # Wait for it to unwind (a loop turn or two) even if this wait is cancelled in
            # turn: the file, maybe shared by other parts, must not be closed under a sendfile.
            interrupted = False
            while not task.done():
                try:
                    await asyncio.wait([task])
                except asyncio.CancelledError:
                    interrupted = True
            if interrupted:
                await self._close_handle()
                raise asyncio.CancelledError
        await self._close_handle()

    async def _close_handle(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            await handle.close()

    async def _send(self, writer: Any) -> None:
        part = self._part
        source: Any = part.file if part.file is not None else self._handle
        if source is None:
            raise RuntimeError("the part's file was closed before its body was sent")
        raw = source.raw if isinstance(source, AsyncBufferedReader) else source
        part._rewind()
        loop = asyncio.get_running_loop()
        transport: asyncio.WriteTransport | None = getattr(writer, "transport", None)
        native = (
            _SENDFILE
            and transport is not None
            and transport.get_extra_info("sslcontext") is None  # TLS: the bytes need encrypting
            and hasattr(loop, "sendfile")
        )
        if native:
            send_headers = getattr(writer, "send_headers", None)  # aiohttp >= 3.12 holds them
            if send_headers is not None:
                send_headers()
            await writer.drain()
        offset, remaining = part.offset, part.length
        while remaining > 0:
            _reschedule(self._timer, loop.time() + self._idle)
            sent = 0
            if native and transport is not None:
                size = min(part.chunk_size, TRANSFER_SLICE, remaining)
                try:
                    sent = await loop.sendfile(transport, raw, offset, size, fallback=False)
                except (RuntimeError, NotImplementedError) as exc:
                    # SendfileNotAvailableError (a RuntimeError) is also what asyncio makes of
                    # a connection that broke before a slice's first byte.
                    if offset != part.offset:
                        raise ConnectionResetError(
                            "the connection broke while the part was being sent"
                        ) from exc
                    native = False  # refused (a loop or transport without it): read instead
                else:
                    # Reading is paused during a sendfile: two loop turns let an answer that
                    # came early (an error before the whole body) be read and end the body.
                    await asyncio.sleep(0)
                    await asyncio.sleep(0)
            if not native:
                if self._handle is None:
                    self._handle = await part.open()
                await self._handle.seek(offset)
                chunk = await self._handle.read(min(part.chunk_size, remaining))
                sent = len(chunk)
                for start in range(0, sent, TRANSFER_SLICE):
                    if start:
                        _reschedule(self._timer, loop.time() + self._idle)
                    await writer.write(memoryview(chunk)[start : start + TRANSFER_SLICE])
            if not sent:
                raise ValidationError(
                    f"{part.path} ended {remaining} bytes before the part's end: the file "
                    "changed during the upload"
                )
            offset += sent
            remaining -= sent
            part._advance(sent)
        _reschedule(self._timer, None)


_SENDFILE: Final = hasattr(os, "sendfile")


async def _open_binary(path: str) -> AsyncBufferedReader:
    """aiofiles.open(path, "rb") that leaks nothing when cancelled."""
    return await open_unleaked(_aiofiles_open(path), lambda handle: handle.close())


async def _aiofiles_open(path: str) -> AsyncBufferedReader:
    return await aiofiles.open(path, "rb")


class _Call:
    """One logical request, shared by its attempts."""

    __slots__ = (
        "attempt",
        "consume",
        "data",
        "headers",
        "idempotent",
        "method",
        "op",
        "params",
        "path",
        "prepare",
        "replay",
        "retries",
        "status",
        "transfer",
        "url",
    )

    def __init__(
        self,
        method: str,
        url: str,
        path: str,
        params: Mapping[str, str] | None,
        data: bytes | PartBody | None,
        headers: Mapping[str, str],
        idempotent: bool,
        op: str,
        prepare: "Callable[[Mapping[str, str]], Awaitable[Mapping[str, str]]] | None" = None,
        consume: "Callable[[aiohttp.ClientResponse], Awaitable[Any]] | None" = None,
        retries: int | None = None,
        transfer: bool = False,
    ) -> None:
        self.method = method
        self.url = url
        self.path = path
        self.params = params
        self.data = data
        self.headers = headers
        self.idempotent = idempotent
        self.op = op
        self.prepare = prepare
        self.consume = consume
        self.retries = retries
        # A part upload or a file download: timed by idle time, not by a total (see AsyncSession).
        self.transfer = transfer
        self.attempt = 0
        self.status = 0
        self.replay: proto.RetrySignal | None = None

    def target(self) -> str:
        """Path and query, for logs and messages (no secrets live in either)."""
        path = urlsplit(self.url).path
        if self.params:
            return f"{path}?{urlencode(self.params, safe=',')}"
        return path


def _field(key: str, cls: type[T]) -> Callable[[Any], T]:
    hook = structure_hook(cls)

    def read(payload: Any) -> T:
        return hook(payload[key])

    return read


def _list_field(key: str, cls: type[T]) -> Callable[[Any], list[T]]:
    def read(payload: Any) -> list[T]:
        return structure_list(cls, payload[key])

    return read


_read_build: Final = _field("build", Build)
_read_build_list: Final = structure_hook(BuildList)
_read_upload_start: Final = structure_hook(UploadStart)
_read_uploaded_part: Final = structure_hook(UploadedPart)
_read_run_start: Final = structure_hook(RunStart)
_read_project_run_start: Final = structure_hook(ProjectRunStart)
_read_run: Final = _field("run", Run)
_read_runs: Final = _list_field("runs", Run)
_read_endpoints: Final = _list_field("endpoints", Endpoint)


def _read_raw_runs(payload: Any) -> list[Mapping[str, Any]]:
    runs = payload["runs"]
    if not isinstance(runs, list):
        raise TypeError(f"expected a list of runs, got {type(runs).__name__}")
    # Elements that are not objects with an id cannot be matched to a watched run; skip them.
    return [run for run in runs if isinstance(run, dict) and isinstance(run.get("id"), str)]


def _read_status(payload: Any) -> str:
    return structure_status(payload["status"])


def _read_id(payload: Any) -> str:
    value = payload["id"]
    if not isinstance(value, str):
        raise TypeError("id is not a string")
    return value


def _check_number(name: str, value: object, *, minimum: float, integer: bool = False) -> None:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:  # type: ignore[operator]
        kind = "a whole number" if integer else "a number"
        raise ValidationError(f"{name} must be {kind} of at least {minimum:g}; got {value!r}")


def _check_idempotency_key(key: object) -> str:
    if key is None:
        return str(uuid.uuid4())
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= 255
        or not all(ch.isascii() and ch.isprintable() for ch in key)
    ):
        raise ValidationError("idempotency_key must be 1 to 255 printable ASCII characters")
    return key


def _run_body(
    mode: object, build_ids: object, build_id: object, idempotency_key: object
) -> tuple[dict[str, Any], str]:
    """The checked JSON body and Idempotency-Key of run_test (build_ids None) or run_project."""
    payload: dict[str, Any] = {}
    if mode is not None:
        payload["mode"] = proto.check_choice("mode", mode, proto.MODES)
    if build_ids is not None:
        if isinstance(build_ids, str | bytes) or not isinstance(build_ids, Iterable):
            raise ValidationError("build_ids must be a list of build ids (ab_...)")
        checked = [proto.check_id("build", value, "build_ids") for value in build_ids]
        if len(checked) > proto.IDS_PER_REQUEST:
            raise ValidationError(
                f"build_ids may name at most {proto.IDS_PER_REQUEST} builds (one per app); "
                f"got {len(checked)}"
            )
        if checked:
            payload["buildIds"] = checked
    if build_id is not None:
        payload["buildId"] = proto.check_id("build", build_id)
    return payload, _check_idempotency_key(idempotency_key)


def _describe(
    exc: BaseException, timeout: float, connect_timeout: float | None, *, transfer: bool = False
) -> str:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"could not connect within {connect_timeout:g} s (connect_timeout)"
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(
        exc, aiohttp.ClientSSLError
    ):
        if isinstance(exc.os_error, socket.gaierror):
            # The resolver's codes are negative (EAI_NONAME is -2): os.strerror knows none of
            # them and says "Unknown error -2". aiohttp >= 3.10 raises ClientConnectorDNSError.
            return f"cannot connect to {exc.host}:{exc.port} (the host name could not be resolved)"
        errno = exc.os_error.errno
        reason = os.strerror(errno) if errno else str(exc.os_error)
        return f"cannot connect to {exc.host}:{exc.port} ({reason.lower()})"
    if transfer and isinstance(exc, TimeoutError):
        # Only idle timers run on a transfer: aiohttp's sock_read, or our body's own.
        return f"no data moved for {timeout:g} s (timeout)"
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"no complete answer within {timeout:g} s (timeout)"
    detail = str(exc)
    name = type(exc).__name__
    return f"{name}: {detail}" if detail else name


class AsyncSession:
    """A client of the Test-Run Service: one method per operation.

    api_key / base_url fall back to ASYNCCLIENT_API_KEY / ASYNCCLIENT_BASE_URL. Options:
    timeout (seconds), connect_timeout, max_retries (after the first attempt), backoff_base /
    backoff_max (exponential backoff with full jitter), max_retry_after (cap on a
    service-requested wait, also for the run watcher), connection_limit (open connections),
    client_session (an aiohttp.ClientSession to use instead of our own; never closed by us, and
    its raise_for_status and timeout are overridden per request), user_agent (text appended to
    the User-Agent).

    Timeouts: an ordinary (JSON) request must be answered whole within `timeout` seconds. The
    transfers, upload_part and download_run_file, have no total limit, since a large part or
    file on a slow link may take any time: they fail only when no data moves for `timeout`
    seconds (the body not being taken, or no bytes of the answer arriving), or when connecting
    takes longer than `connect_timeout`.

    Use it as `async with AsyncSession() as s:` or call `await s.close()` when done.
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float | None = 10.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        max_retry_after: float = 60.0,
        connection_limit: int = 64,
        client_session: aiohttp.ClientSession | None = None,
        user_agent: str | None = None,
    ) -> None:
        key = proto.resolve_api_key(api_key, os.environ)
        self._base_url = proto.resolve_base_url(base_url, os.environ)
        _check_number("timeout", timeout, minimum=0.001)
        if connect_timeout is not None:
            _check_number("connect_timeout", connect_timeout, minimum=0.001)
        _check_number("max_retries", max_retries, minimum=0, integer=True)
        _check_number("backoff_base", backoff_base, minimum=0)
        _check_number("backoff_max", backoff_max, minimum=0)
        _check_number("max_retry_after", max_retry_after, minimum=0)
        _check_number("connection_limit", connection_limit, minimum=1, integer=True)
        if client_session is not None and not isinstance(client_session, aiohttp.ClientSession):
            raise ValidationError("client_session must be an aiohttp.ClientSession")
        self._api = self._base_url + proto.API_PREFIX
        self._headers = proto.base_headers(
            key, proto.user_agent(__version__, aiohttp.__version__, user_agent)
        )
        self._timeout_s = float(timeout)
        self._connect_timeout_s = connect_timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._transfer_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=timeout
        )
        self._max_retry_after = float(max_retry_after)
        self._connection_limit = connection_limit
        self._http: aiohttp.ClientSession | None = client_session
        self._owns_http = client_session is None
        self._max_retries = max_retries
        self._closed = False
        # Our own session carries the timeout; a borrowed one gets it on every request. A
        # borrowed session made with raise_for_status=True would turn error answers into
        # aiohttp exceptions: every request asks for the answer itself.
        self._request_options: dict[str, Any] = {
            "allow_redirects": False,
            "raise_for_status": False,
        }
        if client_session is not None:
            self._request_options["timeout"] = self._timeout
        self._transfer_options = {**self._request_options, "timeout": self._transfer_timeout}
        self._wait_gen = functools.partial(
            proto.wait_gen, backoff_base, backoff_max, max_retry_after
        )
        # Retry loops by their number of retries; the session's own is built here, once.
        self._retry_loops: dict[int, Callable[[_Call], Awaitable[Any]]] = {}
        self._retry_loop(max_retries)

    def _retry_loop(self, retries: int) -> Callable[[_Call], Awaitable[Any]]:
        """backoff driving _retry_attempt with our wait generator (Retry-After exactly, else
        full-jitter exponential; see _protocol.wait_gen), built once per number of retries."""
        loop = self._retry_loops.get(retries)
        if loop is None:
            loop = self._retry_loops[retries] = backoff.on_exception(
                self._wait_gen,
                proto.RetrySignal,
                max_tries=retries + 1,
                jitter=None,
                on_backoff=self._log_retry,
                logger=None,
                raise_on_giveup=True,
            )(self._retry_attempt)
        return loop

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def max_retry_after(self) -> float:
        """The longest wait (seconds) a service's Retry-After may impose; longer ones are cut."""
        return self._max_retry_after

    def __repr__(self) -> str:
        return f"<AsyncSession base_url={self._base_url!r}>"

    async def __aenter__(self) -> Self:
        self._ensure_http()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (a client_session passed in is left open)."""
        self._closed = True
        http, self._http = self._http, None
        if http is not None and self._owns_http:
            await http.close()

    def _ensure_http(self) -> aiohttp.ClientSession:
        if self._http is None:
            if self._closed:
                raise RuntimeError("this AsyncSession is closed; create a new one")
            connector = aiohttp.TCPConnector(limit=self._connection_limit)
            http = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            # aiohttp resends an idempotent request once, at once and unseen, when a reused
            # connection drops (RFC 9112 9.3.1.1). Our loop already retries with backoff and
            # counts every attempt (a DELETE's 404 after a retry means done), so a hidden
            # second loop would only skew that; aiohttp's own test client turns it off too.
            if hasattr(http, "_retry_connection"):
                http._retry_connection = False
            self._http = http
        return self._http

    # --- the request core -----------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        body: bytes | PartBody | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
        op: str,
        decode: Callable[[Any], T],
        retries: int | None = None,
        transfer: bool = False,
    ) -> T:
        """Send one request (with retries) and decode its JSON answer with `decode`."""
        request_headers: Mapping[str, str] = self._headers
        if json is not None:
            body = _dumps(json)
            request_headers = {**request_headers, "Content-Type": "application/json"}
        if headers:
            request_headers = {**request_headers, **headers}
        call = _Call(
            method,
            self._api + path,
            path,
            params,
            body,
            request_headers,
            idempotent,
            op,
            retries=retries,
            transfer=transfer,
        )
        raw: bytes = await self._run(call)
        try:
            return decode(_loads(raw) if raw else None)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ApiError(
                call.status,
                "invalid_response",
                f"the answer to {op} could not be read ({type(exc).__name__}: {exc}); "
                f"it began {proto.excerpt(raw, 120)!r}",
                raw.decode("utf-8", "replace"),
                method,
                call.url,
                attempts=call.attempt,
            ) from exc

    async def _run(self, call: _Call) -> Any:
        """Attempt the call, retrying through backoff; on giving up, raise the public error.

        The first attempt runs outside backoff so the common case pays nothing for the retry
        machinery. If it asks for a retry, the backoff loop takes over and its first try
        replays that failure without I/O, so backoff's accounting (tries, waits, giving up)
        covers every attempt exactly as if it had made the first one itself.
        """
        try:
            return await self._attempt(call)
        except proto.RetrySignal as signal:
            retries = self._max_retries if call.retries is None else call.retries
            if retries == 0:
                failure = signal
            else:
                call.replay = signal
                try:
                    return await self._retry_loop(retries)(call)
                except proto.RetrySignal as last:
                    failure = last
        error = failure.error
        error.attempts = call.attempt  # type: ignore[attr-defined]
        raise error from error.__cause__

    async def _retry_attempt(self, call: _Call) -> Any:
        replay = call.replay
        if replay is not None:
            call.replay = None
            raise replay
        return await self._attempt(call)

    async def _attempt(self, call: _Call) -> Any:
        """One attempt. Returns the body (or what call.consume made of the answer); raises
        RetrySignal for a failure worth another attempt, the public error otherwise."""
        call.attempt += 1
        http = self._http or self._ensure_http()
        debug = logger.isEnabledFor(_DEBUG)
        started = time.perf_counter() if debug else 0.0
        headers = call.headers
        if call.prepare is not None:
            headers = await call.prepare(headers)
        data: Any = call.data
        stream: AsyncGenerator[Any, None] | None = None
        payload: _PartPayload | None = None
        deadline: contextlib.AbstractAsyncContextManager[Any] = _NO_DEADLINE
        if isinstance(data, PartBody):
            # An explicit length keeps aiohttp from chunked encoding; the body streams. The file
            # is opened here, not in aiohttp's writer task, so it is closed below whatever
            # becomes of that task (release() first stops a body still going out).
            headers = {
                **headers,
                "Content-Type": "application/octet-stream",
                "Content-Length": str(data.length),
            }
            timer = deadline = asyncio.timeout(None)
            handle = None if data.file is not None else await data.open()
            data = payload = _PartPayload(data, handle, timer, self._timeout_s)
        elif call.transfer and data is not None:
            # aiohttp's sock_read only watches the answer; this watches the body going out.
            if isinstance(data, bytes):
                headers = {**headers, "Content-Length": str(len(data))}
                data = _single(data)
            timer = deadline = asyncio.timeout(None)
            stream = data = _watched(data, timer, self._timeout_s)
        options = self._transfer_options if call.transfer else self._request_options
        try:
            async with (
                deadline,
                http.request(
                    call.method,
                    call.url,
                    params=call.params,
                    data=data,
                    headers=headers,
                    **options,
                ) as resp,
            ):
                status = call.status = resp.status
                consume = call.consume
                if consume is not None and (200 <= status < 300 or status == 416):
                    result = await consume(resp)
                    if debug:
                        self._log_attempt(call, status, started)
                    return result
                body = await resp.read()
                if 200 <= status < 300:
                    if debug:
                        self._log_attempt(call, status, started)
                    return body
                resp_headers = resp.headers
                url = str(resp.url)
        except _RETRYABLE_TRANSPORT as exc:
            if debug:
                self._log_attempt(call, type(exc).__name__, started)
            tries = f", {call.attempt} attempts" if call.attempt > 1 else ""
            error = TransportError(
                f"{self._describe(exc, call)} ({call.method} {call.target()}{tries})",
                method=call.method,
                url=call.url,
                attempts=call.attempt,
            )
            if isinstance(exc, _PERMANENT_TRANSPORT) or not proto.should_retry_transport(
                idempotent=call.idempotent, never_sent=isinstance(exc, _NEVER_SENT)
            ):
                raise error from exc
            error.__cause__ = exc
            raise proto.RetrySignal(error) from exc
        except aiohttp.ClientError as exc:
            if debug:
                self._log_attempt(call, type(exc).__name__, started)
            raise TransportError(
                f"{self._describe(exc, call)} ({call.method} {call.target()})",
                method=call.method,
                url=call.url,
                attempts=call.attempt,
            ) from exc
        finally:
            # A stream still running belongs to aiohttp's writer task, whose cancellation
            # unwinds it (closing the file); an idle one is closed here.
            if stream is not None and not getattr(stream, "ag_running", False):
                await stream.aclose()
            if payload is not None:
                await payload.release()
        if debug:
            self._log_attempt(call, status, started)
        api_error = error_from_response(status, resp_headers, body, call.method, url)
        api_error.attempts = call.attempt
        if call.idempotent and proto.is_retryable_status(status):
            raise proto.RetrySignal(api_error, api_error.retry_after)
        raise api_error

    def _describe(self, exc: BaseException, call: _Call) -> str:
        return _describe(exc, self._timeout_s, self._connect_timeout_s, transfer=call.transfer)

    def _log_attempt(self, call: _Call, outcome: int | str, started: float) -> None:
        logger.debug(
            "%s %s -> %s in %.1f ms (attempt %d, %s)",
            call.method,
            call.target(),
            outcome,
            (time.perf_counter() - started) * 1000.0,
            call.attempt,
            call.op,
        )

    async def _log_retry(self, details: Mapping[str, Any]) -> None:
        call: _Call = details["args"][0]
        logger.info(
            "%s %s: attempt %d failed (%s); retrying in %.2f s",
            call.method,
            call.target(),
            details["tries"],
            details["exception"].error,
            details["wait"],
        )

    # --- builds ---------------------------------------------------------------------------------

    async def list_builds(self, project_id: str) -> BuildList:
        """The project's builds (newest first), the largest build size and the part size."""
        project_id = proto.check_id("project", project_id)
        return await self._request(
            "GET", f"/projects/{project_id}/builds", op="list_builds", decode=_read_build_list
        )

    async def get_build(self, build_id: str) -> Build:
        build_id = proto.check_id("build", build_id)
        return await self._request("GET", f"/builds/{build_id}", op="get_build", decode=_read_build)

    async def start_upload(
        self, project_id: str, file_name: str, size: int, label: str | None = None
    ) -> UploadStart:
        """Create a build in `uploading` state; answers its id, part size and part count.

        Retried like an idempotent call: a retry after a lost answer can at worst leave an
        empty `uploading` build behind, which never runs.
        """
        project_id = proto.check_id("project", project_id)
        payload: dict[str, Any] = {
            "fileName": proto.check_file_name(file_name),
            "size": proto.check_size(size),
        }
        if label is not None:
            if not isinstance(label, str):
                raise ValidationError("label must be a string (for example a commit id)")
            payload["label"] = label
        return await self._request(
            "POST",
            f"/projects/{project_id}/builds",
            json=payload,
            op="start_upload",
            decode=_read_upload_start,
        )

    async def upload_part(
        self, build_id: str, part_number: int, data: bytes | bytearray | memoryview | PartBody
    ) -> UploadedPart:
        """Send one part (bytes, or a PartBody streamed from a file); safe to retry.

        Timed by idle time, not by a total: see the AsyncSession docstring."""
        build_id = proto.check_id("build", build_id)
        part_number = proto.check_part_number(part_number)
        body: bytes | PartBody
        if isinstance(data, PartBody):
            try:
                if data.file is not None:  # open already: no thread needed to ask its size
                    file_size = os.fstat(data.file.fileno()).st_size
                else:
                    file_size = (await aiofiles.os.stat(data.path)).st_size
            except OSError as exc:
                raise ValidationError(f"cannot read {data.path}: {exc.strerror}") from exc
            if data.offset + data.length > file_size:
                raise ValidationError(
                    f"the part {data.offset}+{data.length} runs past the end of {data.path} "
                    f"({file_size} bytes)"
                )
            body = data
        elif isinstance(data, bytes | bytearray | memoryview):
            body = bytes(data)
            if not body:
                raise ValidationError("a part must hold at least one byte")
        else:
            raise ValidationError("data must be bytes or a PartBody describing a file slice")
        headers = (
            None if isinstance(body, PartBody) else {"Content-Type": "application/octet-stream"}
        )
        return await self._request(
            "PUT",
            f"/builds/{build_id}/parts/{part_number}",
            body=body,
            headers=headers,
            op="upload_part",
            decode=_read_uploaded_part,
            transfer=True,
        )

    async def complete_upload(self, build_id: str, parts: Sequence[UploadedPart]) -> Build:
        """Finish an upload; answers the checked build, or raises BuildRejectedError (422)."""
        build_id = proto.check_id("build", build_id)
        if isinstance(parts, str | bytes) or not isinstance(parts, Iterable):
            raise ValidationError("parts must be the list of UploadedPart from upload_part")
        listed = list(parts)
        if not listed:
            raise ValidationError("parts is empty: list every UploadedPart from upload_part")
        if not all(isinstance(part, UploadedPart) for part in listed):
            raise ValidationError("parts must hold the UploadedPart values upload_part returned")
        payload = {"parts": [converter.unstructure(part) for part in listed]}
        return await self._request(
            "POST",
            f"/builds/{build_id}/complete",
            json=payload,
            op="complete_upload",
            decode=_read_build,
        )

    async def delete_build(self, build_id: str) -> None:
        """Delete a build (needs an edit key). A retry that finds it gone counts as done."""
        build_id = proto.check_id("build", build_id)
        await self._delete(f"/builds/{build_id}", "delete_build")

    async def _delete(self, path: str, op: str) -> None:
        try:
            await self._request("DELETE", path, op=op, decode=_ignore)
        except NotFoundError as exc:
            # An earlier attempt may have deleted it before its answer was lost.
            if exc.attempts <= 1:
                raise

    # --- runs -----------------------------------------------------------------------------------

    async def run_test(
        self,
        test_id: str,
        mode: str | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> RunStart:
        """Start a run of one test. Sends an Idempotency-Key (a new uuid4 unless given) and
        reuses it on every retry, so retries never start a second run."""
        test_id = proto.check_id("test", test_id)
        payload, key = _run_body(mode, None, build_id, idempotency_key)
        return await self._request(
            "POST",
            f"/tests/{test_id}/run",
            json=payload,
            headers={"Idempotency-Key": key},
            op="run_test",
            decode=_read_run_start,
        )

    async def run_project(
        self,
        project_id: str,
        mode: str | None = None,
        build_ids: Sequence[str] | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ProjectRunStart:
        """Start a run of every test of a project; NotStartedError when none could start."""
        project_id = proto.check_id("project", project_id)
        payload, key = _run_body(mode, build_ids, build_id, idempotency_key)
        return await self._request(
            "POST",
            f"/projects/{project_id}/run",
            json=payload,
            headers={"Idempotency-Key": key},
            op="run_project",
            decode=_read_project_run_start,
        )

    async def list_runs(
        self,
        ids: Iterable[str] | None = None,
        test_id: str | None = None,
        project_id: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        *,
        retries: int | None = None,
    ) -> list[Run]:
        """Runs, newest first; with `ids`, those runs (full view) in the order asked.

        More than 50 ids are fetched in batches of 50, LIST_RUNS_CONCURRENCY at once; ids the
        service does not know are left out. With ids, `limit` keeps the first runs in that order.
        `retries` overrides the session's max_retries for this call (a poller that handles 429
        itself passes 0).
        """
        if retries is not None:
            _check_number("retries", retries, minimum=0, integer=True)
        params: dict[str, str] = {}
        if test_id is not None:
            params["testId"] = proto.check_id("test", test_id)
        if project_id is not None:
            params["projectId"] = proto.check_id("project", project_id)
        if status is not None:
            params["status"] = proto.check_choice("status", status, proto.RUN_STATUSES)
        if ids is None:
            if limit is not None:
                params["limit"] = str(proto.check_limit(limit))
            return await self._request(
                "GET", "/runs", params=params, op="list_runs", decode=_read_runs, retries=retries
            )
        if limit is not None:
            proto.check_limit(limit)
        wanted = proto.check_run_ids(ids)
        batches = list(proto.batched(wanted, proto.IDS_PER_REQUEST))
        if len(batches) == 1:
            found = await self._list_run_batch(batches[0], params, retries)
        else:
            gate = asyncio.Semaphore(LIST_RUNS_CONCURRENCY)

            async def fetch(batch: Sequence[str]) -> list[Run]:
                async with gate:
                    return await self._list_run_batch(batch, params, retries)

            found = [run for runs in await _gather(fetch(b) for b in batches) for run in runs]
        by_id = {run.id: run for run in found}
        ordered = [by_id[run_id] for run_id in wanted if run_id in by_id]
        return ordered if limit is None else ordered[:limit]

    async def _list_runs_json(
        self, batch: Sequence[str], retries: int | None = None
    ) -> list[Mapping[str, Any]]:
        """One `GET /runs?ids=` of at most 50 ids already checked by the caller, answered as the
        service's JSON objects: the run watcher builds a Run only for the runs that changed."""
        return await self._request(
            "GET",
            "/runs",
            params={"ids": ",".join(batch)},
            op="list_runs",
            decode=_read_raw_runs,
            retries=retries,
        )

    async def _list_run_batch(
        self, batch: Sequence[str], filters: Mapping[str, str], retries: int | None
    ) -> list[Run]:
        # No limit goes to the service: its default (50) covers a whole batch.
        params = {**filters, "ids": ",".join(batch)}
        return await self._request(
            "GET", "/runs", params=params, op="list_runs", decode=_read_runs, retries=retries
        )

    async def get_run(self, run_id: str) -> Run:
        run_id = proto.check_id("run", run_id)
        return await self._request("GET", f"/runs/{run_id}", op="get_run", decode=_read_run)

    async def stop_run(self, run_id: str) -> str:
        """Stop a queued or running run; answers its status (cancelled). If an earlier attempt
        stopped it and only the answer was lost, the run's current status is returned."""
        run_id = proto.check_id("run", run_id)
        try:
            return await self._request(
                "POST", f"/runs/{run_id}/stop", op="stop_run", decode=_read_status
            )
        except ConflictError as exc:
            if exc.attempts <= 1 or exc.code != "invalid_state":
                raise
        return (await self.get_run(run_id)).status

    async def download_run_file(self, run_id: str, file: str, dest: str | os.PathLike[str]) -> Path:
        """Download a run file (a path such as screenshots/01.png, or the link from the run) to
        dest (a file path, or an existing directory to keep the file's own name).

        A link (a full http(s) URL) is percent-decoded as URLs are; a path is taken as the
        file's name as it is (`step%201.png` names a file with a percent sign). Streams to
        `<dest>.part`, resuming a partial one with Range/If-Range (starting over if the file
        changed since), and renames it to dest once whole. Asks for the bytes as they are stored
        (`Accept-Encoding: identity`). Timed by idle time, not by a total: see the AsyncSession
        docstring. Returns the final path.
        """
        run_id = proto.check_id("run", run_id)
        rel = proto.run_file_path(run_id, file)
        target = Path(dest)
        if await aiofiles.os.path.isdir(target):
            target = target / unquote(rel.rsplit("/", 1)[-1])
        elif not await aiofiles.os.path.isdir(target.parent):
            raise ValidationError(
                f"cannot save to {target}: the folder {target.parent} does not exist "
                "(create it, or pass an existing folder as dest)"
            )
        path = f"/runs/{run_id}/files/{rel}"
        download = _Download(target, self._api + path)
        call = _Call(
            "GET",
            download.url,
            path,
            None,
            None,
            # Byte counts and ranges are of the stored file: no compression on the way.
            {**self._headers, "Accept": "*/*", "Accept-Encoding": "identity"},
            True,
            "download_run_file",
            prepare=download.prepare,
            consume=download.consume,
            transfer=True,
        )
        await self._run(call)
        await download.finish()
        return target

    # --- tester endpoints -----------------------------------------------------------------------

    async def list_endpoints(self, project_id: str) -> list[Endpoint]:
        project_id = proto.check_id("project", project_id)
        return await self._request(
            "GET", f"/projects/{project_id}/endpoints", op="list_endpoints", decode=_read_endpoints
        )

    async def add_endpoint(
        self,
        project_id: str,
        name: str,
        description: str,
        url: str,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        body_template: str | None = None,
    ) -> str:
        """Register a tester endpoint (needs an edit key); answers its id. Header values are
        sent once and never logged. Not idempotent: retried only when the request could not
        have reached the service (it could not connect)."""
        project_id = proto.check_id("project", project_id)
        payload = proto.check_endpoint(name, description, url, method, headers, body_template)
        return await self._request(
            "POST",
            f"/projects/{project_id}/endpoints",
            json=payload,
            idempotent=False,
            op="add_endpoint",
            decode=_read_id,
        )

    async def delete_endpoint(self, endpoint_id: str) -> None:
        endpoint_id = proto.check_id("endpoint", endpoint_id)
        await self._delete(f"/endpoints/{endpoint_id}", "delete_endpoint")

    # --- uploads and watching: the work lives in upload.py and watch.py ----------------------

    async def upload_build(
        self,
        project_id: str,
        path: str | os.PathLike[str],
        *,
        label: str | None = None,
        concurrency: int = 4,
        progress: Callable[[int, int], object] | None = None,
        skip_existing: bool = False,
        journal_dir: str | os.PathLike[str] | None = None,
    ) -> Build:
        """Start, upload the parts in parallel, complete; returns the checked, verified build.

        See asyncclient.upload.upload_build for the details (pre-flight, resume, checksums).
        """
        from asyncclient.upload import upload_build

        return await upload_build(
            self,
            project_id,
            path,
            label=label,
            concurrency=concurrency,
            progress=progress,
            skip_existing=skip_existing,
            journal_dir=journal_dir,
        )

    async def upload_builds(
        self,
        items: "Iterable[ItemLike]",
        *,
        project_id: str | None = None,
        max_parts_in_flight: int = 16,
        concurrency: int | None = None,
        progress: Callable[[Path, int, int], object] | None = None,
        skip_existing: bool = False,
        journal_dir: str | os.PathLike[str] | None = None,
        on_result: "Callable[[UploadResult], object] | None" = None,
    ) -> "list[UploadResult]":
        """Upload many builds at once, sharing one budget of `max_parts_in_flight` parts.

        items: paths, (path, label) pairs or UploadItems; each goes to its UploadItem.project_id,
        else to `project_id`. One result per item, in input order: the build or the error; one
        failing build does not stop the others. See asyncclient.upload.upload_builds.
        """
        from asyncclient.upload import upload_many

        return await upload_many(
            self,
            items,
            project_id=project_id,
            max_parts_in_flight=max_parts_in_flight,
            concurrency=concurrency,
            progress=progress,
            skip_existing=skip_existing,
            journal_dir=journal_dir,
            on_result=on_result,
        )

    def watch_runs(
        self,
        run_ids: Iterable[str],
        *,
        interval: float = 3.0,
        max_interval: float = 30.0,
        timeout: float | None = None,
        stop_on_timeout: bool = False,
        **options: "Unpack[WatchOptions]",
    ) -> "RunWatcher":
        """`async for run in session.watch_runs(ids)`: a Run each time a run's status changes.

        See asyncclient.watch.RunWatcher for every option.
        """
        from asyncclient.watch import watch_runs

        return watch_runs(
            self,
            run_ids,
            interval=interval,
            max_interval=max_interval,
            timeout=timeout,
            stop_on_timeout=stop_on_timeout,
            **options,
        )

    async def wait_for_runs(
        self,
        run_ids: Iterable[str],
        *,
        interval: float = 3.0,
        max_interval: float = 30.0,
        timeout: float | None = None,  # noqa: ASYNC109 - spans many sweeps, then stops runs
        stop_on_timeout: bool = False,
        **options: "Unpack[WatchOptions]",
    ) -> list[Run]:
        """Wait until every run is final; their final views in the order asked."""
        from asyncclient.watch import wait_for_runs

        return await wait_for_runs(
            self,
            run_ids,
            interval=interval,
            max_interval=max_interval,
            timeout=timeout,
            stop_on_timeout=stop_on_timeout,
            **options,
        )


def _ignore(_payload: Any) -> None:
    return None


async def _gather(coros: Iterable[Awaitable[T]]) -> list[T]:
    """gather that cancels (and awaits) the others when one fails, so none is left running."""
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _single(data: bytes) -> AsyncGenerator[bytes, None]:
    yield data


async def _watched(
    source: AsyncGenerator[bytes, None], timer: asyncio.Timeout, idle: float
) -> AsyncGenerator[bytes | memoryview, None]:
    """A transfer's body in slices of at most TRANSFER_SLICE bytes, with `timer` pushed `idle`
    seconds ahead before each one.

    aiohttp asks for the next slice only once the last one is handed to the connection (it
    drains the connection after each write), so a body that stops moving for `idle` seconds
    times the request out however long the whole body takes. Once the body is out the timer is
    lifted: aiohttp's sock_read then watches the answer.
    """
    loop = asyncio.get_running_loop()
    try:
        async for chunk in source:
            if len(chunk) <= TRANSFER_SLICE:  # a file chunk: as it is, no copy, no view
                _reschedule(timer, loop.time() + idle)
                yield chunk
                continue
            view = memoryview(chunk)
            for start in range(0, len(view), TRANSFER_SLICE):
                _reschedule(timer, loop.time() + idle)
                yield view[start : start + TRANSFER_SLICE]
        _reschedule(timer, None)
    finally:
        await source.aclose()


def _reschedule(timer: asyncio.Timeout, when: float | None) -> None:
    # An answer that came before the whole body (an early error) has already ended the timer.
    with contextlib.suppress(RuntimeError):
        timer.reschedule(when)


class _Download:
    """State of one download_run_file: the .part file on disk and the ETag it came from."""

    def __init__(self, target: Path, url: str) -> None:
        self.target = target
        self.url = url
        self.part = target.with_name(target.name + ".part")
        self.etag_file = target.with_name(target.name + ".part.etag")
        self.offset = 0
        self.total: int | None = None
        self.complete = False
        self.validator: str | None = None  # the If-Range of this attempt

    async def prepare(self, headers: Mapping[str, str]) -> Mapping[str, str]:
        """Per attempt: ask for what is not yet on disk."""
        self.validator = None
        try:
            self.offset = (await aiofiles.os.stat(self.part)).st_size
        except FileNotFoundError:
            self.offset = 0
        if self.offset == 0:
            return headers
        extra = {"Range": f"bytes={self.offset}-"}
        etag = await self._read_etag()
        if etag:
            # If the file changed since, the service answers 200 with all of it.
            extra["If-Range"] = self.validator = etag
        return {**headers, **extra}

    async def consume(self, resp: aiohttp.ClientResponse) -> None:
        status = resp.status
        if status == 416:
            total = proto.parse_unsatisfied_range(resp.headers.get("Content-Range"))
            if total is not None and total == self.offset:
                self.total = total
                self.complete = True
                return
            await self._discard()
            raise self._retry(f"the service refused the range bytes={self.offset}- (416)")
        if status == 206:
            content_range = proto.parse_content_range(resp.headers.get("Content-Range"))
            if content_range is None or content_range[0] != self.offset:
                await self._discard()
                raise self._retry(
                    f"asked for bytes from {self.offset}, the service sent "
                    f"{resp.headers.get('Content-Range')!r}"
                )
            if self.validator is not None and resp.headers.get("ETag") != self.validator:
                # A server that ignores If-Range sends the rest of a changed file: appending it
                # to the old bytes would make a file that never existed. Start over, at once.
                await self._discard()
                raise self._retry(
                    "the file changed since the partial download (another ETag) and the "
                    "service sent a range of the new one",
                    at_once=True,
                )
            self.total = content_range[2]
            mode: Literal["ab", "wb"] = "ab"
        else:
            # 200: the whole file (a first attempt, or the file changed): start over.
            self.offset = 0
            self.total = resp.content_length
            mode = "wb"
        etag = resp.headers.get("ETag")
        if etag:
            async with aiofiles.open(self.etag_file, "w") as handle:
                await handle.write(etag)
        written = self.offset
        async with aiofiles.open(self.part, mode) as handle:
            async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                await handle.write(chunk)
                written += len(chunk)
        if self.total is not None and written != self.total:
            raise self._retry(f"got {written} of {self.total} bytes")
        self.offset = written
        self.complete = True

    async def finish(self) -> None:
        if not self.complete:
            raise TransportError(
                f"the download of {self.target.name} did not complete", method="GET", url=self.url
            )
        await aiofiles.os.replace(self.part, self.target)
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self.etag_file)

    async def _read_etag(self) -> str | None:
        try:
            async with aiofiles.open(self.etag_file) as handle:
                text: str = await handle.read()
        except FileNotFoundError:
            return None
        text = text.strip()
        return text or None

    async def _discard(self) -> None:
        for path in (self.part, self.etag_file):
            with contextlib.suppress(FileNotFoundError):
                await aiofiles.os.remove(path)
        self.offset = 0

    def _retry(self, reason: str, *, at_once: bool = False) -> proto.RetrySignal:
        error = TransportError(
            f"download of {self.target.name}: {reason}", method="GET", url=self.url
        )
        return proto.RetrySignal(error, 0.0 if at_once else None)
