"""AsyncSession against the embedded emulator over real loopback HTTP: every operation, every
error class, retries and idempotency, local validation, downloads, and secrets kept out of sight."""

import asyncio
import hashlib
import logging
import os
import random
import re
import socket
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from body_paths import BodyPath
from network_support import PROXY_PASSWORD, raw_client

from asyncclient import (
    FINAL_STATUSES,
    ApiError,
    AsyncSession,
    BadRequestError,
    Build,
    BuildRejectedError,
    ConflictError,
    Endpoint,
    NotFoundError,
    NotStartedError,
    PartBody,
    PaymentRequiredError,
    PermissionDeniedError,
    RateLimitedError,
    Run,
    RunStatus,
    ServerError,
    TransportError,
    UnauthenticatedError,
    UploadedPart,
    ValidationError,
    __version__,
)
from asyncclient._values._lenient import run_status_kind
from asyncclient.testing import (
    FakeService,
    Fault,
    NetworkConditions,
    ServiceSettings,
    demo_seed_data,
)
from asyncclient.testing._bodies import part_etag

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks

MakeApk = Callable[..., Path]

HEADER_SECRET = "hdr-value-0f9e8d7c"


def _statuses(svc: FakeService, op: str) -> list[int]:
    return [record.status for record in svc.requests_for(op)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _upload(session: AsyncSession, path: Path, project_id: str = "p_demo") -> Build:
    data = await asyncio.to_thread(path.read_bytes)
    start = await session.start_upload(project_id, path.name, len(data))
    parts = []
    for number in range(1, start.parts + 1):
        chunk = data[(number - 1) * start.part_bytes : number * start.part_bytes]
        parts.append(await session.upload_part(start.id, number, chunk))
    return await session.complete_upload(start.id, parts)


async def _final_run(svc: FakeService, session: AsyncSession, test_id: str = "t_search") -> Run:
    start = await session.run_test(test_id)
    svc.advance(600)
    run = await session.get_run(start.run_id)
    assert run.is_final
    return run


# --- configuration and lifecycle ---------------------------------------------------------------


async def test_key_and_url_come_from_the_environment(
    service: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCCLIENT_API_KEY", service.run_key)
    monkeypatch.setenv("ASYNCCLIENT_BASE_URL", service.url + "/api/v1/")
    async with AsyncSession() as session:
        assert session.base_url == service.url
        assert (await session.get_build("ab_demo_ios_100")).id == "ab_demo_ios_100"


async def test_missing_key_or_url_says_how_to_give_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASYNCCLIENT_API_KEY", raising=False)
    monkeypatch.delenv("ASYNCCLIENT_BASE_URL", raising=False)
    with pytest.raises(ValidationError) as no_key:
        AsyncSession(base_url="http://127.0.0.1:1")
    assert str(no_key.value) == "no API key: set ASYNCCLIENT_API_KEY or pass api_key="
    with pytest.raises(ValidationError) as no_url:
        AsyncSession(api_key="k")
    assert "ASYNCCLIENT_BASE_URL" in str(no_url.value)
    assert "base_url=" in str(no_url.value)


@pytest.mark.parametrize(
    "options",
    [
        {"max_retries": -1},
        {"max_retries": 1.5},
        {"connection_limit": 0},
        {"timeout": 0},
        {"backoff_base": -1},
        {"max_retry_after": "7"},
        {"client_session": object()},
    ],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AsyncSession("k", "http://127.0.0.1:1", **options)


async def test_repr_shows_only_the_base_url_and_proxy(service: FakeService) -> None:
    session = AsyncSession(service.run_key, service.url)
    proxy = session.network.proxy
    via = f" proxy='http://ci-runner:***@127.0.0.1:{proxy.url.rsplit(':', 1)[1]}'" if proxy else ""
    assert repr(session) == f"<AsyncSession base_url={service.url!r}{via}>"
    assert service.run_key not in repr(vars(session))
    assert PROXY_PASSWORD not in repr(session) + repr(session.network)
    await session.close()


async def test_explicit_close_and_use_after_close(service: FakeService) -> None:
    session = AsyncSession(service.run_key, service.url)
    assert (await session.list_builds("p_demo")).builds
    await session.close()
    await session.close()  # closing twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        await session.get_build("ab_demo_ios_100")


async def test_a_borrowed_client_session_is_used_and_left_open(service: FakeService) -> None:
    async with raw_client(service) as http:
        async with AsyncSession(service.run_key, service.url, client_session=http) as session:
            assert (await session.get_build("ab_demo_ios_100")).is_ready
        assert not http.closed
        async with http.get(f"{service.url}/_emulator/stats") as resp:
            assert resp.status == 200


# --- builds ------------------------------------------------------------------------------------


async def test_list_builds(session: AsyncSession) -> None:
    listing = await session.list_builds("p_demo")
    assert listing.max_bytes == 4 << 30
    assert listing.part_bytes == 8 << 20
    [build] = listing.builds
    assert build.id == "ab_demo_ios_100"
    assert build.platform == "ios"
    assert build.version_code == "100"
    assert build.project_id is None  # single view only
    assert build.created_at is not None


async def test_get_build_single_view(session: AsyncSession) -> None:
    build = await session.get_build("ab_demo_ios_100")
    assert build.project_id == "p_demo"
    assert build.is_ready
    assert build.app_id == "com.example.shop.ios"
    assert build.sha256 is not None
    assert len(build.sha256) == 64
    assert build.file_name is not None
    assert build.file_name.endswith(".app.zip")


async def test_upload_with_bytes(session: AsyncSession, make_apk: MakeApk) -> None:
    path = make_apk("shop.apk", version_name="2.1.0", version_code=21)
    data = path.read_bytes()
    start = await session.start_upload("p_demo", "shop.apk", len(data), label="commit abc")
    assert start.id.startswith("ab_")
    assert start.parts == 1
    assert start.part_bytes == 8 << 20
    part = await session.upload_part(start.id, 1, data)
    assert part == UploadedPart(1, part_etag(data))
    build = await session.complete_upload(start.id, [part])
    assert build.is_ready
    assert (build.app_id, build.version, build.version_code) == ("com.example.shop", "2.1.0", "21")
    assert build.platform == "android"
    assert build.label == "commit abc"
    assert build.size == len(data)
    assert build.sha256 == hashlib.sha256(data).hexdigest()
    assert await session.get_build(start.id) == build
    # Completing again answers the same build (safe to retry).
    assert await session.complete_upload(start.id, [part]) == build
    assert (await session.list_builds("p_demo")).builds[0].id == start.id


async def test_upload_parts_streamed_from_a_file(make_apk: MakeApk, waits: list[float]) -> None:
    settings = ServiceSettings(part_bytes=64 * 1024)
    async with FakeService(clock="manual", settings=settings) as svc:
        path = make_apk(filler_bytes=300_000)
        size = path.stat().st_size
        async with AsyncSession(svc.run_key, svc.url) as session:
            start = await session.start_upload("p_demo", "big.apk", size)
            assert start.parts == -(-size // start.part_bytes) > 3
            progress: list[int] = []
            svc.inject("upload_part", Fault("drop"))  # the first part's connection breaks
            parts = []
            for number in range(1, start.parts + 1):
                offset = (number - 1) * start.part_bytes
                body = PartBody(
                    path,
                    offset,
                    min(start.part_bytes, size - offset),
                    chunk_size=16 * 1024,
                    progress=progress.append,
                )
                parts.append(await session.upload_part(start.id, number, body))
            build = await session.complete_upload(start.id, parts)
        assert _statuses(svc, "upload_part")[:2] == [0, 200]
        assert len(_statuses(svc, "upload_part")) == start.parts + 1
    assert build.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sum(progress) == size
    assert any(delta < 0 for delta in progress)  # the dropped attempt was wound back
    assert max(progress) <= 16 * 1024
    assert len(waits) == 1


async def test_build_rejected(session: AsyncSession, make_apk: MakeApk, dialect: str) -> None:
    with pytest.raises(BuildRejectedError) as info:
        await _upload(session, make_apk(abis=("armeabi-v7a",)))
    err = info.value
    assert (err.status, err.code) == (422, "build_rejected")
    [problem] = err.problems
    # Every dialect says what the devices cannot run; some only in words.
    assert "armeabi-v7a" in problem.message
    if dialect != "flat":  # flat sends the problems as strings, and the build's id only
        assert problem.kind == "abi"
        assert problem.found == ("armeabi-v7a",)
        assert "arm64-v8a" in problem.supported
        assert err.build is not None
        assert err.build.status_kind == "rejected"


async def test_too_large_is_a_bad_request(session: AsyncSession) -> None:
    with pytest.raises(BadRequestError) as info:
        await session.start_upload("p_demo", "huge.apk", (4 << 30) + 1)
    assert info.value.code == "too_large"
    assert info.value.error["maxBytes"] == 4 << 30


async def test_delete_build_needs_an_edit_key(
    session: AsyncSession, edit_session: AsyncSession, make_apk: MakeApk
) -> None:
    build = await _upload(session, make_apk())
    with pytest.raises(PermissionDeniedError) as info:
        await session.delete_build(build.id)
    assert info.value.status == 403
    await edit_session.delete_build(build.id)
    with pytest.raises(NotFoundError):
        await session.get_build(build.id)


async def test_delete_whose_answer_was_lost_counts_as_done(
    service: FakeService, edit_session: AsyncSession, make_apk: MakeApk, waits: list[float]
) -> None:
    build = await _upload(edit_session, make_apk())
    service.inject("delete_build", Fault("drop_after"))
    await edit_session.delete_build(build.id)
    assert _statuses(service, "delete_build") == [0, 404]
    with pytest.raises(NotFoundError) as info:
        await edit_session.delete_build(build.id)
    assert info.value.attempts == 1  # a first-attempt 404 is a real error


# --- runs ----------------------------------------------------------------------------------------


async def test_run_test_and_follow_it_to_the_end(
    service: FakeService, session: AsyncSession
) -> None:
    start = await session.run_test("t_search")
    assert start.run_id.startswith("j_")
    assert start.mode == "cold"  # auto without a learned path explores
    assert start.overage is False
    assert start.link is not None
    run = await session.get_run(start.run_id)
    assert run.status is RunStatus.QUEUED
    assert run.final is False
    assert not run.is_final
    service.advance(600)
    run = await session.get_run(start.run_id)
    assert run.final is True
    assert run.status in FINAL_STATUSES
    assert run.passed
    assert run.test_id == "t_search"
    assert run.source == "test"
    assert run.platform == "web"
    assert run.duration_ms is not None
    assert run.duration_ms > 0
    assert run.finished_at is not None
    assert [r.outcome for r in run.requirement_results] == ["passed"]
    assert run.requirement_results[0].reason
    assert run.capture_values == {"query": "lamp", "results": "12"}
    assert len(run.screenshot_refs) == 2
    assert run.used_build_id is None


async def test_run_test_with_mode_and_build(session: AsyncSession, make_apk: MakeApk) -> None:
    build = await _upload(session, make_apk())
    start = await session.run_test("t_login", mode="warm", build_id=build.id)
    assert start.mode == "warm"
    run = await session.get_run(start.run_id)
    assert run.used_build_id == build.id
    assert run.mode == "warm"


async def test_run_project(session: AsyncSession) -> None:
    result = await session.run_project("p_demo", mode="auto")
    started = {run.test_id: run for run in result.started}
    assert set(started) == {"t_search", "t_onboarding"}
    assert started["t_onboarding"].build_id == "ab_demo_ios_100"
    assert all(run.run_id.startswith("j_") for run in result.started)
    skipped = {skip.test_id: skip for skip in result.skipped}
    assert set(skipped) == {"t_login", "t_checkout"}
    assert skipped["t_login"].code == "no_build"
    assert "upload one" in skipped["t_login"].reason


async def test_run_project_with_build_ids(session: AsyncSession, make_apk: MakeApk) -> None:
    build = await _upload(session, make_apk())
    result = await session.run_project("p_demo", build_ids=[build.id])
    started = {run.test_id: run.build_id for run in result.started}
    assert started["t_login"] == build.id
    assert started["t_checkout"] == build.id


def _seed_with_unstartable_projects() -> dict[str, Any]:
    seed = demo_seed_data()
    seed["projects"] += [
        {"id": "p_empty", "name": "No tests", "plan": "paid", "includedRuns": 10},
        {"id": "p_nobuild", "name": "No builds", "plan": "paid", "includedRuns": 10},
    ]
    for key in seed["keys"]:
        key["projects"] += ["p_empty", "p_nobuild"]
    seed["tests"].append(
        {
            "id": "t_lonely",
            "project": "p_nobuild",
            "title": "Needs an app",
            "target": "android",
            "appId": "com.example.none",
            "outcome": "passed",
        }
    )
    return seed


async def test_not_started_and_empty_carry_the_lists() -> None:
    async with (
        FakeService(_seed_with_unstartable_projects(), clock="manual") as svc,
        AsyncSession(svc.run_key, svc.url) as session,
    ):
        with pytest.raises(NotStartedError) as info:
            await session.run_project("p_nobuild")
        assert (info.value.status, info.value.code) == (402, "not_started")
        assert info.value.started == ()
        assert [skip.test_id for skip in info.value.skipped] == ["t_lonely"]
        with pytest.raises(NotStartedError) as empty:
            await session.run_project("p_empty")
        assert (empty.value.status, empty.value.code) == (400, "empty")
        assert empty.value.skipped == ()


async def test_paid_plan_required(session: AsyncSession) -> None:
    with pytest.raises(PaymentRequiredError) as info:
        await session.run_test("t_free_voucher")
    assert info.value.status == 402
    assert "paid plan" in info.value.message


async def test_stop_run(session: AsyncSession) -> None:
    start = await session.run_test("t_search")
    status = await session.stop_run(start.run_id)
    assert run_status_kind(status) == "cancelled"  # `stopped` or `canceled` in some dialects
    run = await session.get_run(start.run_id)
    assert run.status == status
    assert run.status_kind == "cancelled"
    assert run.is_final
    with pytest.raises(ConflictError) as info:
        await session.stop_run(start.run_id)
    assert info.value.code == "invalid_state"


async def test_stop_whose_answer_was_lost_returns_the_status(
    service: FakeService, session: AsyncSession, waits: list[float]
) -> None:
    start = await session.run_test("t_search")
    service.inject("stop_run", Fault("drop_after"))
    assert run_status_kind(await session.stop_run(start.run_id)) == "cancelled"
    assert _statuses(service, "stop_run") == [0, 409]


async def test_list_runs_with_filters(service: FakeService, session: AsyncSession) -> None:
    first = await session.run_test("t_search")
    second = await session.run_test("t_onboarding")
    third = await session.run_test("t_search")
    await session.stop_run(third.run_id)
    runs = await session.list_runs()
    assert [run.id for run in runs] == [third.run_id, second.run_id, first.run_id]
    assert [r.id for r in await session.list_runs(test_id="t_search")] == [
        third.run_id,
        first.run_id,
    ]
    assert len(await session.list_runs(project_id="p_demo", limit=2)) == 2
    cancelled = await session.list_runs(status="cancelled")
    assert [run.id for run in cancelled] == [third.run_id]
    assert cancelled[0].is_final  # the list view has no `final`: the status decides
    assert service.requests_for("list_runs")[-1].query == {"status": "cancelled"}


async def test_list_runs_by_ids_in_batches_in_the_order_asked(
    service: FakeService, session: AsyncSession
) -> None:
    created = [run.id for run in service.backend.run_store.create_runs("t_search", 120)]
    wanted = created[:]
    random.Random(7).shuffle(wanted)
    asked = [*wanted[:10], "j_000000000000", *wanted, wanted[3]]
    service.reset_requests()
    runs = await session.list_runs(ids=asked)
    assert [run.id for run in runs] == wanted
    assert all(run.final is False for run in runs)  # full views
    batches = [record.query["ids"].split(",") for record in service.requests_for("list_runs")]
    assert sorted(len(batch) for batch in batches) == [21, 50, 50]
    assert sorted(i for batch in batches for i in batch) == sorted({*created, "j_000000000000"})
    limited = await session.list_runs(ids=wanted, limit=5)
    assert [run.id for run in limited] == wanted[:5]


async def test_list_runs_retries_can_be_overridden_per_call(
    service: FakeService, session: AsyncSession, waits: list[float]
) -> None:
    service.inject("list_runs", Fault("429", retry_after=9))
    with pytest.raises(RateLimitedError) as info:
        await session.list_runs(ids=["j_000000000000"], retries=0)
    assert info.value.retry_after == 9.0
    assert waits == []
    service.inject("list_runs", Fault("503", retry_after=2))
    assert await session.list_runs(retries=1) == []
    assert waits == [2.0]
    assert _statuses(service, "list_runs") == [429, 503, 200]
    with pytest.raises(ValidationError, match="retries"):
        await session.list_runs(retries=-1)


async def test_a_failing_batch_fails_the_call_and_stops_the_others(
    service: FakeService, session: AsyncSession
) -> None:
    ids = [run.id for run in service.backend.run_store.create_runs("t_search", 120)]
    service.inject("list_runs", Fault("500", times=10))
    with pytest.raises(ServerError):
        await session.list_runs(ids=ids, retries=0)
    service.clear_faults()
    # Nothing is left running: the session still answers at once.
    assert len(await session.list_runs(ids=ids[:3])) == 3


async def test_run_files_download(
    service: FakeService, session: AsyncSession, tmp_path: Path
) -> None:
    run = await _final_run(service, session)
    video = await session.download_run_file(run.id, "video.mp4", tmp_path / "v.mp4")
    assert video == tmp_path / "v.mp4"
    data = video.read_bytes()
    assert len(data) > 0
    assert sorted(os.listdir(tmp_path)) == ["v.mp4"]  # no .part left
    # A link taken from the run, into a directory: the file keeps its own name.
    shot = await session.download_run_file(run.id, run.screenshot_refs[0], tmp_path)
    assert shot == tmp_path / "01.png"
    assert shot.read_bytes().startswith(b"\x89PNG")


async def test_download_resumes_a_partial_file(
    service: FakeService, session: AsyncSession, tmp_path: Path
) -> None:
    run = await _final_run(service, session)
    whole = (await session.download_run_file(run.id, "video.mp4", tmp_path / "whole")).read_bytes()
    # A first half left by an interrupted download, with the ETag it came with.
    (tmp_path / "v.mp4.part").write_bytes(whole[:1000])
    async with (
        raw_client(service) as http,
        http.get(
            f"{service.url}/api/v1/runs/{run.id}/files/video.mp4",
            headers={"Authorization": f"Bearer {service.run_key}"},
        ) as resp,
    ):
        etag = resp.headers["ETag"]
    (tmp_path / "v.mp4.part.etag").write_text(etag)
    service.reset_requests()
    path = await session.download_run_file(run.id, "video.mp4", tmp_path / "v.mp4")
    assert path.read_bytes() == whole
    assert _statuses(service, "download_run_file") == [206]
    assert not (tmp_path / "v.mp4.part").exists()
    assert not (tmp_path / "v.mp4.part.etag").exists()


async def test_download_restarts_when_the_file_changed(
    service: FakeService, session: AsyncSession, tmp_path: Path
) -> None:
    run = await _final_run(service, session)
    whole = (await session.download_run_file(run.id, "video.mp4", tmp_path / "whole")).read_bytes()
    (tmp_path / "v.mp4.part").write_bytes(b"stale bytes of an older file")
    (tmp_path / "v.mp4.part.etag").write_text('"an-older-etag"')
    service.reset_requests()
    path = await session.download_run_file(run.id, "video.mp4", tmp_path / "v.mp4")
    assert path.read_bytes() == whole
    assert _statuses(service, "download_run_file") == [200]


async def test_download_of_a_complete_part_file_just_renames(
    service: FakeService, session: AsyncSession, tmp_path: Path
) -> None:
    run = await _final_run(service, session)
    whole = (await session.download_run_file(run.id, "video.mp4", tmp_path / "whole")).read_bytes()
    (tmp_path / "v.mp4.part").write_bytes(whole)
    service.reset_requests()
    path = await session.download_run_file(run.id, "video.mp4", tmp_path / "v.mp4")
    assert path.read_bytes() == whole
    assert _statuses(service, "download_run_file") == [416]


async def test_download_retries_a_dropped_connection(
    service: FakeService, session: AsyncSession, tmp_path: Path, waits: list[float]
) -> None:
    run = await _final_run(service, session)
    service.inject("download_run_file", Fault("drop"))
    path = await session.download_run_file(run.id, "screenshots/02.png", tmp_path)
    assert path.read_bytes().startswith(b"\x89PNG")
    assert _statuses(service, "download_run_file") == [0, 200]
    assert len(waits) == 1


async def test_run_file_before_the_run_is_final(session: AsyncSession, tmp_path: Path) -> None:
    start = await session.run_test("t_search")
    with pytest.raises(NotFoundError):
        await session.download_run_file(start.run_id, "video.mp4", tmp_path / "v.mp4")
    assert os.listdir(tmp_path) == []


# --- tester endpoints --------------------------------------------------------------------------


async def test_endpoints(session: AsyncSession, edit_session: AsyncSession) -> None:
    [seeded] = await session.list_endpoints("p_demo")
    assert seeded.id == "ep_demo_voucher"
    assert seeded.name == "create_voucher"
    assert seeded.created_at is not None
    assert seeded.last_used_at is None
    endpoint_id = await edit_session.add_endpoint(
        "p_demo",
        "refund_order",
        "Refunds an order; use it after a test purchase.",
        "https://shop.example.com/hooks/refund",
        method="put",
        headers={"X-Hook-Token": HEADER_SECRET},
        body_template='{"order": "{{order}}"}',
    )
    assert endpoint_id.startswith("ep_")
    listed = {e.id: e for e in await session.list_endpoints("p_demo")}
    added = listed[endpoint_id]
    assert isinstance(added, Endpoint)
    assert (added.name, added.method) == ("refund_order", "PUT")
    assert added.url == "https://shop.example.com/hooks/refund"
    with pytest.raises(ConflictError) as info:
        await edit_session.add_endpoint("p_demo", "refund_order", "again", "https://x.example")
    assert info.value.code == "already_exists"
    with pytest.raises(PermissionDeniedError):
        await session.delete_endpoint(endpoint_id)
    await edit_session.delete_endpoint(endpoint_id)
    assert [e.id for e in await session.list_endpoints("p_demo")] == ["ep_demo_voucher"]
    with pytest.raises(PermissionDeniedError):
        await session.add_endpoint("p_demo", "nope", "d", "https://x.example")


# --- errors --------------------------------------------------------------------------------------


async def test_unknown_key_is_unauthenticated(service: FakeService) -> None:
    async with AsyncSession("not-a-real-key", service.url) as session:
        with pytest.raises(UnauthenticatedError) as info:
            await session.list_builds("p_demo")
    assert info.value.status in (401, 403)  # services choose either for a bad key
    assert "not-a-real-key" not in str(info.value)


async def test_unknown_id_is_not_found_in_one_line(session: AsyncSession) -> None:
    with pytest.raises(NotFoundError) as info:
        await session.get_build("ab_nope")
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith("404 not_found: ")
    assert re.search(r"\(GET /api/v1/builds/ab_nope\) \(request id req_[0-9a-f]{16}\)$", line)
    assert info.value.method == "GET"
    assert info.value.url.endswith("/api/v1/builds/ab_nope")


async def test_connection_refused_is_a_transport_error(waits: list[float]) -> None:
    # retry_deadline=0: an outage counts against max_retries (tests/across/test_embedding.py has the
    # deadline's own behaviour).
    url = f"http://127.0.0.1:{_free_port()}"
    async with AsyncSession("k", url, max_retries=2, retry_deadline=0) as session:
        with pytest.raises(TransportError) as info:
            await session.get_build("ab_1")
    assert info.value.attempts == 3
    assert len(waits) == 2
    assert isinstance(info.value.__cause__, aiohttp.ClientConnectorError)
    assert str(info.value).startswith("cannot connect to 127.0.0.1:")
    assert str(info.value).endswith("(connection refused) (GET /api/v1/builds/ab_1, 3 attempts)")


async def test_an_unknown_host_name_says_it_could_not_be_resolved(waits: list[float]) -> None:
    # .invalid never resolves (RFC 6761).
    async with AsyncSession("k", "http://nosuch.invalid:8080", max_retries=1) as session:
        with pytest.raises(TransportError) as info:
            await session.get_build("ab_1")
    assert isinstance(info.value.__cause__, aiohttp.ClientConnectorError)
    assert str(info.value) == (  # not retried: a name that does not resolve fails at once
        "cannot connect to nosuch.invalid:8080 (the host name could not be resolved)"
        " (GET /api/v1/builds/ab_1)"
    )
    assert waits == []


async def test_timeout_is_a_transport_error(service: FakeService, waits: list[float]) -> None:
    service.conditions = NetworkConditions(latency_ms=1000, ops=frozenset({"get_build"}))
    async with AsyncSession(service.run_key, service.url, timeout=0.2, max_retries=1) as session:
        with pytest.raises(TransportError, match=r"within 0\.2 s") as info:
            await session.get_build("ab_demo_ios_100")
    assert info.value.attempts == 2
    assert len(waits) == 1


# --- retries -------------------------------------------------------------------------------------


async def test_503_waits_exactly_the_retry_after(
    service: FakeService, session: AsyncSession, waits: list[float]
) -> None:
    service.inject("get_build", Fault("503", retry_after=7))
    build = await session.get_build("ab_demo_ios_100")
    assert build.id == "ab_demo_ios_100"
    assert _statuses(service, "get_build") == [503, 200]
    assert waits == [7.0]


async def test_429_waits_exactly_the_retry_after(
    service: FakeService, session: AsyncSession, waits: list[float]
) -> None:
    service.inject("list_builds", Fault("429", times=2, retry_after=3))
    await session.list_builds("p_demo")
    assert _statuses(service, "list_builds") == [429, 429, 200]
    assert waits == [3.0, 3.0]


async def test_retry_after_is_capped(service: FakeService, waits: list[float]) -> None:
    service.inject("get_run", Fault("429", retry_after=3600))
    async with AsyncSession(service.run_key, service.url, max_retry_after=2.5) as session:
        start = await session.run_test("t_search")
        await session.get_run(start.run_id)
    assert waits == [2.5]


async def test_rate_limited_after_the_last_retry(service: FakeService, waits: list[float]) -> None:
    service.inject("get_build", Fault("429", times=5, retry_after=4))
    async with AsyncSession(service.run_key, service.url, max_retries=1) as session:
        with pytest.raises(RateLimitedError) as info:
            await session.get_build("ab_demo_ios_100")
    assert info.value.retry_after == 4.0
    assert info.value.attempts == 2
    assert waits == [4.0]
    assert _statuses(service, "get_build") == [429, 429]


async def test_server_errors_back_off_with_full_jitter(
    service: FakeService, waits: list[float], dialect: str
) -> None:
    service.inject("get_build", Fault("500", times=5))
    async with AsyncSession(
        service.run_key, service.url, max_retries=3, backoff_base=1.0, backoff_max=3.0
    ) as session:
        with pytest.raises(ServerError) as info:
            await session.get_build("ab_demo_ios_100")
    assert (info.value.status, info.value.attempts) == (500, 4)
    # Some services answer a fault with a proxy's page or nothing: no code then.
    assert info.value.code == ("internal" if dialect == "asyncclient" else None)
    assert len(waits) == 3
    for wait, ceiling in zip(waits, (1.0, 2.0, 3.0), strict=True):
        assert 0.0 <= wait <= ceiling
    assert _statuses(service, "get_build") == [500, 500, 500, 500]


async def test_dropped_connection_is_retried(
    service: FakeService, session: AsyncSession, waits: list[float]
) -> None:
    service.inject("list_endpoints", Fault("drop"))
    assert len(await session.list_endpoints("p_demo")) == 1
    assert _statuses(service, "list_endpoints") == [0, 200]
    assert len(waits) == 1
    assert 0.0 <= waits[0] <= 0.5


async def test_other_4xx_are_not_retried(
    service: FakeService, session: AsyncSession, waits: list[float]
) -> None:
    with pytest.raises(NotFoundError):
        await session.get_run("j_000000000000")
    assert _statuses(service, "get_run") == [404]
    assert waits == []


async def test_cancellation_is_not_retried(service: FakeService, waits: list[float]) -> None:
    service.conditions = NetworkConditions(latency_ms=1000, ops=frozenset({"get_build"}))
    async with AsyncSession(service.run_key, service.url) as session:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.get_build("ab_demo_ios_100"), 0.05)
    assert waits == []


@pytest.mark.parametrize("kind", ["drop_after", "500_after", "503", "drop"])
async def test_run_test_retry_starts_one_run(
    service: FakeService, session: AsyncSession, waits: list[float], kind: str
) -> None:
    service.inject("run_test", Fault(kind))
    start = await session.run_test("t_search")
    assert len(_statuses(service, "run_test")) == 2
    runs = await session.list_runs(test_id="t_search")
    assert [run.id for run in runs] == [start.run_id]
    assert len(waits) == 1


async def test_run_project_retry_starts_one_suite(
    service: FakeService, session: AsyncSession, waits: list[float]
) -> None:
    service.inject("run_project", Fault("drop_after"))
    result = await session.run_project("p_demo")
    assert _statuses(service, "run_project") == [0, 201]
    runs = await session.list_runs(project_id="p_demo")
    assert sorted(run.id for run in runs) == sorted(run.run_id for run in result.started)


async def test_a_given_idempotency_key_is_sent(session: AsyncSession) -> None:
    first = await session.run_test("t_search", idempotency_key="deploy-42")
    again = await session.run_test("t_search", idempotency_key="deploy-42")
    assert again == first
    with pytest.raises(ConflictError) as info:
        await session.run_test("t_search", mode="cold", idempotency_key="deploy-42")
    assert info.value.code == "idempotency_conflict"
    other = await session.run_test("t_search")
    assert other.run_id != first.run_id


@pytest.mark.parametrize("kind", ["drop_after", "drop", "503", "500_after"])
async def test_add_endpoint_is_not_retried_once_sent(
    service: FakeService, edit_session: AsyncSession, waits: list[float], kind: str
) -> None:
    service.inject("add_endpoint", Fault(kind))
    expected: type[TransportError | ServerError] = (
        TransportError if kind.startswith("drop") else ServerError
    )
    with pytest.raises(expected) as info:
        await edit_session.add_endpoint("p_demo", "made_once", "desc", "https://x.example")
    err = info.value
    assert isinstance(err, TransportError | ServerError)
    assert err.attempts == 1
    assert len(_statuses(service, "add_endpoint")) == 1
    assert waits == []
    names = {e.name for e in await edit_session.list_endpoints("p_demo")}
    # Whether the work happened depends on where the fault struck; no retry made it twice.
    assert ("made_once" in names) == kind.endswith("_after")


async def test_add_endpoint_is_retried_when_it_could_not_connect(waits: list[float]) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    async with AsyncSession("k", url, max_retries=2, retry_deadline=0) as session:
        with pytest.raises(TransportError) as info:
            await session.add_endpoint("p_demo", "n", "d", "https://x.example")
    assert info.value.attempts == 3
    assert len(waits) == 2


# --- local validation ----------------------------------------------------------------------------


async def test_local_validation_sends_nothing(
    service: FakeService, session: AsyncSession, tmp_path: Path
) -> None:
    service.reset_requests()
    bad_calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("j_1 is not a build id: build ids start with ab_", lambda: session.get_build("j_1")),
        ("project", lambda: session.list_builds("ab_1")),
        ("test", lambda: session.run_test("p_demo")),
        ("mode", lambda: session.run_test("t_search", mode="fast")),
        ("build", lambda: session.run_test("t_search", build_id="t_1")),
        ("idempotency_key", lambda: session.run_test("t_search", idempotency_key="")),
        ("mode", lambda: session.run_project("p_demo", mode="fast")),
        ("build", lambda: session.run_project("p_demo", build_id="t_1")),
        ("idempotency_key", lambda: session.run_project("p_demo", idempotency_key="x" * 256)),
        ("build_ids", lambda: session.run_project("p_demo", build_ids=["j_1"])),
        ("build_ids", lambda: session.run_project("p_demo", build_ids="ab_1")),
        (
            "at most 50 builds",
            lambda: session.run_project("p_demo", build_ids=[f"ab_{i}" for i in range(51)]),
        ),
        ("status", lambda: session.list_runs(status="done")),
        ("limit", lambda: session.list_runs(limit=201)),
        ("limit", lambda: session.list_runs(limit=0)),
        ("ids is empty", lambda: session.list_runs(ids=[])),
        ("ids", lambda: session.list_runs(ids=["ab_1"])),
        ("run", lambda: session.get_run("t_1")),
        ("run", lambda: session.stop_run("ep_1")),
        ("file", lambda: session.download_run_file("j_1", "../etc/passwd", tmp_path)),
        ("does not exist", lambda: session.download_run_file("j_1", "v.mp4", tmp_path / "x/v")),
        ("file_name", lambda: session.start_upload("p_demo", "shop.ipa", 10)),
        ("size", lambda: session.start_upload("p_demo", "shop.apk", 0)),
        ("label", lambda: session.start_upload("p_demo", "shop.apk", 10, label=5)),  # type: ignore[arg-type]
        ("part_number", lambda: session.upload_part("ab_1", 0, b"x")),
        ("at least one byte", lambda: session.upload_part("ab_1", 1, b"")),
        ("runs past the end", lambda: session.upload_part("ab_1", 1, PartBody(__file__, 0, 10**9))),
        ("parts is empty", lambda: session.complete_upload("ab_1", [])),
        ("UploadedPart", lambda: session.complete_upload("ab_1", [(1, "e")])),  # type: ignore[list-item]
        ("1 to 40", lambda: session.add_endpoint("p_demo", "n" * 41, "d", "https://x.example")),
        ("1 to 600", lambda: session.add_endpoint("p_demo", "n", "d" * 601, "https://x.example")),
        ("https://", lambda: session.add_endpoint("p_demo", "n", "d", "http://x.example")),
        ("method", lambda: session.add_endpoint("p_demo", "n", "d", "https://x.example", "TRACE")),
        (
            "at most 20 headers",
            lambda: session.add_endpoint(
                "p_demo", "n", "d", "https://x.example", headers={f"h{i}": "v" for i in range(21)}
            ),
        ),
        ("endpoint", lambda: session.delete_endpoint("ab_1")),
        ("build", lambda: session.delete_build("ep_1")),
    ]
    for expected, call in bad_calls:
        with pytest.raises(ValidationError, match=expected):
            await call()
    assert service.requests == []


# --- logging and secrets -------------------------------------------------------------------------


async def test_secrets_stay_out_of_logs_reprs_and_errors(
    service: FakeService,
    edit_session: AsyncSession,
    caplog: pytest.LogCaptureFixture,
    waits: list[float],
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncclient")
    service.inject("add_endpoint", Fault("drop_after"))
    service.inject("get_build", Fault("503", retry_after=1))
    errors: list[BaseException] = []
    try:
        await edit_session.add_endpoint(
            "p_demo", "leaky", "d", "https://x.example", headers={"X-Token": HEADER_SECRET}
        )
    except TransportError as exc:
        errors.append(exc)
    await edit_session.get_build("ab_demo_ios_100")
    async with AsyncSession("wrong-secret-key", service.url) as bad:
        try:
            await bad.get_build("ab_demo_ios_100")
        except UnauthenticatedError as exc:
            errors.append(exc)
    texts = [caplog.text, repr(edit_session), repr(vars(edit_session))]
    for err in errors:
        texts.append("".join(traceback.format_exception(err)))
        texts.append(repr(err))
    for text in texts:
        for secret in (service.edit_key, "wrong-secret-key", HEADER_SECRET):
            assert secret not in text
    # What is logged: method, path with query, outcome, attempt, op.
    assert "GET /api/v1/builds/ab_demo_ios_100 -> 503" in caplog.text
    assert "(attempt 1, get_build, request id req_" in caplog.text
    assert "-> 200" in caplog.text
    assert "(attempt 2, get_build, request id req_" in caplog.text
    assert "retrying in 1.00 s" in caplog.text


async def test_list_runs_query_is_logged(
    service: FakeService, session: AsyncSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncclient")
    await session.list_runs(test_id="t_search", limit=3)
    assert "GET /api/v1/runs?testId=t_search&limit=3 -> 200" in caplog.text


# --- answers the emulator never gives: a stand-in proxy with odd bodies --------------------------


@pytest.fixture
async def odd_server() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A bare aiohttp app answering like a misconfigured proxy would; records request headers."""
    seen: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        name = request.match_info["id"]
        if name == "ab_html":
            html = "<html><body><h1>502 Bad Gateway</h1>\n<p>nginx</p></body></html>"
            return web.Response(status=502, text=html, content_type="text/html")
        if name == "ab_teapot":
            return web.Response(status=418, text="short and stout")
        if name == "ab_garbage":
            return web.Response(status=200, text="<html>ok</html>", content_type="text/html")
        if name == "ab_shape":
            return web.json_response({"build": ["not", "an", "object"]})
        return web.json_response({"build": {"id": name, "status": "shiny", "brandNew": 1}})

    async def put_part(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        data = await request.read()
        seen[-1]["x-received"] = data.hex()
        number = int(request.match_info["n"])
        return web.json_response({"partNumber": number, "etag": hashlib.sha256(data).hexdigest()})

    app = web.Application()
    app.router.add_get("/api/v1/builds/{id}", handle)
    app.router.add_put("/api/v1/builds/{id}/parts/{n}", put_part)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_non_json_error_bodies(
    odd_server: tuple[str, list[dict[str, str]]], waits: list[float]
) -> None:
    url, _seen = odd_server
    async with AsyncSession("k", url, max_retries=0) as session:
        with pytest.raises(ServerError) as bad_gateway:
            await session.get_build("ab_html")
        with pytest.raises(ApiError) as teapot:
            await session.get_build("ab_teapot")
        with pytest.raises(ApiError) as garbage:
            await session.get_build("ab_garbage")
        with pytest.raises(ApiError) as shape:
            await session.get_build("ab_shape")
    line = str(bad_gateway.value)
    # A proxy's HTML page is read for its title or heading, not shown as markup.
    assert line.startswith("502 Bad Gateway: 502 Bad Gateway")
    assert "<" not in line
    assert line.endswith("(GET /api/v1/builds/ab_html)")
    assert bad_gateway.value.code is None
    assert type(teapot.value) is ApiError
    # A plain text body is the service's message.
    assert str(teapot.value) == "418 I'm a Teapot: short and stout (GET /api/v1/builds/ab_teapot)"
    assert type(garbage.value) is ApiError
    assert (garbage.value.status, garbage.value.code) == (200, "invalid_response")
    assert "<html>ok</html>" in str(garbage.value)
    assert shape.value.code == "invalid_response"


async def test_unknown_fields_and_build_status_are_tolerated(
    odd_server: tuple[str, list[dict[str, str]]],
) -> None:
    url, _seen = odd_server
    async with AsyncSession("k", url) as session:
        build = await session.get_build("ab_fine")
    assert build == Build(id="ab_fine", status="shiny")


async def test_request_headers(odd_server: tuple[str, list[dict[str, str]]]) -> None:
    url, seen = odd_server
    async with AsyncSession("the-key", url, user_agent="ci-bot/1.0") as session:
        await session.get_build("ab_fine")
    headers = seen[-1]
    assert headers["Authorization"] == "Bearer the-key"
    assert headers["Accept"] == "application/json"
    agent = headers["User-Agent"]
    assert agent.startswith(f"asyncclient/{__version__} (+aiohttp/")
    assert agent.endswith("ci-bot/1.0")


@pytest.mark.parametrize("shared", [False, True], ids=["own file", "shared file"])
async def test_a_part_body_streams_with_a_content_length(
    odd_server: tuple[str, list[dict[str, str]]],
    tmp_path: Path,
    body_path: BodyPath,
    shared: bool,
) -> None:
    url, seen = odd_server
    path = tmp_path / "app.apk"
    content = os.urandom(300_000)
    path.write_bytes(content)
    progress: list[int] = []
    with path.open("rb") as file:
        body = PartBody(
            path,
            100,
            200_000,
            chunk_size=64 * 1024,
            progress=progress.append,
            file=file if shared else None,
        )
        async with AsyncSession("k", url) as session:
            part = await session.upload_part("ab_x", 3, body)
        assert not file.closed  # a shared file belongs to its owner
    sent = content[100:200_100]
    assert part == UploadedPart(3, hashlib.sha256(sent).hexdigest())
    headers = seen[-1]
    assert headers["Content-Length"] == "200000"
    assert "Transfer-Encoding" not in headers
    assert headers["Content-Type"] == "application/octet-stream"
    assert bytes.fromhex(headers["x-received"]) == sent
    assert sum(progress) == 200_000
    assert 0 < max(progress) <= 64 * 1024
    body_path.check()


@pytest.mark.parametrize(
    ("args", "match"),
    [((-1, 10), "offset"), ((0, 0), "length"), ((0, 10, 0), "chunk_size"), ((True, 10), "offset")],
)
def test_part_body_arguments(args: tuple[int, ...], match: str) -> None:
    offset, length, *rest = args
    with pytest.raises(ValidationError, match=match):
        PartBody("f.apk", offset, length, chunk_size=rest[0] if rest else 1 << 20)


def test_a_key_digest_is_the_keys_alone_and_tells_nothing_of_it() -> None:
    """Sessions with one key derive one secret per purpose (what a fleet's jobs sign what they
    share with); another key or purpose gives another, and the key is in none of them."""
    key = "a-secret-key-0f9e8d7c"
    first = AsyncSession(key, "http://127.0.0.1:9").key_digest("fleet")
    assert AsyncSession(key, "http://127.0.0.1:8").key_digest("fleet") == first
    assert AsyncSession(key + "x", "http://127.0.0.1:9").key_digest("fleet") != first
    assert AsyncSession(key, "http://127.0.0.1:9").key_digest("other") != first
    assert len(first) == 32
    assert key.encode() not in first
    assert key not in repr(vars(AsyncSession(key, "http://127.0.0.1:9")))
