"""Hostile services in front of the emulator, for the fail-closed tests: each passes requests
on to the emulator and changes what a careful service would not.

- `merging_front`: run starts merged. It keeps only a prefix of each Idempotency-Key and
  answers a start whose prefix it saw with the answer it gave then, whatever the test (no
  fingerprint); or answers every start of a test, or every start, with the first run it
  started; or starts another test. The client must never count such a run twice, nor for
  another test.
- `rewriting_front`: every run view it passes on (a run's answer, each run of a listing)
  rewritten, with the fields a hostile service would send.
- `starting_front`: every run start passed on, and its answer kept back from the client until
  the test lets it go (a job killed, or cancelled, between the start and its answer), or
  changed on its way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from asyncclient.testing import FakeService

__all__ = [
    "StartFront",
    "answering_front",
    "figures",
    "merging_front",
    "nested",
    "rewriting_front",
    "starting_front",
]

Handler = Callable[[web.Request, aiohttp.ClientSession], Awaitable[web.Response]]
_HOP_BY_HOP = ("content-length", "transfer-encoding", "content-encoding")


def nested(depth: int) -> Any:
    """A list `depth` deep."""
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def figures(value: Any) -> list[float]:
    """Every number in a JSON value (booleans aside)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [value]
    if isinstance(value, dict):
        return [n for v in value.values() for n in figures(v)]
    if isinstance(value, list):
        return [n for v in value for n in figures(v)]
    return []


@contextlib.asynccontextmanager
async def _front(handle: Handler) -> AsyncIterator[str]:
    client = aiohttp.ClientSession()

    async def answer(request: web.Request) -> web.Response:
        return await handle(request, client)

    app = web.Application(client_max_size=64 << 20)
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
        await client.close()


async def _pass_on(
    client: aiohttp.ClientSession, service: FakeService, request: web.Request, path: str
) -> tuple[int, bytes, dict[str, str]]:
    headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
    async with client.request(
        request.method, service.url + path, headers=headers, data=await request.read()
    ) as answer:
        body = await answer.read()
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        return answer.status, body, kept


@contextlib.asynccontextmanager
async def merging_front(service: FakeService, merge: str = "prefix64") -> AsyncIterator[str]:
    """The front's base URL. `merge`: "prefix64" (the first 64 characters of a key decide),
    "per_test" (one run per test, whatever the key), "one_run" (one run for every start),
    "swap" (a start of t_checkout starts t_search instead)."""
    answers: dict[str, tuple[int, bytes]] = {}
    one_at_a_time = asyncio.Lock()  # starts in turn: the second finds the first's answer

    def slot(request: web.Request) -> str | None:
        if request.method != "POST" or not request.path.endswith("/run") or merge == "swap":
            return None
        if merge == "prefix64":
            return request.headers.get("Idempotency-Key", "")[:64]
        return request.path if merge == "per_test" else "all"

    async def handle(request: web.Request, client: aiohttp.ClientSession) -> web.Response:
        key = slot(request)
        path = request.path_qs
        if merge == "swap":
            path = path.replace("/tests/t_checkout/run", "/tests/t_search/run")
        if key is None:
            status, body, headers = await _pass_on(client, service, request, path)
            return web.Response(status=status, body=body, headers=headers)
        async with one_at_a_time:
            if key not in answers:
                status, body, _ = await _pass_on(client, service, request, path)
                if status != 201:
                    return web.Response(status=status, body=body, content_type="application/json")
                answers[key] = (status, body)
            status, body = answers[key]
            return web.Response(status=status, body=body, content_type="application/json")

    async with _front(handle) as url:
        yield url


@contextlib.asynccontextmanager
async def rewriting_front(
    service: FakeService, rewrite: Callable[[dict[str, Any]], None]
) -> AsyncIterator[str]:
    """The front's base URL; `rewrite` changes each run view in place."""

    def runs_in(body: Any) -> list[dict[str, Any]]:
        if not isinstance(body, dict):
            return []
        found = [body["run"]] if isinstance(body.get("run"), dict) else []
        listed = body.get("runs")
        return found + (
            [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
        )

    async def handle(request: web.Request, client: aiohttp.ClientSession) -> web.Response:
        status, body, headers = await _pass_on(client, service, request, request.path_qs)
        json_answer = headers.get("Content-Type", "").startswith("application/json")
        if json_answer and body and "/runs" in request.path:
            parsed = json.loads(body)
            for run in runs_in(parsed):
                if "testId" in run:
                    rewrite(run)
            body = json.dumps(parsed).encode()
        return web.Response(status=status, body=body, headers=headers)

    async with _front(handle) as url:
        yield url


@contextlib.asynccontextmanager
async def answering_front(
    service: FakeService, test_id: str, run_id: str, *, from_start: int = 1
) -> AsyncIterator[str]:
    """The front's base URL: from the `from_start`-th start of `test_id` on (a re-run, a copy:
    the suite's own start is the project's), the start is not
    passed on but answered with `run_id` (a run of another build, or an old one)."""
    starts = 0

    async def handle(request: web.Request, client: aiohttp.ClientSession) -> web.Response:
        nonlocal starts
        if request.method == "POST" and request.path == f"/api/v1/tests/{test_id}/run":
            starts += 1
            if starts >= from_start:
                body = {"runId": run_id, "mode": "cold", "overage": False,
                        "link": f"{service.url}/runs/{run_id}"}  # fmt: skip
                return web.json_response(body, status=201)
        status, body, headers = await _pass_on(client, service, request, request.path_qs)
        return web.Response(status=status, body=body, headers=headers)

    async with _front(handle) as url:
        yield url


class StartFront:
    """What `starting_front` saw: the answers of the starts it passed on (`answers`, set as
    each comes back from the emulator), held until `release` is set."""

    def __init__(self) -> None:
        self.url = ""
        self.answers: list[dict[str, Any]] = []
        self.answered = asyncio.Event()
        self.release = asyncio.Event()


@contextlib.asynccontextmanager
async def starting_front(
    service: FakeService,
    *,
    hold: bool = True,
    rewrite: Callable[[int, dict[str, Any]], tuple[int, dict[str, Any]]] | None = None,
) -> AsyncIterator[StartFront]:
    """A front whose run starts (POST .../run) reach the emulator; with `hold` each answer is
    kept back until `front.release` is set; `rewrite(status, body)` changes the answer."""
    front = StartFront()

    async def handle(request: web.Request, client: aiohttp.ClientSession) -> web.Response:
        status, body, headers = await _pass_on(client, service, request, request.path_qs)
        if request.method != "POST" or not request.path.endswith("/run"):
            return web.Response(status=status, body=body, headers=headers)
        parsed = json.loads(body)
        if rewrite is not None:
            status, parsed = rewrite(status, parsed)
        front.answers.append(parsed)
        front.answered.set()
        if hold:
            await front.release.wait()
        return web.json_response(parsed, status=status)

    async with _front(handle) as url:
        front.url = url
        try:
            yield front
        finally:
            front.release.set()  # no answer is held past the test
