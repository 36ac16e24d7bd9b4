"""The run watcher: its pure pacing and bookkeeping, then against the emulator over HTTP.

Time is the emulator's manual clock, moved by the watcher's own (injected) sleep: no test waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from clock_support import ManualTime
from network_support import Network

from asyncclient import AsyncSession
from asyncclient.errors import (
    ServerError,
    TransportError,
    UnauthenticatedError,
    UnknownRunsError,
    ValidationError,
    WatchTimeoutError,
)
from asyncclient.models import Run
from asyncclient.testing import FakeService, Fault
from asyncclient.watch import RunWatcher, _Pacer, _structure_run, _Tracker

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks

# --- pure parts -----------------------------------------------------------------------------------


def view(run_id: str, status: str, final: bool | None = None) -> dict[str, object]:
    """A run as the service sends it in a List runs answer (the tracker's input)."""
    raw: dict[str, object] = {"id": run_id, "status": status}
    if final is not None:
        raw["final"] = final
    return raw


def test_tracker_dedups_keeps_order_and_batches_by_fifty() -> None:
    tracker = _Tracker(unknown_after=3)
    ids = [f"j_{n}" for n in range(120)]
    assert tracker.add([*ids, "j_5", "j_0"]) == ids
    assert tracker.add(["j_3", "j_new"]) == ["j_new"]
    batches = tracker.batches(50)
    assert [len(b) for b in batches] == [50, 50, 21]
    assert [i for b in batches for i in b] == [*ids, "j_new"]


def test_tracker_reports_first_sight_and_changes_only() -> None:
    tracker = _Tracker(unknown_after=3)
    tracker.add(["j_a", "j_b"])
    first = tracker.record(["j_a", "j_b"], [view("j_b", "queued"), view("j_a", "queued")])
    assert [r["id"] for r in first] == ["j_a", "j_b"]  # batch order, not answer order
    assert tracker.record(["j_a", "j_b"], [view("j_a", "queued"), view("j_b", "queued")]) == []
    changed = tracker.record(["j_a", "j_b"], [view("j_a", "running"), view("j_b", "queued")])
    assert [(r["id"], r["status"]) for r in changed] == [("j_a", "running")]
    final = tracker.record(["j_a", "j_b"], [view("j_a", "passed", True), view("j_b", "queued")])
    assert [r["id"] for r in final] == ["j_a"]
    assert list(tracker.pending) == ["j_b"]
    # A late answer about a run that is no longer polled changes nothing.
    assert tracker.record(["j_a"], [view("j_a", "failed", True)]) == []
    assert tracker.view("j_a").status == "passed"


def test_tracker_unknown_after_consecutive_misses_only() -> None:
    tracker = _Tracker(unknown_after=3)
    tracker.add(["j_a", "j_gone"])
    tracker.record(["j_a", "j_gone"], [])
    tracker.record(["j_a", "j_gone"], [])
    tracker.record(["j_a", "j_gone"], [view("j_a", "queued")])  # j_a seen: its count resets
    assert list(tracker.unknown) == ["j_gone"]
    assert list(tracker.pending) == ["j_a"]
    tracker.record(["j_a"], [])
    tracker.record(["j_a"], [])
    assert list(tracker.unknown) == ["j_gone"]
    tracker.record(["j_a"], [])
    assert list(tracker.unknown) == ["j_gone", "j_a"]
    assert list(tracker.pending) == []


def test_tracker_unknown_status_is_not_final_unless_flagged() -> None:
    tracker = _Tracker(unknown_after=3)
    tracker.add(["j_a"])
    [paused] = tracker.record(["j_a"], [view("j_a", "paused")])
    assert tracker.as_run(paused).status == "paused"
    assert list(tracker.pending) == ["j_a"]
    [archived] = tracker.record(["j_a"], [view("j_a", "archived", True)])
    assert tracker.as_run(archived).is_final
    assert list(tracker.pending) == []
    # A final status word without the flag is final too; an unknown word is not.
    tracker.add(["j_b", "j_c"])
    tracker.record(["j_b", "j_c"], [view("j_b", "Canceled"), view("j_c", "SUCCESS")])
    assert list(tracker.pending) == []


def test_tracker_reads_a_status_sent_as_an_object() -> None:
    # An unhashable status cannot be remembered as a state: it is read each time, never refused.
    tracker = _Tracker(unknown_after=3)
    tracker.add(["j_a", "j_b"])
    raws = [{"id": "j_a", "status": {"name": "passed"}, "final": True}, view("j_b", "queued")]
    assert [raw["id"] for raw in tracker.record(["j_a", "j_b"], raws)] == ["j_a", "j_b"]
    assert list(tracker.pending) == ["j_b"]
    assert tracker.view("j_a").status == "{'name': 'passed'}"  # kept as text
    assert tracker.record(["j_b"], [{"id": "j_b", "status": ["odd"]}]) != []
    assert list(tracker.pending) == ["j_b"]


def test_tracker_builds_a_run_only_for_runs_that_changed() -> None:
    tracker = _Tracker(unknown_after=3)
    tracker.add(["j_a"])
    [first] = tracker.record(["j_a"], [{**view("j_a", "running"), "durationMs": 1000}])
    assert tracker.record(["j_a"], [{**view("j_a", "running"), "durationMs": 2000}]) == []
    # The kept view is the one of the last status change, still the service's JSON: no Run is
    # built until one is read, and then once.
    assert tracker.views["j_a"] is first
    run = tracker.as_run(first)
    assert run.duration_ms == 1000
    assert tracker.views["j_a"] is run
    assert tracker.view("j_a") is run
    # An event older than the latest view is built from its own JSON.
    [second] = tracker.record(["j_a"], [view("j_a", "passed", True)])
    assert tracker.as_run(first).status == "running"
    assert tracker.as_run(second).status == "passed"


def test_tracker_keeps_views_the_garbage_collector_never_walks() -> None:
    """A kept view with empty lists is held as a dict the collector does not track (what made
    a first sweep over 100,000 runs cost twice as much per run as one over 1,000); the Run
    built from it has its lists back, equal to the one built from the service's JSON."""
    tracker = _Tracker(unknown_after=3)
    tracker.add(["j_a", "j_b"])
    sent = {**view("j_a", "queued"), "requirements": [], "screenshots": [], "captures": None}
    fuller = {**view("j_b", "running"), "requirements": [{"id": "r1"}], "screenshots": []}
    events = tracker.record(["j_a", "j_b"], [dict(sent), dict(fuller)])
    assert gc.is_tracked(sent)  # as the JSON decoder made it
    assert not gc.is_tracked(tracker.views["j_a"])
    assert gc.is_tracked(tracker.views["j_b"])  # a list with items stays a list
    kept = tracker.views["j_b"]
    assert not isinstance(kept, Run)
    assert kept["requirements"] == [{"id": "r1"}]
    expected = _structure_run(sent)
    assert tracker.as_run(events[0]) == expected
    assert tracker.view("j_a").requirements == []
    assert tracker.view("j_a").screenshots == []
    assert tracker.view("j_b") == _structure_run(fuller)


def test_pacer_grows_while_nothing_changes_and_snaps_back() -> None:
    pacer = _Pacer(2.0, 10.0, 1.5, 0.0, random.Random(0))
    delays = [pacer.after_sweep(c) for c in (True, False, False, False, False, False, True)]
    assert delays == [2.0, 3.0, 4.5, 6.75, 10.0, 10.0, 2.0]
    assert [pacer.after_failure(n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 10.0]


def test_pacer_jitter_stays_within_twenty_percent_and_under_the_cap() -> None:
    pacer = _Pacer(3.0, 30.0, 1.5, 0.2, random.Random(7))
    delays = [pacer.after_sweep(True) for _ in range(500)]
    assert min(delays) >= 2.4
    assert max(delays) <= 3.6
    assert len(set(delays)) > 400  # a fleet does not poll in lockstep
    capped = _Pacer(30.0, 30.0, 1.5, 0.2, random.Random(7))
    assert max(capped.after_sweep(False) for _ in range(200)) == 30.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval": 0}, "interval must be above 0"),
        ({"interval": 5, "max_interval": 2}, "max_interval .2. must be at least interval"),
        ({"jitter": 1.0}, "jitter must be a fraction"),
        ({"growth": 0.5}, "growth must be a number of at least 1"),
        ({"timeout": -1}, "timeout must be above 0"),
        ({"unknown_after": 0}, "unknown_after must be a whole number of at least 1"),
        ({"concurrency": 0}, "concurrency must be"),
    ],
)
def test_watcher_refuses_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RunWatcher(None, ["j_1"], **kwargs)  # type: ignore[arg-type]


