"""The flakiness analysis (`asyncclient flaky`, the MCP `flaky_tests` tool) against a service
that ignores `limit`: every listing answers 20,000 runs of 20,000 tests, or runs with 8 MB
titles. The requests stay within 1 + 200 x 5 and the command's peak memory under 400 MiB,
read from the kernel (ru_maxrss) for the command and from /proc (VmHWM) for the MCP server;
a signed link never reaches a span."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from aiohttp import web
from measure_support import run_measured

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss and /proc are Linux's"),
]

TESTS = 20_000
BOUND = 1 + 200 * 5
KEY = "flood-key-93c1e7"


@attrs.define
class Flood:
    """A service whose every List runs answer is the same `body`, whatever was asked."""

    body: bytes
    first: bytes
    requests: int = 0
    url: str = ""
    per_test: Any = None  # test id -> body, instead of `body`

    async def runs(self, request: web.Request) -> web.Response:
        self.requests += 1
        # The project's listing first (it names the tests), then the same flood for any test.
        body = self.first if "projectId" in request.query else self.body
        if self.per_test is not None and "testId" in request.query:
            body = self.per_test(request.query["testId"])
        return web.Response(body=body, content_type="application/json")


def _runs(count: int, title: str = "t", *, test_of: Any = None) -> bytes:
    created = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    runs = [
        {"id": f"j_{i}", "testId": test_of(i) if test_of else f"t_{i}", "testTitle": title,
         "status": "passed" if i % 3 else "failed", "final": True, "createdAt": created,
         "projectId": "p_1", "durationMs": 1000}
        for i in range(count)
    ]  # fmt: skip
    return json.dumps({"runs": runs}).encode()


@pytest.fixture
async def flood() -> AsyncIterator[Flood]:
    body = _runs(TESTS)
    service = Flood(body=body, first=body)
    app = web.Application()
    app.router.add_get("/api/v1/runs", service.runs)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    service.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield service
    await runner.cleanup()


def _env(service: Flood, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ASYNCCLIENT_BASE_URL": service.url,
        "ASYNCCLIENT_API_KEY": KEY,
        "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
    }


async def test_flaky_is_bounded_whatever_the_service_answers(flood: Flood, tmp_path: Path) -> None:
    done = await asyncio.to_thread(
        run_measured, ["--json", "flaky", "p_1"], _env(flood, tmp_path), tmp_path
    )
    assert done.code == 0, done.stderr
    tests = json.loads(done.stdout)["tests"]
    assert len(tests) == 200  # the first listing's 200 runs name 200 tests
    assert all(t["runs"] == 1 for t in tests)  # runs of other tests are not counted
    assert flood.requests <= BOUND
    assert done.peak_rss_mib < 400, done.peak_rss_mib

    # Titles of 8 MB: cut to 500 characters, and memory still bounded.
    flood.requests = 0
    flood.first = _runs(40)
    title = "x" * (8 << 20)
    flood.per_test = lambda test_id: _runs(1, title, test_of=lambda i: test_id)
    done = await asyncio.to_thread(
        run_measured, ["--json", "flaky", "p_1"], _env(flood, tmp_path), tmp_path
    )
    assert done.code == 0, done.stderr
    tests = json.loads(done.stdout)["tests"]
    assert tests
    assert all(len(t["title"]) <= 500 for t in tests)
    assert flood.requests <= BOUND
    assert done.peak_rss_mib < 400, done.peak_rss_mib


def _peak_of_children() -> dict[int, int]:
    """VmHWM (KiB) of this process's children that run `asyncclient mcp`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0")) == os.getpid() and b"mcp" in cmdline:
            found[int(entry.name)] = int(fields["VmHWM"].split()[0])
    return found


async def test_the_mcp_flaky_tool_is_bounded_too(flood: Flood, tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from mcp_support import Calls, stdio_server

    async with stdio_server(flood, KEY, tmp_path) as (client, _):  # type: ignore[arg-type]
        found = await Calls(client).ok("flaky_tests", {"project_id": "p_1"})
        peaks = _peak_of_children()
    # The tool's answer is cut further to its result budget; what was read is bounded.
    assert 0 < len(found["tests"]) <= 200
    assert flood.requests <= BOUND
    assert peaks
    assert max(peaks.values()) / 1024 < 400, peaks
