"""The HTTP handlers of the run operations: start (idempotent), list, get, stop, download a file.

Each parses and checks its request, calls the run store (`backend.run_store`) and writes the
answer through the dialect.
"""

from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import Any

from aiohttp import web

from asyncclient._values._bounds import digits
from asyncclient.testing._auth import ApiKey
from asyncclient.testing._backend import Backend
from asyncclient.testing._errors import ServiceError, invalid
from asyncclient.testing._files import RangeNotSatisfiable, parse_range
from asyncclient.testing._http import (
    STATE,
    authenticated,
    base_url,
    build_id_field,
    error_response,
    json_answer,
    json_text,
    parse_body,
    read_body,
    run_mode,
    wire,
)
from asyncclient.testing._idempotency import answer_once
from asyncclient.testing._records import RUN_STATUSES

__all__ = ["HANDLERS"]

_MAX_IDS = 50


async def _idempotent(
    request: web.Request,
    backend: Backend,
    key: ApiKey,
    op: str,
    raw: bytes,
    work: Callable[[], Awaitable[tuple[int, Any]]],
) -> web.Response:
    """Run `work` once per (API key, Idempotency-Key); a retry gets the first answer back."""
    answer = await answer_once(
        backend.answers,
        request.app[STATE].dialect,
        key,
        request.headers.get("Idempotency-Key"),
        (op, request.path, raw),
        work,
    )
    return wire(answer)


async def run_test(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    raw = await read_body(request)
    base = base_url(request)

    async def work() -> tuple[int, Any]:
        data = parse_body(raw, ("mode", "buildId"), required=False)
        mode = run_mode(data)
        build_id = data.get("buildId")
        if build_id is not None:
            build_id = build_id_field("buildId", build_id)
        run = backend.run_store.run_test(
            key,
            request.match_info["test_id"],
            mode,
            build_id,
            request.headers.get("Idempotency-Key"),
        )
        link = f"{base}/runs/{run.id}"
        return 201, {"runId": run.id, "mode": run.mode, "overage": run.overage, "link": link}

    return await _idempotent(request, backend, key, "run_test", raw, work)


async def run_project(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    raw = await read_body(request)
    base = base_url(request)

    async def work() -> tuple[int, Any]:
        data = parse_body(raw, ("mode", "buildIds", "buildId"), required=False)
        mode = run_mode(data)
        build_ids: list[str] = []
        listed = data.get("buildIds")
        if listed is not None:
            if not isinstance(listed, list) or len(listed) > 50:
                raise invalid("buildIds", "buildIds must be a list of up to 50 build ids")
            build_ids.extend(build_id_field("buildIds", b) for b in listed)
        if data.get("buildId") is not None:
            build_ids.append(build_id_field("buildId", data["buildId"]))
        started, skipped = backend.run_store.run_project(
            key,
            request.match_info["project_id"],
            mode,
            build_ids,
            request.headers.get("Idempotency-Key"),
        )
        dialect = request.app[STATE].dialect
        return 201, {
            "started": [dialect.run_started(run, base) for run in started],
            "skipped": [dialect.skipped(s) for s in skipped],
        }

    return await _idempotent(request, backend, key, "run_project", raw, work)


_LIST_PARAMS = frozenset({"ids", "testId", "projectId", "status", "limit"})


async def list_runs(request: web.Request) -> web.Response:
    state = request.app[STATE]
    backend, key = authenticated(request)
    query = request.query
    for name in query:
        if name not in _LIST_PARAMS:
            raise invalid(name, f"unknown query parameter {name!r}")
    ids: list[str] | None = None
    raw_ids = query.get("ids")
    if raw_ids is not None:
        ids = raw_ids.split(",")
        if len(ids) > _MAX_IDS:
            raise invalid("ids", f"at most {_MAX_IDS} run ids per request, got {len(ids)}")
        for run_id in ids:
            if len(run_id) < 3 or not run_id.startswith("j_") or len(run_id) > 100:
                raise invalid("ids", "ids must be comma-separated run ids (j_...)")
        if len(ids) > state.max_ids:
            state.max_ids = len(ids)
    status = query.get("status")
    if status is not None:
        status = state.dialect.run_status_in(status)
        if status not in RUN_STATUSES:
            words = ", ".join(state.dialect.run_status(s) for s in RUN_STATUSES)
            raise invalid("status", f"status must be one of {words}")
    limit = 50
    raw_limit = query.get("limit")
    if raw_limit is not None:
        if not digits(raw_limit) or not 1 <= int(raw_limit) <= 200:
            raise invalid("limit", "limit must be a whole number from 1 to 200")
        limit = int(raw_limit)
    runs = backend.run_store.list_runs(
        key,
        ids=ids,
        test_id=query.get("testId"),
        project_id=query.get("projectId"),
        status=status,
        limit=limit,
    )
    now = backend.now()
    base = base_url(request)
    view = state.views.full if ids is not None else state.views.listed
    return json_text('{"runs":[' + ",".join([view(run, now, base) for run in runs]) + "]}")


async def get_run(request: web.Request) -> web.Response:
    state = request.app[STATE]
    backend, key = authenticated(request)
    run = backend.run_store.get(key, request.match_info["run_id"])
    return json_text('{"run":' + state.views.full(run, backend.now(), base_url(request)) + "}")


async def stop_run(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    run = backend.run_store.stop_run(key, request.match_info["run_id"])
    return json_answer(
        {"status": request.app[STATE].dialect.run_status(run.status_at(backend.now()))}
    )


def _if_range_holds(value: str, etag: str, last_modified: str) -> bool:
    value = value.strip()
    if value.startswith("W/"):
        return False  # a weak validator never matches for If-Range
    if value.startswith('"'):
        return value == etag
    return value == last_modified


async def download_run_file(request: web.Request) -> web.Response:
    backend, key = authenticated(request)
    run, file = backend.run_store.run_file(
        key, request.match_info["run_id"], request.match_info["file"]
    )
    finished = run.finished_at(backend.now())
    last_modified = formatdate(finished, usegmt=True)
    headers = {"Accept-Ranges": "bytes", "ETag": file.etag, "Last-Modified": last_modified}
    size = len(file.data)
    header = request.headers.get("Range")
    if_range = request.headers.get("If-Range")
    if header is not None and (
        if_range is None or _if_range_holds(if_range, file.etag, last_modified)
    ):
        try:
            span = parse_range(header, size)
        except RangeNotSatisfiable:
            error = ServiceError(
                416,
                "range_not_satisfiable",
                f"the range {header[:60]!r} is outside the file's {size} bytes",
                headers={**headers, "Content-Range": f"bytes */{size}"},
            )
            return error_response(request.app[STATE], error)
        if span is not None:
            first, last = span
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
            return web.Response(
                body=file.data[first : last + 1],
                status=206,
                content_type=file.content_type,
                headers=headers,
            )
    return web.Response(body=file.data, content_type=file.content_type, headers=headers)


#: The handler of each run operation of asyncclient._core._operations.
HANDLERS: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "run_test": run_test,
    "run_project": run_project,
    "list_runs": list_runs,
    "get_run": get_run,
    "stop_run": stop_run,
    "download_run_file": download_run_file,
}
