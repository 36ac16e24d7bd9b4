"""Tester endpoints: every rule of the Endpoint table, write-only headers, snake_case list view."""

import logging
from typing import Any

import pytest
from emulator_support import SECRET, Http

from asyncclient.testing import FakeService

VALID: dict[str, Any] = {
    "name": "create_user",
    "description": "Creates a user and returns its id.",
    "url": "https://hooks.example.com/users",
}


async def test_list_endpoints_in_snake_case_without_headers(
    a_run: Http, small: FakeService
) -> None:
    reply = await a_run.get("/api/v1/projects/p_a/endpoints")
    assert reply.status == 200
    (endpoint,) = reply.json["endpoints"]
    assert list(endpoint) == [
        "id", "name", "description", "method", "url", "created_at", "last_used_at",
    ]  # fmt: skip
    assert endpoint["id"] == "ep_hook"
    assert endpoint["method"] == "POST"
    assert endpoint["last_used_at"] is None
    assert endpoint["created_at"].endswith("Z")
    assert SECRET.encode() not in reply.raw


async def test_add_and_delete_an_endpoint(
    a_edit: Http, a_run: Http, small: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = {
        **VALID,
        "method": "PUT",
        "headers": {"Authorization": f"Bearer {SECRET}"},
        "bodyTemplate": '{"name": "{{name}}"}',
    }
    added = await a_edit.post("/api/v1/projects/p_a/endpoints", json=body)
    assert added.status == 201
    assert list(added.json) == ["id"]
    endpoint_id = added.json["id"]
    assert endpoint_id.startswith("ep_")
    listed = await a_run.get("/api/v1/projects/p_a/endpoints")
    assert [e["name"] for e in listed.json["endpoints"]] == ["hook", "create_user"]
    assert listed.json["endpoints"][1]["method"] == "PUT"
    # The secret is stored, but appears in no answer, no log line, no repr, no request record.
    assert small.backend.endpoints[endpoint_id].headers == body["headers"]
    assert SECRET not in listed.raw.decode()
    assert SECRET not in caplog.text
    assert SECRET not in repr(small.backend.endpoints[endpoint_id])
    assert SECRET not in repr(small.requests)
    duplicate = await a_edit.post("/api/v1/projects/p_a/endpoints", json=body)
    assert duplicate.status == 409
    assert duplicate.code == "already_exists"
    # The same name in another project is fine.
    assert (await a_edit.post("/api/v1/projects/p_b/endpoints", json=body)).status == 201
    deleted = await a_edit.call("DELETE", f"/api/v1/endpoints/{endpoint_id}")
    assert deleted.json == {"ok": True}
    assert (await a_edit.call("DELETE", f"/api/v1/endpoints/{endpoint_id}")).status == 404
    listed = await a_run.get("/api/v1/projects/p_a/endpoints")
    assert [e["name"] for e in listed.json["endpoints"]] == ["hook"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": None}, "name"),
        ({"name": ""}, "name"),
        ({"name": "n" * 41}, "name"),
        ({"name": 5}, "name"),
        ({"description": None}, "description"),
        ({"description": "d" * 601}, "description"),
        ({"method": "post"}, "method"),
        ({"method": "HEAD"}, "method"),
        ({"url": None}, "url"),
        ({"url": "http://hooks.example.com"}, "url"),
        ({"url": "https://"}, "url"),
        ({"url": "ftp://x"}, "url"),
        ({"headers": ["a"]}, "headers"),
        ({"headers": {f"X-{i}": "v" for i in range(21)}}, "headers"),
        ({"headers": {"X-Number": 5}}, "headers"),
        ({"headers": {"": "v"}}, "headers"),
        ({"bodyTemplate": {"a": 1}}, "bodyTemplate"),
        ({"body_template": "x"}, "body_template"),
    ],
)
async def test_endpoint_rules(a_edit: Http, change: dict[str, Any], field: str) -> None:
    body = {k: v for k, v in {**VALID, **change}.items() if v is not None}
    reply = await a_edit.post("/api/v1/projects/p_a/endpoints", json=body)
    assert reply.status == 400, reply.raw
    assert reply.code == "invalid_request"
    assert reply.json["error"]["field"] == field


async def test_endpoint_limits_are_inclusive(a_edit: Http) -> None:
    body = {
        "name": "n" * 40,
        "description": "d" * 600,
        "url": "https://hooks.example.com/x?y=1",
        "headers": {f"X-{i}": "v" for i in range(20)},
        "method": "DELETE",
    }
    assert (await a_edit.post("/api/v1/projects/p_a/endpoints", json=body)).status == 201


async def test_last_used_at_follows_runs_that_use_the_endpoint(
    a_run: Http, small: FakeService
) -> None:
    await a_run.post("/api/v1/tests/t_fail/run")  # t_fail uses "hook"
    small.advance(30)
    listed = await a_run.get("/api/v1/projects/p_a/endpoints")
    assert listed.json["endpoints"][0]["last_used_at"] is None
    small.advance(40)  # half-way through the run
    listed = await a_run.get("/api/v1/projects/p_a/endpoints")
    assert listed.json["endpoints"][0]["last_used_at"] is not None
