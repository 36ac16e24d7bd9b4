"""FakeService itself: lifecycle, demo, request log, the /_emulator routes, scale, plugin."""

import asyncio
import hashlib
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from emulator_support import SMALL_SEED, Http

from asyncclient.testing import FakeService, NetworkConditions, RequestRecord
from asyncclient.testing.builders import build_apk
from asyncclient.testing.pytest_plugin import FakeServiceFactory


async def test_the_demo_as_a_user_meets_it(
    fake_service: FakeService, clients: Callable[..., Http], tmp_path: Path
) -> None:
    assert (fake_service.run_key, fake_service.edit_key) == ("demo-run", "demo-edit")
    assert fake_service.project_id == "p_demo"
    assert fake_service.url.startswith("http://127.0.0.1:")
    client = clients(fake_service, fake_service.run_key)
    # No Android build yet: the Android tests are skipped, the others start.
    suite = await client.post("/api/v1/projects/p_demo/run")
    assert suite.status == 201
    assert [s["testId"] for s in suite.json["started"]] == ["t_search", "t_onboarding"]
    assert {s["testId"]: s["code"] for s in suite.json["skipped"]} == {
        "t_login": "no_build",
        "t_checkout": "no_build",
    }
    apk = build_apk(tmp_path / "shop.apk").read_bytes()
    uploaded = await client.upload(apk, "shop.apk")
    assert uploaded.json["build"]["status"] == "ready"
    checkout = await client.post("/api/v1/tests/t_checkout/run")
    assert checkout.status == 201
    assert checkout.json["mode"] == "cold"  # its learned path is stale
    assert (await client.post("/api/v1/tests/t_login/run")).json["mode"] == "warm"
    free = await client.post("/api/v1/projects/p_free/run")
    assert [s["testId"] for s in free.json["started"]] == ["t_free_home"]
    assert free.json["skipped"][0]["code"] == "paid_plan_required"
    endpoints = (await client.get("/api/v1/projects/p_demo/endpoints")).json["endpoints"]
    assert [e["name"] for e in endpoints] == ["create_voucher"]


def test_seed_info_lists_projects_and_keys() -> None:
    info = FakeService().seed_info()
    assert info["projects"][0] == {
        "id": "p_demo",
        "name": "Demo shop",
        "plan": "paid",
        "includedRuns": 100,
    }
    assert info["projects"][1]["plan"] == "free"
    assert info["keys"] == [
        {"key": "demo-run", "capability": "run", "projects": ["p_demo", "p_free", "p_new"]},
        {"key": "demo-edit", "capability": "edit", "projects": ["p_demo", "p_free", "p_new"]},
    ]


async def test_start_and_stop_without_async_with() -> None:
    service = FakeService(SMALL_SEED, clock="manual")
    with pytest.raises(RuntimeError, match="not running"):
        _ = service.url
    await service.start()
    data_dir = service.backend.data_dir
    assert data_dir.is_dir()
    with pytest.raises(RuntimeError, match="already running"):
        await service.start()
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{service.url}/_emulator/stats") as r,
    ):
        assert r.status == 200
    assert repr(service).startswith(f"<FakeService {service.url}")
    await service.stop()
    assert not data_dir.exists()
    await service.stop()  # stopping twice is harmless
    assert "stopped" in repr(service)


async def test_a_given_data_dir_is_kept(tmp_path: Path) -> None:
    async with FakeService(SMALL_SEED, data_dir=tmp_path / "data") as service:
        assert service.backend.data_dir == tmp_path / "data"
    assert (tmp_path / "data" / "builds" / "ab_ios_1").is_dir()


async def test_serve_forever_until_cancelled() -> None:
    service = FakeService(SMALL_SEED, clock="manual")
    task = asyncio.create_task(service.serve_forever())
    async with asyncio.timeout(5):
        while not service.running:  # noqa: ASYNC110 - waits for the task on this loop
            await asyncio.sleep(0.001)
    url = service.url
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"{url}/_emulator/stats")


async def test_the_request_log(a_run: Http, small: FakeService) -> None:
    answers = [
        await a_run.get("/api/v1/runs", params={"limit": "5", "status": "queued"}),
        await a_run.get("/api/v1/builds/ab_nope"),
        await a_run.get("/elsewhere"),
    ]
    # Every answer carries its X-Request-Id, and the log keeps it.
    ids = [answer.headers["X-Request-Id"] for answer in answers]
    assert all(re.fullmatch(r"req_[0-9a-f]{16}", i) for i in ids)
    assert len(set(ids)) == 3
    assert small.requests == [
        RequestRecord(
            "GET", "/api/v1/runs", {"limit": "5", "status": "queued"}, 200, "list_runs", ids[0]
        ),
        RequestRecord("GET", "/api/v1/builds/ab_nope", {}, 404, "get_build", ids[1]),
        RequestRecord("GET", "/elsewhere", {}, 404, None, ids[2]),
    ]
    assert small.requests_for("get_build") == [small.requests[1]]
    assert small.request_counts() == {"list_runs": 1, "get_build": 1}
    small.reset_requests()
    assert small.requests == []
    assert small.request_counts() == {}


