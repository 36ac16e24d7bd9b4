"""File parts over TLS from threads (asyncclient._client._tls_parts), against small TLS servers
of our own that behave as the emulator never does: they stall, refuse early, close kept
connections, compress or garble their answers. The suites marked `networks` send every
upload's parts this way over TLS; this module is about the edges."""

import ast
import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import re
import socket
import socketserver
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trustme
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asyncclient import (
    ApiError,
    AsyncSession,
    NotFoundError,
    PartBody,
    TransportError,
    UploadedPart,
)
from asyncclient._client import _tls_parts
from asyncclient._client._network import link
from asyncclient.errors import AsyncClientError, ResponseTooLargeError
from asyncclient.testing import FakeService

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@attrs.define
class Server:
    url: str
    ca_file: Path
    peers: list[Any]

    def session(self, **options: Any) -> AsyncSession:
        """A session of our own (so parts go out from threads) that trusts the server."""
        return AsyncSession("k", self.url, ca_file=self.ca_file, **options)


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[Callable[[Handler], Awaitable[Server]]]:
    """`await tls_server(handler)`: a TLS server on loopback calling `handler(reader, writer)`
    for each connection, with a small receive buffer (a slow link's); stopped afterwards."""
    authority = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    servers: list[asyncio.Server] = []
    writers: list[asyncio.StreamWriter] = []

    async def start(handler: Handler) -> Server:
        peers: list[Any] = []

        async def each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peers.append(writer.get_extra_info("peername"))
            writers.append(writer)
            try:
                await handler(reader, writer)
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        listener.bind(("127.0.0.1", 0))
        server = await asyncio.start_server(each, sock=listener, ssl=context)
        servers.append(server)
        port = listener.getsockname()[1]
        return Server(f"https://127.0.0.1:{port}", ca_file, peers)

    yield start
    for server in servers:
        server.close()
    for writer in writers:
        writer.transport.abort()
    for server in servers:
        await server.wait_closed()


