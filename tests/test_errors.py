"""Tests of the error tree and error_from_response: every status and code, and bodies of any shape.
Pure: answers are given as (status, headers, body) with no server."""

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from asyncclient import errors
from asyncclient._core._responses import error_from_response
from asyncclient.apps import Problem
from asyncclient.errors import (
    ApiError,
    AsyncClientError,
    BadRequestError,
    BuildRejectedError,
    ChecksumMismatchError,
    ConflictError,
    NotFoundError,
    NotStartedError,
    PaymentRequiredError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    TransportError,
    UnauthenticatedError,
    ValidationError,
    WatchTimeoutError,
)
from asyncclient.models import Build, SkippedTest, StartedRun

URL = "http://127.0.0.1:1/api/v1/builds/ab_x"


def _body(code: str, message: str, **extra: Any) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, **extra}}).encode()


def test_tree() -> None:
    for cls in (
        ValidationError,
        TransportError,
        ApiError,
        ChecksumMismatchError,
        WatchTimeoutError,
    ):
        assert issubclass(cls, AsyncClientError)
    assert issubclass(ValidationError, ValueError)
    for api_cls in (
        BadRequestError,
        UnauthenticatedError,
        PaymentRequiredError,
        PermissionDeniedError,
        NotFoundError,
        ConflictError,
        BuildRejectedError,
        NotStartedError,
        RateLimitedError,
        ServerError,
    ):
        assert issubclass(api_cls, ApiError)
    # The tree on the reference page is the classes' own: each under its parent, all there.
    page = (Path(__file__).resolve().parents[1] / "docs/reference/errors.md").read_text()
    tree = page.split("```text\n", 1)[1].split("```", 1)[0]
    parents: list[tuple[int, str]] = [(-1, "AsyncClientError")]
    drawn = {"AsyncClientError"}
    for line in tree.splitlines():
        found = re.search(r"\+-- (\w+)", line)
        if found is None:
            continue
        depth, name = found.start(), found.group(1)
        while parents[-1][0] >= depth:
            parents.pop()
        assert issubclass(getattr(errors, name), getattr(errors, parents[-1][1])), name
        parents.append((depth, name))
        drawn.add(name)
    classes = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)}
    assert classes == drawn


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "invalid_request", BadRequestError),
        (400, "invalid_part", BadRequestError),
        (400, "empty", NotStartedError),
        (401, "unauthenticated", UnauthenticatedError),
        (402, "paid_plan_required", PaymentRequiredError),
        (402, "not_started", NotStartedError),
        (403, "permission_denied", PermissionDeniedError),
        (404, "not_found", NotFoundError),
        (405, "method_not_allowed", ApiError),
        (409, "build_pinned", ConflictError),
        (409, "idempotency_conflict", ConflictError),
        (416, "range_not_satisfiable", ApiError),
        (422, "build_rejected", BuildRejectedError),
        (422, "something_else", ApiError),
        (429, "rate_limited", RateLimitedError),
        (500, "internal", ServerError),
        (503, "unavailable", ServerError),
        (504, None, ServerError),
        (418, None, ApiError),
    ],
)
def test_class_by_code_then_status(status: int, code: str | None, cls: type[ApiError]) -> None:
    body = _body(code, "msg") if code else b""
    err = error_from_response(status, {}, body, "GET", URL)
    assert type(err) is cls
    assert err.status == status
    assert err.code == code


def test_str_is_one_line_with_code_message_and_request() -> None:
    err = error_from_response(
        404, {}, _body("not_found", "no build ab_x in your projects"), "GET", URL
    )
    assert str(err) == "404 not_found: no build ab_x in your projects (GET /api/v1/builds/ab_x)"
    assert err.message == "no build ab_x in your projects"
    assert err.method == "GET"
    assert err.url == URL
    assert err.body == {"error": {"code": "not_found", "message": "no build ab_x in your projects"}}
    assert err.error["code"] == "not_found"


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (b"Unauthorized", "401 Unauthorized (GET /api/v1/builds/ab_x)"),
        (b"unauthorized: bad key", "401 unauthorized: bad key (GET /api/v1/builds/ab_x)"),
        (b"bad key", "401 Unauthorized: bad key (GET /api/v1/builds/ab_x)"),
    ],
)
def test_the_label_is_not_repeated_when_the_message_starts_with_it(body: bytes, line: str) -> None:
    assert str(error_from_response(401, {}, body, "GET", URL)) == line


def test_query_is_shown_in_the_request() -> None:
    err = error_from_response(
        400, {}, _body("invalid_request", "bad limit"), "GET", "http://h/api/v1/runs?limit=999"
    )
    assert str(err).endswith("(GET /api/v1/runs?limit=999)")


def test_non_json_body_gives_status_reason_and_excerpt() -> None:
    html = b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body></html>"
    err = error_from_response(502, {}, html, "POST", "http://h/api/v1/tests/t_1/run")
    assert type(err) is ServerError
    assert err.code is None
    assert err.body == html.decode()
    line = str(err)
    assert "\n" not in line
    # A proxy's HTML page: its title says what happened, not its markup.
    assert line.startswith("502 Bad Gateway: 502 Bad Gateway (POST")
    assert line.endswith("(POST /api/v1/tests/t_1/run)")