def test_watcher_refuses_bad_ids() -> None:
    with pytest.raises(ValidationError, match="t_1 is not a run id"):
        RunWatcher(None, ["j_1", "t_1"])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not one string"):
        RunWatcher(None, "j_1")  # type: ignore[arg-type]


# --- against the emulator -------------------------------------------------------------------------

KEY = "w-run"
SEED: dict[str, Any] = {
    "projects": [{"id": "p_w", "name": "Watch", "plan": "paid", "includedRuns": 100000}],
    "keys": [{"key": KEY, "capability": "run", "projects": ["p_w"]}],
    "tests": [
        {
            "id": "t_fast",
            "project": "p_w",
            "title": "Fast",
            "target": "web",
            "url": "https://shop.example",
            "outcome": "passed",
            "queuedSeconds": 2,
            "durationSeconds": 10,
        },
        {
            "id": "t_slow",
            "project": "p_w",
            "title": "Slow",
            "target": "web",
            "url": "https://shop.example",
            "outcome": "failed",
            "queuedSeconds": 2,
            "durationSeconds": 40,
        },
        {
            "id": "t_err",
            "project": "p_w",
            "title": "Error",
            "target": "web",
            "url": "https://shop.example",
            "outcome": "error",
            "queuedSeconds": 2,
            "durationSeconds": 5,
        },
        {
            "id": "t_spread",
            "project": "p_w",
            "title": "Spread",
            "target": "web",
            "url": "https://shop.example",
            "outcome": "passed",
            "queuedSeconds": 1,
            "durationSeconds": 30,
            "durationJitter": 0.9,
        },
    ],
}


