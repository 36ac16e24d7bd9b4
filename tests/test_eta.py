"""The ETA from history (asyncclient.eta): pure expectations and what is left, then a job
against the emulator whose first `eta` event is checked against the time the job then took."""

from __future__ import annotations

import asyncio
import json
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncclient.eta import (
    DEFAULT_QUEUE_SECONDS,
    DEFAULT_RUN_SECONDS,
    Expected,
    JobEta,
    expected_of,
    job_eta,
    remaining,
)
from asyncclient.models import Run, RunStatus
from asyncclient.testing import FakeService

T0 = datetime(2026, 11, 27, 9, 0, 0, tzinfo=UTC)


def done(run_id: str, *, queue: float, seconds: float, mode: str = "cold", **fields: Any) -> Run:
    created = T0 - timedelta(hours=1)
    fields.setdefault("finished_at", created + timedelta(seconds=queue + seconds))
    return Run(
        id=run_id, status=RunStatus.PASSED, final=True, test_id="t_a", mode=mode,
        created_at=created, duration_ms=round(seconds * 1000), **fields,
    )  # fmt: skip


def test_expectations_are_the_p50_and_p90_of_the_recent_runs_in_the_mode() -> None:
    runs = [done(f"j_{i}", queue=4, seconds=float(s)) for i, s in enumerate([8, 9, 7, 8, 20])]
    runs += [done("j_w1", queue=1, seconds=1, mode="warm")] * 2
    cold = expected_of(runs, "cold")
    assert (cold.queue_p50, cold.run_p50, cold.samples) == (4.0, 8.0, 5)
    assert cold.run_p90 == pytest.approx(15.6)  # between 9 and 20
    # Fewer than 3 in the mode asked: every mode counts.
    assert expected_of(runs, "warm").samples == 7
    assert expected_of([], "cold") == Expected(
        DEFAULT_QUEUE_SECONDS, DEFAULT_QUEUE_SECONDS, DEFAULT_RUN_SECONDS, DEFAULT_RUN_SECONDS, 0
    )
    # A stopped or unfinished run teaches nothing.
    stopped = Run(id="j_s", status=RunStatus.CANCELLED, final=True, test_id="t_a", duration_ms=5)
    going = Run(id="j_g", status=RunStatus.RUNNING, test_id="t_a")
    assert expected_of([stopped, going]).samples == 0


def test_what_is_left_shrinks_as_a_run_goes() -> None:
    usual = Expected(queue_p50=4, queue_p90=6, run_p50=8, run_p90=12, samples=10)
    queued = Run(id="j_q", status=RunStatus.QUEUED, test_id="t_a", created_at=T0)
    assert remaining(queued, usual, T0) == (12.0, 18.0)
    assert remaining(queued, usual, T0 + timedelta(seconds=3)) == (9.0, 15.0)
    running = Run(id="j_r", status=RunStatus.RUNNING, test_id="t_a", created_at=T0,
                  started_at=T0 + timedelta(seconds=4))  # fmt: skip
    assert remaining(running, usual, T0 + timedelta(seconds=6)) == (6.0, 10.0)
    # Past its usual time: a tenth of it at least, and up to its slow tenth's end.
    assert remaining(running, usual, T0 + timedelta(seconds=30)) == (0.8, 0.8)
    final = Run(id="j_f", status=RunStatus.PASSED, final=True)
    assert remaining(final, usual, T0) == (0.0, 0.0)


def test_the_jobs_eta_is_its_slowest_run_still_going() -> None:
    slow = Expected(4, 4, 8, 10, 5)
    quick = Expected(1, 1, 2, 3, 5)
    runs = [
        Run(id="j_1", status=RunStatus.QUEUED, test_id="t_slow", created_at=T0),
        Run(id="j_2", status=RunStatus.QUEUED, test_id="t_quick", created_at=T0),
        Run(id="j_3", status=RunStatus.PASSED, final=True, test_id="t_done"),
    ]
    eta = job_eta(runs, {"t_slow": slow, "t_quick": quick}, T0)
    assert (eta.p50, eta.p90, eta.slowest) == (12.0, 14.0, ("t_slow", "t_quick"))
    assert eta.text() == "about 12-14 s left"
    assert JobEta(250, 370).text() == "about 4-7 min left"
    assert job_eta(runs[2:], {}, T0).text() == "done"
    assert JobEta(51.2, 51.4).text() == "about 51 s left"


