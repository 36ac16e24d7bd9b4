"""Keys, capabilities, unknown ids and paths: every operation's 401, 403, 404 and 405 answers."""

import re
from collections.abc import Callable

import pytest
from emulator_support import Http

from asyncclient._core._operations import API_PREFIX
from asyncclient._core._operations import OPERATIONS as TABLE
from asyncclient.testing import OPERATIONS, FakeService

# Ids that exist in SMALL_SEED, for each placeholder of the operation table's paths.
SAMPLE_IDS = {
    "project_id": "p_a",
    "build_id": "ab_ios_2",
    "part_number": "1",
    "test_id": "t_web",
    "run_id": "j_000000000000",
    "file": "video.mp4",
    "endpoint_id": "ep_hook",
}
# (method, path, op) of every operation, from the table: a new one needs no line here.
CALLS = [
    (
        row.method,
        API_PREFIX + re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: SAMPLE_IDS[m[1]], row.path),
        row.name,
    )
    for row in TABLE.values()
]


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer nope", "Basic azpydW4=", "Bearer", "k-run", "Bearer  "],
    ids=["missing", "unknown", "basic", "empty", "no-scheme", "blank"],
)
async def test_every_operation_needs_a_known_bearer_key(
    clients: Callable[..., Http],
    small: FakeService,
    authorization: str | None,
) -> None:
    raw = clients(small, None)
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path, op in CALLS:
        reply = await raw.call(method, path, headers=headers)
        assert reply.status == 401, (op, reply.raw)
        assert reply.json == {
            "error": {"code": "unauthenticated", "message": reply.json["error"]["message"]}
        }
        assert reply.headers["WWW-Authenticate"] == "Bearer"
        assert "nope" not in reply.raw.decode()
    # Nothing was done: no build was deleted, no run started, no endpoint removed.
    assert "ab_ios_2" in small.backend.builds
    assert not small.backend.runs
    assert "ep_hook" in small.backend.endpoints
    assert [r.status for r in small.requests] == [401] * len(CALLS)
    assert {r.op for r in small.requests} == OPERATIONS


async def test_scheme_is_case_insensitive(a_run: Http) -> None:
    reply = await a_run.get("/api/v1/runs", headers={"Authorization": "bearer k-run"})
    assert reply.status == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/api/v1/builds/ab_ios_2"),
        ("POST", "/api/v1/projects/p_a/endpoints"),
        ("DELETE", "/api/v1/endpoints/ep_hook"),
    ],
)
async def test_edit_operations_need_the_edit_capability(
    a_run: Http, a_edit: Http, small: FakeService, method: str, path: str
) -> None:
    body = {"name": "n", "description": "d", "url": "https://x.example.com"}
    refused = await a_run.call(method, path, json=body)
    assert refused.status == 403
    assert refused.code == "permission_denied"
    allowed = await a_edit.call(method, path, json=body)
    assert allowed.status in (200, 201), allowed.raw


async def test_the_run_key_may_call_every_other_operation(a_run: Http, small: FakeService) -> None:
    """Reading the spec coherently: only the three edit operations need `edit`."""
    started = await a_run.post("/api/v1/projects/p_a/builds", json={"fileName": "a.apk", "size": 3})
    assert started.status == 201
    assert (await a_run.post("/api/v1/tests/t_web/run")).status == 201
    assert (await a_run.post("/api/v1/projects/p_a/run")).status == 201
    run_id = (await a_run.get("/api/v1/runs")).json["runs"][0]["id"]
    assert (await a_run.post(f"/api/v1/runs/{run_id}/stop")).status == 200
    assert (await a_run.get("/api/v1/projects/p_a/endpoints")).status == 200


NOT_FOUND = [
    ("GET", "/api/v1/projects/p_nope/builds"),
    ("GET", "/api/v1/builds/ab_nope"),
    ("GET", "/api/v1/builds/not-an-id"),
    ("POST", "/api/v1/projects/p_nope/builds"),
    ("PUT", "/api/v1/builds/ab_nope/parts/1"),
    ("POST", "/api/v1/builds/ab_nope/complete"),
    ("DELETE", "/api/v1/builds/ab_nope"),
    ("POST", "/api/v1/tests/t_nope/run"),
    ("POST", "/api/v1/projects/p_nope/run"),
    ("GET", "/api/v1/runs/j_nope"),
    ("POST", "/api/v1/runs/j_nope/stop"),
    ("GET", "/api/v1/runs/j_nope/files/video.mp4"),
    ("GET", "/api/v1/projects/p_nope/endpoints"),
    ("POST", "/api/v1/projects/p_nope/endpoints"),
    ("DELETE", "/api/v1/endpoints/ep_nope"),
]


