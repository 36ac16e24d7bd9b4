"""A service in front of the emulator that rewrites every run view it passes on (a run's
answer, each run of a listing): the emulator's behaviour, with the fields a hostile service
would send."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from aiohttp import web

from asyncclient.testing import FakeService

__all__ = ["nested", "rewriting_front"]


def nested(depth: int) -> Any:
    """A list `depth` deep."""
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


@contextlib.asynccontextmanager
async def rewriting_front(
    service: FakeService, rewrite: Callable[[dict[str, Any]], None]
) -> AsyncIterator[str]:
    """The front's base URL; `rewrite` changes each run view in place."""
    client = aiohttp.ClientSession()

    def runs_in(body: Any) -> list[dict[str, Any]]:
        if not isinstance(body, dict):
            return []
        found = [body["run"]] if isinstance(body.get("run"), dict) else []
        listed = body.get("runs")
        return (
            found + [r for r in listed if isinstance(r, dict)]
            if isinstance(listed, list)
            else found
        )

    async def forward(request: web.Request) -> web.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with client.request(
            request.method, service.url + request.path_qs, headers=headers,
            data=await request.read(),
        ) as answer:  # fmt: skip
            body = await answer.read()
            kind = answer.headers.get("Content-Type", "")
            status = answer.status
            if kind.startswith("application/json") and "/runs" in request.path and body:
                parsed = json.loads(body)
                for run in runs_in(parsed):
                    if "testId" in run:
                        rewrite(run)
                body = json.dumps(parsed).encode()
            kept = {
                k: v
                for k, v in answer.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
            }
        return web.Response(status=status, body=body, headers=kept)

    app = web.Application(client_max_size=64 << 20)
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
