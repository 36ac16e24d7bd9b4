"""A service in front of the emulator that merges run starts: it keeps only a prefix of each
Idempotency-Key and answers a start whose prefix it saw with the answer it gave then, whatever
the test (no fingerprint), or answers every start of a test, or every start at all, with the
first run it started. The client must never count such a run twice, nor for another test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from asyncclient.testing import FakeService

__all__ = ["merging_front"]


@contextlib.asynccontextmanager
async def merging_front(service: FakeService, merge: str = "prefix64") -> AsyncIterator[str]:
    """The front's base URL. `merge`: "prefix64" (the first 64 characters of a key decide),
    "per_test" (one run per test, whatever the key), "one_run" (one run for every start),
    "swap" (a start of t_checkout starts t_search instead)."""
    answers: dict[str, tuple[int, bytes]] = {}
    starts = {"count": 0}
    client = aiohttp.ClientSession()
    one_at_a_time = asyncio.Lock()  # starts in turn: the second finds the first's answer

    def slot(request: web.Request) -> str | None:
        if request.method != "POST" or not request.path.endswith("/run"):
            return None
        starts["count"] += 1
        if merge == "prefix64":
            return request.headers.get("Idempotency-Key", "")[:64]
        return request.path if merge == "per_test" else "all"

    async def forward(request: web.Request) -> web.Response:
        key = slot(request)
        if key is None or merge == "swap":
            return await send(request, None)
        async with one_at_a_time:
            return await send(request, key)

    async def send(request: web.Request, key: str | None) -> web.Response:
        if key is not None and key in answers:
            status, body = answers[key]
            return web.Response(status=status, body=body, content_type="application/json")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        path = request.path_qs
        if merge == "swap":
            path = path.replace("/tests/t_checkout/run", "/tests/t_search/run")
        async with client.request(
            request.method, service.url + path, headers=headers,
            data=await request.read(),
        ) as answer:  # fmt: skip
            body = await answer.read()
            if key is not None and answer.status == 201:
                answers[key] = (answer.status, body)
            kept = {
                k: v
                for k, v in answer.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
            }
            return web.Response(status=answer.status, body=body, headers=kept)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await client.close()
