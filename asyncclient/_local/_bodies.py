"""Request bodies and how each attempt sends them: PartBody (a slice of a file, by sendfile or
aiofiles), `part_body()` (the one check of a part before any request), the idle timer of a
transfer's body, and `attempt_body()` (what aiohttp sends for one attempt: headers, timer, what
to close after), so the transport knows bodies only as `Body`.
"""

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, BinaryIO, Final, TypeAlias

import aiofiles
import aiofiles.os
import aiohttp.payload
from aiofiles.threadpool.binary import AsyncBufferedReader

from asyncclient._core import _checks as checks
from asyncclient._local._opening import open_unleaked
from asyncclient.errors import ValidationError

__all__ = [
    "CHUNK_SIZE",
    "TRANSFER_SLICE",
    "AttemptBody",
    "Body",
    "PartBody",
    "PartBodyPayload",
    "attempt_body",
    "part_body",
    "send_buffer",
    "single",
    "watched",
]

# One type for a PartBody's bytes and plain bytes alike.
_OCTETS: Final = "application/octet-stream"

CHUNK_SIZE: Final = 1 << 20
#: Each slice re-arms the idle timer (docs/performance.md).
TRANSFER_SLICE: Final = 256 << 10


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

    Args:
        path: The file.
        offset: Where the slice starts, in bytes.
        length: How many bytes it holds.
        chunk_size: The size of each read when it is not sent with sendfile.
        progress: Called with the bytes handed to the connection (negative to wind back).
        file: `path` already open for reading in binary mode, shared by the parts.
        on_retry: Called as `on_retry(status, wait)` when an attempt failed and is tried again
            after `wait` seconds (status None: the connection failed or timed out).
    """

    __slots__ = (
        "_sent",
        "_socket",
        "chunk_size",
        "file",
        "length",
        "offset",
        "on_retry",
        "path",
        "progress",
        "send_buffer",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        offset: int,
        length: int,
        *,
        chunk_size: int = CHUNK_SIZE,
        progress: Callable[[int], object] | None = None,
        file: BinaryIO | None = None,
        on_retry: Callable[[int | None, float], object] | None = None,
    ) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError("PartBody offset must be a whole number of bytes, 0 or more")
        checks.check_size(length, "PartBody length")
        checks.check_size(chunk_size, "PartBody chunk_size")
        self.path = os.fspath(path)
        self.offset = offset
        self.length = length
        self.chunk_size = chunk_size
        self.progress = progress
        self.file = file
        self.on_retry = on_retry
        # SO_SNDBUF at the last attempt (0: unknown): taken, not carried.
        self.send_buffer = 0
        self._socket: Any = None  # the attempt's connection, while it sends
        self._sent = 0

    def __repr__(self) -> str:
        return f"PartBody(path={self.path!r}, offset={self.offset}, length={self.length})"

    # --- what a transport sending the part calls -----------------------------------------------

    def rewind(self) -> None:
        """A new attempt: wind progress back over what the last one had sent."""
        if self._sent:
            if self.progress is not None:
                self.progress(-self._sent)
            self._sent = 0

    def advance(self, count: int) -> None:
        """More bytes were handed to the connection.

        Args:
            count: How many.
        """
        self._sent += count
        if self.progress is not None:
            self.progress(count)

    def attach(self, sock: Any) -> None:
        """The attempt goes out on a socket: its send buffer is read now, its send queue while
        it sends (in_transit).

        Args:
            sock: The attempt's connected socket.
        """
        self.send_buffer = send_buffer(sock)
        self._socket = sock

    def detach(self) -> None:
        """The attempt is over: its connection is not this part's any more."""
        self._socket = None

    def in_transit(self) -> int | None:
        """Bytes handed to the connection that its peer has not yet acknowledged (the
        kernel's send queue, on Linux and macOS); None where that cannot be read."""
        sock = self._socket
        if sock is None or _send_queue is None:
            return None
        try:
            return _send_queue(sock)
        except (OSError, ValueError, TypeError):
            return None

    async def open(self) -> AsyncBufferedReader:
        """The file, opened for one attempt (the caller closes it)."""
        return await _open_binary(self.path)


