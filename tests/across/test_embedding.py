"""Embedding the session in an async service: any event loop (one at a time), outages ridden
out within the retry deadline, pool waits that are nobody's fault, request ids on errors and
in logs, and the two example services of the guide, run for real.

Waits between retries are recorded, not slept (asyncclient.testing.recorded_retry_waits): time
goes on by each wait for the task that waited, so "8 s" of outage costs milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from asyncclient import (
    AsyncSession,
    EventLoopError,
    NotFoundError,
    TransportError,
)
from asyncclient.testing import FakeService, NetworkConditions, recorded_retry_waits

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService() as service:
        yield service


# --- any event loop, one at a time ----------------------------------------------------------------

THREE_RUNS = """
import asyncio, threading
from asyncclient import AsyncSession
from asyncclient.testing import FakeService

started = threading.Event()
stop = None

async def serve():
    global stop, svc
    stop = asyncio.Event()
    async with FakeService() as svc:
        started.set()
        await stop.wait()

server = threading.Thread(target=lambda: asyncio.run(serve()))
server.start()
started.wait()
session = AsyncSession(svc.run_key, svc.url)
for _ in range(3):
    listed = asyncio.run(session.list_builds("p_demo"))
    print(len(listed.builds))
asyncio.run(session.close())
svc_loop = svc
stop._loop.call_soon_threadsafe(stop.set)
server.join()
import gc; gc.collect()
print("done")
"""


def test_a_session_serves_three_asyncio_runs_in_a_row_without_a_warning() -> None:
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", THREE_RUNS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1", "1", "done"]
    # -X dev: no unclosed session, transport or socket, no "Exception ignored".
    assert "Warning" not in result.stderr
    assert "Unclosed" not in result.stderr
    assert "Exception ignored" not in result.stderr


async def test_two_live_loops_at_once_are_refused_with_the_fix(svc: FakeService) -> None:
    session = AsyncSession(svc.run_key, svc.url)
    in_use = threading.Event()
    release = threading.Event()

    async def other_loop() -> None:
        await session.list_builds("p_demo")
        in_use.set()
        await asyncio.to_thread(release.wait)  # this loop stays alive, its session open

    thread = threading.Thread(target=lambda: asyncio.run(other_loop()))
    thread.start()
    try:
        await asyncio.to_thread(in_use.wait, 30)
        with pytest.raises(EventLoopError, match="one event loop at a time"):
            await session.list_builds("p_demo")
    finally:
        release.set()
        await asyncio.to_thread(thread.join)
    # That loop ended (asyncio.run closed the connections): this one starts afresh.
    assert len((await session.list_builds("p_demo")).builds) == 1
    await session.close()


# --- outages --------------------------------------------------------------------------------------


async def _outage(seconds: float, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """20 calls are in flight when the service goes away for `seconds` and comes back on the
    same port: with the default settings every one succeeds. The outage logger's records."""
    port = free_port()
    svc = FakeService(port=port)
    await svc.start()
    session = AsyncSession(svc.run_key, svc.url)
    await session.list_builds("p_demo")  # connections in the pool
    await svc.stop()
    back = asyncio.Event()
    restart: list[asyncio.Task[Any]] = []

    async def on_wait(elapsed: float) -> None:
        if elapsed >= seconds:  # each call's own time: the service is back after `seconds`
            if not restart:
                restart.append(asyncio.ensure_future(svc.start()))
                restart[0].add_done_callback(lambda _: back.set())
            await back.wait()

    try:
        with (
            caplog.at_level(logging.DEBUG, "asyncclient"),
            recorded_retry_waits(on_wait) as waits,
        ):
            results = await asyncio.gather(*(session.list_builds("p_demo") for _ in range(20)))
        assert all(len(r.builds) == 1 for r in results)
        assert max(waits) <= 5.0  # an outage's waits are capped: a service back is found soon
    finally:
        await session.close()
        await svc.stop()
    return [r for r in caplog.records if r.name == "asyncclient.outage"]