async def read_head(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    line, *rest = head.split("\r\n")
    fields = dict(re.findall(r"^([^:\r\n]+):[ \t]*([^\r\n]*)", "\r\n".join(rest), re.M))
    return line, {name.lower(): value for name, value in fields.items()}


def answer(status: int, body: bytes, *extra: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", *extra, "", ""]
    return "\r\n".join(lines).encode() + body


def part_answer(number: int, data: bytes) -> bytes:
    etag = hashlib.sha256(data).hexdigest()
    return answer(200, json.dumps({"partNumber": number, "etag": etag}).encode())


def number_of(line: str) -> int:
    return int(line.split()[1].rsplit("/", 1)[1])


async def taking_parts(received: list[bytes]) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                line, fields = await read_head(reader)
            except asyncio.IncompleteReadError:
                return
            data = await reader.readexactly(int(fields["content-length"]))
            received.append(data)
            writer.write(part_answer(number_of(line), data))
            await writer.drain()

    return handler


@pytest.fixture
def app(tmp_path: Path) -> Path:
    path = tmp_path / "app.apk"
    path.write_bytes(os.urandom(3 << 20))
    return path


async def test_parts_leave_from_threads_over_one_kept_connection(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    received: list[bytes] = []
    server = await tls_server(await taking_parts(received))
    threads: list[str] = []
    body = _tls_parts.PartSender._body

    def recorded(self: Any, *args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return body(self, *args)

    monkeypatch.setattr(_tls_parts.PartSender, "_body", recorded)
    content = app.read_bytes()
    with open(app, "rb") as shared:
        async with server.session() as session:
            for number, offset in enumerate((0, 1 << 20, 2 << 20), 1):
                part = PartBody(app, offset, 1 << 20, file=shared)
                uploaded = await session.upload_part("ab_1", number, part)
                assert (
                    uploaded.etag
                    == hashlib.sha256(content[offset : offset + (1 << 20)]).hexdigest()
                )
    assert received == [content[: 1 << 20], content[1 << 20 : 2 << 20], content[2 << 20 :]]
    assert len(server.peers) == 1  # one TLS connection carried the three
    assert len(threads) == 3
    assert all(name.startswith("asyncclient-part") for name in threads)


async def test_a_kept_connection_the_service_closed_is_not_used(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path
) -> None:
    closed = asyncio.Event()

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, fields = await read_head(reader)
        data = await reader.readexactly(int(fields["content-length"]))
        writer.write(part_answer(number_of(line), data))  # keep-alive, then closes
        await writer.drain()
        writer.close()  # its close_notify, then its FIN
        closed.set()

    server = await tls_server(once)
    retries: list[Any] = []
    async with server.session() as session:
        await session.upload_part(
            "ab_1", 1, PartBody(app, 0, 1 << 20, on_retry=lambda *a: retries.append(a))
        )
        await closed.wait()
        sender = session._t._parts
        assert sender is not None
        ((kept, _),) = sender._idle_connections
        while not _tls_parts._readable(kept.sock):  # noqa: ASYNC110 (a socket, not an event)
            await asyncio.sleep(0.01)  # until the close has reached our socket
        await session.upload_part(
            "ab_1", 2, PartBody(app, 0, 1 << 20, on_retry=lambda *a: retries.append(a))
        )
    assert retries == []  # the closed connection was left, not tried
    assert len(server.peers) == 2


async def stalling(taken: asyncio.Event) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        await reader.read(8192)
        taken.set()
        await asyncio.Event().wait()  # takes no more until the server stops

    return handler


@pytest.fixture
def big(tmp_path: Path) -> Path:
    path = tmp_path / "big.apk"
    path.write_bytes(os.urandom(32 << 20))  # more than the kernel's buffers take
    return path


async def test_a_part_the_service_stops_taking_times_out(
    tls_server: Callable[[Handler], Awaitable[Server]], big: Path
) -> None:
    taken = asyncio.Event()
    server = await tls_server(await stalling(taken))
    path = big
    async with server.session(timeout=0.2, max_retries=0) as session:
        with pytest.raises(TransportError, match=r"no data moved for 0\.2 s \(timeout\)"):
            await session.upload_part("ab_1", 1, PartBody(path, 0, 32 << 20))
    assert taken.is_set()


async def test_cancelling_a_part_stops_its_thread_at_once(
    tls_server: Callable[[Handler], Awaitable[Server]], big: Path
) -> None:
    taken = asyncio.Event()
    server = await tls_server(await stalling(taken))
    path = big
    async with server.session(timeout=600.0) as session:
        with open(path, "rb") as shared:
            task = asyncio.create_task(
                session.upload_part("ab_1", 1, PartBody(path, 0, 32 << 20, file=shared))
            )
            await taken.wait()
            task.cancel()
            # The thread was blocked in a send with 600 s to go: the cancel ends it now.
            done, _ = await asyncio.wait([task], timeout=60)
            assert done
            assert task.cancelled()
            sender = session._t._parts
            assert sender is not None
            assert sender._idle_connections == []
        # The thread no longer reads the shared file (closed above).


async def test_an_early_answer_stops_the_part_being_sent(
    tls_server: Callable[[Handler], Awaitable[Server]], tmp_path: Path
) -> None:
    async def refuses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        error = {"error": {"code": "not_found", "message": "no build ab_1"}}
        writer.write(answer(404, json.dumps(error).encode(), "Content-Type: application/json"))
        await writer.drain()
        while await reader.read(8192):  # noqa: ASYNC110 (then takes the body slowly)
            await asyncio.sleep(0.004)

    server = await tls_server(refuses)
    path = tmp_path / "big.apk"
    path.write_bytes(os.urandom(8 << 20))
    progress: list[int] = []
    async with server.session(max_retries=0) as session:
        with pytest.raises(NotFoundError, match="no build ab_1"):
            await session.upload_part(
                "ab_1", 1, PartBody(path, 0, 8 << 20, progress=progress.append)
            )
    assert sum(progress) < 4 << 20  # of 8 MiB: stopped once the answer came


async def test_a_dropped_attempt_is_wound_back_and_sent_again(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path
) -> None:
    attempts: list[int] = []

    async def drops_the_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, fields = await read_head(reader)
        attempts.append(1)
        if len(attempts) == 1:
            await reader.readexactly(1 << 20)
            writer.transport.abort()  # a reset, halfway
            return
        data = await reader.readexactly(int(fields["content-length"]))
        writer.write(part_answer(number_of(line), data))
        await writer.drain()

    server = await tls_server(drops_the_first)
    progress: list[int] = []
    retries: list[Any] = []
    length = 3 << 20
    async with server.session(backoff_base=0.01) as session:
        part = PartBody(
            app, 0, length, progress=progress.append, on_retry=lambda *a: retries.append(a)
        )
        uploaded = await session.upload_part("ab_1", 1, part)
    assert uploaded.etag == hashlib.sha256(app.read_bytes()).hexdigest()
    assert len(attempts) == 2
    assert len(retries) == 1
    assert min(progress) < 0  # wound back, then sent whole
    assert sum(progress) == length


async def test_a_part_connects_past_an_address_that_never_answers(
    tls_server: Callable[[Handler], Awaitable[Server]],
    app: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Happy eyeballs (RFC 8305), as aiohttp connects: the service's name gives first an
    address that never answers (a listener whose queue is full drops each SYN), then the
    service's. The part goes out on the second at once, in its one attempt; tried in turn,
    the first would hold it for the whole connect timeout and fail it."""
    received: list[bytes] = []
    server = await tls_server(await taking_parts(received))
    port = int(server.url.rsplit(":", 1)[1])
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    filler = socket.create_connection(silent.getsockname())  # the queue is full now
    real_getaddrinfo = socket.getaddrinfo
    asked: list[object] = []

    def addresses(host: Any, service: Any, *args: Any, **kwargs: Any) -> Any:
        found = real_getaddrinfo(host, service, *args, **kwargs)
        if (host, service) != ("127.0.0.1", port):
            return found
        asked.append(host)
        family, kind, proto, name, _ = found[0]
        return [(family, kind, proto, name, silent.getsockname()), *found]

    monkeypatch.setattr(socket, "getaddrinfo", addresses)
    try:
        async with server.session(max_retries=0, connect_timeout=5) as session:
            uploaded = await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
    finally:
        filler.close()
        silent.close()
    assert uploaded.etag == hashlib.sha256(app.read_bytes()[: 1 << 20]).hexdigest()
    assert asked  # the part's own connection asked for the addresses
    assert len(received) == 1


def test_the_part_sender_builds_no_other_librarys_exceptions() -> None:
    """_tls_parts names its failures in the table's own words (_network.link): it imports no
    aiohttp, so it cannot build aiohttp's exceptions to be understood."""
    tree = ast.parse(Path(_tls_parts.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert "aiohttp" not in imported


async def test_a_sessions_part_link_is_the_seam_its_failures_read_by_the_one_table(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path
) -> None:
    """The session sends its parts through one PartLink, chosen once: a link of another make
    put in its place is asked for each attempt, and its failures (the table's own words) are
    retried and said as any transport's."""
    received: list[bytes] = []
    server = await tls_server(await taking_parts(received))

    class Link:
        """Drops the first attempt, breaks the answer of the second and of every one from
        the fifth, and answers the third and fourth."""

        def __init__(self) -> None:
            self.asked: list[str] = []

        async def send(
            self, part: PartBody, method: str, target: str, headers: Any
        ) -> _tls_parts.Answer:
            self.asked.append(f"{method} {target}")
            if len(self.asked) == 1:
                raise link.Dropped("the connection broke (reset)", closed=False)
            if len(self.asked) == 2 or len(self.asked) >= 5:
                raise link.BrokenAnswer("the answer ended before its length")
            body = json.dumps({"partNumber": 1, "etag": "e"}).encode()
            return _tls_parts.Answer(200, {"Content-Type": "application/json"}, body)

        def close(self) -> None:
            pass

    other = Link()
    async with server.session(backoff_base=0.01, max_retries=2) as session:
        await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))  # the real one
        real = session._t._parts
        assert real is not None  # chosen: parts from threads
        real.close()
        session._t._parts = other
        uploaded = await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
        await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))  # the fourth answers
        with pytest.raises(TransportError, match="the answer ended before its length") as e:
            await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
    assert uploaded.etag == "e"
    assert other.asked == ["PUT /api/v1/builds/ab_1/parts/1"] * 7  # 3, 1, and 3 that failed
    assert len(received) == 1  # only the first part went over the wire
    assert "3 attempts" in str(e.value)


@pytest.mark.parametrize(
    ("reply", "error", "words"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 9999999\r\n\r\n{}",
            ResponseTooLargeError,
            "Content-Length",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"200000\r\n"
            + b"x" * (2 << 20),
            ResponseTooLargeError,
            "more than",
        ),
        (b"SSH-2.0-OpenSSH\r\n\r\n", TransportError, "could not be read"),
        (
            b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
            TransportError,
            "could not be read",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{", TransportError, "before its length"),
    ],
    ids=["declared too large", "arrives too large", "not http", "headers without end", "cut short"],
)
async def test_an_answer_out_of_bounds_or_garbled_is_one_error(
    tls_server: Callable[[Handler], Awaitable[Server]],
    app: Path,
    reply: bytes,
    error: type[Exception],
    words: str,
) -> None:
    async def replies(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, fields = await read_head(reader)
        await reader.readexactly(int(fields["content-length"]))
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await tls_server(replies)
    async with server.session(max_retries=0, max_response_bytes=1 << 20) as session:
        with pytest.raises(error, match=words) as raised:
            await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
    assert "\n" not in str(raised.value)
    assert "Bearer" not in str(raised.value)


async def test_a_compressed_answer_is_read(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path
) -> None:
    async def compresses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, fields = await read_head(reader)
        assert fields["accept-encoding"] == "identity"  # asked for none; sent all the same
        data = await reader.readexactly(int(fields["content-length"]))
        body = gzip.compress(json.dumps({"partNumber": 1, "etag": "e" + str(len(data))}).encode())
        writer.write(answer(200, body, "Content-Encoding: gzip"))
        await writer.drain()

    server = await tls_server(compresses)
    async with server.session() as session:
        uploaded = await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
    assert uploaded.etag == f"e{1 << 20}"


@pytest.mark.parametrize("shared", [True, False], ids=["shared file", "own file"])
async def test_parts_are_read_where_there_is_no_positional_read(
    tls_server: Callable[[Handler], Awaitable[Server]],
    app: Path,
    monkeypatch: pytest.MonkeyPatch,
    shared: bool,
) -> None:
    # Windows has no os.preadv: each attempt opens the file and seeks.
    monkeypatch.setattr(_tls_parts, "_preadv", None)
    received: list[bytes] = []
    server = await tls_server(await taking_parts(received))
    content = app.read_bytes()
    with open(app, "rb") as handle:
        async with server.session() as session:
            part = PartBody(app, 1000, 2 << 20, file=handle if shared else None)
            await session.upload_part("ab_1", 1, part)
        assert handle.tell() == 0  # the shared file's position is not used
    assert received == [content[1000 : 1000 + (2 << 20)]]


async def test_a_connection_it_cannot_make_is_left_to_aiohttp_which_says_why(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path
) -> None:
    received: list[bytes] = []
    server = await tls_server(await taking_parts(received))
    async with AsyncSession("k", server.url, max_retries=0) as session:  # the CA not trusted
        with pytest.raises(TransportError) as by_aiohttp:
            await session.get_build("ab_1")
        with pytest.raises(TransportError) as by_part:
            await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
    assert type(by_part.value) is type(by_aiohttp.value)
    assert "is not trusted" in str(by_part.value)
    assert "ca_file" in str(by_part.value)
    assert received == []


async def test_a_borrowed_session_or_a_proxy_keeps_parts_on_aiohttp(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path
) -> None:
    import aiohttp

    received: list[bytes] = []
    server = await tls_server(await taking_parts(received))
    context = ssl.create_default_context(cafile=str(server.ca_file))
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http,
        AsyncSession("k", server.url, client_session=http) as session,
    ):
        await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
        assert session._t._parts is None
    assert len(received) == 1


async def test_a_client_certificate_wanted_is_said_as_for_any_request(app: Path) -> None:
    # The refusal comes once the part is being sent (TLS 1.3): aiohttp's attempt says why.
    async with (
        FakeService(clock="manual", tls=True, require_client_cert=True) as svc,
        AsyncSession(svc.run_key, svc.url, ca_file=svc.ca_file) as session,
    ):
        with pytest.raises(TransportError) as caught:
            await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
    assert caught.value.kind == "client_cert"
    assert caught.value.attempts == 1  # not retried as a dropped connection


class _AnswerAnything(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """A TLS server that takes a part and answers `reply` as it is, then closes."""

    daemon_threads = True
    reply = b""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _AnswerHandler)
        self.context = context


class _AnswerHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _AnswerAnything)
        with server.context.wrap_socket(self.request, server_side=True) as sock:
            sock.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
            got = len(head.split(b"\r\n\r\n", 1)[1])
            while got < length:
                got += len(sock.recv(65536))
            sock.sendall(server.reply)


_HEADERS = st.sampled_from(
    [
        b"Content-Length: 2",
        b"Content-Length: 99999999",
        b"Content-Length: -1",
        b"Transfer-Encoding: chunked",
        b"Content-Encoding: gzip",
        b"Content-Encoding: deflate",
        b"Connection: close",
        b"Content-Type: application/json",
        b"Retry-After: 1",
    ]
) | st.binary(max_size=40).filter(lambda line: b"\r" not in line and b"\n" not in line)

_ANSWERS = st.binary(max_size=300) | st.builds(
    lambda status, headers, body: (
        b"HTTP/1.1 %d X\r\n" % status
        + b"".join(line + b"\r\n" for line in headers)
        + b"\r\n"
        + body
    ),
    st.integers(100, 999),
    st.lists(_HEADERS, max_size=6),
    st.binary(max_size=300) | st.just(b'{"partNumber": 1, "etag": "e"}'),
)


@pytest.fixture(scope="module")
def answering(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[_AnswerAnything, Path]]:
    authority = trustme.CA()
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    server = _AnswerAnything(context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, ca_file
    server.shutdown()
    server.server_close()


_PART_KEY = "part-key-5d1e7f00c3"


@settings(max_examples=60)  # a TLS connection and an event loop each
@given(reply=_ANSWERS)
@example(reply=b"Bearer")  # found under load: the service's own word is no leak
def test_any_answer_to_a_part_is_a_result_or_one_error(
    answering: tuple[_AnswerAnything, Path], reply: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    server, ca_file = answering
    server.reply = reply
    path = ca_file.parent / "part.bin"
    if not path.exists():
        path.write_bytes(os.urandom(64 << 10))
    url = f"https://127.0.0.1:{server.server_address[1]}"

    async def send() -> object:
        async with AsyncSession(
            _PART_KEY, url, ca_file=ca_file, max_retries=0, timeout=5, max_response_bytes=1 << 20
        ) as session:
            try:
                return await session.upload_part("ab_1", 1, PartBody(path, 0, 64 << 10))
            except AsyncClientError as exc:
                return exc

    outcome = asyncio.run(send())
    if isinstance(outcome, AsyncClientError):
        assert "\n" not in str(outcome)
        # The answer may say anything, "Bearer" too: what must never show is our key.
        assert _PART_KEY not in str(outcome)
    else:
        assert isinstance(outcome, UploadedPart)


async def test_kept_connections_idle_too_long_are_closed(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tls_parts, "KEEP_ALIVE", 0.05)
    ended = asyncio.Event()
    received: list[bytes] = []
    taking = await taking_parts(received)

    async def then_notes_the_close(reader: asyncio.StreamReader, writer: Any) -> None:
        await taking(reader, writer)
        ended.set()  # the client closed the connection it kept

    server = await tls_server(then_notes_the_close)
    async with server.session() as session:
        await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
        await asyncio.wait_for(ended.wait(), 30)  # a bound on a hang, not a measure of speed
        sender = session._t._parts
        assert sender is not None
        assert sender._idle_connections == []
        assert sender._executor is None  # its threads end too
        # ... and the next part starts them again.
        await session.upload_part("ab_1", 2, PartBody(app, 0, 1 << 20))
    assert len(received) == 2


async def test_an_error_answers_headers_are_read_in_any_case(
    tls_server: Callable[[Handler], Awaitable[Server]], app: Path
) -> None:
    async def busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, fields = await read_head(reader)
        await reader.readexactly(int(fields["content-length"]))
        error = json.dumps({"error": {"code": "busy", "message": "try later"}}).encode()
        writer.write(answer(503, error, "retry-after: 7", "x-request-id: req_part1"))
        await writer.drain()

    server = await tls_server(busy)
    async with server.session(max_retries=0) as session:
        with pytest.raises(ApiError) as caught:
            await session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20))
    assert caught.value.status == 503
    assert caught.value.retry_after == 7
    assert caught.value.request_id == "req_part1"


class HoldingFront:
    """A TCP front on loopback (threads, not the test's loop: it works while the loop is stuck)
    for a TLS server: it holds the first connection it takes, saying nothing (a handshake that
    never ends), until released; every later one it passes on, both ways."""

    def __init__(self, port: int) -> None:
        self.held = threading.Event()
        self.released = threading.Event()
        self.closed_by_client = threading.Event()
        self._target = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        first = True
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(conn)
            if first:
                first = False
                threading.Thread(target=self._hold, args=(conn,), daemon=True).start()
                continue
            upstream = socket.create_connection(("127.0.0.1", self._target))
            self._sockets.append(upstream)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        self.held.set()
        conn.settimeout(0.05)
        while not self.released.is_set():
            try:
                if conn.recv(65536) == b"":  # the client gave up on it
                    self.closed_by_client.set()
                    return
            except TimeoutError:
                continue
            except OSError:
                self.closed_by_client.set()
                return

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.released.set()
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
async def held_emulator(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[FakeService, HoldingFront]]:
    """The TLS emulator behind a HoldingFront, trusted through truststore's context (the
    default on macOS and Windows; on Linux its OpenSSL flavour, with the same lock)."""
    from asyncclient._client import _network

    monkeypatch.setattr(_network, "trust_store", lambda *_: "truststore")
    async with FakeService(tls=True, clock="manual") as svc:
        front = HoldingFront(svc.port)
        try:
            yield svc, front
        finally:
            front.close()


async def test_a_parts_handshake_that_never_ends_never_stops_the_loops_own(
    held_emulator: tuple[FakeService, HoldingFront], app: Path
) -> None:
    """truststore holds a lock of its context through a blocking handshake, which the loop's
    handshakes wait on: a part's stalled handshake froze the loop (get_build 7.6 s). The
    thread's handshake goes in steps now: the loop's new connection is made while it stalls.
    A watchdog thread releases the held handshake after 60 s: the loop must not need it."""
    import truststore

    svc, front = held_emulator
    watchdog = threading.Timer(60, front.released.set)
    watchdog.start()
    url = f"https://127.0.0.1:{front.port}"
    try:
        async with AsyncSession(svc.run_key, url, ca_file=svc.ca_file,
                                connect_timeout=600) as session:  # fmt: skip
            assert isinstance(session.network.ssl_context, truststore.SSLContext)
            part = asyncio.create_task(session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20)))
            while not front.held.is_set():  # noqa: ASYNC110 (a thread's event)
                await asyncio.sleep(0.01)
            build = await session.get_build(next(iter(svc.backend.builds)))
            assert not front.released.is_set()  # answered while the part's handshake stalls
            part.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await part
    finally:
        watchdog.cancel()
    assert build.id


async def test_cancelling_a_part_whose_handshake_stalls_ends_its_thread_at_once(
    held_emulator: tuple[FakeService, HoldingFront], app: Path
) -> None:
    """Ctrl-C while a part's handshake stalls: its socket is shut down there and then (it held
    the process for the whole connect timeout before: 20.3 s)."""
    svc, front = held_emulator
    url = f"https://127.0.0.1:{front.port}"
    async with AsyncSession(svc.run_key, url, ca_file=svc.ca_file, connect_timeout=600) as session:
        part = asyncio.create_task(session.upload_part("ab_1", 1, PartBody(app, 0, 1 << 20)))
        while not front.held.is_set():  # noqa: ASYNC110 (a thread's event)
            await asyncio.sleep(0.01)
        part.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await part
        # The thread let go of its connection: the front saw it closed (600 s to go otherwise).
        closed = await asyncio.to_thread(front.closed_by_client.wait, 60)
    assert closed


async def test_progress_wakes_the_loop_at_most_once_a_tick() -> None:
    """Slices sent by a part's thread reach the loop in one hand-over per _EVERY seconds,
    not one wake-up per slice: the loop's clock is held, so no timing decides it."""
    loop = asyncio.get_running_loop()
    now = [1000.0]
    loop.time = lambda: now[0]  # type: ignore[method-assign]
    try:
        advanced: list[int] = []
        part: Any = type("Part", (), {"advance": staticmethod(advanced.append)})()
        progress = _tls_parts._Progress(loop, part)

        async def turns() -> None:
            for _ in range(5):
                await asyncio.sleep(0)

        progress.add(1)
        await turns()
        assert advanced == [1]
        for _ in range(100):
            progress.add(1)
            await turns()
        assert advanced == [1], "a hand-over within the tick"
        now[0] += _tls_parts._EVERY
        await turns()
        assert advanced == [1, 100]
    finally:
        del loop.time
