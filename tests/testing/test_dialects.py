"""The emulator's wire dialects, seen over raw HTTP: each writes the same state its own way in
every point the API spec leaves open, and a dialect of one's own is one small class."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import aiohttp
import pytest
from emulator_support import Http

from asyncclient.testing import DIALECTS, Dialect, FakeService, demo_seed_data, get_dialect
from asyncclient.testing.builders import build_apk
from asyncclient.testing.pytest_plugin import FakeServiceFactory

ISO_Z_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
ISO_OFFSET = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")


class Shouting(Dialect):
    """A third party's dialect: the whole of it."""

    name: ClassVar[str] = "shouting"
    run_statuses: ClassVar[dict[str, str]] = {"cancelled": "HALTED"}

    def headline(self, text: str) -> Any:
        return text.upper()


@pytest.fixture
async def services(fake_service_factory: FakeServiceFactory) -> dict[str, FakeService]:
    seed = demo_seed_data(history=False)
    onboarding = next(t for t in seed["tests"] if t["id"] == "t_onboarding")
    onboarding["pinnedBuild"] = "ab_demo_ios_100"
    return {
        name: await fake_service_factory(seed, clock="manual", dialect=name) for name in DIALECTS
    }


@pytest.fixture
async def http_for() -> AsyncIterator[Callable[[FakeService, str | None], Http]]:
    opened: list[aiohttp.ClientSession] = []

    def make(service: FakeService, key: str | None) -> Http:
        opened.append(aiohttp.ClientSession(service.url))
        return Http(opened[-1], key)

    yield make
    for session in opened:
        await session.close()


async def test_the_silent_cases_get_each_dialects_status(
    services: dict[str, FakeService], http_for: Callable[[FakeService, str | None], Http]
) -> None:
    seen: dict[str, dict[str, int]] = {}
    for name, svc in services.items():
        run, edit, bad = http_for(svc, svc.run_key), http_for(svc, svc.edit_key), http_for(svc, "x")
        seen[name] = {
            "bad key": (await bad.get("/api/v1/projects/p_demo/builds")).status,
            "malformed id": (await run.get("/api/v1/builds/nonsense")).status,
            "pinned": (await edit.call("DELETE", "/api/v1/builds/ab_demo_ios_100")).status,
            "unknown id": (await run.get("/api/v1/builds/ab_000000")).status,
            "needs edit": (await run.call("DELETE", "/api/v1/builds/ab_demo_ios_100")).status,
        }
    assert seen == {
        "asyncclient": {"bad key": 401, "malformed id": 404, "pinned": 409, "unknown id": 404,
                        "needs edit": 403},
        "flat": {"bad key": 403, "malformed id": 400, "pinned": 400, "unknown id": 404,
                 "needs edit": 403},
        "enveloped": {"bad key": 401, "malformed id": 400, "pinned": 422, "unknown id": 404,
                      "needs edit": 403},
    }  # fmt: skip


async def test_another_projects_id_is_403_in_flat(fake_service_factory: FakeServiceFactory) -> None:
    seed = demo_seed_data(history=False)
    seed["keys"].append({"key": "only-free", "capability": "run", "projects": ["p_free"]})
    for name, expected in (("asyncclient", 404), ("flat", 403), ("enveloped", 404)):
        svc = await fake_service_factory(seed, clock="manual", dialect=name)
        async with aiohttp.ClientSession(svc.url) as session:
            reply = await Http(session, "only-free").get("/api/v1/builds/ab_demo_ios_100")
        assert reply.status == expected, name


async def test_error_bodies_take_each_dialects_shape(
    services: dict[str, FakeService], http_for: Callable[[FakeService, str | None], Http]
) -> None:
    bodies = {}
    for name, svc in services.items():
        reply = await http_for(svc, svc.run_key).get("/api/v1/builds/ab_000000")
        bodies[name] = reply.json
    assert bodies["asyncclient"]["error"]["code"] == "not_found"
    assert bodies["flat"]["code"] == "not_found"
    assert "message" in bodies["flat"]
    assert bodies["enveloped"]["errors"][0]["code"] == "not_found"
    # A bad key: {"error": "text"} in enveloped.
    reply = await http_for(services["enveloped"], "nope").get("/api/v1/runs")
    assert isinstance(reply.json["error"], str)


async def test_faults_come_as_pages_text_or_nothing(
    services: dict[str, FakeService], http_for: Callable[[FakeService, str | None], Http]
) -> None:
    from asyncclient.testing import Fault

    flat, enveloped = services["flat"], services["enveloped"]
    flat.inject("list_runs", Fault("503"))
    reply = await http_for(flat, flat.run_key).get("/api/v1/runs")
    assert reply.status == 503
    assert reply.headers["Content-Type"].startswith("text/html")
    assert b"<title>503 Service Unavailable</title>" in reply.raw
    enveloped.inject("list_runs", Fault("500"))
    reply = await http_for(enveloped, enveloped.run_key).get("/api/v1/runs")
    assert (reply.status, reply.raw) == (500, b"")
    reply = await http_for(flat, flat.run_key).get("/api/v1/nowhere")
    assert reply.headers["Content-Type"].startswith("text/plain")


async def _final_failed_run(svc: FakeService, http: Http) -> dict[str, Any]:
    apk = build_apk(svc.backend.data_dir / "shop.apk", package="com.example.shop", version_code=9)
    done = await http.upload(apk.read_bytes(), "shop.apk")
    assert done.status == 200, done.raw
    started = await http.post("/api/v1/tests/t_checkout/run", json={})
    run_id = started.json["runId"]
    svc.advance(3600)
    run: dict[str, Any] = (await http.get(f"/api/v1/runs/{run_id}")).json["run"]
    return run