class PartBodyPayload(aiohttp.payload.Payload):
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
        super().__init__(part, content_type=_OCTETS)
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
        self._part.detach()
        task = self._writer
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            # Wait even if cancelled: a shared file outlives sendfile.
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
        part.rewind()
        loop = asyncio.get_running_loop()
        transport: asyncio.WriteTransport | None = getattr(writer, "transport", None)
        sock = None if transport is None else transport.get_extra_info("socket")
        part.attach(sock)
        await self._send_from(writer, part, transport, loop)

    async def _send_from(
        self,
        writer: Any,
        part: PartBody,
        transport: asyncio.WriteTransport | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        source: Any = part.file if part.file is not None else self._handle
        if source is None:
            raise RuntimeError("the part's file was closed before its body was sent")
        raw = source.raw if isinstance(source, AsyncBufferedReader) else source
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
                    # asyncio says this too for an early broken connection.
                    if offset != part.offset:
                        raise ConnectionResetError(
                            "the connection broke while the part was being sent"
                        ) from exc
                    native = False  # refused (a loop or transport without it): read instead
                else:
                    if sent < remaining:
                        # Two turns let an early error answer end the body.
                        await asyncio.sleep(0)
                        await asyncio.sleep(0)
            if not native:
                chunk, sent = await self._read(offset, min(part.chunk_size, remaining))
                view = memoryview(chunk)
                for start in range(0, sent, TRANSFER_SLICE):
                    if start:
                        _reschedule(self._timer, loop.time() + self._idle)
                    await writer.write(view[start : min(sent, start + TRANSFER_SLICE)])
                view.release()
                if isinstance(chunk, bytearray):
                    _give_back(chunk)
                del chunk
            if not sent:
                raise ValidationError(
                    f"{part.path} ended {remaining} bytes before the part's end: the file "
                    "changed during the upload"
                )
            offset += sent
            remaining -= sent
            part.advance(sent)
        _reschedule(self._timer, None)

    async def _read(self, offset: int, size: int) -> tuple[bytearray | bytes, int]:
        """Up to `size` bytes of the file from `offset`, read in a worker thread, and how many.

        With os.preadv the read is positional: it shares the upload's one open file (no open
        per part, no seek: one thread hop per chunk) and fills a buffer kept for reuse. A buffer
        allocated for each chunk costs page faults instead: by a worker thread it moves between
        malloc's per-thread arenas, and at 1 MiB even the loop's own is mapped and unmapped;
        over TLS that was ~35,000 faults per GB at concurrency 4.
        """
        part = self._part
        if _preadv is not None:
            if part.file is not None:
                fd = part.file.fileno()
            else:
                if self._handle is None:
                    self._handle = await part.open()
                fd = self._handle.fileno()
            buffer = _take_buffer(size)
            whole = memoryview(buffer)
            view = whole[:size]
            try:
                got: int = await _preadv(fd, [view], offset)
            finally:
                # Release the views so _give_back sees who really holds the buffer.
                with contextlib.suppress(BufferError):
                    view.release()
                    whole.release()
            return buffer, got
        if self._handle is None:
            self._handle = await part.open()
        await self._handle.seek(offset)
        data: bytes = await self._handle.read(size)
        return data, len(data)


def send_buffer(sock: Any) -> int:
    """The connection's SO_SNDBUF in bytes; 0 when it cannot be read."""
    try:
        return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)) if sock else 0
    except (OSError, AttributeError, TypeError, ValueError):
        return 0


def _queue_reader(platform: str) -> Callable[[Any], int] | None:
    """How this platform reads a TCP socket's unacknowledged bytes: Linux's SIOCOUTQ ioctl,
    macOS's SO_NWRITE option; None elsewhere (Windows)."""
    if platform.startswith("linux"):
        try:
            import fcntl
            import termios
        except ImportError:
            return None
        request = termios.TIOCOUTQ  # SIOCOUTQ on a socket
        empty = bytes(4)

        def linux(sock: Any) -> int:
            return int.from_bytes(fcntl.ioctl(sock.fileno(), request, empty), sys.byteorder)

        return linux
    if platform == "darwin":
        so_nwrite = 0x1024

        def darwin(sock: Any) -> int:
            return int(sock.getsockopt(socket.SOL_SOCKET, so_nwrite))

        return darwin
    return None


_send_queue = _queue_reader(sys.platform)