async def block_forever(seconds: float) -> None:
    await asyncio.Event().wait()


@pytest.fixture
async def svc(dialect: str, network: Network) -> AsyncIterator[FakeService]:
    """The emulator in each wire dialect, and over HTTPS and a proxy (tests/conftest.py)."""
    emulator = FakeService(SEED, clock="manual", dialect=dialect, **network.service_options)
    async with network.serve(emulator) as service:
        yield service


@pytest.fixture
async def session(svc: FakeService) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(
        api_key=KEY, base_url=svc.url, backoff_base=0.001, backoff_max=0.01
    ) as s:
        yield s


@pytest.fixture
def manual(svc: FakeService) -> ManualTime:
    return ManualTime(svc)


def create(svc: FakeService, test_id: str, count: int) -> list[str]:
    return [run.id for run in svc.backend.run_store.create_runs(test_id, count)]


def list_requests(svc: FakeService) -> list[list[str]]:
    return [r.query["ids"].split(",") for r in svc.requests_for("list_runs")]


def emulator_status(svc: FakeService, run_id: str) -> str:
    run = svc.backend.runs[run_id]
    return run.status_at(svc.backend.now())


async def test_sweeps_batch_fifty_ids_and_skip_final_runs(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_spread", 120) + create(svc, "t_fast", 15)
    svc.reset_requests()
    marks: list[tuple[int, int]] = []  # (requests so far, runs pending) at each pause
    watcher = session.watch_runs(ids, **manual.options(interval=2.0))
    manual.on_sleep = lambda _: marks.append(
        (len(svc.requests_for("list_runs")), len(watcher.pending))
    )
    final_at: dict[str, int] = {}
    finals: dict[str, int] = {}
    async for run in watcher:
        if run.is_final:
            final_at[run.id] = len(svc.requests_for("list_runs"))
            finals[run.id] = finals.get(run.id, 0) + 1

    requests = list_requests(svc)
    assert max(len(batch) for batch in requests) == 50
    assert all(len(set(batch)) == len(batch) for batch in requests)
    for index, batch in enumerate(requests):
        assert not [i for i in batch if i in final_at and final_at[i] <= index]
    assert finals == dict.fromkeys(ids, 1)
    # Requests per sweep = ceil(unfinished / 50), the first sweep over all 135 runs.
    per_sweep = []
    before, pending = 0, len(ids)
    for done, left in [*marks, (len(requests), 0)]:
        per_sweep.append((done - before, math.ceil(pending / 50)))
        before, pending = done, left
    assert per_sweep[0] == (3, 3)
    assert all(got == expected for got, expected in per_sweep)
    assert svc.requests_for("get_run") == []
    assert watcher.sweeps == len(per_sweep)
    assert watcher.requests == len(requests)


async def test_each_run_yields_queued_running_final_once(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_fast", 2) + create(svc, "t_err", 1)
    seen: dict[str, list[str]] = {run_id: [] for run_id in ids}
    async for run in session.watch_runs(ids, **manual.options()):
        seen[run.id].append(str(run.status))
    assert seen == {
        ids[0]: ["queued", "running", "passed"],
        ids[1]: ["queued", "running", "passed"],
        ids[2]: ["queued", "running", "error"],
    }
    assert manual.now == 12.0  # queued 2 s + 10 s running, polled every second


async def test_each_answer_is_taken_in_on_arrival_and_events_keep_batch_order(
    svc: FakeService, session: AsyncSession, manual: ManualTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = create(svc, "t_fast", 120)
    watcher = session.watch_runs(ids, **manual.options())
    real = session.list_run_views
    others_taken_in = False

    async def first_answer_last(batch: list[str], *, retries: int | None = None) -> Any:
        nonlocal others_taken_in
        answer = await real(batch, retries=retries)
        if batch[0] == ids[0]:
            # The other two answers are recorded while this one is still on its way: a sweep
            # does not hold every batch's decoded JSON until the last answer is in. Waited for
            # as long as they take (a proxy adds a real hop); a sweep that held them back
            # would never get here, and the bound below ends the test instead.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(recorded_70.wait(), timeout=30)
                others_taken_in = len(watcher.runs) == 70
        return answer

    recorded_70 = asyncio.Event()
    record = watcher._tracker.record

    def recording(batch: Any, runs: Any) -> Any:
        changed = record(batch, runs)
        if len(watcher.runs) == 70:
            recorded_70.set()
        return changed

    monkeypatch.setattr(watcher._tracker, "record", recording)

    monkeypatch.setattr(session, "list_run_views", first_answer_last)
    first_sweep = [await anext(watcher) for _ in range(120)]
    await watcher.aclose()
    assert others_taken_in
    assert [run.id for run in first_sweep] == ids  # still in the order the ids were given
    assert watcher.requests == 3


async def test_final_view_carries_the_results(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    (run_id,) = create(svc, "t_slow", 1)
    last: Run | None = None
    async for run in session.watch_runs([run_id], **manual.options(interval=5.0)):
        last = run
    assert last is not None
    assert last.is_final
    assert last.status == "failed"
    assert last.requirements
    assert last.link
    assert last.finished_at is not None


async def test_the_interval_grows_while_nothing_changes_and_snaps_back(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_slow", 3)
    options = manual.options(interval=1.0, growth=1.5, max_interval=10.0)
    async for _ in session.watch_runs(ids, **options):
        pass
    # t=0 queued (new: 1 s), t=1 same (1.5 s), t=2.5 running (back to 1 s), then growing.
    assert manual.sleeps[:8] == [1.0, 1.5, 1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375]
    assert max(manual.sleeps) == 10.0
    assert manual.now >= 42.0


async def test_unknown_ids_are_reported_after_three_sweeps(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    (known,) = create(svc, "t_fast", 1)
    events: list[str] = []
    async with session.watch_runs([known, "j_nosuchrun"], **manual.options()) as watcher:
        async for run in watcher:
            events.append(run.id)
    assert set(events) == {known}
    assert watcher.unknown == ("j_nosuchrun",)
    assert sum("j_nosuchrun" in batch for batch in list_requests(svc)) == 3

    with pytest.raises(UnknownRunsError) as caught:
        await session.wait_for_runs(["j_nosuchrun", known], **manual.options())
    assert caught.value.run_ids == ("j_nosuchrun",)
    assert [run.id for run in caught.value.runs] == [known]
    assert "j_nosuchrun" in str(caught.value)


async def test_429_pauses_the_whole_watcher_for_exactly_retry_after(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_fast", 120)
    svc.reset_requests()
    svc.inject("list_runs", Fault("429", retry_after=7))
    paused_at: list[int] = []
    manual.on_sleep = lambda _: paused_at.append(len(svc.requests_for("list_runs")))
    runs = await session.wait_for_runs(ids, **manual.options(interval=3.0))
    assert [run.status for run in runs] == ["passed"] * 120
    assert manual.sleeps[0] == 7.0
    statuses = [r.status for r in svc.requests_for("list_runs")]
    assert statuses[:3].count(429) == 1
    assert paused_at[0] == 3
    # After the pause, the sweep asks again for every run, the two answered batches too.
    assert statuses[3:6] == [200, 200, 200]
    assert manual.sleeps[1:3] == [3.0, 3.0]


async def test_a_503_with_retry_after_pauses_the_whole_watcher_for_it(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_fast", 120)
    svc.reset_requests()
    svc.inject("list_runs", Fault("503", retry_after=7))
    paused_at: list[int] = []
    manual.on_sleep = lambda _: paused_at.append(len(svc.requests_for("list_runs")))
    runs = await session.wait_for_runs(ids, **manual.options(interval=3.0))
    assert [run.status for run in runs] == ["passed"] * 120
    # Not the doubling pause of a failed sweep (3 s): the 7 s the service asked for.
    assert manual.sleeps[0] == 7.0
    assert paused_at[0] == 3
    statuses = [r.status for r in svc.requests_for("list_runs")]
    assert statuses[:3].count(503) == 1
    assert statuses[3:6] == [200, 200, 200]
    assert manual.sleeps[1:3] == [3.0, 3.0]


@pytest.mark.parametrize(("kind", "max_retry_after"), [("429", 60.0), ("429", 5.0), ("503", 5.0)])
async def test_a_huge_retry_after_is_capped_by_the_sessions_max_retry_after(
    svc: FakeService, manual: ManualTime, kind: str, max_retry_after: float
) -> None:
    ids = create(svc, "t_fast", 3)
    svc.inject("list_runs", Fault(kind, retry_after=86400))
    async with AsyncSession(KEY, svc.url, max_retry_after=max_retry_after) as capped:
        assert capped.max_retry_after == max_retry_after
        runs = await capped.wait_for_runs(ids, **manual.options(interval=1.0))
    assert [run.status for run in runs] == ["passed"] * 3
    assert manual.sleeps[0] == max_retry_after
    assert max(manual.sleeps) == max_retry_after


@pytest.mark.parametrize("kind", ["503", "500", "drop"])
async def test_transient_faults_are_retried_with_backoff(
    svc: FakeService, session: AsyncSession, manual: ManualTime, kind: str
) -> None:
    ids = create(svc, "t_slow", 3)
    svc.reset_requests()
    svc.inject("list_runs", Fault(kind, times=4))
    runs = await session.wait_for_runs(ids, **manual.options(interval=1.0))
    assert [run.status for run in runs] == ["failed"] * 3
    assert len([r for r in svc.requests_for("list_runs") if r.status != 200]) == 4
    # Doubling pauses after each failed sweep, then back to the interval. aiohttp itself sends
    # a GET again, once, when a reused keep-alive connection drops, so 4 drops may fail only
    # 2 or 3 sweeps.
    failed = 4 if kind != "drop" else manual.sleeps.index(1.0, 1)
    assert manual.sleeps[: failed + 1] == [2.0**n for n in range(failed)] + [1.0]


async def test_gives_up_after_max_failed_sweeps_in_a_row(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_fast", 3)
    svc.reset_requests()
    svc.inject("list_runs", Fault("503", times=3))
    with pytest.raises(ServerError):
        await session.wait_for_runs(ids, **manual.options(max_failed_sweeps=3))
    assert len(svc.requests_for("list_runs")) == 3
    assert manual.sleeps == [1.0, 2.0]

    svc.inject("list_runs", Fault("drop", times=4))
    with pytest.raises(TransportError):
        await session.wait_for_runs(ids, **manual.options(max_failed_sweeps=2))
    assert 2 <= len(svc.requests_for("list_runs")) - 3 <= 4  # see above: aiohttp may resend


async def test_an_authentication_error_ends_the_watch_at_once(
    svc: FakeService, manual: ManualTime
) -> None:
    ids = create(svc, "t_fast", 2)
    svc.reset_requests()
    async with AsyncSession(api_key="not-a-key", base_url=svc.url) as bad:
        with pytest.raises(UnauthenticatedError):
            await bad.wait_for_runs(ids, **manual.options())
    assert len(svc.requests) == 1
    assert manual.sleeps == []


async def test_timeout_raises_with_the_latest_views_and_leaves_runs_going(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_slow", 2) + create(svc, "t_fast", 1)
    with pytest.raises(WatchTimeoutError) as caught:
        await session.wait_for_runs(ids, **manual.options(interval=4.0), timeout=20)
    assert [(r.id, r.status) for r in caught.value.runs] == [
        (ids[0], "running"),
        (ids[1], "running"),
        (ids[2], "passed"),
    ]
    assert manual.now == 20.0  # slept to the deadline, swept once more, then gave up
    assert svc.requests_for("stop_run") == []
    assert [emulator_status(svc, i) for i in ids[:2]] == ["running", "running"]


async def test_timeout_can_stop_the_runs_still_going(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_slow", 60) + create(svc, "t_fast", 1)
    watcher = session.watch_runs(ids, **manual.options(), timeout=15, stop_on_timeout=True)
    with pytest.raises(WatchTimeoutError) as caught:
        async for _ in watcher:
            pass
    assert len(svc.requests_for("stop_run")) == 60
    assert watcher.stopped == tuple(ids[:60])
    assert [emulator_status(svc, i) for i in ids] == ["cancelled"] * 60 + ["passed"]
    assert [r.status_kind for r in caught.value.runs] == ["cancelled"] * 60 + ["passed"]
    assert "60 run(s) not final after 15 s" in str(caught.value)


async def test_a_run_that_ended_before_its_stop_is_fine(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    ids = create(svc, "t_slow", 2)
    key = svc.backend.authenticate(f"Bearer {KEY}")

    class EndsFirst:
        """The real session, except that the first run ends just before it is stopped."""

        def __getattr__(self, name: str) -> Any:
            return getattr(session, name)

        async def stop_run(self, run_id: str) -> str:
            if run_id == ids[0]:
                svc.backend.run_store.stop_run(key, run_id)
            return await session.stop_run(run_id)

    watcher = RunWatcher(
        EndsFirst(),  # type: ignore[arg-type]
        ids,
        **manual.options(),
        timeout=5,
        stop_on_timeout=True,
    )
    with pytest.raises(WatchTimeoutError):
        async for _ in watcher:
            pass
    assert sorted(r.status for r in svc.requests_for("stop_run")) == [200, 409]
    assert watcher.stopped == (ids[1],)
    assert watcher.stop_errors == {}


async def test_cancelling_can_stop_the_runs_still_going(
    svc: FakeService, session: AsyncSession
) -> None:
    ids = create(svc, "t_slow", 3)
    started = asyncio.Event()

    async def consume(stop: bool) -> None:
        async for _ in session.watch_runs(ids, sleep=block_forever, stop_on_cancel=stop):
            started.set()

    task = asyncio.create_task(consume(False))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert svc.requests_for("stop_run") == []

    started.clear()
    task = asyncio.create_task(consume(True))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [emulator_status(svc, i) for i in ids] == ["cancelled"] * 3


async def _iterating(watcher: RunWatcher) -> asyncio.Task[None]:
    """A task iterating `watcher`, once it has handed out its first run."""
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in watcher:
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    return task


@pytest.mark.parametrize("elsewhere", [0, 1], ids=["all-by-it", "one-stopped-elsewhere"])
async def test_cancelling_reads_the_stopped_runs_again(
    svc: FakeService, session: AsyncSession, elsewhere: int
) -> None:
    """A cancel stops the runs still going and reads them again; one another caller stopped
    (the fleet, for a superseded job) is read and not stopped again."""
    ids = create(svc, "t_slow", 3)
    watcher = session.watch_runs(ids, sleep=block_forever, stop_on_cancel=True)
    task = await _iterating(watcher)
    if elsewhere:
        await session.stop_run(ids[0])
        watcher.stopped_elsewhere([ids[0], "j_000000000000"])
    assert watcher.still_going == tuple(ids[elsewhere:])
    svc.reset_requests()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # What the service now says, not what the last sweep before the interrupt saw.
    assert [watcher.runs[i].status_kind for i in ids] == ["cancelled"] * 3
    assert all(watcher.runs[i].is_final for i in ids)
    stops = sorted(r.path for r in svc.requests_for("stop_run"))
    assert stops == sorted(f"/api/v1/runs/{i}/stop" for i in ids[elsewhere:])
    assert watcher.stopped == tuple(ids[elsewhere:])
    assert (watcher.stop_errors, watcher.still_going) == ({}, ())


async def test_runs_can_be_added_to_a_running_watcher(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    first = create(svc, "t_fast", 1)
    later = create(svc, "t_err", 2)
    seen: list[tuple[str, str]] = []
    watcher = session.watch_runs(first, **manual.options(interval=5.0))
    async for run in watcher:
        seen.append((run.id, str(run.status)))
        if len(seen) == 1:
            watcher.add([*later, first[0]])
    assert [s for i, s in seen if i == first[0]] == ["queued", "running", "passed"]
    for run_id in later:
        assert [s for i, s in seen if i == run_id][-1] == "error"
    assert watcher.run_ids == (*first, *later)
    # Every request carried the later runs after they were added; none had a run twice.
    assert all(len(set(batch)) == len(batch) for batch in list_requests(svc))
    with pytest.raises(RuntimeError, match="has ended"):
        watcher.add(create(svc, "t_fast", 1))


async def test_closing_ends_a_waiting_iteration(svc: FakeService, session: AsyncSession) -> None:
    ids = create(svc, "t_slow", 2)
    events: list[Run] = []
    both_seen = asyncio.Event()
    watcher = session.watch_runs(ids, sleep=block_forever)

    async def consume() -> None:
        async for run in watcher:
            events.append(run)
            if len(events) == 2:
                both_seen.set()

    task = asyncio.create_task(consume())
    await both_seen.wait()
    await watcher.aclose()
    await asyncio.wait_for(task, 1.0)
    assert watcher.closed
    assert [r.status for r in events] == ["queued", "queued"]
    assert len(svc.requests_for("list_runs")) == 1
    assert svc.requests_for("stop_run") == []
    with pytest.raises(RuntimeError, match="closed"):
        watcher.add(["j_other"])


async def test_follow_keeps_waiting_for_added_runs_until_closed(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    first = create(svc, "t_err", 1)
    finals: list[str] = []
    final_seen = asyncio.Event()
    async with session.watch_runs(first, **manual.options(), follow=True) as watcher:

        async def feed() -> None:
            await final_seen.wait()
            final_seen.clear()
            watcher.add(create(svc, "t_fast", 1))
            await final_seen.wait()
            await watcher.aclose()

        feeder = asyncio.create_task(feed())
        async for run in watcher:
            if run.is_final:
                finals.append(str(run.status))
                final_seen.set()
        await feeder
    assert finals == ["error", "passed"]


async def test_wait_for_runs_returns_final_runs_in_the_order_asked(
    svc: FakeService, session: AsyncSession, manual: ManualTime
) -> None:
    slow, fast, err = create(svc, "t_slow", 1) + create(svc, "t_fast", 1) + create(svc, "t_err", 1)
    runs = await session.wait_for_runs([slow, fast, err, fast], **manual.options())
    assert [(r.id, str(r.status)) for r in runs] == [
        (slow, "failed"),
        (fast, "passed"),
        (err, "error"),
        (fast, "passed"),
    ]
    assert all(r.is_final for r in runs)
    assert await session.wait_for_runs([]) == []


async def test_waiting_builds_one_run_per_run_however_often_it_changed(
    svc: FakeService, session: AsyncSession, manual: ManualTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each run goes queued -> running -> final, seen by several sweeps; a first sweep builds no
    # Run at all, and waiting builds one per run: its final view.

    from asyncclient import watch

    built: list[str] = []
    real = watch._structure_run

    def counting(raw: Any) -> Any:
        if raw["id"] != "j_":  # the few (status, final) pairs read once each are not runs
            built.append(raw["id"])
        return real(raw)

    monkeypatch.setattr(watch, "_structure_run", counting)
    ids = create(svc, "t_spread", 120)
    watcher = session.watch_runs(ids, **manual.options(interval=1.0))
    runs = await watcher.wait()
    assert watcher.sweeps > 3
    assert sorted(built) == sorted(ids)  # one Run each, the final one
    assert all(run.is_final for run in runs.values())
    built.clear()
    finished = await session.wait_for_runs(ids, **manual.options(interval=1.0))
    assert [run.id for run in finished] == ids
    assert sorted(built) == sorted(ids)
