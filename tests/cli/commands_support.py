"""Shared pieces of the command tests: a seed with a runnable Android build, finished runs.

The emulator runs on a manual clock, so a run becomes final only when a test advances time.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from asyncclient import AsyncSession, ValidationError
from asyncclient.testing import FakeService, demo_seed_data

# The files of a finished run of t_checkout in seed(): its video and four screenshots.
CHECKOUT_FILES = [
    "video.mp4",
    "screenshots/01.png",
    "screenshots/02.png",
    "screenshots/03.png",
    "screenshots/04.png",
]

ANDROID_BUILD = "ab_shop_120"
PINNED_BUILD = "ab_demo_ios_100"  # pinned by t_onboarding in this seed
HEADER_SECRET = "Bearer hdr-s3cret-value-77"


def seed() -> dict[str, Any]:
    """The demo seed plus an Android build of com.example.shop (t_checkout and t_login need
    one) and a pin on the iOS build (so deleting it is refused), without the demo's history:
    these tests count the runs they start."""
    data = demo_seed_data(history=False)
    data["builds"].append(
        {
            "id": ANDROID_BUILD,
            "project": "p_demo",
            "platform": "android",
            "appId": "com.example.shop",
            "appName": "Shop",
            "version": "1.2.0",
            "versionCode": "120",
            "label": "git-3f2a9c1",
        }
    )
    for test in data["tests"]:
        if test["id"] == "t_onboarding":
            test["pinnedBuild"] = PINNED_BUILD
    return data


async def start_run(svc: FakeService, test_id: str) -> str:
    async with AsyncSession(api_key=svc.run_key, base_url=svc.url) as session:
        return (await session.run_test(test_id)).run_id


async def finished_run(svc: FakeService, test_id: str = "t_checkout") -> str:
    """A run of test_id that is final (time moved on far enough), with no request recorded."""
    run_id = await start_run(svc, test_id)
    svc.advance(3600)
    svc.reset_requests()
    return run_id


async def plain_get(svc: FakeService, path: str) -> bytes:
    """The bytes the emulator serves at /api/v1/<path>, fetched without asyncclient."""
    headers = {"Authorization": f"Bearer {svc.run_key}"}
    tls = {"ssl": svc.ssl_context()} if svc.tls else {}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{svc.url}/api/v1/{path}", headers=headers, **tls) as resp,
    ):
        assert resp.status == 200, resp.status
        return await resp.read()


def closed_port() -> int:
    """A loopback port nothing listens on: bound, read, then closed again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def env_for(svc: FakeService, key: str | None = None) -> dict[str, str]:
    """The environment that points the command at the emulator with one of its keys."""
    return {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": key or svc.run_key}


def library_message(check: Callable[..., object], *args: object) -> str:
    """What one of the library's own checks (asyncclient._core: _checks, _wire) says about
    `args`: the command must refuse with the same words, not a drifting copy of its own."""
    try:
        check(*args)
    except ValidationError as exc:
        return str(exc)
    raise AssertionError(f"{check.__name__}{args!r} accepted what the test expected refused")


def asyncclient_command() -> list[str]:
    """The installed `asyncclient` script beside this Python, else `python -m asyncclient`."""
    script = Path(sys.executable).with_name("asyncclient")
    return [str(script)] if script.exists() else [sys.executable, "-m", "asyncclient"]


async def run_all(
    argvs: list[list[str]],
    env: dict[str, str],
    cwd: Path | None = None,
    *,
    command: Sequence[str] | None = None,
) -> list[tuple[int, str, str]]:
    """Start every command at once, as separate processes; (exit code, stdout, stderr) of
    each, in order. `command`: what runs asyncclient (default: the installed script)."""
    procs = [
        await asyncio.create_subprocess_exec(
            *(command if command is not None else asyncclient_command()),
            *argv,
            env={**os.environ, **env},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for argv in argvs
    ]
    outs = [await proc.communicate() for proc in procs]
    return [
        (proc.returncode or 0, out.decode(), err.decode())
        for proc, (out, err) in zip(procs, outs, strict=True)
    ]
