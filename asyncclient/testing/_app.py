"""The emulator's HTTP face (moto's "responses"): one handler per operation, which parses,
validates, calls the backend and serialises; a middleware applies faults and logs each request.
"""

import asyncio
import contextlib
import hashlib
import html
import json
import secrets
import time
import zlib
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from email.utils import formatdate
from pathlib import Path
from typing import Any, BinaryIO

import attrs
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from asyncclient._operations import OPERATIONS as OPERATIONS_TABLE
from asyncclient.testing._auth import ApiKey, bearer_token
from asyncclient.testing._backend import Backend
from asyncclient.testing._build_files import PartWriter
from asyncclient.testing._clock import to_iso
from asyncclient.testing._conditions import (
    OPERATIONS,
    Decision,
    Fault,
    FaultPlan,
    NetworkConditions,
)
from asyncclient.testing._errors import ServiceError, invalid
from asyncclient.testing._files import RangeNotSatisfiable, parse_range
from asyncclient.testing._idempotency import answer_once
from asyncclient.testing._runs import MODES, RUN_STATUSES, Run
from asyncclient.testing._seed import endpoint_problem
from asyncclient.testing.dialects.base import Dialect, WireAnswer

__all__ = ["STATE", "AppState", "RequestRecord", "make_app"]

#: A body is handed to a worker thread (checksum and write) in batches of about this size.
_BATCH = 1 << 20
#: A connection held to a bandwidth sleeps once it is this far ahead of its cap (seconds).
_NAP = 0.005
_MAX_IDS = 50
_JSON = "application/json"
_PAGE_DIALECT = Dialect()


@attrs.frozen
class RequestRecord:
    """One request the emulator answered. status is 0 when the connection was dropped."""

    method: str
    path: str
    query: Mapping[str, str]
    status: int
    op: str | None


class RunViews:
    """JSON text of run views, cached per (run, status, base URL): a view only changes with them."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._full: dict[str, tuple[str, str, str]] = {}
        self._list: dict[str, tuple[str, str, str]] = {}

    def full(self, run: Run, now: float, base: str) -> str:
        status = run.status_at(now)
        cached = self._full.get(run.id)
        if cached is not None and cached[0] == status and cached[1] == base:
            return cached[2]
        text = _dumps(self._dialect.run_full_view(run, status, now, base))
        self._full[run.id] = (status, base, text)
        return text

    def listed(self, run: Run, now: float, base: str) -> str:
        status = run.status_at(now)
        cached = self._list.get(run.id)
        if cached is not None and cached[0] == status and cached[1] == base:
            return cached[2]
        text = _dumps(self._dialect.run_list_view(run, status, now, base))
        self._list[run.id] = (status, base, text)
        return text


class AppState:
    """Everything the handlers share: the backend, the fault plan, the request log and stats."""

    def __init__(
        self,
        backend: Backend,
        plan: FaultPlan,
        *,
        dialect: Dialect | None = None,
        log_size: int = 100_000,
    ) -> None:
        self.backend = backend
        self.plan = plan
        self.dialect = dialect or Dialect()
        self.log: deque[RequestRecord] = deque(maxlen=log_size)
        self.counts: Counter[str] = Counter()
        self.max_ids = 0
        self.views = RunViews(self.dialect)
        self.incoming = backend.data_dir / "incoming"
        self.incoming.mkdir(parents=True, exist_ok=True)

    def record(self, request: web.BaseRequest, op: str | None, status: int) -> None:
        if op is not None:
            self.counts[op] += 1
        self.log.append(
            RequestRecord(request.method, request.path, dict(request.query), status, op)
        )


STATE = web.AppKey("asyncclient_emulator", AppState)


# --- serialisation ------------------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return _json_text(_dumps(value), status, headers)


def _json_text(
    text: str, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(text=text, status=status, content_type=_JSON, headers=headers)


def error_response(state: "AppState", exc: ServiceError) -> web.Response:
    """The error answer in the service's dialect."""
    return _wire(state.dialect.error_answer(exc))


def _wire(answer: WireAnswer) -> web.Response:
    return web.Response(
        body=answer.body,
        status=answer.status,
        content_type=answer.content_type,
        charset="utf-8",
        headers=answer.headers,
    )


