"""Against a hostile service: small servers written here answer with huge bodies (declared and
chunked), error pages of 512 MiB, gzip bombs, bodies shorter than their Content-Length and
stalls. The client reads within its limit, says so in one line naming the limit and how to
raise it, never retries an answer that would be as large, and its memory stays bounded: peak
RSS is read from the kernel's accounting of the `asyncclient` process (os.wait4), not timed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import attrs
import pytest
from measure_support import LAUNCHER, Finished, run_measured

from asyncclient import AsyncSession, ResponseTooLargeError, ServerError, TransportError
from asyncclient.testing import recorded_retry_waits

MiB = 1 << 20
HUGE = 512 * MiB
API_KEY = "hostile-test-key-4e1f0a9b"

Writer = Callable[[asyncio.StreamWriter], Awaitable[None]]


@attrs.define
class Hostile:
    """A raw HTTP/1.1 server on loopback: each request is answered by `answer` on its own
    connection, which is then closed; counts requests and the body bytes it got out."""

    answer: Writer
    requests: int = 0
    sent: int = 0
    url: str = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")  # the GETs of these tests carry no body
            self.requests += 1
            await self.answer(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: what a bounded reader does
        finally:
            writer.close()

    async def stream(self, writer: asyncio.StreamWriter, total: int, *, chunked: bool) -> None:
        """`total` bytes of JSON-looking text, 1 MiB at a time, as fast as the client reads."""
        block = b"[" + b" " * (MiB - 1)
        while total > 0:
            data = block[: min(total, MiB)]
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            await writer.drain()
            self.sent += len(data)
            total -= len(data)
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()


def builds_answer(padding: int) -> bytes:
    """A valid List builds answer, padded to about `padding` bytes by a field unknown to us."""
    return b'{"builds": [], "maxBytes": 1000, "partBytes": 100, "pad": "%s"}' % (b"x" * padding)


def head(status: str, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", "Connection: close"]
    return ("\r\n".join([*lines, *headers]) + "\r\n\r\n").encode()


@pytest.fixture
async def hostile() -> AsyncIterator[Callable[[Writer], Awaitable[Hostile]]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Writer) -> Hostile:
        server_state = Hostile(answer)
        server = await asyncio.start_server(server_state._serve, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        server_state.url = f"http://127.0.0.1:{port}"
        return server_state

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.fixture(scope="session")
def gzip_bomb() -> bytes:
    """1 GiB of zeros, gzipped: about 1 MB on the wire."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MiB)
    return b"".join([*(packer.compress(zeros) for _ in range(1024)), packer.flush()])


# --- the kinds of hostile answer ------------------------------------------------------------


def declared(status: str = "200 OK", size: int = HUGE) -> Callable[[Hostile], Writer]:
    def make(server: Hostile) -> Writer:
        async def answer(writer: asyncio.StreamWriter) -> None:
            writer.write(head(status, f"Content-Length: {size}"))
            await server.stream(writer, size, chunked=False)

        return answer

    return make


def chunked(status: str = "200 OK", size: int = HUGE) -> Callable[[Hostile], Writer]:
    def make(server: Hostile) -> Writer:
        async def answer(writer: asyncio.StreamWriter) -> None:
            writer.write(head(status, "Transfer-Encoding: chunked"))
            await server.stream(writer, size, chunked=True)

        return answer

    return make


def bomb(body: bytes) -> Callable[[Hostile], Writer]:
    def make(server: Hostile) -> Writer:
        async def answer(writer: asyncio.StreamWriter) -> None:
            writer.write(head("200 OK", "Content-Encoding: gzip", f"Content-Length: {len(body)}"))
            writer.write(body)
            await writer.drain()
            server.sent += len(body)

        return answer

    return make


async def serve(
    hostile: Callable[[Writer], Awaitable[Hostile]], kind: Callable[[Hostile], Writer]
) -> Hostile:
    holder: list[Hostile] = []

    async def answer(writer: asyncio.StreamWriter) -> None:
        await kind(holder[0])(writer)

    holder.append(await hostile(answer))
    return holder[0]


# --- the library ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["declared", "chunked"])
async def test_an_answer_over_the_limit_is_refused_once_and_not_read_on(
    hostile: Callable[[Writer], Awaitable[Hostile]], kind: str
) -> None:
    server = await serve(hostile, declared() if kind == "declared" else chunked())
    async with AsyncSession(API_KEY, server.url, max_response_bytes=MiB) as session:
        with pytest.raises(ResponseTooLargeError) as caught:
            await session.list_builds("p_1")
    error = caught.value
    assert server.requests == 1  # not retried: the next answer would be as large
    assert error.limit == MiB
    assert error.kind == "too_large"
    assert error.attempts == 1
    seen = (
        f"Content-Length {HUGE:,} bytes"
        if kind == "declared"
        else "more than 1,048,576 bytes arrived"
    )
    assert str(error) == (
        "the answer to GET /api/v1/projects/p_1/builds is larger than the limit of 1,048,576 "
        f"bytes ({seen}): if it is genuine, raise the limit with max_response_bytes= or "
        "ASYNCCLIENT_MAX_RESPONSE_BYTES"
    )
    # What got out before the client hung up: the limit and the sockets' buffers, not 512 MiB.
    assert server.sent < 32 * MiB


