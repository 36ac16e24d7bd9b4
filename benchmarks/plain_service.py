"""A service that is not the emulator, for the benchmarks: a plain aiohttp.web app serving the
few operations they call (list and get builds, the three upload steps) with fixed answers in
the spec's shapes. It keeps no state worth the name and hashes nothing: a part's bytes are read
and dropped, its etag is its number. Run by `PlainService` (benchmarks/_support.py) in a
process of its own; HTTPS with a throwaway CA (trustme) when asked.

    .venv/bin/python benchmarks/bench_session.py --service plain
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

PART_BYTES = 8 << 20
MAX_BYTES = 4 << 30
KEY = "plain-run"
_BUILD: dict[str, Any] = {
    "id": "ab_plain_1",
    "projectId": "p_demo",
    "status": "ready",
    "fileName": "shop.apk",
    "size": 52_428_800,
    "platform": "android",
    "appId": "com.example.shop",
    "appName": "Shop",
    "version": "1.2.0",
    "versionCode": "120",
    "minOs": "7.0",
    "abis": ["arm64-v8a", "x86_64"],
    "warnings": [],
    "sha256": "0" * 64,
    "label": "git-3f2a9c1",
    "createdAt": "2026-12-06T12:00:00Z",
    "readyAt": "2026-12-06T12:00:05Z",
}


def _authorized(request: web.Request) -> None:
    if request.headers.get("Authorization") != f"Bearer {KEY}":
        raise web.HTTPUnauthorized(
            text='{"error": {"code": "unauthorized", "message": "bad key"}}',
            content_type="application/json",
        )


async def list_builds(request: web.Request) -> web.Response:
    _authorized(request)
    listed = {k: v for k, v in _BUILD.items() if k not in ("projectId", "sha256")}
    return web.json_response({"builds": [listed], "maxBytes": MAX_BYTES, "partBytes": PART_BYTES})


async def get_build(request: web.Request) -> web.Response:
    _authorized(request)
    build_id = request.match_info["build"]
    if build_id == _BUILD["id"]:
        return web.json_response({"build": _BUILD})
    # A build uploaded here: nothing hashed, so no sha256 is said.
    build = {k: v for k, v in _BUILD.items() if k != "sha256"}
    return web.json_response({"build": {**build, "id": build_id}})


async def start_upload(request: web.Request) -> web.Response:
    _authorized(request)
    body = await request.json()
    size = int(body["size"])
    started = {"id": f"ab_plain_{size}", "partBytes": PART_BYTES, "parts": -(-size // PART_BYTES)}
    return web.json_response(started, status=201)


async def upload_part(request: web.Request) -> web.Response:
    _authorized(request)
    while await request.content.read(1 << 20):
        pass  # read and dropped: no hashing, no disk
    number = int(request.match_info["number"])
    return web.json_response({"partNumber": number, "etag": f"e{number}"})


async def complete(request: web.Request) -> web.Response:
    _authorized(request)
    await request.read()
    build = {k: v for k, v in _BUILD.items() if k != "sha256"}  # nothing hashed: none said
    return web.json_response({"build": {**build, "id": request.match_info["build"]}})


async def sink(request: web.Request) -> web.Response:
    """A whole file PUT here is read and dropped (the baselines' target): its size, no hash."""
    size = 0
    while chunk := await request.content.read(1 << 20):
        size += len(chunk)
    return web.json_response({"bytes": size, "sha256": None})


async def stats(request: web.Request) -> web.Response:
    import time

    return web.json_response({"cpuSeconds": time.process_time(), "requests": {}})


async def delete_build(request: web.Request) -> web.Response:
    _authorized(request)
    return web.Response(status=204)


async def main(tls: bool) -> None:
    app = web.Application(client_max_size=MAX_BYTES)
    app.router.add_get("/api/v1/projects/{project}/builds", list_builds)
    app.router.add_post("/api/v1/projects/{project}/builds", start_upload)
    app.router.add_get("/api/v1/builds/{build}", get_build)
    app.router.add_put("/api/v1/builds/{build}/parts/{number}", upload_part)
    app.router.add_post("/api/v1/builds/{build}/complete", complete)
    app.router.add_delete("/api/v1/builds/{build}", delete_build)
    # What bench_upload asks of a service besides the API: a sink for the baselines, its CPU.
    app.router.add_put("/_emulator/sink", sink)
    app.router.add_get("/_emulator/stats", stats)
    context, ca_file = None, None
    if tls:
        import ssl

        import trustme

        authority = trustme.CA()
        ca_file = str(Path(tempfile.mkdtemp(prefix="plain-ca-")) / "ca.pem")
        authority.cert_pem.write_to_path(ca_file)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        authority.issue_cert("127.0.0.1").configure_cert(context)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    scheme = "https" if tls else "http"
    info = {"url": f"{scheme}://127.0.0.1:{port}", "run_key": KEY, "ca_file": ca_file}
    print(json.dumps(info), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main("--tls" in sys.argv))