async def test_a_final_run_in_each_dialect(
    services: dict[str, FakeService], http_for: Callable[[FakeService, str | None], Http]
) -> None:
    runs = {
        name: await _final_failed_run(svc, http_for(svc, svc.run_key))
        for name, svc in services.items()
    }
    default, flat, env = runs["asyncclient"], runs["flat"], runs["enveloped"]
    assert default["requirements"][1]["result"] == "failed"
    assert flat["requirements"][1] == {
        "requirement": "A voucher code reduces the total",
        "result": False,
        "details": default["requirements"][1]["reason"],
    }
    assert env["requirements"]["checks"][1]["status"] == "fail"
    assert default["captures"] == {"voucher": "SAVE10", "total": "$42.00", "order": "10023"}
    assert flat["captures"][0] == {"name": "voucher", "value": "SAVE10"}
    assert env["captures"]["voucher"] == {"value": "SAVE10"}
    assert (default["verdict"], flat["verdict"], env["verdict"]) == (
        "failed",
        {"status": "failed", "passed": False},
        "FAIL",
    )
    assert env["headline"]["text"] == default["headline"]
    assert default["video"].endswith("/files/video.mp4")
    assert flat["video"] == "video.mp4"
    assert env["video"]["url"] == default["video"].replace(
        services["asyncclient"].url, services["enveloped"].url
    )
    assert isinstance(flat["build"], str)
    assert "buildId" not in env
    assert ISO_Z_MS.fullmatch(default["createdAt"])
    assert isinstance(flat["createdAt"], int)
    assert flat["createdAt"] > 10**12  # epoch milliseconds
    assert ISO_OFFSET.fullmatch(env["createdAt"])


async def test_builds_and_stopped_runs_in_each_dialect(
    services: dict[str, FakeService], http_for: Callable[[FakeService, str | None], Http]
) -> None:
    seen = {}
    for name, svc in services.items():
        http = http_for(svc, svc.run_key)
        build = (await http.get("/api/v1/builds/ab_demo_ios_100")).json["build"]
        run_id = (await http.post("/api/v1/tests/t_search/run", json={})).json["runId"]
        stopped = (await http.post(f"/api/v1/runs/{run_id}/stop")).json["status"]
        by_word = await http.get("/api/v1/runs", params={"status": stopped})
        documented = await http.get("/api/v1/runs", params={"status": "cancelled"})
        assert [r["id"] for r in by_word.json["runs"]] == [run_id]
        assert [r["id"] for r in documented.json["runs"]] == [run_id]
        seen[name] = (build["status"], type(build["size"]).__name__, type(build["abis"]).__name__,
                      stopped)  # fmt: skip
    assert seen == {
        "asyncclient": ("ready", "int", "list", "cancelled"),
        "flat": ("ready", "str", "str", "stopped"),
        "enveloped": ("READY", "int", "list", "canceled"),
    }


async def test_not_started_lists_inside_or_beside_the_error(
    fake_service_factory: FakeServiceFactory,
) -> None:
    seed = demo_seed_data(history=False)
    seed["projects"].append({"id": "p_x", "name": "Nothing runs", "plan": "paid"})
    seed["keys"][0]["projects"].append("p_x")
    seed["tests"].append(
        {"id": "t_x", "project": "p_x", "title": "X", "target": "android", "appId": "com.none"}
    )
    bodies = {}
    for name in DIALECTS:
        svc = await fake_service_factory(seed, clock="manual", dialect=name)
        async with aiohttp.ClientSession(svc.url) as session:
            reply = await Http(session, svc.run_key).post("/api/v1/projects/p_x/run", json={})
        assert reply.status == 402
        bodies[name] = reply.json
    assert bodies["asyncclient"]["error"]["skipped"][0]["testId"] == "t_x"
    assert bodies["flat"]["skipped"][0]["testId"] == "t_x"  # flat: all at the top level
    assert "skipped" not in bodies["enveloped"]["errors"][0]  # beside the error
    assert bodies["enveloped"]["skipped"][0]["reason"]["message"]


async def test_a_dialect_of_ones_own(fake_service_factory: FakeServiceFactory) -> None:
    for spec in (Shouting, Shouting(), f"{__name__}:Shouting"):
        assert get_dialect(spec).name == "shouting"
    seed = {**demo_seed_data(history=False), "dialect": f"{__name__}:Shouting"}
    svc = await fake_service_factory(seed, clock="manual")
    assert svc.dialect.name == "shouting"
    async with aiohttp.ClientSession(svc.url) as session:
        http = Http(session, svc.run_key)
        run_id = (await http.post("/api/v1/tests/t_search/run", json={})).json["runId"]
        assert (await http.post(f"/api/v1/runs/{run_id}/stop")).json["status"] == "HALTED"
        svc.advance(3600)
        other = (await http.post("/api/v1/tests/t_search/run", json={})).json["runId"]
        svc.advance(3600)
        run = (await http.get(f"/api/v1/runs/{other}")).json["run"]
    assert run["headline"] == run["headline"].upper()


@pytest.mark.parametrize("spec", ["klingon", "no.such.module:Thing", f"{__name__}:ISO_Z_MS", 42])
def test_unknown_dialects_are_refused_with_the_choices(spec: Any) -> None:
    with pytest.raises(ValueError, match=r"dialect"):
        get_dialect(spec)
    with pytest.raises(ValueError, match="use one of asyncclient, flat, enveloped"):
        get_dialect("klingon")