@pytest.mark.parametrize("kind", ["declared", "chunked"])
async def test_an_error_answer_over_the_limit_is_not_retried(
    hostile: Callable[[Writer], Awaitable[Hostile]], kind: str
) -> None:
    make = declared if kind == "declared" else chunked
    server = await serve(hostile, make("500 Internal Server Error"))
    with recorded_retry_waits() as waits:
        async with AsyncSession(API_KEY, server.url, max_response_bytes=MiB) as session:
            with pytest.raises(ResponseTooLargeError, match=r"the 500 answer to GET .* 1,048,576"):
                await session.list_builds("p_1")
    assert server.requests == 1
    assert waits == []
    assert server.sent < 32 * MiB


async def test_an_error_page_is_read_only_as_far_as_its_message_on_each_retry(
    hostile: Callable[[Writer], Awaitable[Hostile]],
) -> None:
    """A 500 whose body is under the limit but far longer than any message: each attempt keeps
    its first 64 KiB and drops the rest as it arrives."""
    message = b'{"error": {"code": "internal", "message": "the gateway broke"}}'
    page = message + b" " * (4 * MiB)

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(head("500 Internal Server Error", f"Content-Length: {len(page)}") + page)
        await writer.drain()

    server = await hostile(answer)
    with recorded_retry_waits() as waits:
        async with AsyncSession(API_KEY, server.url, max_retries=2) as session:
            with pytest.raises(ServerError) as caught:
                await session.list_builds("p_1")
    assert server.requests == 3
    assert len(waits) == 2
    assert caught.value.status == 500
    assert "the gateway broke" in str(caught.value)


async def test_a_gzip_bomb_is_stopped_at_the_limit_after_inflating(
    hostile: Callable[[Writer], Awaitable[Hostile]], gzip_bomb: bytes
) -> None:
    server = await serve(hostile, bomb(gzip_bomb))
    async with AsyncSession(API_KEY, server.url, max_response_bytes=MiB) as session:
        with pytest.raises(ResponseTooLargeError, match="more than 1,048,576 bytes arrived"):
            await session.list_builds("p_1")
    assert server.requests == 1


async def test_answers_within_the_limit_are_read_whole_compressed_or_not(
    hostile: Callable[[Writer], Awaitable[Hostile]],
) -> None:
    body = builds_answer(MiB - 100)
    packed = zlib.compress(body, wbits=31)
    answers = iter([head("200 OK", f"Content-Length: {len(body)}") + body])

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(next(answers, b""))
        await writer.drain()

    server = await hostile(answer)
    async with AsyncSession(API_KEY, server.url, max_response_bytes=MiB) as session:
        assert not (await session.list_builds("p_1")).builds
        answers = iter(
            [head("200 OK", "Content-Encoding: gzip", f"Content-Length: {len(packed)}") + packed]
        )
        assert not (await session.list_builds("p_1")).builds


async def test_a_body_shorter_than_its_length_fails_after_the_retries(
    hostile: Callable[[Writer], Awaitable[Hostile]],
) -> None:
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(head("200 OK", "Content-Length: 1000") + b'{"builds": [')
        await writer.drain()  # then the connection closes

    server = await hostile(answer)
    with recorded_retry_waits():
        async with AsyncSession(API_KEY, server.url, max_retries=2) as session:
            with pytest.raises(TransportError) as caught:
                await session.list_builds("p_1")
    assert server.requests == 3
    assert caught.value.attempts == 3
    assert not isinstance(caught.value, ResponseTooLargeError)


def test_the_limit_is_checked_before_any_request() -> None:
    for bad in (0, 1023, -1, 1.5, True, "big"):
        with pytest.raises(ValueError, match="max_response_bytes must be a whole number"):
            AsyncSession(API_KEY, "http://127.0.0.1:9", max_response_bytes=bad)  # type: ignore[arg-type]


# --- the command, in its own process: peak memory from the kernel -----------------------------


