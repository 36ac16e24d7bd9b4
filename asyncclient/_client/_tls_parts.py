"""File parts over TLS from threads: each goes out on a blocking TLS socket whose OpenSSL writes
its records straight to the kernel, as curl does; asyncio's TLS encrypts into a memory buffer
and copies each record out (docs/performance.md). The transport sends a PartBody here on its own
session, directly (no proxy); a connection this module cannot make is left to aiohttp, which
says why."""

import asyncio
import contextlib
import functools
import http.client
import io
import os
import select
import selectors
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, Protocol

import aiohappyeyeballs

from asyncclient._client._network import Network
from asyncclient._client._network.bounded import Kept, Over
from asyncclient._client._network.link import BrokenAnswer, Dropped, NotConnected
from asyncclient._local._bodies import PartBody
from asyncclient.errors import ValidationError

__all__ = ["Answer", "PartLink", "PartSender", "TooLarge", "Unconnected"]

#: Each read of the file and write into TLS (256 KiB: see docs/performance.md).
SLICE: Final = 256 << 10
# An idle connection older than this is closed, not reused (aiohttp's own keep-alive).
KEEP_ALIVE: Final = 15.0
# aiohttp's own delay between the addresses' connection attempts.
HAPPY_EYEBALLS_DELAY: Final = 0.25
# Answers are read in steps of this size.
_STEP: Final = 64 << 10
# Progress reaches the loop at most this often (a fifth of the upload tuner's tick).
_EVERY: Final = 0.01
_INFLATE: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 0}
_preadv: Final = getattr(os, "preadv", None)
_poll: Final = getattr(select, "poll", None)
# Headers this module writes itself.
_OURS: Final = frozenset({"accept-encoding", "content-length", "content-type", "host"})


class Unconnected(Exception):
    """No connection could be made: the attempt goes to aiohttp, whose error says why."""


class TooLarge(Exception):
    """The answer is over the session's max_response_bytes (`seen` says how it showed)."""

    def __init__(self, seen: str, status: int, headers: Mapping[str, str]) -> None:
        super().__init__(seen)
        self.seen = seen
        self.status = status
        self.headers = headers


class Answer:
    """A part's answer: status, headers and the body (an error's cut to `keep` bytes)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class PartLink(Protocol):
    """What sends a session's file parts, chosen once per session (httpx's `handle_request` is
    the model): one attempt in, its Answer out, its failures raised as the failure table's
    own (`_network.link`), never as another library's. PartSender is the one over TLS from
    threads; a session without it sends parts on aiohttp with every other request."""

    async def send(
        self, part: PartBody, method: str, target: str, headers: Mapping[str, str]
    ) -> Answer: ...

    def close(self) -> None: ...


class _Job:
    """One attempt, shared by the loop and the thread sending it."""

    __slots__ = ("_lock", "aborted", "part", "progress", "sock")

    def __init__(self, part: PartBody, progress: "_Progress | None") -> None:
        self.part = part
        self.progress = progress
        self.sock: ssl.SSLSocket | None = None
        self.aborted = False
        self._lock = threading.Lock()

    def connecting(self, sock: ssl.SSLSocket) -> None:
        """The socket being connected: an abort shuts it down, its handshake too."""
        with self._lock:
            if self.aborted:
                raise _Aborted
            self.sock = sock

    def attach(self, sock: ssl.SSLSocket) -> None:
        with self._lock:
            if self.aborted:
                raise _Aborted
            self.sock = sock
        self.part.attach(sock)

    def abort(self) -> bool:
        """Stop the thread: shut its socket down under its blocking call. False when it had
        no socket yet: it stops before it reads the part's file (attach)."""
        with self._lock:
            self.aborted = True
            sock = self.sock
        if sock is None:
            return False
        with contextlib.suppress(OSError):
            # The plain socket's shutdown: SSLSocket's drops its TLS state under the thread.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        return True


class _Progress:
    """Bytes sent, handed to the part's progress on the loop at most once every _EVERY
    seconds: one wake-up of the loop per hand-over, not one per slice."""

    __slots__ = ("_last", "_lock", "_loop", "_part", "_pending", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop, part: PartBody) -> None:
        self._loop = loop
        self._part = part
        self._pending = 0
        self._scheduled = False
        self._last = -_EVERY
        self._lock = threading.Lock()

    def add(self, count: int) -> None:
        with self._lock:
            self._pending += count
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop has closed
            self._loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        """On the loop: hand over now, or when _EVERY has passed since the last hand-over."""
        due = self._last + _EVERY
        if due <= self._loop.time():
            self.flush()
        else:
            self._loop.call_at(due, self.flush)

    def flush(self) -> None:
        with self._lock:
            count, self._pending, self._scheduled = self._pending, 0, False
        self._last = self._loop.time()
        if count:
            self._part.advance(count)