def _fault_error(kind: str, retry_after: int) -> ServiceError:
    if kind == "429":
        return ServiceError(
            429,
            "rate_limited",
            f"too many requests; retry after {retry_after} s",
            extra={"retryAfter": retry_after},
            headers={"Retry-After": str(retry_after)},
            kind="rate_limited",
        )
    if kind == "503":
        return ServiceError(
            503,
            "unavailable",
            "the service is briefly unavailable; retry shortly",
            headers={"Retry-After": str(retry_after)},
            kind="unavailable",
        )
    return ServiceError(
        500, "internal", "the service failed to answer this request", kind="internal"
    )


# --- request parsing ----------------------------------------------------------------------------


def _base(request: web.BaseRequest) -> str:
    return f"{request.scheme}://{request.host}"


def _auth(request: web.Request) -> tuple[Backend, ApiKey]:
    backend = request.app[STATE].backend
    return backend, backend.authenticate(request.headers.get("Authorization"))


async def _read_body(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise invalid("body", "the JSON body is too large") from None


def _parse_body(raw: bytes, allowed: tuple[str, ...], *, required: bool) -> dict[str, Any]:
    """The JSON object of a request body; unknown fields are refused so typos do not pass."""
    if not raw.strip():
        if required:
            raise invalid("body", "this operation needs a JSON object body")
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise invalid("body", "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise invalid("body", "the body must be a JSON object")
    for name in data:
        if name not in allowed:
            raise invalid(
                name, f"unknown field {name!r}; this operation takes {', '.join(allowed)}"
            )
    return data


async def _body(
    request: web.Request, allowed: tuple[str, ...], *, required: bool
) -> dict[str, Any]:
    return _parse_body(await _read_body(request), allowed, required=required)


def _opt_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid(name, f"{name} must be a string")
    return value


def _req_str(data: Mapping[str, Any], name: str) -> str:
    value = _opt_str(data, name)
    if not value:
        raise invalid(name, f"{name} is required and must be a non-empty string")
    return value


def _mode(data: Mapping[str, Any]) -> str:
    mode = data.get("mode")
    if mode is None:
        return "auto"
    if mode not in MODES:
        raise invalid("mode", f"mode must be one of {', '.join(MODES)}")
    assert isinstance(mode, str)
    return mode


def _build_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("ab_"):
        raise invalid(name, f"{name} must hold build ids (ab_...)")
    return value


# --- idempotency ---------------------------------------------------------------------------------


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
    return _wire(answer)


# --- streaming bodies ---------------------------------------------------------------------------


class _ClientGone(Exception):
    """The client's connection broke while its body was being read."""


class _Dropped(Exception):
    """The emulator dropped the connection on purpose (a fault)."""


class _Crc32:
    """zlib.crc32 behind hashlib's update/hexdigest: a part's etag. It names the bytes received
    for a part at a third of sha256's CPU; the build's own checksum stays sha256."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def part_etag(data: bytes) -> str:
    """The etag the emulator answers for a part of these bytes: opaque to clients (the API spec
    says only that complete must list it), here the part's crc32 and length."""
    crc = _Crc32()
    crc.update(data)
    return _etag(crc.hexdigest(), len(data))


def _etag(crc: str, length: int) -> str:
    return f"{crc}-{length}"


def _absorb(out: BinaryIO | PartWriter, digest: Any, chunks: list[bytes]) -> None:
    """Hash and write one batch of a body's chunks. Blocking: runs in a worker thread (hashlib
    and the writes release the GIL on buffers this size)."""
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)


async def _receive(
    request: web.Request,
    dest: Path | PartWriter,
    limit: int,
    bandwidth: int | None,
    checksum: Callable[[], Any] = hashlib.sha256,
) -> tuple[str, int]:
    """Stream the body to `dest` (a new file, or a part's place) in chunks, checksumming as it
    goes: (hex checksum, length). A new file is removed when the body does not arrive whole.

    Refuses a body longer than `limit`. With `bandwidth`, reads at most that many bytes/s on
    average: a body takes length/bandwidth at the least, taken in as the connection buffered it.
    The event loop only reads, taking the chunks as the connection buffered them (no joining
    copies); each batch of about _BATCH bytes is hashed and written by a worker thread while the
    loop reads the next one.
    """
    loop = asyncio.get_running_loop()
    digest = checksum()
    total = 0
    content = request.content
    began = loop.time()
    batch: list[bytes] = []
    batched = 0
    pending: asyncio.Future[None] | None = None
    # Opening is a metadata operation of microseconds.
    out = dest.open("wb") if isinstance(dest, Path) else dest  # closed once the last batch is in
    try:
        while True:
            try:
                chunk, boundary = await content.readchunk()
            except (OSError, HttpProcessingError, asyncio.IncompleteReadError) as exc:
                raise _ClientGone from exc
            if not chunk and boundary:
                continue  # the end of one chunk of a chunked body
            if chunk:
                total += len(chunk)
                if total > limit:
                    raise ServiceError(
                        400, "invalid_part", f"the body is longer than the {limit} bytes expected"
                    )
                batch.append(chunk)
                batched += len(chunk)
            if batched >= _BATCH or (not chunk and batch):
                if pending is not None:
                    await pending
                pending = loop.run_in_executor(None, _absorb, out, digest, batch)
                batch, batched = [], 0
            if bandwidth is not None:
                # Sleep off what this connection is ahead of its cap, in naps of at least
                # _NAP (and at the end): the body takes total/bandwidth at the least, without
                # a timer and a wake-up for every chunk the connection buffered.
                ahead = began + total / bandwidth - loop.time()
                if ahead >= _NAP or (ahead > 0 and not chunk):
                    await asyncio.sleep(ahead)
            if not chunk:
                break
        if pending is not None:
            await pending
            pending = None
    except BaseException:
        if pending is not None:
            await asyncio.wait([pending])  # the thread may still be writing to `out`
            if not pending.cancelled():
                pending.exception()  # retrieved: the error being raised is the one that counts
        out.close()
        if isinstance(dest, Path):
            # Unlinking a temp file is a metadata operation of microseconds.
            dest.unlink(missing_ok=True)  # noqa: ASYNC240
        raise
    out.close()
    return digest.hexdigest(), total


def _abort(request: web.BaseRequest) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _drop(request: web.BaseRequest) -> None:
    """Read part of the body (when there is one), then cut the connection."""
    if request.body_exists:
        want = min(max(1, (request.content_length or 1 << 17) // 2), 1 << 20)
        got = 0
        with contextlib.suppress(OSError, HttpProcessingError, asyncio.IncompleteReadError):
            while got < want:
                chunk = await request.content.readany()
                if not chunk:
                    break
                got += len(chunk)
    _abort(request)


# --- middleware ---------------------------------------------------------------------------------

_PASS = Decision()


def _known_key(request: web.BaseRequest, backend: Backend) -> str | None:
    """The request's API key if the service knows it, else None.

    Rate-limit buckets are kept per key: keyed by any string presented, random keys would grow
    the table without end (and an unknown key answers 401 anyway, the first check).
    """
    token = bearer_token(request.headers.get("Authorization"))
    return token if token is not None and token in backend.keys else None


@web.middleware
async def _middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    state = request.app[STATE]
    op = request.match_info.route.name
    if op not in OPERATIONS:
        op = None
    status = 0
    try:
        response = await _serve(request, handler, state, op)
        status = response.status
        return response
    except _Dropped:
        # The transport is gone: aiohttp fails to send this quietly and closes the connection.
        return web.Response()
    finally:
        state.record(request, op, status)


async def _serve(
    request: web.Request,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    state: AppState,
    op: str | None,
) -> web.StreamResponse:
    decision = _PASS
    if op is not None and state.plan.active:
        decision = state.plan.decide(op, _known_key(request, state.backend))
        if decision.latency:
            await asyncio.sleep(decision.latency)
        if decision.before == "drop":
            await _drop(request)
            raise _Dropped
        if decision.before is not None:
            return error_response(state, _fault_error(decision.before, decision.retry_after))
    try:
        response = await handler(request)
    except ServiceError as exc:
        response = error_response(state, exc)
    except _ClientGone:
        raise _Dropped from None
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        response = error_response(
            state,
            ServiceError(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed on {request.path}; use {allowed}",
                headers={"Allow": allowed},
                kind="method",
            ),
        )
    except web.HTTPNotFound:
        response = error_response(
            state, ServiceError(404, "not_found", f"no such path {request.path}", kind="no_route")
        )
    if decision.after == "drop_after":
        _abort(request)
        raise _Dropped
    if decision.after == "500_after":
        return error_response(state, _fault_error("500", decision.retry_after))
    return response


# --- handlers: builds ---------------------------------------------------------------------------


async def list_builds(request: web.Request) -> web.Response:
    dialect = request.app[STATE].dialect
    backend, key = _auth(request)
    builds = backend.list_builds(key, request.match_info["project_id"])
    settings = backend.settings
    return _json(
        {
            "builds": [dialect.build_view(b, single=False) for b in builds],
            "maxBytes": settings.max_bytes,
            "partBytes": settings.part_bytes,
        }
    )


async def get_build(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    build = backend.get_build(key, request.match_info["build_id"])
    return _json({"build": request.app[STATE].dialect.build_view(build, single=True)})


async def start_upload(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    data = await _body(request, ("fileName", "size", "label"), required=True)
    file_name = _req_str(data, "fileName")
    size = data.get("size")
    if isinstance(size, float) and size.is_integer():
        size = int(size)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise invalid("size", "size is required and must be a whole number of bytes, at least 1")
    label = _opt_str(data, "label")
    build = backend.start_upload(key, request.match_info["project_id"], file_name, size, label)
    return _json({"id": build.id, "partBytes": build.part_bytes, "parts": build.parts}, 201)


async def upload_part(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    build, number, expected = backend.part_target(
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
    bandwidth = request.app[STATE].plan.conditions.part_bandwidth
    try:
        # A part sent for the first time is received straight into its place in the build file
        # (if cut off, nothing earlier is lost); any other into a file commit_part copies.
        claimed = backend.claim_part(build, number)
        dest = build.directory / f".part-{number}-{secrets.token_hex(6)}"
        try:
            crc, length = await _receive(
                request, dest if claimed is None else claimed, expected, bandwidth, _Crc32
            )
        finally:
            if claimed is not None:
                backend.release_part(build, number, claimed)
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
    etag = _etag(crc, length)
    await backend.commit_part(build, number, dest if claimed is None else claimed, etag)
    return _json({"partNumber": number, "etag": etag})


async def complete_upload(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    data = await _body(request, ("parts",), required=True)
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
    build = await backend.complete_upload(key, request.match_info["build_id"], parts)
    return _json({"build": request.app[STATE].dialect.build_view(build, single=True)})


async def delete_build(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    await backend.delete_build(key, request.match_info["build_id"])
    return _json({"ok": True})


# --- handlers: runs -----------------------------------------------------------------------------


async def run_test(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    raw = await _read_body(request)
    base = _base(request)

    async def work() -> tuple[int, Any]:
        data = _parse_body(raw, ("mode", "buildId"), required=False)
        mode = _mode(data)
        build_id = data.get("buildId")
        if build_id is not None:
            build_id = _build_id("buildId", build_id)
        run = backend.run_test(key, request.match_info["test_id"], mode, build_id)
        link = f"{base}/runs/{run.id}"
        return 201, {"runId": run.id, "mode": run.mode, "overage": run.overage, "link": link}

    return await _idempotent(request, backend, key, "run_test", raw, work)


async def run_project(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    raw = await _read_body(request)
    base = _base(request)

    async def work() -> tuple[int, Any]:
        data = _parse_body(raw, ("mode", "buildIds", "buildId"), required=False)
        mode = _mode(data)
        build_ids: list[str] = []
        listed = data.get("buildIds")
        if listed is not None:
            if not isinstance(listed, list) or len(listed) > 50:
                raise invalid("buildIds", "buildIds must be a list of up to 50 build ids")
            build_ids.extend(_build_id("buildIds", b) for b in listed)
        if data.get("buildId") is not None:
            build_ids.append(_build_id("buildId", data["buildId"]))
        started, skipped = backend.run_project(
            key, request.match_info["project_id"], mode, build_ids
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
    backend, key = _auth(request)
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
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 200:
            raise invalid("limit", "limit must be a whole number from 1 to 200")
        limit = int(raw_limit)
    runs = backend.list_runs(
        key,
        ids=ids,
        test_id=query.get("testId"),
        project_id=query.get("projectId"),
        status=status,
        limit=limit,
    )
    now = backend.now()
    base = _base(request)
    view = state.views.full if ids is not None else state.views.listed
    return _json_text('{"runs":[' + ",".join([view(run, now, base) for run in runs]) + "]}")


async def get_run(request: web.Request) -> web.Response:
    state = request.app[STATE]
    backend, key = _auth(request)
    run = backend.get_run(key, request.match_info["run_id"])
    return _json_text('{"run":' + state.views.full(run, backend.now(), _base(request)) + "}")


async def stop_run(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    run = backend.stop_run(key, request.match_info["run_id"])
    return _json({"status": request.app[STATE].dialect.run_status(run.status_at(backend.now()))})


def _if_range_holds(value: str, etag: str, last_modified: str) -> bool:
    value = value.strip()
    if value.startswith("W/"):
        return False  # a weak validator never matches for If-Range
    if value.startswith('"'):
        return value == etag
    return value == last_modified


async def download_run_file(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    run, file = backend.run_file(key, request.match_info["run_id"], request.match_info["file"])
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


# --- handlers: endpoints ------------------------------------------------------------------------


async def list_endpoints(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    endpoints = backend.list_endpoints(key, request.match_info["project_id"])
    now = backend.now()
    dialect = request.app[STATE].dialect
    return _json({"endpoints": [dialect.endpoint_view(e, now) for e in endpoints]})


async def add_endpoint(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    project_id = request.match_info["project_id"]
    # Capability first: a key that may not edit learns nothing about the body's problems.
    backend.require_edit(key, "Add an endpoint")
    data = await _body(
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
    endpoint = backend.add_endpoint(
        key,
        project_id,
        name=data["name"],
        description=data["description"],
        method=method,
        url=data["url"],
        headers=data.get("headers") or {},
        body_template=data.get("bodyTemplate"),
    )
    return _json({"id": endpoint.id}, 201)


async def delete_endpoint(request: web.Request) -> web.Response:
    backend, key = _auth(request)
    backend.delete_endpoint(key, request.match_info["endpoint_id"])
    return _json({"ok": True})


# --- the result page and the emulator's own routes ----------------------------------------------


async def result_page(request: web.Request) -> web.Response:
    backend = request.app[STATE].backend
    run = backend.find_run(request.match_info["run_id"])
    if run is None:
        raise ServiceError(404, "not_found", "no such run")
    now = backend.now()
    # The page people read is the same in every dialect.
    view = _PAGE_DIALECT.run_full_view(run, run.status_at(now), now, _base(request))
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(r['result'])}</td><td>{esc(r['title'])}</td><td>{esc(r['reason'])}</td></tr>"
        for r in view["requirements"]
    )
    captures = "".join(
        f"<li>{esc(str(k))}: {esc(str(v))}</li>" for k, v in (view["captures"] or {}).items()
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(view["testTitle"])} - {esc(run.id)}</title>
<meta http-equiv="refresh" content="{"3600" if view["final"] else "2"}"></head>
<body><h1>{esc(view["testTitle"])}</h1>
<p>Run <code>{esc(run.id)}</code> of <code>{esc(view["testId"])}</code>:
<strong>{esc(view["status"])}</strong> (mode {esc(view["mode"])}, {esc(view["platform"])})</p>
<p>{esc(view["headline"] or "The run is not final yet; this page refreshes itself.")}</p>
<table><tr><th>Result</th><th>Check</th><th>Reason</th></tr>{rows}</table>
<ul>{captures}</ul>
</body></html>
"""
    return web.Response(text=page, content_type="text/html")


async def emulator_stats(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json(
        {
            "requests": dict(state.counts),
            "maxIds": state.max_ids,
            "runs": len(state.backend.runs),
            "builds": len(state.backend.builds),
            "cpuSeconds": time.process_time(),
            "now": to_iso(state.backend.now()),
        }
    )


async def emulator_advance(request: web.Request) -> web.Response:
    backend = request.app[STATE].backend
    data = await _body(request, ("seconds",), required=True)
    seconds = data.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise invalid("seconds", "seconds must be a number of at least 0")
    backend.clock.advance(float(seconds))
    return _json({"now": to_iso(backend.now())})


async def emulator_runs(request: web.Request) -> web.Response:
    backend = request.app[STATE].backend
    data = await _body(request, ("testId", "count", "mode"), required=True)
    count = data.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100_000:
        raise invalid("count", "count must be a whole number from 1 to 100000")
    runs = backend.create_runs(_req_str(data, "testId"), count, _mode(data))
    return _json({"runIds": [run.id for run in runs]}, 201)


async def emulator_sink(request: web.Request) -> web.Response:
    state = request.app[STATE]
    dest = state.incoming / f"sink-{secrets.token_hex(6)}"
    digest, length = await _receive(
        request, dest, state.backend.settings.max_bytes, state.plan.conditions.part_bandwidth
    )
    dest.unlink(missing_ok=True)
    return _json({"bytes": length, "sha256": digest})


async def emulator_get_conditions(request: web.Request) -> web.Response:
    return _json(request.app[STATE].plan.conditions.to_json())


async def emulator_put_conditions(request: web.Request) -> web.Response:
    plan = request.app[STATE].plan
    try:
        data = json.loads(await _read_body(request) or b"{}")
        plan.conditions = NetworkConditions.from_json(data)
    except (ValueError, TypeError) as exc:
        raise invalid("conditions", str(exc)) from None
    return _json(plan.conditions.to_json())


async def emulator_faults(request: web.Request) -> web.Response:
    plan = request.app[STATE].plan
    data = await _body(request, ("op", "kind", "times", "retryAfter"), required=True)
    try:
        fault = Fault(str(data.get("kind")), int(data.get("times", 1)), data.get("retryAfter"))
        plan.inject(str(data.get("op")), fault)
    except (ValueError, TypeError) as exc:
        raise invalid("fault", str(exc)) from None
    return _json({"op": data["op"], "pending": plan.pending(str(data["op"]))}, 201)


#: The handler of each operation of asyncclient._operations (routes come from that table).
_HANDLERS: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "list_builds": list_builds,
    "get_build": get_build,
    "start_upload": start_upload,
    "upload_part": upload_part,
    "complete_upload": complete_upload,
    "delete_build": delete_build,
    "run_test": run_test,
    "run_project": run_project,
    "list_runs": list_runs,
    "get_run": get_run,
    "stop_run": stop_run,
    "download_run_file": download_run_file,
    "list_endpoints": list_endpoints,
    "add_endpoint": add_endpoint,
    "delete_endpoint": delete_endpoint,
}


def make_app(state: AppState) -> web.Application:
    # Complete may list thousands of parts: allow JSON bodies well beyond the default 1 MiB.
    app = web.Application(middlewares=[_middleware], client_max_size=16 << 20)
    app[STATE] = state
    routes: list[tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]], str]] = [
        *(
            (operation.method, operation.route, _HANDLERS[name], name)
            for name, operation in OPERATIONS_TABLE.items()
        ),
        ("GET", "/runs/{run_id}", result_page, "result_page"),
        ("GET", "/_emulator/stats", emulator_stats, "emulator_stats"),
        ("POST", "/_emulator/advance", emulator_advance, "emulator_advance"),
        ("POST", "/_emulator/runs", emulator_runs, "emulator_runs"),
        ("PUT", "/_emulator/sink", emulator_sink, "emulator_sink"),
        ("GET", "/_emulator/conditions", emulator_get_conditions, "emulator_get_conditions"),
        ("PUT", "/_emulator/conditions", emulator_put_conditions, "emulator_put_conditions"),
        ("POST", "/_emulator/faults", emulator_faults, "emulator_faults"),
    ]
    for method, path, handler, name in routes:
        if method == "GET":
            app.router.add_get(path, handler, name=name)  # HEAD too
        else:
            app.router.add_route(method, path, handler, name=name)
    return app
