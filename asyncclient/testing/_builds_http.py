"""The HTTP handlers of the build operations: list, get, start an upload, parts, complete, delete.

Each parses and checks its request, calls the build store (`backend.build_store`) and writes
the answer through the dialect.
"""

import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

from asyncclient.testing._bodies import Crc32, format_etag, receive
from asyncclient.testing._errors import ServiceError, invalid
from asyncclient.testing._http import (
    STATE,
    authenticated,
    json_answer,
    json_body,
    opt_str,
    req_str,
)

__all__ = ["HANDLERS"]


async def list_builds(request: web.Request) -> web.Response:
    dialect = request.app[STATE].dialect
    backend, key = authenticated(request)
    builds = backend.build_store.list_builds(key, request.match_info["project_id"])
    settings = backend.settings
    return json_answer(
        {
            "builds": [dialect.build_view(b, single=False) for b in builds],
            "maxBytes": settings.max_bytes,
            "partBytes": settings.part_bytes,
        }
    )


async def get_build(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    build = backend.build_store.get(key, request.match_info["build_id"])
    return json_answer({"build": request.app[STATE].dialect.build_view(build, single=True)})


async def start_upload(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    data = await json_body(request, ("fileName", "size", "label"), required=True)
    file_name = req_str(data, "fileName")
    size = data.get("size")
    if isinstance(size, float) and size.is_integer():
        size = int(size)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise invalid("size", "size is required and must be a whole number of bytes, at least 1")
    label = opt_str(data, "label")
    build = backend.build_store.start_upload(
        key, request.match_info["project_id"], file_name, size, label
    )
    return json_answer({"id": build.id, "partBytes": build.part_bytes, "parts": build.parts}, 201)


async def upload_part(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    build, number, expected = backend.build_store.part_target(
        key, request.match_info["build_id"], request.match_info["part_number"]
    )
    declared = request.content_length
    if declared is not None and declared != expected:
        raise ServiceError(
            400,
            "invalid_part",
            f"part {number} must be exactly {expected} bytes, got {declared}",
            extra={"expectedBytes": expected},
        )
    plan = request.app[STATE].plan
    bandwidth = plan.conditions.part_bandwidth
    try:
        # A first part goes straight in place; others via commit_part.
        discard = build.status == "ready"
        claimed = None if discard else backend.build_store.claim_part(build, number)
        dest = build.directory / f".part-{number}-{secrets.token_hex(6)}"
        try:
            crc, length = await receive(
                request,
                dest if claimed is None else claimed,
                expected,
                bandwidth,
                Crc32,
                plan.link.take if plan.conditions.link_bandwidth else None,
            )
        finally:
            if claimed is not None:
                backend.build_store.release_part(build, number, claimed)
    except FileNotFoundError:
        raise ServiceError(404, "not_found", f"build {build.id} was deleted") from None
    if length != expected:
        if claimed is None:
            dest.unlink(missing_ok=True)
        raise ServiceError(
            400,
            "invalid_part",
            f"part {number} must be exactly {expected} bytes, got {length}",
            extra={"expectedBytes": expected},
        )
    etag = format_etag(crc, length)
    if discard:
        dest.unlink(missing_ok=True)
        return json_answer({"partNumber": number, "etag": etag})
    await backend.build_store.commit_part(build, number, dest if claimed is None else claimed, etag)
    return json_answer({"partNumber": number, "etag": etag})


async def complete_upload(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    data = await json_body(request, ("parts",), required=True)
    listed = data.get("parts")
    if not isinstance(listed, list) or not listed:
        raise invalid("parts", "parts must be a non-empty list of {partNumber, etag}")
    parts: list[tuple[int, str]] = []
    for item in listed:
        if (
            not isinstance(item, dict)
            or set(item) != {"partNumber", "etag"}
            or isinstance(item["partNumber"], bool)
            or not isinstance(item["partNumber"], int)
            or not isinstance(item["etag"], str)
        ):
            raise invalid("parts", "each part must be an object {partNumber: int, etag: string}")
        parts.append((item["partNumber"], item["etag"]))
    build = await backend.build_store.complete_upload(key, request.match_info["build_id"], parts)
    return json_answer({"build": request.app[STATE].dialect.build_view(build, single=True)})


async def delete_build(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    await backend.build_store.delete_build(key, request.match_info["build_id"])
    return json_answer({"ok": True})


#: The handler of each build operation of asyncclient._core._operations.
HANDLERS: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "list_builds": list_builds,
    "get_build": get_build,
    "start_upload": start_upload,
    "upload_part": upload_part,
    "complete_upload": complete_upload,
    "delete_build": delete_build,
}