@pytest.mark.parametrize("seconds", [4.0, 8.0])
async def test_an_outage_is_told_once_when_it_begins_and_once_when_it_ends(
    seconds: float, caplog: pytest.LogCaptureFixture
) -> None:
    began, ended = await _outage(seconds, caplog)
    assert began.levelno == logging.WARNING
    said = began.getMessage()
    assert said.startswith("service unreachable since ")
    assert ": connection refused (GET /api/v1/projects/p_demo/builds); calls are retried for " \
        "up to 30 s" in said  # fmt: skip
    assert began.outage_seconds >= 2.0  # past the threshold, not at the first failure
    assert ended.levelno == logging.INFO
    assert ended.getMessage().startswith("service reachable again after ")
    assert ended.outage_seconds >= 2.0
    assert ended.outage_since == began.outage_since
    # Every retry is on its own logger, at DEBUG, with its fields.
    retries = [r for r in caplog.records if r.name == "asyncclient.retries"]
    assert len(retries) >= 20
    assert {r.levelno for r in retries} == {logging.DEBUG}
    assert {r.operation for r in retries} == {"list_builds"}
    assert all(r.http_status is None and r.error for r in retries)
    assert all(isinstance(r.wait, float) for r in retries)


async def test_a_half_second_blip_is_not_an_outage(caplog: pytest.LogCaptureFixture) -> None:
    assert await _outage(0.5, caplog) == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_outage_ends_with_a_call_that_lived_through_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call that began after the service came back does not end the outage while calls that
    waited for it are still under way: one of those says it is over."""
    from asyncclient._client._outage import Outages

    now = [0.0]
    outages = Outages(2.0, 30.0, lambda: now[0])
    with caplog.at_level(logging.DEBUG, "asyncclient.outage"):
        outages.failed(1, "connection refused", "GET /a")
        now[0] = 1.0
        outages.failed(2, "connection refused", "GET /b")
        now[0] = 2.5
        outages.failed(1, "connection refused", "GET /a")  # 2.5 s: told
        now[0] = 4.0
        outages.left(3, answered=True, request="GET /fresh")  # a newcomer: not the one to say
        outages.left(2, answered=True, request="GET /b")
        outages.left(1, answered=True, request="GET /a")
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == ["WARNING", "INFO"]
    assert said[1][1] == "service reachable again after 4.0 s (3 failed attempts; GET /b came " \
        "through)"  # fmt: skip
    assert outages.since is None


async def test_a_call_waiting_between_attempts_is_told_at_the_threshold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Attempts seconds apart meet no failure at the threshold itself: a timer tells it."""
    from asyncclient._client._outage import Outages

    loop = asyncio.get_running_loop()
    outages = Outages(0.05, 30.0, loop.time)
    with caplog.at_level(logging.DEBUG, "asyncclient.outage"):
        outages.failed(1, "connection refused", "GET /a")  # then a long wait: no failure
        await asyncio.sleep(0.2)
        (began,) = caplog.records
        assert began.levelno == logging.WARNING
        assert began.outage_seconds >= 0.05
        outages.left(1, answered=True, request="GET /a")
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    # A blip that ends before the threshold cancels the timer: nothing is said.
    caplog.clear()
    with caplog.at_level(logging.DEBUG, "asyncclient.outage"):
        outages.failed(2, "connection refused", "GET /b")
        outages.left(2, answered=True, request="GET /b")
        await asyncio.sleep(0.2)
    assert caplog.records == []


