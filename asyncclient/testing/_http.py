"""What every handler of the emulator shares: the app state, JSON answers, request parsing.

`AppState` (the backend, the fault plan, the dialect, the request log) hangs on the app as STATE.
"""

import json
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from aiohttp import web

from asyncclient._core._operations import OPERATIONS
from asyncclient.testing._auth import ApiKey, require_edit
from asyncclient.testing._backend import Backend
from asyncclient.testing._conditions import FaultPlan
from asyncclient.testing._errors import ServiceError, invalid
from asyncclient.testing._records import MODES, Run
from asyncclient.testing.dialects.base import Dialect, WireAnswer, dumps

__all__ = [
    "STATE",
    "AppState",
    "RequestRecord",
    "RunViews",
    "authenticated",
    "base_url",
    "build_id_field",
    "error_response",
    "json_answer",
    "json_body",
    "json_text",
    "opt_str",
    "parse_body",
    "read_body",
    "req_str",
    "run_mode",
    "wire",
]

_JSON = "application/json"


@attrs.frozen
class RequestRecord:
    """One request the emulator answered. status is 0 when the connection was dropped.

    Attributes:
        method: The HTTP method.
        path: The path asked for.
        query: The query string, parsed.
        status: The status answered (0: the connection was dropped).
        op: The operation's tool name, if the route is one.
        request_id: The `X-Request-Id` answered.
        traceparent: The `traceparent` the client sent, if any.
        idempotency_key: The `Idempotency-Key` the client sent, if any.
    """

    method: str
    path: str
    query: Mapping[str, str]
    status: int
    op: str | None
    request_id: str | None = None
    """The X-Request-Id the answer carried."""
    traceparent: str | None = None
    """The request's W3C traceparent header, if it carried one."""
    idempotency_key: str | None = None
    """The request's Idempotency-Key header, if it carried one."""


class RunViews:
    """JSON text of run views, cached per (run, status, base URL): a view only changes with them."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._full: dict[str, tuple[str, str, str]] = {}
        self._list: dict[str, tuple[str, str, str]] = {}

    def full(self, run: Run, now: float, base: str) -> str:
        return self._view(self._full, self._dialect.run_full_view, run, now, base)

    def listed(self, run: Run, now: float, base: str) -> str:
        return self._view(self._list, self._dialect.run_list_view, run, now, base)

    @staticmethod
    def _view(
        cache: dict[str, tuple[str, str, str]],
        make: Callable[[Run, str, float, str], dict[str, Any]],
        run: Run,
        now: float,
        base: str,
    ) -> str:
        status = run.status_at(now)
        cached = cache.get(run.id)
        if cached is not None and cached[0] == status and cached[1] == base:
            return cached[2]
        text = dumps(make(run, status, now, base))
        cache[run.id] = (status, base, text)
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

    def record(
        self, request: web.BaseRequest, op: str | None, status: int, request_id: str | None = None
    ) -> None:
        if op is not None:
            self.counts[op] += 1
        self.log.append(
            RequestRecord(
                request.method,
                request.path,
                dict(request.query),
                status,
                op,
                request_id,
                request.headers.get("traceparent"),
                request.headers.get("Idempotency-Key"),
            )
        )


STATE = web.AppKey("asyncclient_emulator", AppState)


# --- answers -----------------------------------------------------------------------------------


def json_answer(
    value: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return json_text(dumps(value), status, headers)


def json_text(
    text: str, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(text=text, status=status, content_type=_JSON, headers=headers)


def error_response(state: "AppState", exc: ServiceError) -> web.Response:
    """The error answer in the service's dialect."""
    return wire(state.dialect.error_answer(exc))


def wire(answer: WireAnswer) -> web.Response:
    return web.Response(
        body=answer.body,
        status=answer.status,
        content_type=answer.content_type,
        charset="utf-8",
        headers=answer.headers,
    )


# --- request parsing ----------------------------------------------------------------------------


def base_url(request: web.BaseRequest) -> str:
    return f"{request.scheme}://{request.host}"


def authenticated(request: web.Request) -> tuple[Backend, ApiKey]:
    """The service's state and the caller's key: 401 without a known key, 403 when the
    operation (the route's name) needs a capability the key lacks, read from the operation
    table alone, before anything of the request is looked at."""
    backend = request.app[STATE].backend
    key = backend.authenticate(request.headers.get("Authorization"))
    operation = OPERATIONS.get(request.match_info.route.name or "")
    if operation is not None and operation.capability == "edit":
        require_edit(key, operation.title)
    return backend, key


async def read_body(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise invalid("body", "the JSON body is too large") from None


def parse_body(raw: bytes, allowed: tuple[str, ...], *, required: bool) -> dict[str, Any]:
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


async def json_body(
    request: web.Request, allowed: tuple[str, ...], *, required: bool
) -> dict[str, Any]:
    return parse_body(await read_body(request), allowed, required=required)


def opt_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid(name, f"{name} must be a string")
    return value


def req_str(data: Mapping[str, Any], name: str) -> str:
    value = opt_str(data, name)
    if not value:
        raise invalid(name, f"{name} is required and must be a non-empty string")
    return value


def run_mode(data: Mapping[str, Any]) -> str:
    mode = data.get("mode")
    if mode is None:
        return "auto"
    if mode not in MODES:
        raise invalid("mode", f"mode must be one of {', '.join(MODES)}")
    assert isinstance(mode, str)
    return mode


def build_id_field(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("ab_"):
        raise invalid(name, f"{name} must hold build ids (ab_...)")
    return value