class PartSender:
    """Sends PartBody requests to one host over TLS, each from a thread of its own, and keeps
    the connections between them (at most `limit` threads and idle connections)."""

    def __init__(
        self,
        network: Network,
        *,
        limit: int,
        connect_timeout: float | None,
        idle: float,
        max_response_bytes: int,
        keep: int,
    ) -> None:
        self._host = network.host
        self._port = network.port
        self._context = network.ssl_context  # None: the process's default, made once
        self._connect_timeout = connect_timeout
        self._idle = idle
        self._limit = limit
        self._max = max_response_bytes
        self._keep = keep
        # Its threads end once no part has gone out for KEEP_ALIVE (_reap).
        self._executor: ThreadPoolExecutor | None = None
        self._sending = 0
        self._lock = threading.Lock()
        self._idle_connections: list[tuple[http.client.HTTPConnection, float]] = []
        self._local = threading.local()
        self._closed = False
        self._reaper: asyncio.TimerHandle | None = None

    def close(self) -> None:
        """Close the idle connections; threads still sending end with their attempts."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        with self._lock:
            idle, self._idle_connections = self._idle_connections, []
        for connection, _ in idle:
            connection.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _reap(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Close the idle connections kept past KEEP_ALIVE; come back while any is kept. With
        none kept and no part going out, the threads end too (a service's session is idle)."""
        self._reaper = None
        expired = time.monotonic() - KEEP_ALIVE
        with self._lock:
            old = [c for c, since in self._idle_connections if since <= expired]
            self._idle_connections = [e for e in self._idle_connections if e[1] > expired]
            kept = bool(self._idle_connections)
        for connection in old:
            connection.close()
        if kept and loop is not None and not self._closed:
            self._reaper = loop.call_later(KEEP_ALIVE, self._reap, loop)
        elif not kept and not self._sending and self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    @staticmethod
    def takes(data: object) -> bool:
        """Whether `data` is a body this sends: a file part."""
        return type(data) is PartBody

    async def send(
        self, part: PartBody, method: str, target: str, headers: Mapping[str, str]
    ) -> Answer:
        """One attempt: `method` `target` (path and query) with `headers` and the part as
        its body. Raises the failure table's own (NotConnected, Dropped, BrokenAnswer),
        TimeoutError when nothing moved for `idle` seconds, Unconnected, TooLarge."""
        loop = asyncio.get_running_loop()
        part.rewind()
        job = _Job(part, _Progress(loop, part) if part.progress is not None else None)
        done: asyncio.Future[Answer] = loop.create_future()
        reused = self._reused()
        timeout = self._connect_timeout if self._connect_timeout is not None else self._idle
        deadline = time.monotonic() + timeout
        connected = reused if reused is not None else await self._open(loop, deadline)
        try:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._limit, thread_name_prefix="asyncclient-part"
                )
            future = self._executor.submit(
                self._exchange, job, connected, deadline, method, target, headers
            )
        except BaseException:  # closed meanwhile: no thread takes the connection
            connected.close()
            raise
        future.add_done_callback(lambda _: _settle(loop, done, future, connected))
        self._sending += 1
        try:
            try:
                return await asyncio.shield(done)
            except asyncio.CancelledError:
                done.add_done_callback(_retrieved)  # the cancellation is what is raised
                if job.abort():
                    # The part's file must outlive the thread's reads of it.
                    while not done.done():
                        with contextlib.suppress(asyncio.CancelledError):
                            await asyncio.wait([done])
                raise
        finally:
            self._sending -= 1
            part.detach()
            if job.progress is not None:
                job.progress.flush()
            if self._reaper is None and not self._closed:
                self._reaper = loop.call_later(KEEP_ALIVE, self._reap, loop)

    async def _open(self, loop: asyncio.AbstractEventLoop, deadline: float) -> socket.socket:
        """A new TCP connection to the service, made on the loop as aiohttp makes its own:
        every address the name has, tried by happy eyeballs (RFC 8305), so an address family
        that does not answer costs a quarter of a second, not the connect timeout."""
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                addresses = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
                raw = await aiohappyeyeballs.start_connection(
                    addresses, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY, loop=loop
                )
        except TimeoutError:
            raise self._connect_timed_out() from None
        except OSError as exc:
            raise Unconnected(exc) from None
        raw.setblocking(True)
        return raw

    # --- in the thread ------------------------------------------------------------------------

    def _exchange(
        self,
        job: _Job,
        connected: "_Connection | socket.socket",
        deadline: float,
        method: str,
        target: str,
        headers: Mapping[str, str],
    ) -> Answer:
        reused = connected if isinstance(connected, _Connection) else None
        connection = reused or self._connect(job, connected, deadline)
        try:
            with _Source(job.part) as read:
                sock = connection.sock
                assert isinstance(sock, ssl.SSLSocket)
                job.attach(sock)
                _request_line(connection, method, target, headers, job.part.length)
                try:
                    early = self._body(job, sock, read)
                except OSError as exc:
                    if job.aborted or _timed_out(exc):
                        raise
                    early = b""  # the service may have answered why it stopped reading
                    if (response := _early(sock, early, method)) is None:
                        raise
                else:
                    if early is None:
                        response = _response(connection)
                    elif (response := _early(sock, early, method)) is None:
                        raise _closed()
                answer = self._answer(response)
                if early is not None:
                    connection.close()  # the body was cut short: the connection is done
        except (Dropped, BrokenAnswer):
            connection.close()
            raise
        except OSError as exc:
            connection.close()
            if job.aborted:
                raise _Aborted from None
            if reused is None and _refused_tls(exc):
                # A new connection's TLS refused (a client certificate wanted): aiohttp's
                # attempt finds why.
                raise Unconnected(exc) from None
            if _timed_out(exc):
                raise TimeoutError() from None  # "no data moved", in the transport's words
            raise _dropped(exc) from None
        except BaseException:
            connection.close()
            raise
        if connection.sock is None:  # the answer said it closes
            connection.close()
        else:
            self._keep_idle(connection)
        return answer

    def _reused(self) -> "_Connection | None":
        """An idle connection the service has not closed since, if any."""
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._idle_connections:
                    return None
                connection, since = self._idle_connections.pop()
            sock = connection.sock
            if now - since < KEEP_ALIVE and sock is not None and _quiet(sock):
                assert isinstance(connection, _Connection)
                return connection
            connection.close()

    def _keep_idle(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle_connections) < self._limit:
                self._idle_connections.append((connection, time.monotonic()))
                return
        connection.close()

    def _connect(self, job: _Job, raw: Any, deadline: float) -> "_Connection":
        """TLS on the new connection `raw`, its handshake done by `deadline`."""
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = (self._context or _default_context()).wrap_socket(
                raw, server_hostname=self._host, do_handshake_on_connect=False
            )
        except (OSError, ValueError) as exc:
            raw.close()
            raise Unconnected(exc) from None
        try:
            job.connecting(sock)
            _handshake(sock, deadline)
        except TimeoutError:
            sock.close()
            raise self._connect_timed_out() from None
        except (OSError, ValueError) as exc:
            sock.close()
            if job.aborted:
                raise _Aborted from None
            raise Unconnected(exc) from None
        except BaseException:
            sock.close()
            raise
        sock.settimeout(self._idle)
        connection = _Connection(self._host, self._port)
        connection.sock = sock
        return connection

    def _connect_timed_out(self) -> BaseException:
        if self._connect_timeout is None:
            return TimeoutError()
        return NotConnected(f"no connection to {self._host} in time")

    def _body(self, job: _Job, sock: ssl.SSLSocket, read: Any) -> bytes | None:
        """Send the part; None once it is out, or the first bytes of an answer that came
        before its end (the service refused it early: the rest is not sent)."""
        part = job.part
        buffer = self._buffer()
        view = memoryview(buffer)
        step = min(SLICE, part.chunk_size)
        offset, remaining = part.offset, part.length
        while remaining > 0:
            got = read(view[: min(step, remaining)], offset)
            if not got:
                raise ValidationError(
                    f"{part.path} ended {remaining} bytes before the part's end: the file "
                    "changed during the upload"
                )
            sock.sendall(view[:got])
            offset += got
            remaining -= got
            if job.progress is not None:
                job.progress.add(got)
            if remaining and (sock.pending() or _readable(sock)):
                early = self._early_bytes(sock)
                if early is not None:
                    return early
        return None

    def _early_bytes(self, sock: ssl.SSLSocket) -> bytes | None:
        """What arrived while the body went out: the start of an answer, or None when it was
        only TLS's own messages (TLS 1.3 session tickets come after the handshake)."""
        sock.settimeout(0.0)
        try:
            data = sock.recv(_STEP)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None
        finally:
            sock.settimeout(self._idle)
        if not data:
            raise _closed()
        return data

    def _buffer(self) -> bytearray:
        """This thread's read buffer, kept for its next part."""
        buffer: bytearray | None = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = self._local.buffer = bytearray(SLICE)
        return buffer

    def _answer(self, response: http.client.HTTPResponse) -> Answer:
        status = response.status
        headers = _Headers(response.headers)
        keep = None if 200 <= status < 300 else self._keep
        try:
            body = _read_bounded(response, self._max, keep)
        except Over as over:
            raise TooLarge(str(over), status, headers) from None
        finally:
            response.close()  # else its reader keeps the socket open
        return Answer(status, headers, body)