def test_blips_between_answers_are_never_told(caplog: pytest.LogCaptureFixture) -> None:
    """Failures spread over minutes, each followed by an answer, never add up to an outage."""
    from asyncclient._client._outage import Outages

    now = [0.0]
    outages = Outages(2.0, 30.0, lambda: now[0])
    with caplog.at_level(logging.DEBUG, "asyncclient.outage"):
        for call in range(100):
            now[0] = call * 1.5
            outages.failed(call, "503 unavailable", "GET /x")
            now[0] += 1.0
            outages.left(call + 1000, answered=True, request="GET /y")  # another call answered
            outages.left(call, answered=True, request="GET /x")
        # A call that gives up alone ends its blip too: the next failure starts afresh.
        outages.failed(7, "connection refused", "GET /x")
        outages.left(7, answered=False, request="GET /x")
        now[0] += 60.0
        outages.failed(8, "connection refused", "GET /x")
    assert caplog.records == []
    # A call whose blip another call's answer ended is not remembered after it succeeds.
    outages.left(9, answered=True, request="GET /y")
    assert outages.since is None
    assert not outages._waiting


async def test_an_outage_past_the_deadline_fails_saying_how_long_it_tried() -> None:
    port = free_port()  # nothing listens there
    async with AsyncSession("key", f"http://127.0.0.1:{port}") as session:
        with recorded_retry_waits() as waits, pytest.raises(TransportError) as info:
            await session.list_builds("p_demo")
    message = str(info.value)
    assert message.startswith(f"cannot connect to 127.0.0.1:{port} (connection refused)")
    assert "; retried for 3" in message
    assert message.endswith(" s (retry deadline)")
    assert info.value.attempts > 5  # more than max_retries: the deadline decided
    assert 25.0 <= sum(waits) <= 30.0 + 1e-9  # the deadline less the attempts' own time


async def test_without_a_deadline_an_outage_counts_against_the_retries() -> None:
    port = free_port()
    async with AsyncSession("key", f"http://127.0.0.1:{port}", retry_deadline=0) as session:
        with recorded_retry_waits(), pytest.raises(TransportError) as info:
            await session.list_builds("p_demo")
    assert info.value.attempts == 5


async def test_a_host_name_that_does_not_resolve_fails_at_once() -> None:
    async with AsyncSession("key", "http://no-such-host.invalid") as session:
        with recorded_retry_waits() as waits, pytest.raises(TransportError) as info:
            await session.list_builds("p_demo")
    assert "could not be resolved" in str(info.value)
    assert info.value.attempts == 1
    assert waits == []


async def test_503s_are_ridden_out_past_the_retries() -> None:
    """Seven 503s (more than the 4 retries) while a deploy rolls, then an answer."""
    answers = iter([503] * 7)

    async def handler(request: web.Request) -> web.Response:
        status = next(answers, 200)
        if status == 200:
            return web.json_response({"builds": [], "maxBytes": 1, "partBytes": 1})
        return web.json_response(
            {"error": {"code": "unavailable", "message": "deploy"}}, status=503
        )

    app = web.Application()
    app.router.add_get("/api/v1/projects/{project}/builds", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with AsyncSession("key", f"http://127.0.0.1:{port}") as session:
            with recorded_retry_waits() as waits:
                listed = await session.list_builds("p_demo")
        assert listed.builds == ()
        assert len(waits) == 7
    finally:
        await runner.cleanup()


# --- pool waits -----------------------------------------------------------------------------------


async def test_waiting_for_a_pooled_connection_is_not_the_services_fault() -> None:
    """60 calls through 4 connections, 0.4 s each, with timeout=2: every call succeeds and
    the service sees exactly 60 requests (a wait in the pool is neither timed nor retried)."""
    conditions = NetworkConditions(latency_ms=400, ops=["get_build"])
    async with (
        FakeService(conditions=conditions) as svc,
        AsyncSession(svc.run_key, svc.url, timeout=2, connection_limit=4) as session,
    ):
        builds = await asyncio.gather(*(session.get_build("ab_demo_ios_100") for _ in range(60)))
        assert len(builds) == 60
        assert svc.request_counts()["get_build"] == 60


async def test_pool_timeout_bounds_the_wait_and_names_itself() -> None:
    conditions = NetworkConditions(latency_ms=300, ops=["get_build"])
    async with (
        FakeService(conditions=conditions) as svc,
        AsyncSession(svc.run_key, svc.url, connection_limit=1, pool_timeout=0.05) as session,
    ):
        results = await asyncio.gather(
            *(session.get_build("ab_demo_ios_100") for _ in range(3)), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, TransportError)]
        assert len(failed) == 2
        assert all(e.kind == "pool_timeout" and e.attempts == 1 for e in failed)
        assert "no free connection within 0.05 s (pool_timeout)" in str(failed[0])
        assert "raise connection_limit or pool_timeout" in str(failed[0])
        assert svc.request_counts()["get_build"] == 1  # the waits sent nothing