def test_empty_body() -> None:
    err = error_from_response(503, {}, b"", "GET", URL)
    assert str(err) == "503 Service Unavailable (GET /api/v1/builds/ab_x)"
    assert err.body is None


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b'{"message": "plain shape"}', None, "plain shape"),
        (b'{"code": "nope", "message": "flat"}', "nope", "flat"),
        (b'{"error": "just text"}', None, "just text"),
        (b'{"detail": "fastapi style"}', None, "fastapi style"),
        (b'{"error": {"code": 5, "message": ["x"]}}', None, None),
        (b"[1, 2]", None, None),
        (b'"a string"', None, "a string"),
        (b'{"errors": [{"code": "bad", "detail": "listed"}]}', "bad", "listed"),
        (b'{"error": "not_found", "message": "oauth style"}', "not_found", "oauth style"),
    ],
)
def test_other_json_shapes(body: bytes, code: str | None, message: str | None) -> None:
    err = error_from_response(400, {}, body, "GET", URL)
    assert type(err) is BadRequestError
    assert err.code == code
    if message is None:
        assert err.message.startswith("Bad Request; the answer was ")
    else:
        assert err.message == message


def test_rate_limited_reads_retry_after_header_then_body() -> None:
    err = error_from_response(
        429, {"Retry-After": "7"}, _body("rate_limited", "slow down", retryAfter=3), "GET", URL
    )
    assert isinstance(err, RateLimitedError)
    assert err.retry_after == 7.0
    from_body = error_from_response(429, {}, _body("rate_limited", "x", retryAfter=3), "GET", URL)
    assert from_body.retry_after == 3.0
    neither = error_from_response(429, {}, b"", "GET", URL)
    assert neither.retry_after is None


def test_build_rejected_carries_problems_and_build() -> None:
    body = _body(
        "build_rejected",
        "the devices cannot run this build",
        problems=[
            {
                "kind": "abi",
                "found": ["armeabi-v7a"],
                "supported": ["arm64-v8a", "x86_64"],
                "message": "no supported ABI",
            },
            "not an object",
        ],
        build={"id": "ab_1", "status": "rejected", "appId": "com.x", "versionCode": 3},
    )
    err = error_from_response(422, {}, body, "POST", URL)
    assert isinstance(err, BuildRejectedError)
    assert err.problems == (
        Problem(
            kind="abi",
            found=("armeabi-v7a",),
            supported=("arm64-v8a", "x86_64"),
            message="no supported ABI",
        ),
        # An item of another shape is kept as text rather than dropped.
        Problem(kind="", found=(), supported=(), message="not an object"),
    )
    assert err.build == Build(id="ab_1", status="rejected", app_id="com.x", version_code="3")


def test_build_rejected_with_odd_details_still_raises_cleanly() -> None:
    err = error_from_response(422, {}, _body("build_rejected", "no", build=[1]), "POST", URL)
    assert isinstance(err, BuildRejectedError)
    assert err.problems == ()
    assert err.build is None


@pytest.mark.parametrize(("status", "code"), [(402, "not_started"), (400, "empty")])
def test_not_started_carries_the_lists(status: int, code: str) -> None:
    body = _body(
        code,
        "no test was started",
        started=[],
        skipped=[{"testId": "t_1", "reason": "no_build"}, {"testId": "t_2", "reason": "x"}],
    )
    err = error_from_response(status, {}, body, "POST", URL)
    assert isinstance(err, NotStartedError)
    assert err.started == ()
    assert err.skipped == (SkippedTest("t_1", "no_build"), SkippedTest("t_2", "x"))


def test_not_started_with_odd_lists() -> None:
    err = error_from_response(402, {}, _body("not_started", "x", started="?"), "POST", URL)
    assert isinstance(err, NotStartedError)
    assert err.started == ()
    assert err.skipped == ()


def test_errors_pickle() -> None:
    err = error_from_response(
        402,
        {},
        _body("not_started", "none", started=[{"testId": "t_1", "runId": "j_1"}], skipped=[]),
        "POST",
        URL,
    )
    err.attempts = 3
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is NotStartedError
    assert str(copy) == str(err)
    assert copy.started == (StartedRun("t_1", "j_1"),)
    assert copy.attempts == 3
    transport = pickle.loads(pickle.dumps(TransportError("down", method="GET", url=URL)))
    assert (transport.method, transport.url, str(transport)) == ("GET", URL, "down")
    mismatch = pickle.loads(
        pickle.dumps(ChecksumMismatchError("differs", expected="a", actual="b"))
    )
    assert (mismatch.expected, mismatch.actual) == ("a", "b")
    watch = pickle.loads(pickle.dumps(WatchTimeoutError("late")))
    assert watch.runs == ()