async def test_emulator_routes(a_run: Http, small: FakeService) -> None:
    admin = a_run.as_key(None)
    created = await admin.post("/_emulator/runs", json={"testId": "t_web", "count": 3})
    assert created.status == 201
    ids = created.json["runIds"]
    assert len(set(ids)) == 3
    assert (await admin.post("/_emulator/runs", json={"testId": "t_nope"})).status == 404
    assert (await admin.post("/_emulator/runs", json={"testId": "t_web", "count": 0})).status == 400
    await a_run.get("/api/v1/runs", params={"ids": ",".join(ids)})
    stats = (await admin.get("/_emulator/stats")).json
    assert stats["requests"] == {"list_runs": 1}
    assert (stats["maxIds"], stats["runs"], stats["builds"]) == (3, 3, 3)
    before = small.now()
    advanced = await admin.post("/_emulator/advance", json={"seconds": 200})
    assert advanced.status == 200
    assert small.now() == before + 200
    assert (await admin.post("/_emulator/advance", json={"seconds": -1})).status == 400
    runs = (await a_run.get("/api/v1/runs", params={"ids": ids[0]})).json["runs"]
    assert runs[0]["status"] == "passed"
    payload = os.urandom(300_000)
    sunk = await admin.call("PUT", "/_emulator/sink", data=payload)
    assert sunk.json == {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    assert not any(small.backend.data_dir.joinpath("incoming").iterdir())


async def test_conditions_and_faults_over_http(a_run: Http, small: FakeService) -> None:
    admin = a_run.as_key(None)
    assert (await admin.get("/_emulator/conditions")).json == NetworkConditions().to_json()
    wanted = {"errorRate": 1.0, "ops": ["get_build"], "retryAfter": 3}
    changed = await admin.call("PUT", "/_emulator/conditions", json=wanted)
    assert changed.status == 200
    assert small.conditions == NetworkConditions(
        error_rate=1.0, ops=frozenset({"get_build"}), retry_after=3
    )
    assert (await a_run.get("/api/v1/builds/ab_ios_1")).status in (500, 503)
    refused = await admin.call("PUT", "/_emulator/conditions", json={"errorRate": 3})
    assert refused.status == 400
    assert (await admin.call("PUT", "/_emulator/conditions", json={})).status == 200
    injected = await admin.post(
        "/_emulator/faults", json={"op": "get_run", "kind": "429", "times": 2, "retryAfter": 5}
    )
    assert injected.json == {"op": "get_run", "pending": 2}
    reply = await a_run.get("/api/v1/runs/j_x")
    assert (reply.status, reply.headers["Retry-After"]) == (429, "5")
    assert (await admin.post("/_emulator/faults", json={"op": "x", "kind": "500"})).status == 400


async def test_ten_thousand_runs_finish_at_spread_out_times(
    fake_service_factory: FakeServiceFactory, clients: Callable[..., Http]
) -> None:
    seed = {
        "projects": [{"id": "p_big", "includedRuns": 100}],
        "keys": [{"key": "big", "capability": "run", "projects": ["p_big"]}],
        "tests": [
            {
                "id": "t_big",
                "project": "p_big",
                "target": "web",
                "url": "https://big.example.com",
                "queuedSeconds": 5,
                "durationSeconds": 100,
                "durationJitter": 0.5,
            }
        ],
    }
    service = await fake_service_factory(seed, clock="manual")
    client = clients(service, "big")
    admin = client.as_key(None)
    ids = (await admin.post("/_emulator/runs", json={"testId": "t_big", "count": 10_000})).json[
        "runIds"
    ]
    assert len(set(ids)) == 10_000
    durations = [service.backend.runs[i].end_at - service.backend.runs[i].start_at for i in ids]
    assert 50 <= min(durations) < 52
    assert 148 < max(durations) <= 150
    service.advance(105)  # the middle of the spread

    async def statuses() -> Counter[str]:
        found: Counter[str] = Counter()
        for start in range(0, 10_000, 50):
            reply = await client.get(
                "/api/v1/runs", params={"ids": ",".join(ids[start : start + 50])}
            )
            found.update(r["status"] for r in reply.json["runs"])
        return found

    middle = await statuses()
    assert set(middle) == {"running", "passed"}
    assert 3000 < middle["passed"] < 7000
    assert sum(middle.values()) == 10_000
    service.advance(100)
    assert await statuses() == Counter({"passed": 10_000})
    created = (await client.get("/api/v1/runs", params={"limit": "200"})).json["runs"]
    assert [r["id"] for r in created] == ids[::-1][:200]


def test_the_pytest_plugin_serves_users_tests(tmp_path: Path) -> None:
    """A user's test suite, in strict asyncio mode, gets the fixtures from the entry point."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import aiohttp
            import pytest

            @pytest.mark.asyncio
            async def test_demo(fake_service):
                headers = {"Authorization": f"Bearer {fake_service.run_key}"}
                async with aiohttp.ClientSession(fake_service.url) as session:
                    async with session.get(
                        "/api/v1/projects/p_demo/builds", headers=headers
                    ) as response:
                        assert response.status == 200

            @pytest.mark.asyncio
            async def test_factory(fake_service_factory):
                first = await fake_service_factory(clock="manual")
                second = await fake_service_factory({"projects": [{"id": "p_x"}],
                                                     "keys": [{"key": "x", "capability": "run",
                                                               "projects": ["p_x"]}]})
                assert first.url != second.url
                assert second.project_id == "p_x"

            @pytest.mark.asyncio
            async def test_tls(fake_tls_service):
                from asyncclient import AsyncSession

                assert fake_tls_service.url.startswith("https://127.0.0.1:")
                async with AsyncSession(
                    fake_tls_service.run_key, fake_tls_service.url,
                    ca_file=fake_tls_service.ca_file,
                ) as session:
                    assert (await session.list_builds("p_demo")).part_bytes > 0
            """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=strict",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
