"""Runs: states over the manual clock, stop, modes, builds, plans, project runs, idempotency."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from emulator_support import SMALL_SEED, Http

from asyncclient.testing import FakeService, Fault
from asyncclient.testing.pytest_plugin import FakeServiceFactory

FULL_VIEW = [
    "id", "testId", "testTitle", "projectId", "url", "link", "mode", "source", "platform",
    "status", "final", "createdAt", "startedAt", "finishedAt", "durationMs", "error", "verdict",
    "headline", "requirements", "captures", "video", "screenshots", "buildId", "build",
]  # fmt: skip


async def get_run(client: Http, run_id: str) -> dict[str, Any]:
    reply = await client.get(f"/api/v1/runs/{run_id}")
    assert reply.status == 200, reply.raw
    return dict(reply.json["run"])


async def test_a_run_moves_queued_running_final_with_the_clock(
    a_run: Http, small: FakeService
) -> None:
    started = await a_run.post("/api/v1/tests/t_fail/run", json={})
    assert started.status == 201
    run_id = started.json["runId"]
    assert started.json == {
        "runId": run_id,
        "mode": "cold",
        "overage": False,
        "link": f"{small.url}/runs/{run_id}",
    }
    queued = await get_run(a_run, run_id)
    assert list(queued) == FULL_VIEW
    assert (queued["status"], queued["final"]) == ("queued", False)
    for field in ("startedAt", "finishedAt", "durationMs", "verdict", "headline", "error"):
        assert queued[field] is None, field
    assert (queued["requirements"], queued["captures"], queued["video"]) == ([], None, None)
    assert queued["screenshots"] == []
    assert queued["url"] == f"{small.url}/api/v1/runs/{run_id}"
    assert (queued["source"], queued["platform"], queued["build"]) == ("test", "web", None)

    small.advance(10)  # queuedSeconds
    running = await get_run(a_run, run_id)
    assert (running["status"], running["final"]) == ("running", False)
    assert running["startedAt"] is not None
    assert running["verdict"] is None
    assert running["requirements"] == []

    small.advance(99.9)
    assert (await get_run(a_run, run_id))["status"] == "running"
    small.advance(0.1)
    final = await get_run(a_run, run_id)
    assert (final["status"], final["final"], final["verdict"]) == ("failed", True, "failed")
    assert final["headline"] == "The voucher did not apply."
    assert final["requirements"] == [
        {"id": "r1", "title": "Cart", "result": "passed", "reason": "Two items."},
        {"id": "r2", "title": "Voucher", "result": "failed", "reason": "The total did not change."},
    ]
    assert final["captures"] == {"total": "$42.00"}
    assert final["video"] == f"{small.url}/api/v1/runs/{run_id}/files/video.mp4"
    assert final["screenshots"] == [
        f"{small.url}/api/v1/runs/{run_id}/files/screenshots/{i:02d}.png" for i in (1, 2, 3)
    ]
    assert final["durationMs"] == 100_000
    assert final["error"] is None
    # Final is final: more time changes nothing.
    small.advance(10_000)
    assert await get_run(a_run, run_id) == final


@pytest.mark.parametrize("when", [0.0, 50.0])
async def test_stop_while_queued_or_running_cancels(
    a_run: Http, small: FakeService, when: float
) -> None:
    run_id = (await a_run.post("/api/v1/tests/t_web/run")).json["runId"]
    small.advance(when)
    stopped = await a_run.post(f"/api/v1/runs/{run_id}/stop")
    assert stopped.status == 200
    assert stopped.json == {"status": "cancelled"}
    small.advance(1000)
    run = await get_run(a_run, run_id)
    assert (run["status"], run["final"], run["verdict"]) == ("cancelled", True, "cancelled")
    assert run["video"] is None
    assert run["screenshots"] == []
    assert (run["startedAt"] is None) == (when == 0.0)
    assert run["finishedAt"] is not None
    again = await a_run.post(f"/api/v1/runs/{run_id}/stop")
    assert again.status == 409
    assert again.code == "invalid_state"


async def test_a_final_run_cannot_be_stopped(a_run: Http, small: FakeService) -> None:
    run_id = (await a_run.post("/api/v1/tests/t_web/run")).json["runId"]
    small.advance(110)
    refused = await a_run.post(f"/api/v1/runs/{run_id}/stop")
    assert refused.status == 409
    assert refused.code == "invalid_state"
    assert (await get_run(a_run, run_id))["status"] == "passed"


async def test_overage_counts_runs_beyond_the_plan_but_not_stopped_ones(a_run: Http) -> None:
    # p_a includes 2 runs.
    first = await a_run.post("/api/v1/tests/t_web/run")
    second = await a_run.post("/api/v1/tests/t_web/run")
    third = await a_run.post("/api/v1/tests/t_web/run")
    assert [r.json["overage"] for r in (first, second, third)] == [False, False, True]
    await a_run.post(f"/api/v1/runs/{second.json['runId']}/stop")
    await a_run.post(f"/api/v1/runs/{third.json['runId']}/stop")
    fourth = await a_run.post("/api/v1/tests/t_web/run")
    assert fourth.json["overage"] is False
    assert (await a_run.post("/api/v1/tests/t_web/run")).json["overage"] is True


async def test_modes(a_run: Http, small: FakeService) -> None:
    # t_web has no learned path: auto explores (cold), warm is refused.
    warm = await a_run.post("/api/v1/tests/t_web/run", json={"mode": "warm"})
    assert warm.status == 409
    assert warm.code == "no_learned_path"
    cold = await a_run.post("/api/v1/tests/t_web/run", json={"mode": "auto"})
    assert cold.json["mode"] == "cold"
    # A passing cold run makes the path fresh once it has passed: then auto replays (warm).
    small.advance(50)
    assert (await a_run.post("/api/v1/tests/t_web/run")).json["mode"] == "cold"
    small.advance(60)
    assert (await a_run.post("/api/v1/tests/t_web/run")).json["mode"] == "warm"
    assert (await a_run.post("/api/v1/tests/t_web/run", json={"mode": "cold"})).json[
        "mode"
    ] == "cold"
    # t_pinned's path is stale: auto explores, warm still replays the stale path.
    assert (await a_run.post("/api/v1/tests/t_pinned/run")).json["mode"] == "cold"
    assert (await a_run.post("/api/v1/tests/t_pinned/run", json={"mode": "warm"})).json[
        "mode"
    ] == "warm"


async def test_a_stopped_cold_run_does_not_teach_the_path(a_run: Http, small: FakeService) -> None:
    run_id = (await a_run.post("/api/v1/tests/t_web/run")).json["runId"]
    await a_run.post(f"/api/v1/runs/{run_id}/stop")
    small.advance(1000)
    assert (await a_run.post("/api/v1/tests/t_web/run")).json["mode"] == "cold"


async def test_app_tests_run_the_newest_ready_build_or_the_pinned_one(a_run: Http) -> None:
    pinned = await a_run.post("/api/v1/tests/t_pinned/run")
    run = await get_run(a_run, pinned.json["runId"])
    assert run["buildId"] == "ab_ios_1"
    build = await a_run.get("/api/v1/builds/ab_ios_1")
    assert run["build"] == {
        "id": "ab_ios_1",
        "appId": "com.example.shop.ios",
        "version": "1.0.0",
        "versionCode": "1",
        "platform": "ios",
        "sha256": build.json["build"]["sha256"],  # which bytes ran: a pass is reused by them
    }
    assert run["platform"] == "ios"
    named = await a_run.post("/api/v1/tests/t_pinned/run", json={"buildId": "ab_ios_2"})
    assert (await get_run(a_run, named.json["runId"]))["buildId"] == "ab_ios_2"


async def test_build_rules_of_a_run(a_run: Http) -> None:
    no_build = await a_run.post("/api/v1/tests/t_app/run")
    assert no_build.status == 409
    assert no_build.code == "no_build"
    assert "com.example.shop" in no_build.json["error"]["message"]
    other_app = await a_run.post("/api/v1/tests/t_app/run", json={"buildId": "ab_ios_2"})
    assert other_app.status == 400
    assert other_app.code == "build_mismatch"
    web = await a_run.post("/api/v1/tests/t_web/run", json={"buildId": "ab_ios_2"})
    assert web.status == 400
    assert web.code == "build_mismatch"
    other_project = await a_run.post("/api/v1/tests/t_pinned/run", json={"buildId": "ab_b_1"})
    assert other_project.status == 400
    assert other_project.code == "build_mismatch"
    unknown = await a_run.post("/api/v1/tests/t_pinned/run", json={"buildId": "ab_nope"})
    assert unknown.status == 404
    uploading = await a_run.post(
        "/api/v1/projects/p_a/builds", json={"fileName": "x.app.zip", "size": 10}
    )
    not_ready = await a_run.post(
        "/api/v1/tests/t_pinned/run", json={"buildId": uploading.json["id"]}
    )
    assert not_ready.status == 409
    assert not_ready.code == "invalid_state"


async def test_tester_endpoints_need_a_paid_plan(a_run: Http) -> None:
    refused = await a_run.post("/api/v1/tests/t_hooks/run")
    assert refused.status == 402
    assert refused.code == "paid_plan_required"
    assert "free" in refused.json["error"]["message"]
    assert (await a_run.post("/api/v1/tests/t_fail/run")).status == 201  # p_a is paid


async def test_run_a_project_starts_what_it_can(a_run: Http, small: FakeService) -> None:
    reply = await a_run.post("/api/v1/projects/p_a/run", json={"mode": "auto"})
    assert reply.status == 201
    started = reply.json["started"]
    assert [s["testId"] for s in started] == ["t_web", "t_pinned", "t_fail"]
    assert started[1] == {
        "testId": "t_pinned",
        "runId": started[1]["runId"],
        "mode": "cold",
        "buildId": "ab_ios_1",
        "link": f"{small.url}/runs/{started[1]['runId']}",
    }
    assert started[0]["buildId"] is None
    assert reply.json["skipped"] == [
        {"testId": "t_app", "reason": reply.json["skipped"][0]["reason"], "code": "no_build"}
    ]
    run = await get_run(a_run, started[0]["runId"])
    assert run["source"] == "project"


async def test_run_a_project_with_named_builds(a_run: Http) -> None:
    reply = await a_run.post("/api/v1/projects/p_a/run", json={"buildIds": ["ab_ios_2"]})
    by_test = {s["testId"]: s for s in reply.json["started"]}
    assert by_test["t_pinned"]["buildId"] == "ab_ios_2"
    single = await a_run.post("/api/v1/projects/p_a/run", json={"buildId": "ab_ios_2"})
    assert {s["testId"]: s["buildId"] for s in single.json["started"]}["t_pinned"] == "ab_ios_2"
    twice = await a_run.post(
        "/api/v1/projects/p_a/run", json={"buildIds": ["ab_ios_1", "ab_ios_2"]}
    )
    assert twice.status == 400
    other = await a_run.post("/api/v1/projects/p_a/run", json={"buildIds": ["ab_b_1"]})
    assert other.status == 400
    assert other.code == "build_mismatch"


async def test_run_a_project_that_starts_nothing(a_run: Http) -> None:
    free = await a_run.post("/api/v1/projects/p_b/run")
    assert free.status == 402
    assert free.code == "not_started"
    assert free.json["error"]["started"] == []
    assert [(s["testId"], s["code"]) for s in free.json["error"]["skipped"]] == [
        ("t_hooks", "paid_plan_required")
    ]
    empty = await a_run.post("/api/v1/projects/p_empty/run")
    assert empty.status == 400
    assert empty.code == "empty"
    assert (empty.json["error"]["started"], empty.json["error"]["skipped"]) == ([], [])
    warm = await a_run.post("/api/v1/projects/p_b/run", json={"mode": "warm"})
    assert warm.status == 402


# --- idempotency ----------------------------------------------------------------------------


async def test_a_retry_with_the_same_key_starts_nothing_new(
    a_run: Http, small: FakeService
) -> None:
    headers = {"Idempotency-Key": "attempt-1"}
    first = await a_run.post("/api/v1/tests/t_web/run", json={"mode": "cold"}, headers=headers)
    second = await a_run.post("/api/v1/tests/t_web/run", json={"mode": "cold"}, headers=headers)
    assert first.status == second.status == 201
    assert second.raw == first.raw
    assert "Idempotent-Replayed" not in first.headers
    assert second.headers["Idempotent-Replayed"] == "true"
    assert len(small.backend.runs) == 1
    # Another request with the same key is refused; another key starts a run.
    conflict = await a_run.post("/api/v1/tests/t_web/run", json={"mode": "warm"}, headers=headers)
    assert conflict.status == 409
    assert conflict.code == "idempotency_conflict"
    conflict = await a_run.post("/api/v1/projects/p_a/run", headers=headers)
    assert conflict.code == "idempotency_conflict"
    other = await a_run.post("/api/v1/tests/t_web/run", headers={"Idempotency-Key": "attempt-2"})
    assert other.json["runId"] != first.json["runId"]
    # The same Idempotency-Key of another API key is another request.
    editor = a_run.as_key("k-edit")
    theirs = await editor.post("/api/v1/tests/t_web/run", json={"mode": "cold"}, headers=headers)
    assert "Idempotent-Replayed" not in theirs.headers
    assert len(small.backend.runs) == 3


async def test_project_runs_and_refusals_are_replayed_too(a_run: Http, small: FakeService) -> None:
    headers = {"Idempotency-Key": "suite-1"}
    first = await a_run.post("/api/v1/projects/p_a/run", headers=headers)
    again = await a_run.post("/api/v1/projects/p_a/run", headers=headers)
    assert (again.status, again.raw) == (201, first.raw)
    assert len(small.backend.runs) == 3
    refused = await a_run.post("/api/v1/projects/p_b/run", headers={"Idempotency-Key": "k"})
    replayed = await a_run.post("/api/v1/projects/p_b/run", headers={"Idempotency-Key": "k"})
    assert (replayed.status, replayed.raw) == (402, refused.raw)
    assert replayed.headers["Idempotent-Replayed"] == "true"


async def test_concurrent_requests_with_one_key_start_one_run(
    a_run: Http, small: FakeService
) -> None:
    headers = {"Idempotency-Key": "burst"}
    replies = await asyncio.gather(
        *(a_run.post("/api/v1/tests/t_web/run", headers=headers) for _ in range(10))
    )
    assert {r.status for r in replies} == {201}
    assert len({r.json["runId"] for r in replies}) == 1
    assert sum("Idempotent-Replayed" in r.headers for r in replies) == 9
    assert len(small.backend.runs) == 1


async def test_failures_of_the_service_are_not_remembered(a_run: Http, small: FakeService) -> None:
    headers = {"Idempotency-Key": "retry-me"}
    small.inject("run_test", Fault("503"))
    small.inject("run_test", Fault("429", retry_after=2))
    assert (await a_run.post("/api/v1/tests/t_web/run", headers=headers)).status == 503
    assert (await a_run.post("/api/v1/tests/t_web/run", headers=headers)).status == 429
    real = await a_run.post("/api/v1/tests/t_web/run", headers=headers)
    assert real.status == 201
    assert "Idempotent-Replayed" not in real.headers
    assert len(small.backend.runs) == 1


async def test_work_done_before_a_fault_is_replayed(a_run: Http, small: FakeService) -> None:
    """500_after: the run started, the answer was lost; the retry gets the first answer."""
    headers = {"Idempotency-Key": "lost-answer"}
    small.inject("run_test", Fault("500_after"))
    lost = await a_run.post("/api/v1/tests/t_web/run", headers=headers)
    assert lost.status == 500
    assert len(small.backend.runs) == 1
    retry = await a_run.post("/api/v1/tests/t_web/run", headers=headers)
    assert retry.status == 201
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json["runId"] == next(iter(small.backend.runs))


async def test_idempotency_keys_expire(
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
) -> None:
    from asyncclient.testing import ServiceSettings

    service = await fake_service_factory(
        SMALL_SEED, clock="manual", settings=ServiceSettings(idempotency_ttl=60)
    )
    client = clients(service, "k-run")
    headers = {"Idempotency-Key": "short-lived"}
    first = await client.post("/api/v1/tests/t_web/run", headers=headers)
    service.advance(61)
    later = await client.post("/api/v1/tests/t_web/run", headers=headers)
    assert later.json["runId"] != first.json["runId"]
    too_long = await client.post("/api/v1/tests/t_web/run", headers={"Idempotency-Key": "x" * 256})
    assert too_long.status == 400


# --- list runs ------------------------------------------------------------------------------


async def test_list_runs_newest_first_with_filters_and_limit(
    a_run: Http, small: FakeService
) -> None:
    ids = [(await a_run.post("/api/v1/tests/t_web/run")).json["runId"] for _ in range(3)]
    fail_id = (await a_run.post("/api/v1/tests/t_fail/run")).json["runId"]
    listed = (await a_run.get("/api/v1/runs")).json["runs"]
    assert [r["id"] for r in listed] == [fail_id, *reversed(ids)]
    assert set(listed[0]) == {
        "id", "testId", "testTitle", "projectId", "status", "final", "mode", "source",
        "platform", "buildId", "createdAt", "startedAt", "finishedAt", "durationMs", "link",
    }  # fmt: skip
    by_test = (await a_run.get("/api/v1/runs", params={"testId": "t_web"})).json["runs"]
    assert [r["id"] for r in by_test] == ids[::-1]
    limited = (await a_run.get("/api/v1/runs", params={"limit": "2"})).json["runs"]
    assert [r["id"] for r in limited] == [fail_id, ids[2]]
    in_project = await a_run.get("/api/v1/runs", params={"projectId": "p_b"})
    assert in_project.json == {"runs": []}
    await a_run.post(f"/api/v1/runs/{ids[0]}/stop")
    cancelled = (await a_run.get("/api/v1/runs", params={"status": "cancelled"})).json["runs"]
    assert [r["id"] for r in cancelled] == [ids[0]]
    small.advance(110)
    statuses = {
        s: [r["id"] for r in (await a_run.get("/api/v1/runs", params={"status": s})).json["runs"]]
        for s in ("passed", "failed", "queued")
    }
    assert statuses == {"passed": [ids[2], ids[1]], "failed": [fail_id], "queued": []}


async def test_list_runs_by_ids(a_run: Http) -> None:
    ids = [(await a_run.post("/api/v1/tests/t_web/run")).json["runId"] for _ in range(3)]
    asked = ",".join([ids[0], "j_unknown", ids[2], ids[0]])
    runs = (await a_run.get("/api/v1/runs", params={"ids": asked})).json["runs"]
    assert [r["id"] for r in runs] == [ids[2], ids[0]]  # newest first, unknown left out
    assert list(runs[0]) == FULL_VIEW


async def test_list_runs_refuses_bad_queries(a_run: Http, small: FakeService) -> None:
    fifty = ",".join(f"j_{i:012d}" for i in range(50))
    assert (await a_run.get("/api/v1/runs", params={"ids": fifty})).status == 200
    for params in [
        {"ids": fifty + ",j_x"},
        {"ids": "j_ok,nope"},
        {"ids": ""},
        {"status": "done"},
        {"limit": "0"},
        {"limit": "201"},
        {"limit": "ten"},
        {"test_id": "t_web"},
    ]:
        reply = await a_run.get("/api/v1/runs", params=params)
        assert reply.status == 400, params
        assert reply.code == "invalid_request"
    assert (await a_run.get("/api/v1/runs", params={"limit": "200"})).status == 200
    assert small.request_counts()["list_runs"] == 10


async def test_with_device_slots_runs_wait_their_turn_and_a_stop_frees_a_device() -> None:
    """ServiceSettings(device_slots=2): a third run waits for a device in the order it came,
    and a stopped run's device goes to the next one at once."""
    from asyncclient import AsyncSession
    from asyncclient.testing import ServiceSettings, demo_seed_data

    async with (
        FakeService(demo_seed_data(), settings=ServiceSettings(device_slots=2)) as svc,
        AsyncSession(svc.run_key, svc.url) as session,
    ):
        first, second, third = [(await session.run_test("t_search")).run_id for _ in range(3)]
        svc.advance(10)  # past the queue time: two devices, three runs
        statuses = [(await session.get_run(r)).status for r in (first, second, third)]
        assert statuses == ["running", "running", "queued"]
        await session.stop_run(first)
        svc.advance(0.01)
        assert (await session.get_run(third)).status == "running"
        waited = svc.backend.runs[third]
        assert waited.start_at - waited.created_at > 5  # it waited for the stop, not its queue


def test_device_slots_are_a_whole_number() -> None:
    from asyncclient.testing import ServiceSettings

    with pytest.raises(ValueError, match="whole number of devices"):
        ServiceSettings(device_slots=0)
