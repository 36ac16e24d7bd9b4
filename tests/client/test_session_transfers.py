"""Part uploads and file downloads against small servers of our own that behave as the emulator
never does: slow links, gzip, odd links, servers that ignore If-Range, borrowed sessions.

A slow link is a server that reads or writes at a fixed rate. Its socket buffers are kept small
(SO_RCVBUF on the listening socket, SO_SNDBUF on the client's): on loopback the kernel would
otherwise take a whole part into its buffers at once, which no slow link does.
"""

import asyncio
import contextlib
import gzip
import hashlib
import os
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web
from body_paths import BodyPath

from asyncclient import AsyncSession, NotFoundError, PartBody, TransportError
from asyncclient.testing import FakeService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Serve = Callable[..., Awaitable[str]]

BUFFER = 8192  # socket buffers and aiohttp's read buffer of the slow links
#: Set when the test ends: what a stalled handler waits for.
STOP = web.AppKey("stop", asyncio.Event)


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """`await serve({(method, path): handler, ...})`: a server's base URL; stopped afterwards.

    Its listening socket and request reading use small buffers, so a slow handler slows the
    client's sending too, as a slow link would. A handler that stalls waits for app[STOP].
    """
    runners: list[web.AppRunner] = []
    stop = asyncio.Event()

    async def start(routes: dict[tuple[str, str], Handler]) -> str:
        app = web.Application()
        app[STOP] = stop
        for (method, path), handler in routes.items():
            app.router.add_route(method, path, handler)
        runner = web.AppRunner(app, access_log=None, read_bufsize=BUFFER, lingering_time=0)
        await runner.setup()
        runners.append(runner)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
        listener.bind(("127.0.0.1", 0))
        await web.SockSite(runner, listener).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    stop.set()
    for runner in runners:
        await runner.cleanup()


def _small_send_buffer(address: Any) -> socket.socket:
    family, kind, proto, *_ = address
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
    return sock


