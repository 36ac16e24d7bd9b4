"""A service for tests/across/test_history_memory.py, run as `python heavy_history_server.py
TITLE_BYTES [TESTS]`: p_1 has TESTS tests (200); each test's listing holds 25 earlier runs
whose titles are TITLE_BYTES long; the job's own runs are final at once. Prints its URL, then
serves until stopped; GET /count says how many test listings it answered."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta

from aiohttp import web

TESTS = 200
RUNS = 25


def _run(run_id: str, test: str, at: datetime, title: str) -> dict[str, object]:
    return {
        "id": run_id, "testId": test, "testTitle": title, "projectId": "p_1",
        "status": "passed", "final": True, "mode": "cold",
        "createdAt": (at - timedelta(seconds=40)).isoformat(),
        "startedAt": (at - timedelta(seconds=30)).isoformat(),
        "finishedAt": at.isoformat(), "durationMs": 30_000,
    }  # fmt: skip


async def main(title_bytes: int, tests: int) -> None:
    listings = 0
    url = ""

    async def start(request: web.Request) -> web.Response:
        started = [{"testId": f"t_{i}", "runId": f"j_new{i}", "mode": "cold", "buildId": None,
                    "link": f"{url}/runs/j_new{i}"} for i in range(tests)]  # fmt: skip
        return web.json_response({"started": started, "skipped": []}, status=201)

    async def runs(request: web.Request) -> web.Response:
        nonlocal listings
        now = datetime.now(UTC)
        if "ids" in request.query:
            ids = request.query["ids"].split(",")
            own = [_run(i, f"t_{i.removeprefix('j_new')}", now, "x") for i in ids]
            return web.json_response({"runs": own})
        listings += 1
        test = request.query.get("testId", "t_0")
        title = "x" * title_bytes
        earlier = [_run(f"j_{test}_{n}", test, now - timedelta(hours=n + 1), title)
                   for n in range(RUNS)]  # fmt: skip
        return web.Response(body=json.dumps({"runs": earlier}), content_type="application/json")

    async def count(request: web.Request) -> web.Response:
        return web.Response(text=str(listings))

    app = web.Application()
    app.router.add_post("/api/v1/projects/p_1/run", start)
    app.router.add_get("/api/v1/runs", runs)
    app.router.add_get("/count", count)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    print(url, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else TESTS))