async def test_unknown_ids_are_404(a_edit: Http) -> None:
    """Valid bodies: checks run key (401), capability (403), body (400), then ids (404)."""
    bodies = {
        "/builds": {"fileName": "a.apk", "size": 1},
        "/complete": {"parts": [{"partNumber": 1, "etag": "x"}]},
        "/endpoints": {"name": "n", "description": "d", "url": "https://x.example.com"},
    }
    for method, path in NOT_FOUND:
        json_body = None
        if method == "POST":
            json_body = next((b for end, b in bodies.items() if path.endswith(end)), None)
        reply = await a_edit.call(method, path, json=json_body)
        assert reply.status == 404, (method, path, reply.raw)
        assert reply.code == "not_found"
        assert reply.json["error"]["message"]


async def test_ids_of_other_projects_are_404_never_403(
    clients: Callable[..., Http], small: FakeService, a_run: Http
) -> None:
    started = await a_run.post("/api/v1/tests/t_web/run")
    run_id = started.json["runId"]
    outsider = clients(small, "k-b-only")
    for method, path in [
        ("GET", "/api/v1/projects/p_a/builds"),
        ("GET", "/api/v1/builds/ab_ios_1"),
        ("DELETE", "/api/v1/builds/ab_ios_2"),
        ("POST", "/api/v1/tests/t_web/run"),
        ("POST", "/api/v1/projects/p_a/run"),
        ("GET", f"/api/v1/runs/{run_id}"),
        ("POST", f"/api/v1/runs/{run_id}/stop"),
        ("GET", "/api/v1/projects/p_a/endpoints"),
        ("DELETE", "/api/v1/endpoints/ep_hook"),
    ]:
        reply = await outsider.call(method, path)
        assert reply.status == 404, (method, path, reply.raw)
    # ...and listing runs simply does not show them.
    assert (await outsider.get("/api/v1/runs")).json == {"runs": []}
    assert (await outsider.get("/api/v1/runs", params={"ids": run_id})).json == {"runs": []}


async def test_unknown_paths_and_methods(a_run: Http) -> None:
    missing = await a_run.get("/api/v1/nothing/here")
    assert missing.status == 404
    assert missing.code == "not_found"
    wrong = await a_run.call("PATCH", "/api/v1/runs")
    assert wrong.status == 405
    assert wrong.code == "method_not_allowed"
    assert "GET" in wrong.headers["Allow"]
    wrong = await a_run.call("PUT", "/api/v1/projects/p_a/builds")
    assert wrong.status == 405
    assert set(wrong.headers["Allow"].split(", ")) >= {"GET", "POST"}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/projects/p_a/builds", b"{not json", "body"),
        ("/api/v1/projects/p_a/builds", b"[1, 2]", "body"),
        ("/api/v1/projects/p_a/builds", b"", "body"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": "a.apk"}', "size"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": "a.apk", "size": "9"}', "size"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": "a.apk", "size": true}', "size"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": "a.apk", "size": 0}', "size"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": "a.txt", "size": 9}', "fileName"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": "../a.apk", "size": 9}', "fileName"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": 7, "size": 9}', "fileName"),
        ("/api/v1/projects/p_a/builds", b'{"fileName": "a.apk", "size": 9, "label": 1}', "label"),
        ("/api/v1/projects/p_a/builds", b'{"file_name": "a.apk", "size": 9}', "file_name"),
        ("/api/v1/tests/t_web/run", b'{"mode": "hot"}', "mode"),
        ("/api/v1/tests/t_web/run", b'{"buildId": 5}', "buildId"),
        ("/api/v1/tests/t_web/run", b'"auto"', "body"),
        ("/api/v1/projects/p_a/run", b'{"buildIds": "ab_ios_1"}', "buildIds"),
        ("/api/v1/projects/p_a/run", b'{"buildIds": ["x"]}', "buildIds"),
        ("/api/v1/builds/ab_ios_2/complete", b'{"parts": []}', "parts"),
        (
            "/api/v1/builds/ab_ios_2/complete",
            b'{"parts": [{"partNumber": "1", "etag": "e"}]}',
            "parts",
        ),
        ("/api/v1/builds/ab_ios_2/complete", b'{"parts": [{"partNumber": 1}]}', "parts"),
    ],
)
async def test_invalid_bodies_are_400_naming_the_field(
    a_run: Http, path: str, body: bytes, field: str
) -> None:
    reply = await a_run.call("POST", path, data=body, headers={"Content-Type": "application/json"})
    assert reply.status == 400, reply.raw
    assert reply.code == "invalid_request"
    assert reply.json["error"]["field"] == field


async def test_too_large_names_the_limit(a_run: Http) -> None:
    reply = await a_run.post(
        "/api/v1/projects/p_a/builds", json={"fileName": "a.apk", "size": (4 << 30) + 1}
    )
    assert reply.status == 400
    assert reply.code == "too_large"
    assert reply.json["error"]["maxBytes"] == 4 << 30
