"""The emulator's clock: service time, and the wall's time the wire shows for it."""

from __future__ import annotations

from datetime import datetime

import pytest

from asyncclient import AsyncSession
from asyncclient.testing import FakeService
from asyncclient.testing._clock import ManualClock, ScaledClock


def test_a_scaled_clock_shows_the_walls_time_and_compresses_each_runs_span() -> None:
    clock = ScaledClock(30.0)
    base = clock.started_at
    assert clock.wall(base + 60.0) == pytest.approx(base + 2.0)  # a service minute: 2 s
    assert clock.wall(base - 86400.0) == base - 86400.0  # yesterday stays yesterday
    # A run of earlier days: queued 10 s and ran 30 s of the service's time.
    created, started, finished = clock.span(base - 1000.0, base - 990.0, base - 960.0)
    assert created == base - 1000.0
    assert started == pytest.approx(created + 10 / 30)
    assert finished == pytest.approx(started + 1.0)  # type: ignore[operator]
    # Not started (stopped while queued): None stays None, the end follows the start.
    assert clock.span(base, None, base + 3.0) == pytest.approx((base, None, base + 0.1))


def test_a_manual_clock_shows_its_own_time() -> None:
    clock = ManualClock()
    clock.advance(100.0)
    assert clock.wall(clock.now()) == clock.now()
    assert clock.span(5.0, 6.0, 8.0) == (5.0, 6.0, 8.0)


async def test_the_wire_shows_the_walls_times_and_the_devices_duration() -> None:
    """At x30 a seeded run of 30 s spans 1 s of the wall on the wire; durationMs stays 30 s."""
    async with (
        FakeService(speed=30.0) as svc,
        AsyncSession(svc.run_key, svc.url, proxy="direct") as session,
    ):
        listing = await session.list_runs(test_id="t_login", project_id="p_demo")
        now = datetime.now().astimezone()
    history = [r for r in listing if r.status_kind == "passed"]
    assert history
    for run in history:
        assert run.duration_seconds is not None
        assert run.started_at is not None
        assert run.finished_at is not None
        span = (run.finished_at - run.started_at).total_seconds()
        assert span == pytest.approx(run.duration_seconds / 30, abs=0.002)
        assert run.finished_at < now  # the past, not the service's future
