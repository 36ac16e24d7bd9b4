"""FakeService.hold: runs kept in a state until the test lets them go, whatever the clock does."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from emulator_support import SMALL_SEED, Http

from asyncclient.testing import FakeService
from asyncclient.testing.pytest_plugin import FakeServiceFactory


async def view(client: Http, run_id: str) -> dict[str, Any]:
    reply = await client.get(f"/api/v1/runs/{run_id}")
    assert reply.status == 200, reply.raw
    return dict(reply.json["run"])


async def start(client: Http, test_id: str) -> str:
    started = await client.post(f"/api/v1/tests/{test_id}/run", json={})
    assert started.status == 201, started.raw
    return str(started.json["runId"])


async def test_held_runs_stay_queued_however_far_the_clock_moves(
    a_run: Http, small: FakeService
) -> None:
    with small.hold("t_fail") as hold:
        run_id = await start(a_run, "t_fail")
        other = await start(a_run, "t_web")  # not held
        small.advance(100_000)  # a day of service time
        held = await view(a_run, run_id)
        assert (held["status"], held["startedAt"], held["finishedAt"]) == ("queued", None, None)
        assert (await view(a_run, other))["final"] is True
        listed = await a_run.get("/api/v1/runs", params={"testId": "t_fail", "status": "queued"})
        assert [r["id"] for r in listed.json["runs"]] == [run_id]
        assert hold.run_ids == [run_id]
    # Released: the rest of its queue (none left), then its whole 100 s run, from now.
    released_at = small.now()
    assert (await view(a_run, run_id))["status"] == "running"
    small.advance(99)
    assert (await view(a_run, run_id))["status"] == "running"
    small.advance(1)
    final = await view(a_run, run_id)
    assert (final["status"], final["final"]) == ("failed", True)
    assert final["durationMs"] == 100_000
    assert final["startedAt"] is not None
    assert small.backend.runs[run_id].start_at == pytest.approx(released_at)
    assert hold.run_ids == []
    # Runs started after the release are not held.
    later = await start(a_run, "t_fail")
    small.advance(10)
    assert (await view(a_run, later))["status"] == "running"


async def test_held_runs_do_not_move_on_a_scaled_clock_either(
    fake_service_factory: FakeServiceFactory, clients: Callable[..., Http]
) -> None:
    """At 10,000 service seconds per wall second, a held 100 s run stays queued while the test
    waits, and ends once let go."""
    svc = await fake_service_factory(SMALL_SEED, speed=10_000)
    client = clients(svc, "k-run")
    hold = svc.hold("t_fail")
    run_id = await start(client, "t_fail")
    for _ in range(5):
        await asyncio.sleep(0.05)  # 500 service seconds each
        assert (await view(client, run_id))["status"] == "queued"
    hold.release()
    for _ in range(1000):  # as a client polls
        if (await view(client, run_id))["final"]:
            break
        await asyncio.sleep(0.01)
    assert (await view(client, run_id))["status"] == "failed"


async def test_a_hold_in_running_lets_runs_start_and_never_end(
    a_run: Http, small: FakeService
) -> None:
    queued_before = await start(a_run, "t_fail")
    hold = small.hold("t_fail", state="running")  # takes the run already queued too
    small.advance(10_000)
    running = await view(a_run, queued_before)
    assert (running["status"], running["finishedAt"]) == ("running", None)
    assert running["startedAt"] is not None
    hold.release()
    hold.release()  # idempotent
    assert (await view(a_run, queued_before))["final"] is True


async def test_a_held_run_can_be_stopped_and_never_started(a_run: Http, small: FakeService) -> None:
    with small.hold("t_fail"):
        run_id = await start(a_run, "t_fail")
        small.advance(1_000)
        stopped = await a_run.post(f"/api/v1/runs/{run_id}/stop")
        assert stopped.status == 200, stopped.raw
    small.advance(1_000)
    final = await view(a_run, run_id)
    assert (final["status"], final["startedAt"]) == ("cancelled", None)


async def test_a_final_run_is_not_held_and_bad_holds_are_refused(
    a_run: Http, small: FakeService
) -> None:
    run_id = await start(a_run, "t_fail")
    small.advance(200)
    with small.hold("t_fail") as hold:
        assert hold.run_ids == []
        assert (await view(a_run, run_id))["status"] == "failed"
    with pytest.raises(ValueError, match="unknown: \\['t_nope'\\]"):
        small.hold("t_nope")
    with pytest.raises(ValueError, match="state must be 'queued' or 'running'"):
        small.hold("t_fail", state="final")