async def test_a_timeout_names_the_phase_that_ran_out() -> None:
    conditions = NetworkConditions(latency_ms=1000, ops=["get_build"])
    async with (
        FakeService(conditions=conditions) as svc,
        AsyncSession(svc.run_key, svc.url, timeout=0.1, max_retries=0, retry_deadline=0) as s,
    ):
        with pytest.raises(TransportError) as info:
            await s.get_build("ab_demo_ios_100")
    assert "no complete answer within 0.1 s (timeout, waiting for the answer)" in str(info.value)


# --- request ids ----------------------------------------------------------------------------------


async def test_an_errors_request_id_is_the_services_in_the_message_and_the_log(
    svc: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    async with AsyncSession(svc.run_key, svc.url) as session:
        with caplog.at_level(logging.DEBUG, "asyncclient"):
            with pytest.raises(NotFoundError) as info:
                await session.get_build("ab_nope")
            started = await session.run_test("t_search", idempotency_key="ci-7")
    (record,) = svc.requests_for("get_build")
    assert record.request_id is not None
    assert record.request_id.startswith("req_")
    assert info.value.request_id == record.request_id
    assert str(info.value).endswith(f"(request id {record.request_id})")
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        record.request_id in line and "GET /api/v1/builds/ab_nope -> 404" in line for line in lines
    )
    assert any("Idempotency-Key ci-7" in line and "POST" in line for line in lines)
    assert started.run_id


async def test_request_ids_come_from_the_usual_headers_or_the_body() -> None:
    from asyncclient._core._wire import request_id_of

    assert request_id_of({"X-Request-Id": "a1"}) == "a1"
    assert request_id_of({"Request-Id": "b2"}) == "b2"
    assert request_id_of({"X-Amzn-RequestId": "c3"}) == "c3"
    assert request_id_of({}, {"requestId": "d4"}) == "d4"
    assert request_id_of({}, {"request_id": 55}) == "55"
    assert request_id_of({"X-Request-Id": "x" * 500}) is None  # not an id: not shown
    assert request_id_of({"X-Request-Id": "a\nb"}) is None
    assert request_id_of({}, None) is None


# --- the README's example services, run for real -------------------------------------------------


async def _started(server: Any) -> None:
    """Until uvicorn says it serves (it offers no event to wait for)."""
    for _ in range(3000):
        if server.started:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("uvicorn did not start")


