"""The HTTP handlers of the tester-endpoint operations: list, add, delete.

Each parses and checks its request, calls the endpoint store (`backend.endpoint_store`) and
writes the answer through the dialect.
"""

from collections.abc import Awaitable, Callable

from aiohttp import web

from asyncclient.testing._errors import invalid
from asyncclient.testing._http import STATE, authenticated, json_answer, json_body
from asyncclient.testing._seed import endpoint_problem

__all__ = ["HANDLERS"]


async def list_endpoints(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    endpoints = backend.endpoint_store.list_endpoints(key, request.match_info["project_id"])
    now = backend.now()
    dialect = request.app[STATE].dialect
    return json_answer({"endpoints": [dialect.endpoint_view(e, now) for e in endpoints]})


async def add_endpoint(request: web.Request) -> web.Response:
    # Capability first: a non-editor learns nothing of the body.
    backend, key = authenticated(request)
    project_id = request.match_info["project_id"]
    data = await json_body(
        request,
        ("name", "description", "method", "url", "headers", "bodyTemplate"),
        required=True,
    )
    method = data.get("method")
    method = "POST" if method is None else method
    problem = endpoint_problem(
        data.get("name"),
        data.get("description"),
        method,
        data.get("url"),
        data.get("headers"),
        data.get("bodyTemplate"),
    )
    if problem is not None:
        raise invalid(*problem)
    endpoint = backend.endpoint_store.add_endpoint(
        key,
        project_id,
        name=data["name"],
        description=data["description"],
        method=method,
        url=data["url"],
        headers=data.get("headers") or {},
        body_template=data.get("bodyTemplate"),
    )
    return json_answer({"id": endpoint.id}, 201)


async def delete_endpoint(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    backend.endpoint_store.delete_endpoint(key, request.match_info["endpoint_id"])
    return json_answer({"ok": True})


#: The handler of each endpoint operation of asyncclient._core._operations.
HANDLERS: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "list_endpoints": list_endpoints,
    "add_endpoint": add_endpoint,
    "delete_endpoint": delete_endpoint,
}