def eta_seed() -> dict[str, Any]:
    """t_slow takes 8 s after a 4 s queue, t_quick 2 s after 1 s: ten earlier runs each."""
    web = {"project": "p_eta", "target": "web", "url": "https://shop.example"}
    return {
        "projects": [{"id": "p_eta", "name": "p_eta", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "eta-run", "capability": "run", "projects": ["p_eta"]}],
        "tests": [
            {"id": "t_slow", **web, "queuedSeconds": 4, "durationSeconds": 8,
             "history": [{"daysAgo": d, "status": "passed", "durationSeconds": 8,
                          "queuedSeconds": 4} for d in range(1, 11)]},
            {"id": "t_quick", **web, "queuedSeconds": 1, "durationSeconds": 2,
             "history": [{"daysAgo": d, "status": "passed", "durationSeconds": 2,
                          "queuedSeconds": 1} for d in range(1, 11)]},
        ],
    }  # fmt: skip


async def test_the_first_eta_of_a_job_is_near_the_time_it_took(
    run_cli: Any, tmp_path: Path
) -> None:
    """History: t_slow 8 s after a 4 s queue, t_quick 2 s after 1 s, on a service ten times
    faster than the wall. The job's first `eta` event (before the first sweep) is within
    0.6x-1.6x of the time the job then took on the wall (what the user waits, not the
    service's seconds). The emulator holds the runs in their queue until the job has said its
    ETA, so no run can end first however busy the machine is."""
    events = tmp_path / "events.jsonl"
    async with FakeService(eta_seed(), speed=10.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "eta-run"}
        hold = svc.hold("t_slow", "t_quick")

        async def release_after_the_eta() -> None:
            for _ in range(6000):  # the job writes it; at most a minute
                if events.exists() and '"event": "eta"' in events.read_text():
                    break
                await asyncio.sleep(0.01)
            hold.release()

        releasing = asyncio.create_task(release_after_the_eta())
        result = await run_cli(
            "run", "project", "p_eta", "--wait", "--events", str(events), "--interval", "0.05",
            env=env,
        )  # fmt: skip
        await asyncio.wait_for(releasing, 5)
        runs = [svc.backend.runs[run_id] for run_id in svc.backend.runs]
    assert result.code == 0, result.stderr
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    first = next(line for line in lines if line["event"] == "eta")
    kinds = [line["event"] for line in lines]
    assert kinds.index("eta") < kinds.index("run_finished")  # known before any run ended
    # The job's own length on the wall, the hold left out: each run's queue, then its run.
    took = (
        max(
            run.test.seed.queued_seconds + run.end_at - run.start_at
            for run in runs
            if run.source != "history"
        )
        / 10.0
    )
    assert 0.6 * took <= first["seconds"] <= 1.6 * took, (first, took)
    assert first["slowest"][0] == "t_slow"


async def test_a_timeout_below_the_eta_is_said_before_it_passes(
    run_cli: Any, tmp_path: Path
) -> None:
    """The same history on a service as fast as the wall: about 12 s to go, past --timeout 3,
    said at once (the runs are held in their queue: none ends, the timeout ends the job)."""
    async with FakeService(eta_seed(), speed=1.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "eta-run"}
        with svc.hold("t_slow", "t_quick"):
            result = await run_cli(
                "run", "project", "p_eta", "--wait", "--timeout", "3", "--interval", "0.05",
                env=env,
            )  # fmt: skip
    assert result.code == 1, result.stderr
    warning = re.search(
        r"the runs are expected to need about .* more, past --timeout 3 s", result.stderr
    )
    assert warning is not None, result.stderr
    assert "t_slow" in result.stderr[warning.start() :].splitlines()[0]


def slower_seed() -> dict[str, Any]:
    """t_login ran 30 s on ten earlier builds and takes 48 s now; t_steady 30 s with 5 %
    noise, and 31 s now."""
    web = {"project": "p_eta", "target": "web", "url": "https://shop.example", "queuedSeconds": 1}
    steady = [29.0, 30.5, 31.5, 28.5, 30.0, 31.0, 29.5, 30.0, 28.7, 31.3]
    return {
        "projects": [{"id": "p_eta", "name": "p_eta", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "eta-run", "capability": "run", "projects": ["p_eta"]}],
        "tests": [
            {"id": "t_login", **web, "durationSeconds": 48,
             "history": [{"daysAgo": d, "status": "passed", "durationSeconds": 30}
                         for d in range(1, 11)]},
            {"id": "t_steady", **web, "durationSeconds": 31,
             "history": [{"daysAgo": d + 1, "status": "passed", "durationSeconds": s}
                         for d, s in enumerate(steady)]},
        ],
    }  # fmt: skip


