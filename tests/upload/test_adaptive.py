"""The adaptive parts-in-flight rule (asyncclient.upload._adaptive.Rule) driven by a simulated
link: a fluid model in which n parts carry min(n x per-part cap, the link's capacity), measured
on the same settle-and-window schedule as Adaptive uses. No clock: the simulation's time is
its own, so every figure is exact and the same on a busy machine."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncclient import AsyncSession
from asyncclient._local._bodies import PartBody, _queue_reader
from asyncclient.errors import ValidationError
from asyncclient.testing import FakeService, Fault, NetworkConditions, ServiceSettings
from asyncclient.testing.builders import build_apk
from asyncclient.upload import Adaptive, UploadItem
from asyncclient.upload._adaptive import (
    CEILING,
    FLOOR,
    SETTLE,
    START,
    START_SETTLE,
    START_WINDOW,
    WINDOW,
    Rule,
)
from asyncclient.upload._batch import upload_many
from asyncclient.upload._budget import Flow

MB = 1_000_000
GiB = 1 << 30


class Simulated:
    """One upload over a link whose capacity may change with time."""

    def __init__(
        self,
        per_part: float,
        link: Callable[[float], float],
        *,
        noise: float = 0.0,
        seed: int = 1,
        warmup: float = 0.0,
    ) -> None:
        self.per_part = per_part
        self.link = link
        # A raise's new parts carry nothing for `warmup` s each (they start one after
        # another) and cost the old ones a tenth meanwhile.
        self.warmup = warmup
        self.raised: tuple[float, int] = (-1.0, 0)  # (when, the level before)
        self.noise = noise
        self.random = random.Random(seed)
        self.rule = Rule()
        self.now = 0.0
        self.sent = 0.0
        self.size = 0.0
        self.trace: list[tuple[float, int, float]] = []  # (time, level, carried bytes/s)

    def rate(self, level: int, at: float) -> float:
        when, before = self.raised
        if at < when + self.warmup * (level - before):
            return 0.9 * min(before * self.per_part, self.link(at))
        return min(level * self.per_part, self.link(at))

    def run(self, seconds: float, step: float = 0.01) -> float:
        """Carry bytes at the current level for `seconds`; the bytes carried."""
        carried = 0.0
        end = self.now + seconds
        while self.now < end - 1e-9 and self.sent + carried < self.size:
            dt = min(step, end - self.now)
            rate = self.rate(self.rule.level, self.now)
            dt = min(dt, (self.size - self.sent - carried) / rate)
            carried += rate * dt
            self.trace.append((self.now, self.rule.level, rate))
            self.now += dt
        self.sent += carried
        return carried

    def upload(self, size: float) -> float:
        """Upload `size` bytes, measuring and deciding as Adaptive does; the seconds taken."""
        self.size = size
        while self.sent < size * (1 - 1e-12):
            settle, window = (
                (START_SETTLE, START_WINDOW) if self.rule.starting else (SETTLE, WINDOW)
            )
            self.run(settle)
            measured = self.run(window) / window
            if self.noise:
                measured *= 1 + self.random.uniform(-self.noise, self.noise)
            level = self.rule.level
            if self.rule.measured(measured, self.now) > level:
                self.raised = (self.now, level)
        return self.now

    def carried_between(self, start: float, end: float) -> float:
        """Mean bytes/s carried over [start, end)."""
        rates = [rate for at, _, rate in self.trace if start <= at < end]
        return sum(rates) / len(rates)


def steady(rate: float) -> Callable[[float], float]:
    return lambda _at: rate


def changing(first: float, then: float, at: float) -> Callable[[float], float]:
    return lambda now: first if now < at else then


def test_long_fat_link_is_filled_within_a_second() -> None:
    """4 MB/s a connection, 100 MB/s in all: fixed 4 carries 16 %; the rule reaches the link
    within a second (2, 4, 16, 64: its first probe doubles, since two parts may fill a link)
    and loses under 0.75 s of it over 1 GiB."""
    sim = Simulated(4 * MB, steady(100 * MB))
    took = sim.upload(GiB)
    best = GiB / (100 * MB)
    assert took - best < 0.75
    assert sim.carried_between(1.0, took) >= 0.97 * 100 * MB
    assert max(level for _, level, _ in sim.trace) <= CEILING


def test_a_quadruple_judged_while_its_parts_start_goes_back_only_halfway() -> None:
    """New parts that start one after another, 6 ms each, and cost the old ones a tenth
    meanwhile: the start's 16 -> 64 is judged in that dip (0.29 s). It went back to 16 and
    climbed a quarter at a time (found over a real 100 MB/s bottleneck: 84 % of the link);
    going back to 32, which fills the link, loses about a second of it over 1 GiB (that way,
    4.9 s)."""
    sim = Simulated(4 * MB, steady(100 * MB), warmup=0.006)
    took = sim.upload(GiB)
    assert took - GiB / (100 * MB) < 1.5


def test_short_thin_link_never_goes_past_four() -> None:
    """One connection could carry more than the whole link (20 MB/s): more parts bring
    nothing, so the rule, starting at 2 and doubling once, never goes past 4 (it climbed to 16
    before: the first part stored at 4x its time alone) and settles at what the link needs."""
    sim = Simulated(100 * MB, steady(20 * MB))
    took = sim.upload(GiB)
    assert took <= GiB / (20 * MB) * 1.001
    assert START == 2
    assert max(level for _, level, _ in sim.trace) <= 4
    assert min(level for _, level, _ in sim.trace) >= FLOOR
    assert sim.rule.level <= 4


def test_a_link_that_doubles_is_followed_within_ten_seconds() -> None:
    """50 MB/s, then 100 MB/s after 8 s: within 10 s the upload carries at least 85 % of the
    new capacity."""
    sim = Simulated(4 * MB, changing(50 * MB, 100 * MB, 8.0))
    sim.upload(3 * GiB)
    followed = next(
        at for at, _, _ in sim.trace if at >= 8.0 and sim.carried_between(at, at + 1) >= 85 * MB
    )
    assert followed - 8.0 <= 10.0


def test_a_link_that_halves_is_followed_and_the_parts_come_down() -> None:
    sim = Simulated(4 * MB, changing(100 * MB, 50 * MB, 8.0))
    took = sim.upload(2 * GiB)
    assert sim.carried_between(8.0, took) >= 0.97 * 50 * MB
    # 13 parts fill 50 MB/s: the rule gives back what it no longer needs.
    assert sim.rule.level <= 20
    assert max(level for at, level, _ in sim.trace if at < 8.0) >= 25


def test_measurement_noise_costs_little() -> None:
    """Measures off by up to 10 % either way: the long fat link is still carried at 90 %."""
    for seed in range(5):
        sim = Simulated(4 * MB, steady(100 * MB), noise=0.10, seed=seed)
        took = sim.upload(GiB)
        assert GiB / (100 * MB) / took >= 0.90, seed


def test_pushback_halves_and_holds_off_raises() -> None:
    rule = Rule()
    rule.measured(8 * MB, now=0.3)  # 2 -> 4: the first probe doubles
    rule.measured(16 * MB, now=0.6)  # 4 -> 16: twice the parts, twice the throughput
    rule.measured(64 * MB, now=0.9)  # 16 -> 64
    assert rule.level == 64
    assert rule.pushback(now=1.0, quiet=3.0) == 32
    assert rule.pushback(now=1.1, quiet=3.0) == 16
    assert not rule.starting
    # Throughput that would invite a raise: none while quiet, only cuts.
    levels = [rule.measured(64 * MB, now=1.5 + i * 0.3) for i in range(6)]
    assert max(levels) <= 16
    # Quiet over: raises again.
    later = [rule.measured(rule.level * 4 * MB, now=10 + i) for i in range(6)]
    assert max(later) > 16


def test_pushback_never_goes_below_the_floor() -> None:
    rule = Rule(start=4, floor=2, ceiling=64)
    for i in range(10):
        rule.pushback(now=float(i))
    assert rule.level == 2


def test_adaptive_checks_its_bounds() -> None:
    assert repr(Adaptive()) == "Adaptive(current=2, floor=2, ceiling=64, peak=2)"
    tuned = Adaptive(start=100, floor=3, ceiling=8)
    assert tuned.start == 8
    with pytest.raises(ValidationError, match="ceiling"):
        Adaptive(floor=10, ceiling=4)
    with pytest.raises(ValidationError, match="floor"):
        Adaptive(floor=0)


# --- over real HTTP, against the emulator --------------------------------------------------------

PART = 64 * 1024


class Counting:
    """The session as the uploader's Service, counting the parts in flight at once."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self.in_flight = 0
        self.most = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def upload_part(self, build_id: str, number: int, data: Any) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            return await self._session.upload_part(build_id, number, data)
        finally:
            self.in_flight -= 1


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService(settings=ServiceSettings(part_bytes=PART)) as service:
        yield service