@pytest.fixture
async def slow_link_http() -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session whose connections have small send buffers (see the module doc)."""
    connector = aiohttp.TCPConnector(socket_factory=_small_send_buffer)
    async with aiohttp.ClientSession(connector=connector) as http:
        yield http


def _reading_at(rate: int) -> Handler:
    """An upload_part handler that takes the body in at `rate` bytes/s, then answers."""

    async def put_part(request: web.Request) -> web.Response:
        digest = hashlib.sha256()
        while chunk := await request.content.read(BUFFER):
            digest.update(chunk)
            await asyncio.sleep(len(chunk) / rate)
        number = int(request.match_info["n"])
        return web.json_response({"partNumber": number, "etag": digest.hexdigest()})

    return put_part


PART_ROUTE = ("PUT", "/api/v1/builds/{id}/parts/{n}")


# --- A: transfers are timed by idle time, not by a total ------------------------------------------


async def test_a_part_slower_than_the_timeout_completes_while_it_moves(
    serve: Serve, slow_link_http: aiohttp.ClientSession
) -> None:
    # 1.5 MB at 1 MB/s: 1.5 s in all, more than the timeout, but never 1 s without progress
    # (a margin a loaded machine, running the suite in parallel, keeps).
    url = await serve({PART_ROUTE: _reading_at(1_000_000)})
    data = os.urandom(1_500_000)
    async with AsyncSession(
        "k", url, timeout=1.0, max_retries=0, client_session=slow_link_http
    ) as session:
        part = await session.upload_part("ab_1", 1, data)
    assert part.etag == hashlib.sha256(data).hexdigest()


async def test_a_part_the_server_stops_taking_times_out(
    serve: Serve, slow_link_http: aiohttp.ClientSession
) -> None:
    taken = asyncio.Event()

    async def stalls(request: web.Request) -> web.Response:
        await request.content.read(BUFFER)
        taken.set()
        await request.app[STOP].wait()  # takes no more of the body until the test ends
        return web.Response()

    url = await serve({PART_ROUTE: stalls})
    async with AsyncSession(
        "k", url, timeout=0.2, max_retries=0, client_session=slow_link_http
    ) as session:
        with pytest.raises(TransportError, match=r"no data moved for 0\.2 s \(timeout\)"):
            await session.upload_part("ab_1", 1, b"x" * 2_000_000)
    assert taken.is_set()


async def test_a_file_part_slower_than_the_timeout_completes_while_it_moves(
    serve: Serve, slow_link_http: aiohttp.ClientSession, tmp_path: Path, body_path: BodyPath
) -> None:
    # As above, from a file: by sendfile, or read because the loop refused sendfile.
    url = await serve({PART_ROUTE: _reading_at(1_000_000)})
    path = tmp_path / "app.apk"
    path.write_bytes(os.urandom(1_600_000))
    async with AsyncSession(
        "k", url, timeout=1.0, max_retries=0, client_session=slow_link_http
    ) as session:
        part = await session.upload_part("ab_1", 1, PartBody(path, 100_000, 1_500_000))
    assert part.etag == hashlib.sha256(path.read_bytes()[100_000:]).hexdigest()
    body_path.check()


async def test_a_file_part_the_server_stops_taking_times_out(
    serve: Serve, slow_link_http: aiohttp.ClientSession, tmp_path: Path, body_path: BodyPath
) -> None:
    taken = asyncio.Event()

    async def stalls(request: web.Request) -> web.Response:
        await request.content.read(BUFFER)
        taken.set()
        await request.app[STOP].wait()
        return web.Response()

    url = await serve({PART_ROUTE: stalls})
    path = tmp_path / "app.apk"
    path.write_bytes(os.urandom(2_000_000))
    async with AsyncSession(
        "k", url, timeout=0.2, max_retries=0, client_session=slow_link_http
    ) as session:
        with pytest.raises(TransportError, match=r"no data moved for 0\.2 s \(timeout\)"):
            await session.upload_part("ab_1", 1, PartBody(path, 0, 2_000_000))
    assert taken.is_set()
    body_path.check()
    # Nothing of the attempt is left running.
    assert not [t for t in asyncio.all_tasks() if "write_bytes" in t.get_coro().__qualname__]  # type: ignore[union-attr]


async def test_an_early_answer_stops_a_file_part_being_sent(
    serve: Serve, slow_link_http: aiohttp.ClientSession, tmp_path: Path, body_path: BodyPath
) -> None:
    # The server refuses the part at once, then takes the body slowly: the client reads the
    # answer and stops sending, rather than pushing the whole part first.
    async def refuses(request: web.Request) -> web.StreamResponse:
        response = web.json_response(
            {"error": {"code": "not_found", "message": "no build ab_1"}}, status=404
        )
        await response.prepare(request)
        await response.write_eof()
        taken = 0
        with contextlib.suppress(OSError, aiohttp.ClientError):
            while chunk := await request.content.read(BUFFER):
                taken += len(chunk)
                await asyncio.sleep(len(chunk) / 2_000_000)
        return response

    url = await serve({PART_ROUTE: refuses})
    path = tmp_path / "app.apk"
    path.write_bytes(os.urandom(8 << 20))
    progress: list[int] = []
    async with AsyncSession("k", url, max_retries=0, client_session=slow_link_http) as session:
        with pytest.raises(NotFoundError):
            await session.upload_part(
                "ab_1", 1, PartBody(path, 0, 8 << 20, progress=progress.append)
            )
    assert sum(progress) < 2 << 20  # of 8 MiB: stopped within a few slices of the answer
    body_path.check()


async def test_a_file_part_goes_over_tls_by_reads(tmp_path: Path) -> None:
    # sendfile cannot encrypt: over TLS a part is read and written, and arrives whole.
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    received: list[bytes] = []

    async def put_part(request: web.Request) -> web.Response:
        received.append(await request.read())
        digest = hashlib.sha256(received[-1]).hexdigest()
        return web.json_response({"partNumber": 1, "etag": digest})

    app = web.Application(client_max_size=8 << 20)
    app.router.add_route(*PART_ROUTE, put_part)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = runner.addresses[0][1]
    path = tmp_path / "app.apk"
    content = os.urandom(3 << 20)
    path.write_bytes(content)
    try:
        connector = aiohttp.TCPConnector(ssl=client_context)
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            AsyncSession("k", f"https://127.0.0.1:{port}", client_session=http) as session,
        ):
            part = await session.upload_part("ab_1", 1, PartBody(path, 1000, len(content) - 1000))
    finally:
        await runner.cleanup()
    assert received == [content[1000:]]
    assert part.etag == hashlib.sha256(content[1000:]).hexdigest()


class KeepingWriter:
    """A connection that keeps what it is given without copying it, as a transport may keep a
    slice until the socket takes it: a read buffer reused under it would change those bytes."""

    transport = None  # no socket: the body is read, not sent by sendfile

    def __init__(self, *, keep: bool) -> None:
        self.keep = keep
        self.kept: list[memoryview] = []
        self.copies: list[bytes] = []

    async def write(self, data: memoryview) -> None:
        if self.keep:
            self.kept.append(data)
        self.copies.append(bytes(data))

    async def drain(self) -> None:
        return None


async def test_read_buffers_are_reused_only_when_nothing_holds_them(tmp_path: Path) -> None:
    from asyncclient._local._bodies import _SPARE_BUFFERS, PartBodyPayload

    path = tmp_path / "app.apk"
    content = os.urandom(5 << 20)
    path.write_bytes(content)
    _SPARE_BUFFERS.clear()
    with path.open("rb") as shared:
        for holds in (True, False):
            writer = KeepingWriter(keep=holds)
            body = PartBody(path, 1000, len(content) - 3000, file=shared)
            async with asyncio.timeout(None) as timer:
                payload = PartBodyPayload(body, None, timer, 30.0)
                await payload.write(writer)
                await payload.release()
            sent = content[1000:-2000]
            assert b"".join(writer.copies) == sent  # what went out when it was written
            if holds:
                assert b"".join(writer.kept) == sent  # and still, where a transport kept it
                assert _SPARE_BUFFERS == []  # each held buffer stayed with its holder
            del writer
    # Buffers nobody held went back for reuse: the second body read its 5 chunks into one.
    assert len(_SPARE_BUFFERS) == 1


async def test_a_download_slower_than_the_timeout_completes_while_it_moves(
    serve: Serve, tmp_path: Path
) -> None:
    content = os.urandom(200_000)

    async def trickle(request: web.Request) -> web.StreamResponse:
        # 1.2 s in all, in 20 pieces 60 ms apart: never 0.6 s without a byte (ten times the
        # gap, so a busy machine's pauses do not stop it).
        response = web.StreamResponse(headers={"Content-Length": str(len(content))})
        await response.prepare(request)
        for start in range(0, len(content), 10_000):
            await response.write(content[start : start + 10_000])
            await asyncio.sleep(0.06)
        await response.write_eof()
        return response

    url = await serve({("GET", "/api/v1/runs/j_1/files/video.mp4"): trickle})
    async with AsyncSession("k", url, timeout=0.6, max_retries=0) as session:
        path = await session.download_run_file("j_1", "video.mp4", tmp_path)
    assert path.read_bytes() == content


async def test_a_download_that_stops_moving_times_out(serve: Serve, tmp_path: Path) -> None:
    async def stalls(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "100000"})
        await response.prepare(request)
        await response.write(b"x" * 1000)
        await request.app[STOP].wait()
        return response

    url = await serve({("GET", "/api/v1/runs/j_1/files/video.mp4"): stalls})
    async with AsyncSession("k", url, timeout=0.2, max_retries=0) as session:
        with pytest.raises(TransportError, match=r"no data moved for 0\.2 s"):
            await session.download_run_file("j_1", "video.mp4", tmp_path)


# --- B: downloads ask for the stored bytes --------------------------------------------------------


async def test_a_download_asks_for_no_compression(serve: Serve, tmp_path: Path) -> None:
    content = b"line of a log\n" * 5000
    seen: list[str | None] = []

    async def gzips_when_allowed(request: web.Request) -> web.Response:
        # Like a proxy with gzip on: compresses whenever the client accepts it.
        accepted = request.headers.get("Accept-Encoding")
        seen.append(accepted)
        if accepted is not None and "gzip" in accepted:
            return web.Response(
                body=gzip.compress(content),
                headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"},
            )
        return web.Response(body=content, content_type="text/plain")

    url = await serve({("GET", "/api/v1/runs/j_1/files/log.txt"): gzips_when_allowed})
    async with AsyncSession("k", url, max_retries=0) as session:
        path = await session.download_run_file("j_1", "log.txt", tmp_path)
    assert path.read_bytes() == content
    assert seen == ["identity"]


# --- C: links are percent-decoded once ------------------------------------------------------------


async def test_a_link_with_percent_escapes_is_not_encoded_twice(
    serve: Serve, tmp_path: Path
) -> None:
    asked: list[str] = []

    async def shot(request: web.Request) -> web.Response:
        asked.append(request.raw_path)
        return web.Response(body=b"png bytes", content_type="image/png")

    url = await serve({("GET", "/api/v1/runs/j_1/files/{tail:.+}"): shot})
    async with AsyncSession("k", url, max_retries=0) as session:
        link = f"{url}/api/v1/runs/j_1/files/screenshots/step%201.png"
        from_link = await session.download_run_file("j_1", link, tmp_path)
        # A path is the file's name as it is: here one with a percent sign.
        literal = await session.download_run_file("j_1", "screenshots/100%.png", tmp_path)
    assert asked == [
        "/api/v1/runs/j_1/files/screenshots/step%201.png",
        "/api/v1/runs/j_1/files/screenshots/100%25.png",
    ]
    assert from_link == tmp_path / "step 1.png"
    assert literal == tmp_path / "100%.png"


# --- E: a borrowed session's raise_for_status does not change the errors -------------------------


async def test_a_borrowed_session_that_raises_for_status_still_gives_api_errors(
    service: FakeService, tmp_path: Path
) -> None:
    async with (
        aiohttp.ClientSession(raise_for_status=True) as http,
        AsyncSession(service.run_key, service.url, client_session=http) as session,
    ):
        with pytest.raises(NotFoundError) as info:
            await session.get_run("j_nope")
        assert info.value.code == "not_found"
        with pytest.raises(NotFoundError):
            await session.download_run_file("j_nope", "video.mp4", tmp_path)
        assert (await session.list_builds("p_demo")).builds


# --- K: a resumed download never appends to the bytes of another version -----------------------


async def test_a_resume_starts_over_when_the_server_ignores_if_range(
    serve: Serve, tmp_path: Path
) -> None:
    new = os.urandom(50_000)
    answers: list[tuple[str | None, str | None, int]] = []

    async def ignores_if_range(request: web.Request) -> web.Response:
        # Serves the range asked for, of the current file, whatever If-Range says.
        wanted = request.headers.get("Range")
        headers = {"ETag": '"v2"', "Accept-Ranges": "bytes"}
        if wanted is None:
            answers.append((None, request.headers.get("If-Range"), 200))
            return web.Response(body=new, headers=headers)
        start = int(wanted.removeprefix("bytes=").rstrip("-"))
        answers.append((wanted, request.headers.get("If-Range"), 206))
        headers["Content-Range"] = f"bytes {start}-{len(new) - 1}/{len(new)}"
        return web.Response(status=206, body=new[start:], headers=headers)

    url = await serve({("GET", "/api/v1/runs/j_1/files/video.mp4"): ignores_if_range})
    # The first 1000 bytes of version "v1", left by an interrupted download.
    (tmp_path / "video.mp4.part").write_bytes(b"o" * 1000)
    (tmp_path / "video.mp4.part.etag").write_text('"v1"')
    async with AsyncSession("k", url, max_retries=1) as session:
        path = await session.download_run_file("j_1", "video.mp4", tmp_path)
    assert path.read_bytes() == new
    assert answers == [("bytes=1000-", '"v1"', 206), (None, None, 200)]
    assert sorted(os.listdir(tmp_path)) == ["video.mp4"]


async def test_a_resume_whose_etag_matches_appends(serve: Serve, tmp_path: Path) -> None:
    content = os.urandom(50_000)

    async def ranges(request: web.Request) -> web.Response:
        start = int(request.headers["Range"].removeprefix("bytes=").rstrip("-"))
        return web.Response(
            status=206,
            body=content[start:],
            headers={"ETag": '"v1"', "Content-Range": f"bytes {start}-49999/50000"},
        )

    url = await serve({("GET", "/api/v1/runs/j_1/files/video.mp4"): ranges})
    (tmp_path / "video.mp4.part").write_bytes(content[:1000])
    (tmp_path / "video.mp4.part.etag").write_text('"v1"')
    async with AsyncSession("k", url, max_retries=0) as session:
        path = await session.download_run_file("j_1", "video.mp4", tmp_path)
    assert path.read_bytes() == content
