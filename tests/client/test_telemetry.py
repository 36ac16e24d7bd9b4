"""OpenTelemetry by its semantic conventions for HTTP clients: the operation's INTERNAL span,
a CLIENT span per attempt with its own traceparent (seen by the emulator), the duration
histogram and the retry counter; and nothing at all while no SDK is set up.

Each test sets up a fresh SDK as the global providers (tests/otel_support.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Telemetry, _reset_globals, children

from asyncclient import AsyncSession, NotFoundError
from asyncclient._client import _telemetry
from asyncclient.testing import FakeService, Fault, recorded_retry_waits
from asyncclient.testing.builders import build_apk


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService(clock="manual") as service:
        yield service


def span_id_of(traceparent: str | None) -> int:
    assert traceparent is not None
    return int(traceparent.split("-")[2], 16)


async def test_a_call_answered_503_503_200_is_one_operation_and_three_client_spans(
    svc: FakeService, otel: Telemetry
) -> None:
    svc.inject("get_build", Fault("503", times=2))
    async with AsyncSession(svc.run_key, svc.url) as session:
        with recorded_retry_waits():
            build = await session.get_build("ab_demo_ios_100")
    assert build.id == "ab_demo_ios_100"
    spans = otel.finished()
    (operation,) = [s for s in spans if s.name == "asyncclient.get_build"]
    assert operation.kind == SpanKind.INTERNAL
    assert operation.attributes is not None
    assert operation.attributes["asyncclient.build_id"] == "ab_demo_ios_100"
    assert operation.attributes["asyncclient.attempts"] == 3
    assert "error.type" not in operation.attributes  # the call succeeded
    attempts = children(spans, operation)
    assert [(s.name, s.kind) for s in attempts] == [("GET", SpanKind.CLIENT)] * 3
    url = f"{svc.url}/api/v1/builds/ab_demo_ios_100"
    for span in attempts:
        assert span.attributes is not None
        assert span.attributes["http.request.method"] == "GET"
        assert span.attributes["url.full"] == url
        assert span.attributes["server.address"] == "127.0.0.1"
        assert span.attributes["server.port"] == svc.port
    got = [dict(s.attributes or {}) for s in attempts]
    assert [a["http.response.status_code"] for a in got] == [503, 503, 200]
    assert [a.get("error.type") for a in got] == ["503", "503", None]
    assert [a.get("http.request.resend_count") for a in got] == [None, 1, 2]
    assert [s.status.status_code for s in attempts] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    # The emulator saw three traceparents, each the span of its own attempt.
    seen = [r.traceparent for r in svc.requests_for("get_build")]
    assert len(set(seen)) == 3
    assert [span_id_of(t) for t in seen] == [s.context.span_id for s in attempts]
    # One duration per attempt, by status; the retry counter by operation and reason.
    durations = otel.points(_telemetry.DURATION, svc.port)
    by_status = Counter()
    for point in durations:
        by_status[point.attributes.get("http.response.status_code")] += point.count
        assert point.attributes["http.request.method"] == "GET"
        assert point.attributes["server.address"] == "127.0.0.1"
        assert point.sum >= 0
    assert by_status == {503: 2, 200: 1}
    (retries,) = otel.points(_telemetry.RETRIES, svc.port)
    assert dict(retries.attributes) == {
        "asyncclient.operation": "get_build",
        "asyncclient.retry.reason": "503",
    }
    assert retries.value == 2


async def test_a_dropped_connection_is_an_error_type_of_its_own(
    svc: FakeService, otel: Telemetry
) -> None:
    svc.inject("list_builds", Fault("drop"))
    async with AsyncSession(svc.run_key, svc.url) as session:
        with recorded_retry_waits():
            await session.list_builds("p_demo")
    first, second = [s for s in otel.finished() if s.kind == SpanKind.CLIENT]
    assert first.attributes is not None
    assert "http.response.status_code" not in first.attributes
    assert str(first.attributes["error.type"]).startswith("aiohttp.client_exceptions.")
    assert second.attributes is not None
    assert second.attributes["http.response.status_code"] == 200
    assert second.attributes["http.request.resend_count"] == 1
    (retries,) = otel.points(_telemetry.RETRIES, svc.port)
    assert retries.attributes["asyncclient.retry.reason"] == first.attributes["error.type"]


async def test_errors_uploads_and_downloads_have_their_spans_and_traceparents(
    svc: FakeService, otel: Telemetry, tmp_path: Path
) -> None:
    apk = build_apk(tmp_path / "shop.apk")
    async with AsyncSession(svc.run_key, svc.url) as session:
        with pytest.raises(NotFoundError):
            await session.get_build("ab_nope")
        build = await session.upload_build(svc.project_id, apk)
        start = await session.run_test("t_search")
        svc.advance(600)
        await session.download_run_file(start.run_id, "video.mp4", tmp_path / "video.mp4")
    spans = otel.finished()
    by_name = {s.name: s for s in spans}
    missing = by_name["asyncclient.get_build"]
    assert missing.attributes is not None
    assert missing.attributes["error.type"] == "404"
    assert missing.status.status_code == StatusCode.ERROR
    (answer,) = children(spans, missing)
    assert answer.attributes is not None
    assert answer.attributes["http.response.status_code"] == 404
    assert answer.attributes["error.type"] == "404"
    # The upload: its operation holds the start, the parts and the completion.
    upload = by_name["asyncclient.upload_build"]
    assert {s.name for s in children(spans, upload)} >= {
        "asyncclient.start_upload",
        "asyncclient.upload_part",
        "asyncclient.complete_upload",
    }
    parts = [s for s in spans if s.name == "asyncclient.upload_part"]
    part_attempts = [c for p in parts for c in children(spans, p)]
    assert {s.name for s in part_attempts} == {"PUT"}
    sent = {span_id_of(r.traceparent) for r in svc.requests_for("upload_part")}
    assert sent == {s.context.span_id for s in part_attempts}
    assert build.id
    # The download: every request of it carries the traceparent of its own CLIENT span.
    download = by_name["asyncclient.download_run_file"]
    fetched = children(spans, download)
    assert fetched
    assert {s.name for s in fetched} == {"GET"}
    requests = svc.requests_for("download_run_file")
    assert requests
    assert all(r.traceparent for r in requests)
    assert {span_id_of(r.traceparent) for r in requests} == {s.context.span_id for s in fetched}
    assert all(
        s.context.trace_id == download.context.trace_id for s in fetched
    )  # one trace for the operation


async def test_without_an_sdk_nothing_is_made_and_no_traceparent_is_sent(
    svc: FakeService,
) -> None:
    _reset_globals()  # the API installed, no SDK set up: what most applications have
    assert _telemetry.tracer() is None
    assert _telemetry.instruments() is None
    async with AsyncSession(svc.run_key, svc.url) as session:
        await session.get_build("ab_demo_ios_100")
    assert [r.traceparent for r in svc.requests_for("get_build")] == [None]


def test_credentials_in_a_url_never_reach_url_full() -> None:
    assert (
        _telemetry.url_full("http://ann:s3cret@svc.example:8080/api/v1/runs", "ids=r_1")
        == "http://REDACTED:REDACTED@svc.example:8080/api/v1/runs?ids=r_1"
    )
    assert _telemetry.url_full("https://svc.example/api/v1/builds/b_1", "") == (
        "https://svc.example/api/v1/builds/b_1"
    )


def test_error_types_by_the_conventions() -> None:
    from asyncclient.errors import ServerError

    assert _telemetry.error_type(ServerError(503, "unavailable", "busy", "", "GET", "u")) == "503"
    assert _telemetry.error_type(TimeoutError()) == "TimeoutError"
    assert _telemetry.error_type(NotFoundError(404, "x", "y", "", "GET", "u")) == "404"


async def test_a_signed_links_query_never_reaches_a_span(
    svc: FakeService, otel: Telemetry, tmp_path: Path
) -> None:
    """A run file named by its link with a signature in the query: the operation's
    `asyncclient.file` attribute keeps the link without it, as `url.full` does."""
    async with AsyncSession(svc.run_key, svc.url) as session:
        start = await session.run_test("t_search")
        svc.advance(600)
        link = f"{svc.url}/api/v1/runs/{start.run_id}/files/video.mp4?X-Sig=s3cr3t-sig#frag"
        await session.download_run_file(start.run_id, link, tmp_path / "video.mp4")
    spans = otel.finished()
    (download,) = [s for s in spans if s.name == "asyncclient.download_run_file"]
    assert download.attributes is not None
    assert download.attributes["asyncclient.file"] == (
        f"{svc.url}/api/v1/runs/{start.run_id}/files/video.mp4"
    )
    for span in spans:
        assert "s3cr3t-sig" not in str(dict(span.attributes or {}).get("asyncclient.file", ""))


def test_a_provider_named_in_the_environment_is_seen_as_soon_as_it_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The environment's names are read again whenever a variable is set or removed."""
    from asyncclient._client import _telemetry

    name = "OTEL_PYTHON_TRACER_PROVIDER"
    monkeypatch.delenv(name, raising=False)
    assert not _telemetry._in_environ(name)
    monkeypatch.setenv(name, "sdk_tracer_provider")
    assert _telemetry._in_environ(name)
    monkeypatch.delenv(name)
    assert not _telemetry._in_environ(name)