async def cli(server: Hostile, tmp_path: Path, *argv: str, **env: str) -> Finished:
    environ = {
        **os.environ,
        "ASYNCCLIENT_BASE_URL": server.url,
        "ASYNCCLIENT_API_KEY": API_KEY,
        "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
        **env,
    }
    return await asyncio.to_thread(run_measured, list(argv), environ, tmp_path)


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
@pytest.mark.parametrize(
    "case", ["512 MiB answer", "512 MiB chunked", "500 with 512 MiB", "gzip bomb of 1 GiB"]
)
async def test_the_command_stays_under_128_mib_and_says_the_limit(
    hostile: Callable[[Writer], Awaitable[Hostile]],
    gzip_bomb: bytes,
    tmp_path: Path,
    case: str,
) -> None:
    kind = {
        "512 MiB answer": declared(),
        "512 MiB chunked": chunked(),
        "500 with 512 MiB": chunked("500 Internal Server Error"),
        "gzip bomb of 1 GiB": bomb(gzip_bomb),
    }[case]
    server = await serve(hostile, kind)

    done = await cli(server, tmp_path, "builds", "list", "p_1")

    assert done.code == 4, done.stderr
    (line,) = done.stderr.splitlines()  # one line, no traceback
    assert "is larger than the limit of 33,554,432 bytes" in line
    assert line.endswith(
        "if it is genuine, raise the limit with --max-response-bytes or "
        "ASYNCCLIENT_MAX_RESPONSE_BYTES"
    )
    assert server.requests == 1  # an oversized answer is not asked for again
    print(f"{case}: peak RSS {done.peak_rss_mib:.1f} MiB")  # shown with -s
    assert done.peak_rss_mib < 128, f"peak RSS {done.peak_rss_mib:.0f} MiB"
    assert done.stdout == ""


async def test_the_command_takes_a_higher_limit(
    hostile: Callable[[Writer], Awaitable[Hostile]], tmp_path: Path
) -> None:
    body = builds_answer(2 * MiB)

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(head("200 OK", f"Content-Length: {len(body)}") + body)
        await writer.drain()

    server = await hostile(answer)
    low = await cli(server, tmp_path, "builds", "list", "p_1", "--max-response-bytes", str(MiB))
    assert low.code == 4
    assert "limit of 1,048,576 bytes" in low.stderr
    high = await cli(
        server, tmp_path, "builds", "list", "p_1", ASYNCCLIENT_MAX_RESPONSE_BYTES=str(4 * MiB)
    )
    assert high.code == 0, high.stderr


async def test_a_stalled_answer_holds_the_command_only_as_long_as_it_is_told(
    hostile: Callable[[Writer], Awaitable[Hostile]], tmp_path: Path
) -> None:
    """Headers, then nothing: --timeout (another name of --request-timeout on this command)
    and --retries bound it; the attempts are counted, not timed."""
    held: list[asyncio.Event] = []

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(head("200 OK", "Content-Length: 100"))
        await writer.drain()
        held.append(asyncio.Event())
        await held[-1].wait()  # until the test ends

    server = await hostile(answer)
    try:
        done = await cli(
            server, tmp_path, "builds", "list", "p_1", "--timeout", "0.3", "--retries", "1"
        )
        assert done.code == 4
        (line,) = done.stderr.splitlines()
        assert "2 attempts" in line
        assert "0.3 s" in line
        assert server.requests == 2
        by_env = await cli(
            server,
            tmp_path,
            "builds",
            "list",
            "p_1",
            ASYNCCLIENT_REQUEST_TIMEOUT="0.3",
            ASYNCCLIENT_RETRIES="0",
        )
        assert by_env.code == 4
        assert server.requests == 3
    finally:
        for event in held:
            event.set()


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--retries", "-1"], {}, "--retries -1 is out of range: give a number at least 0"),
        (["--request-timeout", "0"], {}, "--request-timeout 0 is out of range"),
        ([], {"ASYNCCLIENT_RETRIES": "many"}, "ASYNCCLIENT_RETRIES 'many' is not a whole number"),
        (
            [],
            {"ASYNCCLIENT_REQUEST_TIMEOUT": "soon"},
            "ASYNCCLIENT_REQUEST_TIMEOUT 'soon' is not a number",
        ),
        (
            ["--max-response-bytes", "10"],
            {},
            "--max-response-bytes must be a whole number of bytes, at least 1024",
        ),
        (
            [],
            {"ASYNCCLIENT_MAX_RESPONSE_BYTES": "lots"},
            "ASYNCCLIENT_MAX_RESPONSE_BYTES 'lots' is not a number of bytes: give a whole number",
        ),
    ],
)
async def test_bad_knobs_are_refused_before_any_request(
    hostile: Callable[[Writer], Awaitable[Hostile]],
    tmp_path: Path,
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    server = await serve(hostile, declared())
    done = await cli(server, tmp_path, "builds", "list", "p_1", *argv, **env)
    assert done.code == 2
    (line,) = done.stderr.splitlines()
    assert message in line
    assert server.requests == 0


def test_the_measurement_sees_what_a_process_holds_and_nothing_of_pytest(
    tmp_path: Path,
) -> None:
    """The measurement itself can fail: a child that touches 200 MiB is seen holding them, and
    one that holds nothing is not charged with the test process's own memory."""
    ballast = bytearray(300 * MiB)  # pytest's side grows: it must not show in the child
    ballast[::4096] = b"x" * len(ballast[::4096])
    big = "b = bytearray(200 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"
    cases = {"big": big, "small": "pass"}
    seen = {}
    for name, code in cases.items():
        argv = [sys.executable, "-c", LAUNCHER, str(tmp_path / name), sys.executable, "-c", code]
        assert subprocess.call(argv) == 0
        seen[name] = int((tmp_path / name).read_text()) / 1024
    del ballast
    assert 200 < seen["big"] < 280
    assert seen["small"] < 40