async def test_a_test_slower_than_usual_is_told(run_cli: Any) -> None:
    async with FakeService(slower_seed(), speed=100.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "eta-run"}
        result = await run_cli(
            "run", "project", "p_eta", "--wait", "--json", "--interval", "0.05", env=env
        )  # fmt: skip
    assert result.code == 0, result.stderr
    assert "t_login took 48.0 s, usually 30.0 s" in result.stderr
    assert "t_steady took" not in result.stderr
    entries = {entry["testId"]: entry for entry in result.json()}
    assert entries["t_login"]["slower"] == {"seconds": 48.0, "usualSeconds": 30.0}
    assert entries["t_steady"]["slower"] is None


async def test_json_says_what_a_run_not_final_still_has_to_go(run_cli: Any) -> None:
    """The wait ends (--timeout) before the runs do: each --json entry has `left`, from its
    test's history (t_slow: 8 s after a 4 s queue, 12 s at most)."""
    async with FakeService(eta_seed(), speed=1.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "eta-run"}
        with svc.hold("t_slow"):  # not final when the wait ends, however slow the machine
            result = await run_cli(
                "run", "project", "p_eta", "--wait", "--json", "--timeout", "0.5",
                "--interval", "0.05", env=env,
            )  # fmt: skip
    assert result.code == 1, result.stderr
    entries = {entry["testId"]: entry for entry in result.json()}
    left = entries["t_slow"].get("left")
    assert left is not None, entries["t_slow"]
    assert 0 < left["seconds"] <= left["p90Seconds"] <= 12.0


def test_the_time_left_is_on_the_wall_when_the_services_clock_runs_faster() -> None:
    """A service whose runs' timestamps span a thirtieth of their durationMs (an emulator at
    x30): the time left is told in the wall's seconds, while the usual duration stays the
    device's (what "took 48 s, usually 30 s" compares)."""
    fast = [
        done(
            f"j_{i}", queue=0.1, seconds=30.0, started_at=T0, finished_at=T0 + timedelta(seconds=1)
        )
        for i in range(5)
    ]
    expected = expected_of(fast)
    assert expected.run_p50 == 30.0  # the device's seconds
    assert expected.pace == pytest.approx(1 / 30)
    running = Run(id="j_r", status=RunStatus.RUNNING, test_id="t_a", created_at=T0, started_at=T0)
    p50, _ = remaining(running, expected, now=T0 + timedelta(seconds=0.5))
    assert p50 == pytest.approx(0.5)
    # A service whose clock is the wall's, up to its rounding: no pace at all.
    real = [
        done(f"j_{i}", queue=1, seconds=30.0, started_at=T0, finished_at=T0 + timedelta(seconds=31))
        for i in range(5)
    ]
    assert expected_of(real).pace == 1.0


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=-(10**12), max_value=10**12),  # durationMs, any the wire says
            st.floats(min_value=-1e7, max_value=1e7),  # seconds from startedAt to finishedAt
        ),
        max_size=25,
    ),
    st.floats(min_value=-1e6, max_value=1e6),
)
def test_any_times_a_service_sends_give_a_bounded_pace_and_time_left(
    timings: list[tuple[int, float]], ran: float
) -> None:
    """Durations and spans out of range, negative or zero (a hostile or broken service): the
    pace stays within a thousandth and ten, and the time left is finite and not below 0."""
    runs = [
        Run(
            id=f"j_{i}", status=RunStatus.PASSED, final=True, test_id="t_a", mode="cold",
            created_at=T0, started_at=T0, finished_at=T0 + timedelta(seconds=span),
            duration_ms=ms,
        )
        for i, (ms, span) in enumerate(timings)
    ]  # fmt: skip
    expected = expected_of(runs)
    assert expected.pace == 1.0 or 0.001 <= expected.pace <= 10.0
    running = Run(id="j_r", status=RunStatus.RUNNING, test_id="t_a", created_at=T0, started_at=T0)
    p50, p90 = remaining(running, expected, now=T0 + timedelta(seconds=ran))
    assert math.isfinite(p50)
    assert math.isfinite(p90)
    assert 0 <= p50 <= p90