def apk_of(path: Path, parts: int) -> Path:
    out = build_apk(path, filler_bytes=parts * PART - 4096)
    assert -(-out.stat().st_size // PART) == parts
    return out


async def no_wait(_seconds: float) -> None:
    return None


@pytest.mark.parametrize(
    ("kind", "pushback"), [("429", True), ("503", True), ("drop", True), ("500", False)]
)
async def test_the_service_asking_for_less_lowers_the_number_and_no_part_is_lost(
    svc: FakeService, tmp_path: Path, kind: str, pushback: bool
) -> None:
    """429 and 503 answers and parts cut off halve the parts in flight (each retried attempt
    once); a 500 does not; every part arrives once accepted and the build is the file."""
    apk = apk_of(tmp_path / "shop.apk", parts=24)
    svc.conditions = NetworkConditions(part_bandwidth=2_000_000)
    svc.inject("upload_part", Fault(kind, times=3, retry_after=0))
    # At its ceiling from the start: only a cut moves it (a rise is timing, not this test's).
    tuner = Adaptive(start=16, ceiling=16)
    seen: list[int] = []
    async with AsyncSession(svc.edit_key, svc.url, sleep=no_wait) as session:
        counting = Counting(session)
        results = await upload_many(
            counting,
            [UploadItem(apk, progress=lambda done, total: seen.append(tuner.current))],
            project_id=svc.project_id,
            max_parts_in_flight=tuner,
            journal_dir=tmp_path / "journal",
        )
    (result,) = results
    assert result.ok, result.error
    assert result.build is not None
    assert svc.backend.builds[result.build.id].path.read_bytes() == apk.read_bytes()
    numbers = Counter(int(r.path.rsplit("/", 1)[1]) for r in svc.requests_for("upload_part"))
    assert set(numbers) == set(range(1, 25))
    assert sum(numbers.values()) == 24 + 3
    assert counting.most <= 16
    if pushback:
        assert tuner.pushbacks == 3
        assert min(seen) <= 4  # 16 halved three times, however the rule moved meanwhile
    else:
        assert tuner.pushbacks == 0


async def test_a_fixed_number_turns_it_off(svc: FakeService, tmp_path: Path) -> None:
    apk = apk_of(tmp_path / "shop.apk", parts=12)
    async with AsyncSession(svc.edit_key, svc.url) as session:
        counting = Counting(session)
        (fixed,) = await upload_many(
            counting, [apk], project_id=svc.project_id, max_parts_in_flight=3,
            journal_dir=tmp_path / "journal",
        )  # fmt: skip
        assert fixed.parts_in_flight == 3
        assert counting.most <= 3
        svc.backend.builds.clear()
        (per_build,) = await upload_many(
            counting, [apk], project_id=svc.project_id, concurrency=2,
            journal_dir=tmp_path / "journal",
        )  # fmt: skip
        assert per_build.parts_in_flight == 2


async def test_the_ceiling_holds_and_the_result_says_the_number(
    svc: FakeService, tmp_path: Path
) -> None:
    apk = apk_of(tmp_path / "shop.apk", parts=40)
    svc.conditions = NetworkConditions(part_bandwidth=2_000_000)
    tuner = Adaptive(start=2, floor=1, ceiling=5)
    async with AsyncSession(svc.edit_key, svc.url) as session:
        counting = Counting(session)
        (result,) = await upload_many(
            counting, [apk], project_id=svc.project_id, max_parts_in_flight=tuner,
            journal_dir=tmp_path / "journal",
        )  # fmt: skip
    assert result.ok
    assert counting.most <= 5
    assert 1 <= result.parts_in_flight <= 5
    assert result.parts_in_flight == tuner.current
    assert tuner.peak <= 5


# --- what the link carried: the kernel's send queue, per platform -------------------------------


@pytest.mark.linux(reason="the SIOCOUTQ ioctl on a TCP socket")
def test_linux_reads_the_send_queue_of_a_real_tcp_socket() -> None:
    reader = _queue_reader("linux")
    assert reader is not None
    server = socket.create_server(("127.0.0.1", 0))
    left = socket.create_connection(server.getsockname())
    right, _ = server.accept()
    server.close()
    try:
        left.setblocking(False)
        assert reader(left) == 0
        right.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sent = 0
        with contextlib.suppress(BlockingIOError):
            while sent < 1 << 22:
                sent += left.send(b"x" * 65536)
        queued = reader(left)
        assert 0 < queued <= sent  # what the peer has not taken in is still queued here
    finally:
        left.close()
        right.close()


def test_macos_reads_so_nwrite_and_windows_cannot_tell() -> None:
    class FakeSocket:
        def getsockopt(self, level: int, option: int) -> int:
            assert (level, option) == (socket.SOL_SOCKET, 0x1024)  # SO_NWRITE
            return 12345

    darwin = _queue_reader("darwin")
    assert darwin is not None
    assert darwin(FakeSocket()) == 12345
    assert _queue_reader("win32") is None
    assert _queue_reader("cygwin") is None


def test_without_fcntl_linux_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fcntl", None)  # as on a platform without it
    assert _queue_reader("linux") is None


def test_a_part_that_cannot_read_its_queue_assumes_a_full_send_buffer(tmp_path: Path) -> None:
    """Where the platform cannot tell (Windows), the bytes of a full send buffer are taken as
    not yet carried: a measure that errs low, never one that counts a buffer's fill."""
    path = tmp_path / "part.bin"
    path.write_bytes(bytes(8 << 20))
    flow = Flow(lambda _delta: None)
    flow.body = PartBody(path, 0, 8 << 20, progress=flow.add)
    flow.body.send_buffer = 1 << 20
    flow.add(3 << 20)
    assert flow.body.in_transit() is None  # no attempt under way: nothing to read
    assert flow.carried() == 2 << 20
    flow.body.send_buffer = 0  # unknown too: the default (4 MiB)
    assert flow.carried() == 0
    flow.add(-(3 << 20))  # a retried attempt starts again
    assert flow.written == 0


async def test_one_adaptive_steers_one_call_at_a_time(svc: FakeService, tmp_path: Path) -> None:
    apk = apk_of(tmp_path / "shop.apk", parts=8)
    other = apk_of(tmp_path / "other.apk", parts=2)
    svc.conditions = NetworkConditions(part_bandwidth=500_000)
    shared = Adaptive()
    going = asyncio.Event()
    item = UploadItem(apk, progress=lambda done, total: going.set())
    async with AsyncSession(svc.edit_key, svc.url) as session:
        first = asyncio.create_task(
            session.upload_builds([item], project_id=svc.project_id, max_parts_in_flight=shared)
        )
        await going.wait()  # the first call's parts are going: it holds the Adaptive
        with pytest.raises(ValidationError, match="give each call its own"):
            await session.upload_builds(
                [other], project_id=svc.project_id, max_parts_in_flight=shared
            )
        (result,) = await first
        assert result.ok
        svc.conditions = NetworkConditions()
        (again,) = await session.upload_builds(
            [other], project_id=svc.project_id, max_parts_in_flight=shared
        )
        assert again.ok  # free again once the first call is over


@settings(max_examples=300, deadline=None)
@given(
    bounds=st.tuples(st.integers(1, 8), st.integers(1, 128), st.integers(1, 200)),
    events=st.lists(
        st.one_of(
            st.floats(min_value=0, allow_nan=False),  # a measure, infinity included
            st.tuples(st.just("pushback"), st.floats(min_value=0, allow_nan=False)),
        ),
        max_size=60,
    ),
)
def test_whatever_is_measured_the_number_stays_within_its_bounds(
    bounds: tuple[int, int, int], events: list[Any]
) -> None:
    """Measures of any size (nothing, infinity), and pushback with any wait (a Retry-After the
    service chose): the number never leaves [floor, ceiling] and is always whole."""
    floor, extra, start = bounds
    ceiling = floor + extra
    rule = Rule(start, floor, ceiling)
    now = 0.0
    for event in events:
        now += 0.5
        if isinstance(event, tuple):
            level = rule.pushback(now, event[1])
        else:
            level = rule.measured(event, now)
        assert isinstance(level, int)
        assert floor <= level <= ceiling
        assert level == rule.level