def load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[int]:
    """The app on a port of its own on 127.0.0.1 (its port), cleaned up after."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def test_the_guide_shows_the_example_services_as_they_are() -> None:
    """The guide shows each file whole, as these tests run it (tests/across/test_docs_pages.py
    holds every guide to the files it copies)."""
    guide = (ROOT / "docs" / "guides" / "embedding.md").read_text()
    for name in ("aiohttp_service", "asgi_service", "suite_service"):
        assert (ROOT / "docs" / "examples" / f"{name}.py").read_text().rstrip("\n") in guide, name


async def test_the_aiohttp_web_example_keeps_one_session(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCCLIENT_BASE_URL", svc.url)
    monkeypatch.setenv("ASYNCCLIENT_API_KEY", svc.run_key)
    example = load("aiohttp_service")
    async with served(example.make_app()) as port, aiohttp.ClientSession() as http:
        answers = await asyncio.gather(
            *(http.get(f"http://127.0.0.1:{port}/builds/ab_demo_ios_100") for _ in range(20))
        )
        bodies = [await a.json() for a in answers]
        missing = await http.get(f"http://127.0.0.1:{port}/builds/ab_nope")
        error = await missing.json()
        sent = len(svc.requests)
        mistaken = await http.get(f"http://127.0.0.1:{port}/builds/j_123")
        mistake = await mistaken.json()
    assert {b["id"] for b in bodies} == {"ab_demo_ios_100"}
    assert missing.status == 404
    assert error["requestId"] == svc.requests_for("get_build")[-1].request_id
    # The caller's own bad input is a 400 that names it, not a 502, and reaches no service.
    assert mistaken.status == 400
    assert "j_123 is not a build id" in mistake["error"]
    assert len(svc.requests) == sent


async def test_the_suite_service_streams_the_loops_events_then_the_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/examples/suite_service.py: the library's loop inside an aiohttp.web service, with
    hedge, fail-fast and a budget, streaming its events; it imports nothing of the command."""
    import ast
    import json

    from asyncclient.testing.builders import build_apk

    source = (EXAMPLES / "suite_service.py").read_text()
    imported = {
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not any(name.startswith("asyncclient.cli") for name in imported)
    async with FakeService(speed=600) as svc, AsyncSession(svc.run_key, svc.url) as client:
        android = await client.upload_build("p_demo", build_apk(tmp_path / "shop.apk"))
        monkeypatch.setenv("ASYNCCLIENT_BASE_URL", svc.url)
        monkeypatch.setenv("ASYNCCLIENT_API_KEY", svc.run_key)
        example = load("suite_service")
        async with served(example.make_app()) as port, aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/suites/p_demo"
            builds = [("build", android.id), ("build", "ab_demo_ios_100")]
            answer = await http.post(url, params=builds)
            lines = [json.loads(raw) for raw in (await answer.text()).splitlines()]
            mistake = await http.post(f"http://127.0.0.1:{port}/suites/t_login")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("application/x-ndjson")
    names = [item["event"] for item in lines]
    assert names[0] == "run_started"
    # t_onboarding flakes in its history: it got two copies at the start.
    copies = [item for item in lines if item["event"] == "copy_started"]
    assert {item["testId"] for item in copies} == {"t_onboarding"}
    assert len(copies) == 2
    report = lines[-1]
    assert report["event"] == "report"
    assert report["tests"]["t_checkout"] == "failed"  # fails on purpose, with its re-runs
    assert report["tests"]["t_onboarding"] in ("passed", "flaky")
    assert report["copyRuns"] == 2
    assert report["passed"] is False
    assert mistake.status == 400


async def test_the_asgi_example_runs_under_uvicorn(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    monkeypatch.setenv("ASYNCCLIENT_BASE_URL", svc.url)
    monkeypatch.setenv("ASYNCCLIENT_API_KEY", svc.run_key)
    example = load("asgi_service")
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(example.app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await _started(server)
        async with aiohttp.ClientSession() as http:
            ok = await http.get(f"http://127.0.0.1:{port}/builds/ab_demo_ios_100")
            body = await ok.json()
            missing = await http.get(f"http://127.0.0.1:{port}/builds/ab_nope")
            error = await missing.json()
            mistaken = await http.get(f"http://127.0.0.1:{port}/builds/j_123")
            mistake = await mistaken.json()
    finally:
        server.should_exit = True
        await serving
        sock.close()
    assert body["id"] == "ab_demo_ios_100"
    assert missing.status == 404
    assert error["requestId"].startswith("req_")
    assert mistaken.status == 400
    assert "j_123 is not a build id" in mistake["error"]