# Spare read buffers, reused once no transport holds one.
_SPARE_BUFFERS: list[bytearray] = []
_SPARE_MAX: Final = 8


def _take_buffer(size: int) -> bytearray:
    while _SPARE_BUFFERS:
        buffer = _SPARE_BUFFERS.pop()
        if len(buffer) >= size:
            return buffer
    return bytearray(max(size, CHUNK_SIZE))


def _give_back(buffer: bytearray) -> None:
    # The caller's, the argument's and getrefcount's own; more means a view.
    if sys.getrefcount(buffer) <= 3 and len(_SPARE_BUFFERS) < _SPARE_MAX:
        _SPARE_BUFFERS.append(buffer)


_SENDFILE: Final = hasattr(os, "sendfile")
# os.preadv in a thread, as aiofiles runs every file call.
_preadv: Final = aiofiles.os.wrap(os.preadv) if hasattr(os, "preadv") else None


def retrying_body(data: object, status: int | None, wait: float) -> None:
    """An attempt that sent `data` failed and is tried again after `wait` seconds: a part
    says so to its owner (on_retry; status None: the connection failed or timed out)."""
    if isinstance(data, PartBody) and data.on_retry is not None:
        data.on_retry(status, wait)


async def part_body(data: object) -> bytes | PartBody:
    """A part as upload_part takes it, checked before any request: bytes (at least one), or a
    PartBody whose slice lies within its file (as the file is now)."""
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
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        body = bytes(data)
        if not body:
            raise ValidationError("a part must hold at least one byte")
        return body
    raise ValidationError("data must be bytes or a PartBody describing a file slice")


async def _open_binary(path: str) -> AsyncBufferedReader:
    """aiofiles.open(path, "rb") that leaks nothing when cancelled."""
    return await open_unleaked(_aiofiles_open(path), lambda handle: handle.close())


async def _aiofiles_open(path: str) -> AsyncBufferedReader:
    return await aiofiles.open(path, "rb")


#: What a request carries: bytes, a file slice, nothing.
Body: TypeAlias = "bytes | PartBody | None"


class AttemptBody:
    """A transfer's body as one attempt sends it: `data` for aiohttp, the `headers` with its
    length, the `timer` that watches it go out (None: no body to watch), and close() to call
    once the attempt is over, however it ended."""

    __slots__ = ("_payload", "_stream", "data", "headers", "timer")

    def __init__(
        self,
        data: Any,
        headers: Mapping[str, str],
        timer: asyncio.Timeout | None = None,
        *,
        stream: AsyncGenerator[Any, None] | None = None,
        payload: "PartBodyPayload | None" = None,
    ) -> None:
        self.data = data
        self.headers = headers
        self.timer = timer
        self._stream = stream
        self._payload = payload

    async def close(self) -> None:
        # aiohttp unwinds a running stream; an idle one closes here.
        stream = self._stream
        if stream is not None and not getattr(stream, "ag_running", False):
            await stream.aclose()
        if self._payload is not None:
            await self._payload.release()


async def attempt_body(data: Any, headers: Mapping[str, str], idle: float) -> AttemptBody:
    """What one attempt of a transfer sends: `data` (a Body, or an async generator of bytes)
    with `headers` and its Content-Type and Content-Length, its idle timer re-armed `idle`
    seconds ahead as each slice goes out (aiohttp's sock_read only watches the answer)."""
    if isinstance(data, PartBody):
        # A length avoids chunking; close() always closes the file.
        headers = {**headers, "Content-Type": _OCTETS, "Content-Length": str(data.length)}
        timer = asyncio.timeout(None)
        handle = None if data.file is not None else await data.open()
        payload = PartBodyPayload(data, handle, timer, idle)
        return AttemptBody(payload, headers, timer, payload=payload)
    if data is None:
        return AttemptBody(None, headers)
    if isinstance(data, bytes):
        headers = {**headers, "Content-Type": _OCTETS, "Content-Length": str(len(data))}
        data = single(data)
    timer = asyncio.timeout(None)
    stream = watched(data, timer, idle)
    return AttemptBody(stream, headers, timer, stream=stream)


async def single(data: bytes) -> AsyncGenerator[bytes, None]:
    yield data


async def watched(
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
    # An early error answer has already ended the timer.
    with contextlib.suppress(RuntimeError):
        timer.reschedule(when)