class _Headers(Mapping[str, str]):
    """An answer's headers, looked up by any case (the first of a repeated one)."""

    def __init__(self, message: http.client.HTTPMessage) -> None:
        self._message = message

    def __getitem__(self, name: str) -> str:
        value = self._message.get(name)
        if value is None:
            raise KeyError(name)
        return str(value)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(self._message.keys()))

    def __len__(self) -> int:
        return len(dict.fromkeys(self._message.keys()))


class _Connection(http.client.HTTPConnection):
    """http.client's request writing and answer reading, on a socket made by PartSender."""

    default_port = 443  # no ":443" in the Host header


class _Aborted(Exception):
    """The loop called the attempt off (job.abort)."""


def _timed_out(exc: OSError) -> bool:
    return isinstance(exc, TimeoutError)


def _request_line(
    connection: http.client.HTTPConnection,
    method: str,
    target: str,
    headers: Mapping[str, str],
    length: int,
) -> None:
    connection.putrequest(method, target, skip_accept_encoding=True)
    try:
        for name, value in headers.items():
            if name.lower() not in _OURS:
                connection.putheader(name, value)
    except ValueError:
        # http.client's words would show the value: a key, perhaps.
        raise ValidationError(f"the header {name!r} holds a character HTTP forbids") from None
    connection.putheader("Accept-Encoding", "identity")
    connection.putheader("Content-Type", "application/octet-stream")
    connection.putheader("Content-Length", str(length))
    connection.endheaders()


