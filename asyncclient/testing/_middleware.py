"""The middleware every request passes: it applies the fault plan, then logs the request.

Faults before the handler (latency, 429/503/500, a dropped connection) and after it (drop_after,
500_after); an operation's name is its route's name, as in asyncclient._core._operations.
"""

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from asyncclient.testing._auth import bearer_token
from asyncclient.testing._backend import Backend
from asyncclient.testing._bodies import ClientGone
from asyncclient.testing._conditions import OPERATIONS, Decision
from asyncclient.testing._errors import ServiceError
from asyncclient.testing._http import STATE, AppState, error_response

__all__ = ["middleware"]

_PASS = Decision()


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


class _Dropped(Exception):
    """The emulator dropped the connection on purpose (a fault)."""


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


def _known_key(request: web.BaseRequest, backend: Backend) -> str | None:
    """The request's API key if the service knows it, else None.

    Rate-limit buckets are kept per key: keyed by any string presented, random keys would grow
    the table without end (and an unknown key answers 401 anyway, the first check).
    """
    token = bearer_token(request.headers.get("Authorization"))
    return token if token is not None and token in backend.keys else None


REQUEST_ID: Final = web.RequestKey("asyncclient_request_id", str)


async def add_request_id(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """on_response_prepare: the request's id on its answer, streamed ones included."""
    request_id = request.get(REQUEST_ID)
    if request_id is not None:
        response.headers["X-Request-Id"] = request_id


@web.middleware
async def middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    state = request.app[STATE]
    op = request.match_info.route.name
    if op not in OPERATIONS:
        op = None
    # Every answer carries its X-Request-Id, as services do.
    request[REQUEST_ID] = f"req_{secrets.token_hex(8)}"
    status = 0
    try:
        response = await _serve(request, handler, state, op)
        status = response.status
        return response
    except _Dropped:
        # The transport is gone: aiohttp drops this quietly.
        return web.Response()
    finally:
        state.record(request, op, status, request.get(REQUEST_ID))


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
    except ClientGone:
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