def _response(connection: http.client.HTTPConnection) -> http.client.HTTPResponse:
    try:
        return connection.getresponse()
    except http.client.RemoteDisconnected:
        raise _closed() from None
    except http.client.HTTPException as exc:
        raise BrokenAnswer(f"the answer could not be read ({exc!r:.200})") from None


def _early(sock: ssl.SSLSocket, start: bytes, method: str) -> http.client.HTTPResponse | None:
    """The answer that began with `start` (read on from `sock`), or None if none came."""
    response = http.client.HTTPResponse(_Rest(start, sock), method=method)  # type: ignore[arg-type]
    try:
        response.begin()
    except (OSError, http.client.HTTPException):
        response.close()
        return None
    return response


class _Rest(io.RawIOBase):
    """`start`, then what `sock` reads: http.client reads an answer from it (by makefile)."""

    def __init__(self, start: bytes, sock: ssl.SSLSocket) -> None:
        super().__init__()
        self._start = memoryview(start)
        self._sock = sock

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._start:
            count = min(len(buffer), len(self._start))
            buffer[:count] = self._start[:count]
            self._start = self._start[count:]
            return count
        return self._sock.recv_into(buffer)


def _refused_tls(exc: OSError) -> bool:
    """A TLS alert from the service, not a connection that merely ended."""
    ended = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
    return isinstance(exc, ssl.SSLError) and not isinstance(exc, ended)


def _closed() -> Dropped:
    return Dropped("the service closed the connection", closed=True)


def _dropped(exc: OSError) -> Dropped:
    """A connection that broke as `exc` says: a service that closed or reset it is one that
    disconnected (the transport then looks closer once)."""
    closed = (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError)
    if isinstance(exc, closed):
        return _closed()
    if isinstance(exc, ssl.SSLError):
        return Dropped(f"the connection broke (TLS: {exc.reason or exc})", closed=False)
    return Dropped(f"the connection broke ({exc.strerror or type(exc).__name__})", closed=False)


def _read_bounded(response: http.client.HTTPResponse, limit: int, keep: int | None) -> bytes:
    """The answer within the limits, as bounded.read_bounded reads aiohttp's (one Kept), but
    inflated here: http.client does not."""
    encoding = (response.getheader("Content-Encoding") or "").strip().lower()
    wbits = _INFLATE.get(encoding)
    kept = Kept(limit, keep)
    if not encoding:
        kept.declared(response.length)
    inflater = zlib.decompressobj(wbits) if wbits is not None else None
    try:
        while raw := response.read1(_STEP):
            kept.add(raw if inflater is None else inflater.decompress(raw, kept.room()))
    except http.client.IncompleteRead:
        raise BrokenAnswer("the answer ended before its length") from None
    except zlib.error:
        raise BrokenAnswer(f"the answer's {encoding} could not be read") from None
    if response.length:  # http.client's read1 ends quietly at a cut
        raise BrokenAnswer("the answer ended before its length")
    response.close()  # read whole: its connection can carry the next request
    return kept.body()


def _handshake(sock: ssl.SSLSocket, deadline: float) -> None:
    """The TLS handshake in non-blocking steps, waiting for the socket between them: a context
    that locks itself for each step (truststore's, the default on macOS and Windows) is never
    held while the service takes its time, so the loop's own handshakes on it go on. An abort
    (the socket shut down) or the deadline ends it."""
    sock.settimeout(0.0)
    with selectors.DefaultSelector() as waiting:
        waiting.register(sock, selectors.EVENT_READ)
        while True:
            try:
                sock.do_handshake()
                return
            except ssl.SSLWantReadError:
                events = selectors.EVENT_READ
            except ssl.SSLWantWriteError:
                events = selectors.EVENT_WRITE
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            waiting.modify(sock, events)
            if not waiting.select(left):
                raise TimeoutError


def _readable(sock: socket.socket) -> bool:
    """Whether `sock` has something to read (or was closed) now, without waiting."""
    if _poll is not None:
        poller = _poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([sock], [], [], 0)  # Windows: no poll, no FD_SETSIZE cap
    return bool(readable)


def _quiet(sock: socket.socket) -> bool:
    """An idle connection with nothing to read: the service has not closed it."""
    try:
        return isinstance(sock, ssl.SSLSocket) and not sock.pending() and not _readable(sock)
    except (OSError, ValueError):
        return False


class _Source:
    """Reads of the part's file at an offset: the shared file's descriptor by os.preadv, else
    the file opened for this attempt (Windows has no positional read)."""

    def __init__(self, part: PartBody) -> None:
        self._part = part
        self._own: Any = None

    def __enter__(self) -> Any:
        part = self._part
        if _preadv is not None and part.file is not None:
            fd = part.file.fileno()
            return lambda view, offset: _preadv(fd, [view], offset)
        try:
            self._own = open(part.path, "rb", buffering=0)
        except OSError as exc:
            raise ValidationError(f"cannot read {part.path}: {exc.strerror}") from None
        if _preadv is not None:
            fd = self._own.fileno()
            return lambda view, offset: _preadv(fd, [view], offset)
        own = self._own

        def read(view: memoryview, offset: int) -> int:
            own.seek(offset)
            return int(own.readinto(view) or 0)

        return read

    def __exit__(self, *exc: object) -> None:
        if self._own is not None:
            self._own.close()


@functools.cache
def _default_context() -> ssl.SSLContext:
    """The verifying context every session without one of its own shares, made in the first
    part's thread (loading the CA file blocks): aiohttp's default, as aiohttp makes it."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


def _retrieved(done: "asyncio.Future[Answer]") -> None:
    if not done.cancelled():
        done.exception()


def _settle(
    loop: asyncio.AbstractEventLoop,
    done: "asyncio.Future[Answer]",
    future: Future[Any],
    connected: "_Connection | socket.socket",
) -> None:
    """The thread's outcome, onto `done` on the loop; a connection no thread took (the
    sender closed first) is closed."""
    if future.cancelled():
        connected.close()

    def settle() -> None:
        if done.done():
            return
        if future.cancelled() or isinstance(future.exception(), _Aborted):
            done.cancel()
        elif (error := future.exception()) is not None:
            done.set_exception(error)
        else:
            done.set_result(future.result())

    with contextlib.suppress(RuntimeError):  # the loop has closed
        loop.call_soon_threadsafe(settle)
