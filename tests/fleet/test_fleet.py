"""The fleet's ledger against a real Redis server (tests/redis_support.py) and the emulator:
jobs hold their runs, release them however they end, dead jobs are reaped exactly once,
older commits of a ref are superseded, and nothing the ledger holds is acted on unchecked."""

import asyncio
import contextlib
import json
import time
import unicodedata
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_support import RedisServer

from asyncclient import AsyncSession
from asyncclient._core._checks import is_id
from asyncclient._core._untrusted import line
from asyncclient.fleet import Fleet, FleetError, Identity, identity_from_ci
from asyncclient.fleet._common import redact_url
from asyncclient.testing import FakeService, NetworkConditions


def _job(name: str, ref: str = "mr/1", commit: str = "aaaa1111", **kw: object) -> Identity:
    return Identity(job_id=name, ref=ref, commit=commit, supersede=True, **kw)  # type: ignore[arg-type]


async def _kill_lease(fleet: Fleet, job_id: str) -> None:
    """The job is dead: its lease is gone (as when it expires), without waiting for a clock."""
    await fleet._redis.delete(f"{fleet.prefix}lease:{job_id}")


async def _started(session: AsyncSession, *tests: str) -> list[str]:
    return [(await session.run_test(t)).run_id for t in tests]


def _stopped(service: FakeService, run_id: str) -> bool:
    """Whether the emulator stopped the run (each dialect names the status its own way)."""
    run = service.backend.run_store.find_run(run_id)
    assert run is not None
    return run.stopped_at is not None


async def test_a_job_holds_its_runs_and_releases_them_when_it_ends(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    async with Fleet(redis.url) as fleet:
        with service.hold("t_search", "t_onboarding", state="running"):
            runs = await _started(session, "t_search", "t_onboarding")
            async with fleet.job(session, _job("job-1")) as job:
                job.hold(runs)
                await job.flush()
                (seen,) = await fleet.status()
                assert seen.job_id == "job-1"
                assert seen.runs == tuple(sorted(runs))
                assert seen.ref == "mr/1"
                assert seen.commit == "aaaa1111"
                assert seen.lease_left is not None
                assert 0 < seen.lease_left <= 30
            # Ended: nothing of it is held, so nobody ever stops its runs.
            assert await fleet.status() == []
            assert await fleet.reap(session) == []
            assert not any(_stopped(service, r) for r in runs)


async def test_a_job_cancelled_still_releases_its_runs(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    async with Fleet(redis.url) as fleet:
        entered = asyncio.Event()

        async def job_body() -> None:
            async with fleet.job(session, _job("job-c")) as job:
                job.hold(["j_aaaaaaaaaaaa"])
                await job.flush()
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(job_body())
        await entered.wait()
        assert [j.job_id for j in await fleet.status()] == ["job-c"]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await fleet.status() == []


async def test_a_dead_jobs_runs_are_stopped_exactly_once_by_many_reapers(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    with service.hold("t_search", "t_onboarding", state="running"):
        runs = await _started(session, "t_search", "t_onboarding")
        async with Fleet(redis.url, lease=5) as fleet:
            job = fleet.job(session, _job("dead-job"))
            await job.__aenter__()
            job.hold(runs)
            await job.flush()
            # The job dies without a word: its beat stops, its lease lapses.
            assert job._task is not None
            job._closing = True
            job._wake.set()
            await job._task
            await _kill_lease(fleet, "dead-job")
            service.reset_requests()
            reapers = [Fleet(redis.url) for _ in range(8)]
            for reaper in reapers:
                await reaper.connect()
            try:
                results = await asyncio.gather(*(r.reap(session) for r in reapers))
            finally:
                for reaper in reapers:
                    await reaper.close()
        claimed = [reaped for result in results for reaped in result]
        assert len(claimed) == 1  # one reaper of eight got it
        assert claimed[0].job_id == "dead-job"
        assert sorted(claimed[0].stopped) == sorted(runs)
        assert len(service.requests_for("stop_run")) == 2  # each run stopped once
        assert all(_stopped(service, r) for r in runs)


async def test_a_live_job_is_never_reaped(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    async with Fleet(redis.url) as fleet, fleet.job(session, _job("alive")) as job:
        job.hold(["j_aaaaaaaaaaaa"])
        await job.flush()
        service.reset_requests()
        assert await fleet.reap(session) == []
        assert service.requests_for("stop_run") == []


async def test_a_newer_commit_of_the_ref_supersedes_the_older_jobs_runs(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    with service.hold("t_search", "t_onboarding", state="running"):
        async with Fleet(redis.url) as fleet:
            old_runs = await _started(session, "t_search")
            async with fleet.job(session, _job("old", commit="aaaa1111")) as old:
                old.hold(old_runs)
                await old.flush()
                new_runs = await _started(session, "t_onboarding")
                async with fleet.job(session, _job("new", commit="bbbb2222")) as new:
                    assert new.superseded_by is None
                    assert new.marked == ("old",)
                    new.hold(new_runs)
                    await asyncio.wait_for(old.ended.wait(), 30)
                    assert old.superseded_by == "bbbb2222"
                    # The old job stops its own runs at once, before `ended` says so; the
                    # new one runs on.
                    assert old.stopped == tuple(old_runs)
                    assert _stopped(service, old_runs[0])
                    assert not _stopped(service, new_runs[0])
                    assert not new.ended.is_set()


async def test_a_superseded_job_stops_each_run_it_holds_once_and_none_it_saw_end(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    with service.hold("t_search", "t_onboarding", state="running"):
        async with Fleet(redis.url) as fleet:
            ended, unseen, *going = await _started(
                session, "t_search", "t_onboarding", "t_search", "t_onboarding"
            )
            async with fleet.job(session, _job("old", commit="aaaa1111")) as old:
                old.hold([ended, unseen, *going])
                old.finished([ended, "j_000000000000"])  # a run it does not hold: ignored
                await old.flush()
                await session.stop_run(unseen)  # it ends unseen by the job
                service.reset_requests()
                async with fleet.job(session, _job("new", commit="bbbb2222")):
                    await asyncio.wait_for(old.ended.wait(), 30)
    assert old.stopped == tuple(sorted(going))
    assert sorted(old.not_going) == sorted([ended, unseen, *going])
    stops = [r.path for r in service.requests_for("stop_run")]
    assert sorted(stops) == sorted(f"/api/v1/runs/{r}/stop" for r in [unseen, *going])
    assert not _stopped(service, ended)


async def test_a_job_whose_beat_has_ended_is_still_told_it_was_superseded(
    redis: RedisServer, session: AsyncSession
) -> None:
    """With no beat to stop its runs, `ended` is set at once: the follower's own cancel
    stops them (nothing is left running because nobody stops it)."""
    async with (
        Fleet(redis.url) as fleet,
        fleet.job(session, _job("old", commit="aaaa1111")) as old,
    ):
        assert old._task is not None
        old._task.cancel()
        await asyncio.gather(old._task, return_exceptions=True)
        old.hold(["j_aaaaaaaaaaaa"])
        async with fleet.job(session, _job("new", commit="bbbb2222")):
            assert await old.flush()
            assert old.superseded_by == "bbbb2222"
            assert old.ended.is_set()
            assert old.stopped == ()
            assert old.not_going == ()


async def test_a_job_for_an_older_commit_is_superseded_before_it_starts(
    redis: RedisServer, session: AsyncSession
) -> None:
    async with Fleet(redis.url) as fleet:
        # Ordered by the CI's run numbers: run 7 is newer than run 5 whatever starts first.
        newer = _job("run-7", commit="bbbb2222", order=7, order_kind="github-run")
        older = _job("run-5", commit="aaaa1111", order=5, order_kind="github-run")
        async with fleet.job(session, newer) as first:
            async with fleet.job(session, older) as late:
                assert late.superseded_by == "bbbb2222"
                assert late.ended.is_set()
            assert first.superseded_by is None
            assert [j.job_id for j in await fleet.status()] == ["run-7"]


@pytest.mark.parametrize(
    ("second", "superseded"),
    [
        (_job("same-commit", commit="aaaa1111"), False),  # a matrix leg, a retry
        (_job("other-ref", ref="mr/2", commit="bbbb2222"), False),
        (Identity(job_id="main-job", ref="mr/1", commit="bbbb2222", supersede=False), False),
        (_job("newer", commit="bbbb2222"), True),
    ],
)
async def test_only_a_newer_commit_of_the_same_ref_that_asks_supersedes(
    redis: RedisServer, session: AsyncSession, second: Identity, superseded: bool
) -> None:
    async with (
        Fleet(redis.url) as fleet,
        fleet.job(session, _job("first")) as first,
        fleet.job(session, second),
    ):
        await first.flush()
        assert (first.superseded_by is not None) == superseded


async def test_what_a_hostile_ledger_holds_is_never_stopped_unless_it_is_a_run_id(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    with service.hold("t_search", state="running"):
        (run,) = await _started(session, "t_search")
        async with Fleet(redis.url) as fleet:
            r, p = fleet._redis, fleet.prefix
            await r.sadd(p + "jobs", "planted")
            await r.hset(p + "job:planted", mapping={"ref": "x", "commit": "y"})
            await r.sadd(p + "job:planted:runs", run, "../../admin", "j_$(reboot)", "p_demo")
            service.reset_requests()
            (reaped,) = await fleet.reap(session)
    assert reaped.stopped == (run,)
    assert [r.path for r in service.requests_for("stop_run")] == [f"/api/v1/runs/{run}/stop"]


async def test_an_unreachable_ledger_is_one_line_without_the_password(
    redis: RedisServer,
) -> None:
    closed = f"redis://:hunter2secret@127.0.0.1:{redis.port + 1 if redis.port < 65535 else 1}/0"
    with pytest.raises(FleetError) as caught:
        async with Fleet(closed):
            pass
    text = str(caught.value)
    assert "hunter2secret" not in text
    assert "***@" in text
    assert "\n" not in text
    assert "hunter2secret" not in repr(Fleet(closed))
    assert redact_url("redis://user:pw@h:1/0") == "redis://***@h:1/0"


def test_bad_settings_are_refused_before_any_connection() -> None:
    with pytest.raises(ValueError, match="not a Redis URL"):
        Fleet("http://127.0.0.1:6379")
    with pytest.raises(ValueError, match="2 to 3600 seconds"):
        Fleet("redis://127.0.0.1:6379/0", lease=0.5)


@pytest.mark.parametrize(
    ("environ", "ref", "supersede", "priority", "order"),
    [
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_HEAD_REF":
             "feature/x", "GITHUB_SHA": "ab12cd34", "GITHUB_RUN_NUMBER": "41",
             "GITHUB_RUN_ID": "9", "GITHUB_JOB": "test"},
            "pr/feature/x", True, "pr", 41,
        ),
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_REF_NAME": "main",
             "GITHUB_SHA": "ab12cd34", "GITHUB_RUN_NUMBER": "42"},
            "main", False, "main", 42,
        ),
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_REF_NAME": "v1.0",
             "GITHUB_REF_TYPE": "tag", "GITHUB_SHA": "ab12cd34"},
            "v1.0", False, "release", None,
        ),
        (
            {"GITLAB_CI": "true", "CI_MERGE_REQUEST_IID": "17", "CI_COMMIT_SHA": "ab12cd34",
             "CI_PIPELINE_IID": "300", "CI_JOB_ID": "5"},
            "mr/17", True, "pr", 300,
        ),
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push",
             "GITHUB_REF_NAME": "main; rm -rf /", "GITHUB_SHA": "not a commit!"},
            None, False, "main", None,
        ),
    ],
)  # fmt: skip
def test_a_jobs_identity_comes_from_the_cis_variables(
    environ: dict[str, str], ref: str | None, supersede: bool, priority: str, order: int | None
) -> None:
    ident = identity_from_ci(environ)
    assert ident.ref == ref
    assert ident.supersede is supersede
    assert ident.priority == priority
    assert ident.order == order
    assert ident.commit in ("ab12cd34", None)
    assert identity_from_ci({}).ref is None


# --- the governor: device slots shared by the fleet, a fair queue by priority class --------------


async def _queue(fleet: Fleet) -> list[str]:
    return [t.decode() for t in await fleet._redis.zrange(fleet.prefix + "queue", 0, -1)]


async def _in_flight(fleet: Fleet) -> dict[str, int]:
    held = await fleet._redis.hgetall(fleet.prefix + "inflight")
    return {k.decode(): int(v) for k, v in held.items()}


async def _waiting(fleet: Fleet, ticket_job: str) -> None:
    """Until `ticket_job` has a ticket in the queue (its start is waiting)."""
    async with asyncio.timeout(30):
        while not any(t.startswith(ticket_job + "|") for t in await _queue(fleet)):  # noqa: ASYNC110 (Redis)
            await asyncio.sleep(0.01)


async def test_a_start_waits_for_a_free_slot_and_gets_the_first_one_given_back(
    redis: RedisServer, session: AsyncSession
) -> None:
    async with (
        Fleet(redis.url, max_runs=2) as fleet,
        fleet.job(session, _job("a", ref="main")) as a,
        fleet.job(session, _job("b", ref="main")) as b,
    ):
        await a.acquire(2)
        places: list[tuple[int, int]] = []
        waiting = asyncio.create_task(b.acquire(1, on_wait=lambda *p: places.append(p)))
        await _waiting(fleet, "b")
        assert not waiting.done()
        assert await _in_flight(fleet) == {"a": 2}
        a.free(1)
        await asyncio.wait_for(waiting, 30)
        assert await _in_flight(fleet) == {"a": 1, "b": 1}
        assert places[0] == (0, 2)  # next in line, 2 of 2 in flight
    # Ended: nothing is held any more.
    async with Fleet(redis.url) as fleet:
        assert await _in_flight(fleet) == {}


async def test_main_goes_before_a_pull_request_unless_the_pull_request_waited_longer(
    redis: RedisServer, session: AsyncSession
) -> None:
    async with (
        Fleet(redis.url, max_runs=1) as fleet,
        fleet.job(session, Identity(job_id="holder", priority="pr")) as holder,
        fleet.job(session, Identity(job_id="pr", priority="pr")) as pr,
        fleet.job(session, Identity(job_id="main", priority="main")) as main,
    ):
        await holder.acquire(1)
        pr_start = asyncio.create_task(pr.acquire(1))
        await _waiting(fleet, "pr")
        main_start = asyncio.create_task(main.acquire(1))
        await _waiting(fleet, "main")
        # main came later but its class has a 10-minute head start: it is first in line.
        assert [t.split("|")[0] for t in await _queue(fleet)] == ["main", "pr"]
        holder.free(1)
        await asyncio.wait_for(main_start, 30)
        assert not pr_start.done()
        # The pull request has now waited (as if) 11 minutes: it ages past a new main start.
        (ticket,) = await _queue(fleet)
        score = await fleet._redis.zscore(fleet.prefix + "queue", ticket)
        await fleet._redis.zadd(fleet.prefix + "queue", {ticket: score - 660_000})
        again = asyncio.create_task(main.acquire(1))
        await _waiting(fleet, "main")
        assert [t.split("|")[0] for t in await _queue(fleet)] == ["pr", "main"]
        main.free(1)
        await asyncio.wait_for(pr_start, 30)
        assert not again.done()
        again.cancel()


async def test_a_dead_jobs_slots_and_place_in_line_are_given_up(
    redis: RedisServer, session: AsyncSession
) -> None:
    async with Fleet(redis.url, max_runs=1) as fleet:
        dead = fleet.job(session, Identity(job_id="dead"))
        await dead.__aenter__()
        await dead.acquire(1)
        dead._closing = True  # it dies holding its slot
        dead._wake.set()
        assert dead._task is not None
        await dead._task
        async with fleet.job(session, Identity(job_id="alive")) as alive:
            start = asyncio.create_task(alive.acquire(1))
            await _waiting(fleet, "alive")
            await _kill_lease(fleet, "dead")
            await asyncio.wait_for(start, 30)
            assert await _in_flight(fleet) == {"alive": 1}


async def test_a_governed_project_start_is_charged_each_run_it_began(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.fleet import GovernedSession

    async with (
        Fleet(redis.url, max_runs=10) as fleet,
        fleet.job(session, Identity(job_id="p")) as job,
    ):
        governed = GovernedSession(session, job)
        with service.hold("t_search", "t_onboarding", state="queued"):
            result = await governed.run_project("p_demo")
            await job.flush()
            assert len(result.started) >= 2
            assert await _in_flight(fleet) == {"p": len(result.started)}
            # Everything else is the session's own.
            assert (await governed.get_run(result.started[0].run_id)).id


# --- one sweep for the fleet ----------------------------------------------------------------------


async def test_a_second_job_reads_the_runs_the_first_polled_without_asking_the_service(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.fleet._views import SharedViews

    with service.hold("t_search", "t_onboarding", state="running"):
        runs = await _started(session, "t_search", "t_onboarding")
        async with (
            Fleet(redis.url) as fleet,
            SharedViews(session, fleet, "job-1", view_seconds=120) as first,
            SharedViews(session, fleet, "job-2", view_seconds=120) as second,
        ):
            service.reset_requests()
            views = await first.list_run_views(runs)
            assert [v["id"] for v in views] == runs
            assert len(service.requests_for("list_runs")) == 1
            shared = await second.list_run_views(runs)
            assert shared == views
            assert len(service.requests_for("list_runs")) == 1  # nothing more asked
            assert (second.requests, second.shared) == (0, 2)


async def test_a_verdict_is_taken_from_the_fleet_only_signed_with_the_keys_secret(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A writer to the ledger could publish 'passed' for a failing run: a verdict is taken
    from the fleet only when signed with the secret the API key gives (key_digest), so one
    unsigned or signed with another key is read from the service; one a job of the same key
    published is read from the fleet, with no request."""
    from asyncclient.fleet._views import SharedViews, _signature

    with service.hold("t_search", state="running"):
        (run,) = await _started(session, "t_search")
        async with Fleet(redis.url) as fleet:
            now = int(time.time() * 1000)  # fresh: only the verdict's signature is judged
            verdict = {"id": run, "status": "passed", "testId": "t_search"}
            other_key = AsyncSession("another-key-0f9e8d7c", service.url).key_digest("x")
            for sig in (None, _signature(other_key, now, verdict), "0" * 64):
                forged = {"at": now, "view": verdict, **({"sig": sig} if sig else {})}
                key = f"{fleet.prefix}view:{run}"
                await fleet._redis.set(key, json.dumps(forged), px=60_000)
                service.reset_requests()
                async with SharedViews(session, fleet, "job-1") as views:
                    (view,) = await views.list_run_views([run])
                assert view["status"] in ("queued", "running")  # as the service has it
                assert len(service.requests_for("list_runs")) == 1
    (run,) = await _started(session, "t_onboarding")
    service.advance(3600)
    async with (
        Fleet(redis.url) as fleet,
        SharedViews(session, fleet, "job-1", view_seconds=120) as first,
        SharedViews(session, fleet, "job-2", view_seconds=120) as second,
    ):
        (final,) = await first.list_run_views([run])
        assert final["status"] not in ("queued", "running")
        service.reset_requests()
        assert await second.list_run_views([run]) == [final]
        assert service.requests_for("list_runs") == []


async def test_the_poller_polls_for_the_others_and_a_new_one_takes_over_when_it_is_gone(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.fleet._views import SharedViews

    with service.hold("t_search", "t_onboarding", state="running"):
        mine, theirs = await _started(session, "t_search", "t_onboarding")
        async with Fleet(redis.url) as fleet:
            poller = SharedViews(session, fleet, "job-1", view_seconds=120)
            other = SharedViews(session, fleet, "job-2", view_seconds=120)
            await other.list_run_views([theirs])  # job-2 wants its run (and is not the poller)
            await fleet._redis.delete(f"{fleet.prefix}view:{theirs}")  # its view aged out
            await fleet._redis.delete(f"{fleet.prefix}poller")
            await fleet._redis.set(f"{fleet.prefix}poller", "job-1")  # job-1 polls
            await poller.list_run_views([mine])  # and polls for job-2 too
            service.reset_requests()
            (view,) = await other.list_run_views([theirs])
            assert view["id"] == theirs
            assert service.requests_for("list_runs") == []
            # The poller is gone: its lease lapses and the next job to sweep takes it.
            await fleet._redis.delete(f"{fleet.prefix}poller")
            await other.list_run_views([theirs])
            assert await fleet._redis.get(f"{fleet.prefix}poller") == b"job-2"
            # A job that ends hands the lease back at once; one that does not hold it, never.
            await poller.close()
            assert await fleet._redis.get(f"{fleet.prefix}poller") == b"job-2"
            await other.close()
            assert await fleet._redis.get(f"{fleet.prefix}poller") is None


@contextlib.asynccontextmanager
async def _poller_and_other(
    redis: RedisServer, session: AsyncSession, *, view_seconds: float
) -> AsyncIterator[tuple[Fleet, Any, Any]]:
    """A ledger and two jobs' shared views of it: job-1's and job-2's."""
    from asyncclient.fleet._views import SharedViews

    async with (
        Fleet(redis.url) as fleet,
        SharedViews(session, fleet, "job-1", view_seconds=view_seconds) as first,
        SharedViews(session, fleet, "job-2", view_seconds=view_seconds) as second,
    ):
        yield fleet, first, second


async def test_the_poller_polls_for_the_others_on_its_own_clock_between_its_sweeps(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A poller whose own runs are quiet (its watcher backed off to 30 s between sweeps)
    still polls the others' runs on its own clock: their views stay fresh and their
    jobs ask the service nothing."""

    with service.hold("t_search", "t_onboarding", state="running"):
        mine, theirs = await _started(session, "t_search", "t_onboarding")
        async with _poller_and_other(redis, session, view_seconds=1) as (fleet, poller, other):
            await poller.list_run_views([mine])  # its one sweep: it holds the lease
            assert await fleet._redis.get(f"{fleet.prefix}poller") == b"job-1"
            (first,) = await other.list_run_views([theirs])  # from the poller's next poll
            assert (other.requests, other.shared) == (0, 1)
            key = f"{fleet.prefix}view:{theirs}"
            at = json.loads(await fleet._redis.get(key))["at"]
            polls = poller.requests
            async with asyncio.timeout(60):
                while json.loads(await fleet._redis.get(key))["at"] == at:
                    # What job-2's sweeps record: it still wants the run.
                    now = int(time.time() * 1000)
                    await fleet._redis.zadd(f"{fleet.prefix}wanted", {theirs: now + 5000})
                    await asyncio.sleep(0.05)
            assert poller.requests > polls  # polled again with no sweep of its own
            assert other.requests == 0
            assert first["id"] == theirs


async def test_a_first_look_at_new_runs_waits_for_the_pollers_poll_not_the_service(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """Jobs that start runs each looked at them once themselves; they wait for the poller's
    next poll, which asks for all of them at once. With no other poller, or once the lease
    is free, a job asks itself."""
    from asyncclient.fleet._views import SharedViews

    with service.hold("t_search", "t_onboarding", state="running"):
        mine, a, b = await _started(session, "t_search", "t_onboarding", "t_search")
        async with (
            Fleet(redis.url) as fleet,
            SharedViews(session, fleet, "job-1", view_seconds=1) as poller,
            SharedViews(session, fleet, "job-2", view_seconds=1) as second,
            SharedViews(session, fleet, "job-3", view_seconds=1) as third,
        ):
            await poller.list_run_views([mine])
            service.reset_requests()
            got = await asyncio.gather(second.list_run_views([a]), third.list_run_views([b]))
            assert [[v["id"] for v in views] for views in got] == [[a], [b]]
            assert (second.requests, third.requests) == (0, 0)
            asked = {r.query["ids"] for r in service.requests_for("list_runs")}
            assert {a, b} <= {i for ids in asked for i in ids.split(",")}
    # No other poller: the first look is the job's own, at once.
    async with Fleet(redis.url) as fleet, SharedViews(session, fleet, "alone") as alone:
        (late,) = await _started(session, "t_onboarding")
        await alone.list_run_views([late])
        assert (alone.requests, alone.shared) == (1, 0)


async def test_a_planted_poller_that_never_polls_delays_a_first_look_one_lease_at_most(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A writer to the ledger names a poller that does not exist and renews its lease: a
    job's first look waits one lease for its poll, then asks the service itself."""
    from asyncclient.fleet._views import SharedViews

    (run,) = await _started(session, "t_search")
    async with Fleet(redis.url, lease=2) as fleet:
        await fleet._redis.set(f"{fleet.prefix}poller", "\x1b[31mghost\n", px=600_000)
        async with SharedViews(session, fleet, "job-1") as views:
            service.reset_requests()
            (view,) = await asyncio.wait_for(views.list_run_views([run]), 60)
    assert view["id"] == run
    assert (views.requests, views.shared) == (1, 0)
    assert len(service.requests_for("list_runs")) == 1


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    planted=st.binary(max_size=300),
    poller=st.binary(min_size=1, max_size=40),
    mark=st.none() | st.binary(min_size=1, max_size=40),
    wanted=st.floats(allow_nan=False),
)
async def test_whatever_the_ledger_holds_for_a_view_and_its_poller_a_sweep_ends_with_the_truth(
    redis: RedisServer,
    service: FakeService,
    session: AsyncSession,
    planted: bytes,
    poller: bytes,
    mark: bytes | None,
    wanted: float,
) -> None:
    """Any bytes as a run's view, as the poller's name (not this job) and as a stop mark, and
    any time the run is wanted until: the sweep neither waits for that poller (a view is
    there, if unreadable) nor takes a verdict it cannot check; it answers the run as the
    service has it."""
    from asyncclient.fleet._views import SharedViews

    with service.hold("t_search", state="running"):
        (run,) = await _started(session, "t_search")
        async with Fleet(redis.url) as fleet:
            await fleet._redis.set(f"{fleet.prefix}view:{run}", planted, px=60_000)
            await fleet._redis.set(f"{fleet.prefix}poller", poller, px=60_000)
            await fleet._redis.zadd(f"{fleet.prefix}wanted", {run: wanted})
            if mark is not None:
                await fleet._redis.set(f"{fleet.prefix}stopped:{run}", mark, px=60_000)
            async with SharedViews(session, fleet, "job-1", view_seconds=1) as views:
                service.reset_requests()
                found = await asyncio.wait_for(views.list_run_views([run]), 30)
                found += await asyncio.wait_for(views.list_run_views([run]), 30)
                await fleet._redis.delete(f"{fleet.prefix}poller")
    assert [v["id"] for v in found] == [run, run]
    assert all(v["status"] in ("queued", "running") for v in found)
    assert len(service.requests_for("list_runs")) == views.requests


async def test_the_poller_refreshes_a_view_that_would_lapse_before_its_next_poll(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A view 3 s old, fresh for 2 s more (5 s): the poller, polling the others every 4 s,
    refreshes it now. Left to lapse, every watcher would ask the service itself until the
    poll after (found in bench_fleet.py)."""

    with service.hold("t_search", "t_onboarding", state="running"):
        mine, theirs = await _started(session, "t_search", "t_onboarding")
        async with _poller_and_other(redis, session, view_seconds=5) as (fleet, poller, other):
            await other.list_run_views([theirs])  # job-2 watches its run
            key = f"{fleet.prefix}view:{theirs}"
            aged = json.loads(await fleet._redis.get(key))
            aged["at"] -= 3000
            await fleet._redis.set(key, json.dumps(aged), px=30_000)
            await fleet._redis.set(f"{fleet.prefix}poller", "job-1")
            service.reset_requests()
            await poller.list_run_views([mine])
            polled = [r.query.get("ids", "") for r in service.requests_for("list_runs")]
            refreshed = json.loads(await fleet._redis.get(key))
    assert any(theirs in ids for ids in polled)
    assert refreshed["at"] > aged["at"] + 2000


async def test_a_job_that_sweeps_seldom_has_its_runs_polled_until_its_next_sweep(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A job 20 s between sweeps wants its run's view fresh at its next one: the poller
    keeps polling the run past `view_seconds` after the job's sweep (before, it stopped
    then, and the job's next sweep found the view too old and asked the service itself)."""

    with service.hold("t_search", "t_onboarding", state="running"):
        mine, theirs = await _started(session, "t_search", "t_onboarding")
        async with _poller_and_other(redis, session, view_seconds=1) as (fleet, poller, other):
            await poller.list_run_views([mine])  # it holds the lease
            other._swept_at = time.monotonic() - 20  # its last sweep, 20 s ago
            await other.list_run_views([theirs])  # a first look: from the poller's poll
            swept = int(time.time() * 1000)
            wanted = await fleet._redis.zscore(f"{fleet.prefix}wanted", theirs)
            assert wanted is not None
            assert wanted >= swept + 20_000
            key = f"{fleet.prefix}view:{theirs}"
            async with asyncio.timeout(60):
                while json.loads(await fleet._redis.get(key))["at"] <= swept + 2000:  # noqa: ASYNC110 (Redis)
                    await asyncio.sleep(0.05)
            assert other.requests == 0


async def test_the_poller_leaves_out_a_run_whose_signed_verdict_it_published(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A verdict does not change: a final run still wanted is not asked for again, while a
    run still going beside it is polled at each poll."""

    with service.hold("t_search", state="running"):
        going, done = await _started(session, "t_search", "t_onboarding")
        service.advance(3600)  # t_onboarding's run ends; t_search's is held
        async with _poller_and_other(redis, session, view_seconds=1) as (_, poller, other):
            poller._swept_at = other._swept_at = time.monotonic() - 20  # wanted for 30 s
            await poller.list_run_views([going])
            (verdict,) = await other.list_run_views([done])
            assert verdict["final"] is True
            service.reset_requests()
            async with asyncio.timeout(60):
                while len(service.requests_for("list_runs")) < 3:  # noqa: ASYNC110 (the service's count)
                    await asyncio.sleep(0.05)
            asked = [r.query.get("ids", "") for r in service.requests_for("list_runs")]
    assert all(going in ids for ids in asked)
    assert not any(done in ids for ids in asked)


async def test_the_pollers_polls_come_sooner_when_the_service_answers_slowly(
    redis: RedisServer, session: AsyncSession
) -> None:
    """Every 4 s of a view's 5 (1 s left for the poll itself); a poll that took 0.6 s leaves
    three of it; never under half of the 5."""
    from asyncclient.fleet._views import SharedViews

    conditions = NetworkConditions(latency_ms=600, ops=["list_runs"])
    async with (
        FakeService(conditions=conditions) as slow,
        AsyncSession(slow.run_key, slow.url) as on_slow,
        Fleet(redis.url) as fleet,
        SharedViews(on_slow, fleet, "job-1") as poller,
    ):
        assert poller._others_every == 4.0
        (run,) = await _started(on_slow, "t_search")
        await poller.list_run_views([run])  # the lease, and the run wanted for 5 s
        await fleet._redis.delete(f"{fleet.prefix}view:{run}")
        await poller._poll_for_others(0)  # 0.6 s at least
        assert poller._poll_took >= 0.6
        assert 2.5 <= poller._others_every <= 5 - 3 * 0.6


async def test_the_pollers_own_request_polls_for_the_others_too(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """The poller looks at a run it has just started: the one request also asks for job-2's
    run, whose view is 3 s old, and the poller's next poll for the others comes later."""

    with service.hold("t_search", "t_onboarding", state="running"):
        (theirs,) = await _started(session, "t_onboarding")
        async with _poller_and_other(redis, session, view_seconds=5) as (fleet, poller, other):
            await other.list_run_views([theirs])  # no poller yet: its own request
            await fleet._redis.set(f"{fleet.prefix}poller", "job-1", px=60_000)
            key = f"{fleet.prefix}view:{theirs}"
            aged = json.loads(await fleet._redis.get(key))
            aged["at"] -= 3000
            await fleet._redis.set(key, json.dumps(aged), px=30_000)
            (mine,) = await _started(session, "t_search")
            poller._others_at = time.monotonic()  # polled for the others a moment ago
            service.reset_requests()
            await poller.list_run_views([mine])
            asked = [r.query.get("ids", "") for r in service.requests_for("list_runs")]
            refreshed = json.loads(await fleet._redis.get(key))
    assert [sorted(ids.split(",")) for ids in asked] == [sorted([mine, theirs])]
    assert refreshed["at"] > aged["at"] + 2000


async def test_a_run_this_job_stopped_is_read_again_from_the_service_not_the_fleet(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """The fleet's view of a run says it is running; the job stops it (a cancel, a timeout):
    its read after the stop is the service's, the run as it ended, not that view."""
    from asyncclient.fleet._views import SharedViews

    with service.hold("t_search", state="running"):
        (run,) = await _started(session, "t_search")
        async with Fleet(redis.url) as fleet, SharedViews(session, fleet, "job-1") as views:
            watcher = views.watch_runs([run], interval=0.05)
            await views.list_run_views([run])  # published: running
            assert await watcher.stop() == (run,)
            assert await fleet._redis.get(f"{fleet.prefix}stopped:{run}") == b"1"
    assert watcher.runs[run].is_final  # cancelled, as each dialect names it
    assert views.requests == 2


async def test_a_run_the_fleet_stopped_is_taken_from_the_pollers_poll_as_its_verdict(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """The fleet stopped job-2's run (a newer commit superseded it) after the poller had
    published it running: job-2 does not take that view; it takes the run's verdict from the
    poller's next poll, asking the service nothing."""
    from asyncclient.fleet._common import mark_stopped

    with service.hold("t_search", "t_onboarding", state="running"):
        mine, theirs = await _started(session, "t_search", "t_onboarding")
        async with _poller_and_other(redis, session, view_seconds=1) as (fleet, poller, other):
            await poller.list_run_views([mine])
            (seen,) = await other.list_run_views([theirs])
            assert (seen["status"] in ("queued", "running"), other.requests) == (True, 0)
            await session.stop_run(theirs)
            await mark_stopped(fleet, [theirs])
            (ended,) = await other.list_run_views([theirs])
    assert ended["final"] is True
    assert ended["status"] not in ("queued", "running")
    assert other.requests == 0


async def test_a_planted_stop_mark_costs_one_wait_of_one_views_time_then_the_service(
    redis: RedisServer, service: FakeService, session: AsyncSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer to the ledger marks a run still going as stopped and names a poller that never
    polls: the job waits once, at most one view's time, for a verdict that does not come, then
    reads the run from the service; its next sweeps do not wait again."""
    from asyncclient.fleet._views import SharedViews

    waits: list[float] = []
    real_wait = SharedViews._await_views

    async def counted(self: Any, run_ids: list[str], seconds: float) -> Any:
        waits.append(seconds)
        return await real_wait(self, run_ids, seconds)

    monkeypatch.setattr(SharedViews, "_await_views", counted)
    with service.hold("t_search", state="running"):
        (run,) = await _started(session, "t_search")
        async with Fleet(redis.url) as fleet, SharedViews(session, fleet, "job-1") as first:
            await first.list_run_views([run])  # a going view, published
            await first.close()
            await fleet._redis.set(f"{fleet.prefix}poller", "ghost", px=600_000)
            await fleet._redis.set(f"{fleet.prefix}stopped:{run}", b"1", px=600_000)
            async with SharedViews(session, fleet, "job-2", view_seconds=1) as views:
                service.reset_requests()
                seen = [await views.list_run_views([run]) for _ in range(3)]
    assert waits == [1]
    assert [v["status"] in ("queued", "running") for (v,) in seen] == [True] * 3
    assert views.requests == len(service.requests_for("list_runs")) == 3


async def test_a_planted_far_future_want_is_neither_polled_nor_kept(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A writer to the ledger wants a run polled until the year 33,000: the next sweep drops
    it and no poll asks for it."""

    with service.hold("t_search", "t_onboarding", state="running"):
        mine, planted = await _started(session, "t_search", "t_onboarding")
        async with _poller_and_other(redis, session, view_seconds=1) as (fleet, poller, _):
            await fleet._redis.zadd(f"{fleet.prefix}wanted", {planted: 10**15})
            service.reset_requests()
            await poller.list_run_views([mine])
            assert await fleet._redis.zscore(f"{fleet.prefix}wanted", planted) is None
            asked = [r.query.get("ids", "") for r in service.requests_for("list_runs")]
    assert asked
    assert not any(planted in ids for ids in asked)


async def test_the_shared_sweep_follows_a_suite_to_its_end(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A watcher over the shared source sees each run to its verdict (the verdicts read from
    the service), as one over the session does."""
    from asyncclient.fleet._views import SharedViews

    runs = await _started(session, "t_search", "t_onboarding")
    async with Fleet(redis.url) as fleet:
        service.advance(3600)
        async with (
            SharedViews(session, fleet, "job-1") as source,
            source.watch_runs(runs, interval=0.01) as watcher,
        ):
            seen = {run.id: run async for run in watcher}
    assert set(seen) == set(runs)
    assert all(run.is_final for run in seen.values())


async def test_status_says_the_slots_each_job_holds_and_its_starts_waiting(
    redis: RedisServer, session: AsyncSession
) -> None:
    async with (
        Fleet(redis.url, max_runs=1) as fleet,
        fleet.job(session, Identity(job_id="holder", priority="main")) as holder,
        fleet.job(session, Identity(job_id="waiter", priority="pr")) as waiter,
    ):
        await holder.acquire(1)
        start = asyncio.create_task(waiter.acquire(1))
        await _waiting(fleet, "waiter")
        seen = {j.job_id: j for j in await fleet.status()}
        assert (seen["holder"].in_flight, seen["holder"].queued) == (1, 0)
        assert (seen["waiter"].in_flight, seen["waiter"].queued) == (0, 1)
        assert (seen["holder"].priority, seen["waiter"].priority) == ("main", "pr")
        start.cancel()


async def test_a_cancel_raised_inside_the_redis_client_is_a_ledger_failure_not_the_jobs_end(
    redis: RedisServer,
) -> None:
    """A client whose read gives up by cancelling itself must not end the command silently
    (a CancelledError the command's task did not get is the ledger's failure)."""

    async def gives_up(**_: object) -> object:
        raise asyncio.CancelledError

    async with Fleet(redis.url) as fleet:
        fleet._scripts["BEAT"] = gives_up
        with pytest.raises(FleetError, match="did not answer in time"):
            await fleet._script("BEAT", "job", 1000)
        # Ours is ours: a job being cancelled still ends.
        task = asyncio.create_task(fleet._script("BEAT", "job", 1000))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_lease_lapses_by_the_servers_clock_and_the_job_is_then_reaped(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """No key deleted by hand: the job stops beating and Redis expires its lease itself."""
    with service.hold("t_search", state="running"):
        (run,) = await _started(session, "t_search")
        async with Fleet(redis.url, lease=5) as fleet:
            job = fleet.job(session, _job("silent"))
            await job.__aenter__()
            job.hold([run])
            await job.flush()
            job._closing = True  # it stops beating, as a frozen runner would
            job._wake.set()
            assert job._task is not None
            await job._task
            assert await fleet.reap(session) == []  # alive for up to a lease
            async with asyncio.timeout(30):
                while (await fleet.status())[0].lease_left is not None:  # noqa: ASYNC110 (Redis)
                    await asyncio.sleep(0.1)
            (reaped,) = await fleet.reap(session)
    assert reaped.stopped == (run,)
    assert _stopped(service, run)


HOSTILE = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=400
)


@settings(
    max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(job_id=HOSTILE, ref=HOSTILE, commit=HOSTILE, by=HOSTILE, run=HOSTILE)
def test_whatever_the_ledger_holds_is_shown_as_one_clean_bounded_line(
    redis: RedisServer, job_id: str, ref: str, commit: str, by: str, run: str
) -> None:
    """Any job of the fleet can write the ledger: its ids, refs, commits and 'superseded by'
    reach a terminal only through the one sanitiser, one line, bounded."""

    async def read() -> list[str]:
        async with Fleet(redis.url) as fleet:
            r, p = fleet._redis, fleet.prefix
            await r.flushdb()
            await r.sadd(p + "jobs", job_id)
            await r.hset(
                f"{p}job:{job_id}",
                mapping={"ref": ref, "commit": commit, "superseded_by": by, "priority": by},
            )
            await r.sadd(f"{p}job:{job_id}:runs", run, "j_aaaaaaaaaaaa")
            (info,) = await fleet.status()
            (reaped,) = await fleet.reap(_NoStops())  # no lease: it is dead
        assert info.runs == ("j_aaaaaaaaaaaa",) or is_id("run", run)
        assert reaped.stopped == info.runs
        return [
            info.job_id, info.ref or "", info.commit or "", info.superseded_by or "",
            info.priority or "", reaped.job_id, reaped.ref or "", reaped.commit or "",
        ]  # fmt: skip

    for shown in asyncio.run(read()):
        assert len(shown) <= 120
        assert line(shown) == shown  # the sanitiser's own fixed point: nothing left to escape
        assert not any(unicodedata.category(c) == "Cc" for c in shown), shown
        assert not _BIDI.intersection(shown), shown


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class _NoStops:
    """A session whose stops succeed without a service (the reap's stops are not the point)."""

    async def stop_run(self, run_id: str) -> str:
        return "cancelled"


# --- starts recorded before they are sent --------------------------------------------------------


async def _starts_of(fleet: Fleet, job_id: str) -> dict[bytes, bytes]:
    return await fleet._redis.hgetall(f"{fleet.prefix}job:{job_id}:starts")


def _runs_of(service: FakeService, test_id: str) -> list[str]:
    return [r.id for r in service.backend.tests[test_id].runs]


async def _dies(job: object) -> None:
    """The job's process is gone: its beat ends without a word, nothing is released."""
    job._closing = True  # type: ignore[attr-defined]
    job._wake.set()  # type: ignore[attr-defined]
    await job._task  # type: ignore[attr-defined]


async def test_an_answered_start_is_forgotten_in_the_beat_that_holds_its_run(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.fleet import GovernedSession

    async with Fleet(redis.url) as fleet, fleet.job(session, _job("s")) as job:
        with service.hold("t_search", state="running"):
            job._closing = True  # its beat waits: what the start leaves is seen before it
            start = await GovernedSession(session, job).run_test("t_search")
            assert len(await _starts_of(fleet, "s")) == 1  # recorded, not yet forgotten
            await job.flush()
            assert await _starts_of(fleet, "s") == {}
            (seen,) = await fleet.status()
            assert seen.runs == (start.run_id,)


async def test_a_job_killed_between_a_starts_answer_and_its_beat_leaves_no_run_going(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """The service started the run; the job died before it could write it down. A reaper asks
    again with the start's key (the service answers with that run and starts none) and stops
    it."""
    from front_support import starting_front

    from asyncclient.fleet import GovernedSession

    with service.hold("t_search", state="running"):
        async with (
            starting_front(service) as front,
            AsyncSession(service.run_key, front.url) as through_front,
            Fleet(redis.url, lease=5) as fleet,
        ):
            job = fleet.job(through_front, _job("killed"))
            await job.__aenter__()
            start = asyncio.create_task(GovernedSession(through_front, job).run_test("t_search"))
            await asyncio.wait_for(front.answered.wait(), 30)
            await _dies(job)  # the answer never reached it
            start.cancel()
            await asyncio.gather(start, return_exceptions=True)
            (started,) = _runs_of(service, "t_search")
            assert len(await _starts_of(fleet, "killed")) == 1
            assert (await fleet.status())[0].runs == ()  # the ledger never saw the run
            await _kill_lease(fleet, "killed")
            service.reset_requests()
            (reaped,) = await fleet.reap(session)
        assert reaped.stopped == (started,)
        assert _stopped(service, started)
        assert _runs_of(service, "t_search") == [started]  # asked again: no second run
        assert len(service.requests_for("run_test")) == 1


async def test_a_job_cancelled_mid_start_stops_what_the_start_began(
    redis: RedisServer, service: FakeService
) -> None:
    from front_support import starting_front

    from asyncclient.fleet import GovernedSession

    with service.hold("t_search", state="running"):
        async with (
            starting_front(service) as front,
            AsyncSession(service.run_key, front.url) as through_front,
            Fleet(redis.url) as fleet,
        ):
            async with fleet.job(through_front, _job("ctrl-c")) as job:
                start = asyncio.create_task(
                    GovernedSession(through_front, job).run_test("t_search")
                )
                await asyncio.wait_for(front.answered.wait(), 30)
                start.cancel()  # Ctrl-C while the answer is on its way
                await asyncio.gather(start, return_exceptions=True)
                front.release.set()
            (started,) = _runs_of(service, "t_search")
            assert _stopped(service, started)
            assert _runs_of(service, "t_search") == [started]
            assert await fleet.status() == []


async def test_a_start_the_ledger_holds_is_asked_again_only_when_it_is_well_formed(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    good = json.dumps({"kind": "test", "target": "t_search", "body": {"mode": "cold"}})
    forged = {
        "k-bad-json": "{not json",
        "k-path": json.dumps({"kind": "test", "target": "../../admin", "body": {}}),
        "k-kind": json.dumps({"kind": "delete", "target": "t_search", "body": {}}),
        "k-field": json.dumps({"kind": "test", "target": "t_search", "body": {"x": 1}}),
        "k-mode": json.dumps({"kind": "test", "target": "t_search", "body": {"mode": "rm"}}),
        "k-build": json.dumps(
            {"kind": "test", "target": "t_search", "body": {"buildId": "$(reboot)"}}
        ),
        "k-huge": json.dumps({"kind": "test", "target": "t_search", "body": {}, "x": "y" * 9000}),
        "k-deep": "[" * 4000,
        "k e y\r\nX-Evil: 1": good,
    }
    async with Fleet(redis.url) as fleet:
        dead = fleet.job(session, _job("forged"))
        await dead.__aenter__()
        await _dies(dead)
        await fleet._redis.hset(f"{fleet.prefix}job:forged:starts", mapping=forged)
        await _kill_lease(fleet, "forged")
        service.reset_requests()
        (reaped,) = await fleet.reap(session)
        assert reaped.stopped == ()
        assert service.requests_for("run_test") == []
        assert service.requests_for("run_project") == []
        # The same, well formed: asked again (the check above could fail).
        other = fleet.job(session, _job("honest"))
        await other.__aenter__()
        await _dies(other)
        await fleet._redis.hset(f"{fleet.prefix}job:honest:starts", "k-good", good)
        await _kill_lease(fleet, "honest")
        with service.hold("t_search", state="running"):
            (reaped,) = await fleet.reap(session)
        assert len(service.requests_for("run_test")) == 1
        assert len(reaped.stopped) == 1


# --- a limit the service's answers teach --------------------------------------------------------


async def test_an_overage_answer_makes_the_fleet_keep_to_the_runs_it_has_in_flight(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.fleet import GovernedSession

    said: list[str] = []
    async with (
        Fleet(redis.url) as fleet,
        fleet.job(session, Identity(job_id="a")) as a,
        fleet.job(session, Identity(job_id="b")) as b,
    ):
        a.warn = said.append
        with service.hold("t_search", "t_onboarding", state="running"):
            await GovernedSession(session, a).run_test("t_search")  # within the plan
            assert await fleet.learned_limit() is None
            service.backend.projects["p_demo"].included_runs = 0  # the plan is spent
            started = await GovernedSession(session, a).run_test("t_onboarding")
            assert started.overage is True
            limit = await fleet.learned_limit()
            assert limit is not None
            assert limit[0] == 2
            assert 590 < limit[1] <= 600
            assert len(said) == 1
            assert "keeps to 2 run(s) in flight for 10 minutes" in said[0]
            places: list[tuple[int, int]] = []
            waiting = asyncio.create_task(b.acquire(1, on_wait=lambda *p: places.append(p)))
            await _waiting(fleet, "b")
            assert places[0] == (0, 2)
            assert b.limit == 2
            a.free(1)
            await asyncio.wait_for(waiting, 30)
            assert places[-1] == (-1, 2)  # 1 of a's and its own


async def test_a_project_start_refused_402_teaches_the_limit_and_a_set_limit_wins(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.errors import NotStartedError
    from asyncclient.fleet import GovernedSession

    project = service.backend.projects["p_demo"]
    with service.hold("t_search", state="running"):
        async with Fleet(redis.url) as fleet, fleet.job(session, Identity(job_id="p")) as job:
            await GovernedSession(session, job).run_test("t_search")
            project.plan = "free"
            for test in project.tests:
                test.seed = attrs.evolve(test.seed, uses_endpoints=("staging",))
            with pytest.raises(NotStartedError):
                await GovernedSession(session, job).run_project("p_demo")
            assert (await fleet.learned_limit() or (0, 0))[0] == 1
        async with Fleet(redis.url, max_runs=5) as fleet, fleet.job(session, _job("q")) as q:
            await q.acquire(3)  # a set limit is not the one learned
            assert q.limit == 5


async def test_a_start_waiting_when_its_job_is_superseded_is_never_sent(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.fleet import GovernedSession, JobEnded

    async with (
        Fleet(redis.url, max_runs=1) as fleet,
        fleet.job(session, Identity(job_id="holder", ref="main")) as holder,
        fleet.job(session, _job("old", commit="aaaa1111")) as old,
    ):
        await holder.acquire(1)
        service.reset_requests()
        waiting = asyncio.create_task(GovernedSession(session, old).run_test("t_search"))
        await _waiting(fleet, "old")
        async with fleet.job(session, _job("new", commit="bbbb2222")) as new:
            assert new.marked == ("old",)
            with pytest.raises(JobEnded, match="superseded by bbbb2222"):
                await asyncio.wait_for(waiting, 30)
        assert service.requests_for("run_test") == []
        assert "old" not in await _in_flight(fleet)


async def test_a_job_taken_for_dead_while_it_waits_goes_on_alone(
    redis: RedisServer, session: AsyncSession
) -> None:
    said: list[str] = []
    async with (
        Fleet(redis.url, max_runs=1) as fleet,
        fleet.job(session, Identity(job_id="holder")) as holder,
        fleet.job(session, Identity(job_id="slow")) as slow,
    ):
        slow.warn = said.append
        await holder.acquire(1)
        waiting = asyncio.create_task(slow.acquire(1))
        await _waiting(fleet, "slow")
        await _kill_lease(fleet, "slow")  # its beats came too late: the fleet took it for dead
        await asyncio.wait_for(waiting, 30)  # it goes on, ungoverned, rather than wait forever
        assert len(said) == 1
        assert "took this job for dead while it waited" in said[0]


async def test_a_view_serves_a_job_that_sweeps_less_often_for_longer(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A view published 12 s ago is too old for a job sweeping every few seconds, and fresh
    enough for one whose sweeps come 20 s apart (its own poll would be as old)."""
    from asyncclient.fleet._views import SharedViews

    with service.hold("t_search", state="running"):
        (run,) = await _started(session, "t_search")
        async with Fleet(redis.url) as fleet:
            view = {"id": run, "status": "running", "testId": "t_search"}
            aged = {"at": int(time.time() * 1000) - 12_000, "view": view}
            key = f"{fleet.prefix}view:{run}"
            async with (
                SharedViews(session, fleet, "quick") as quick,
                SharedViews(session, fleet, "slow") as slow,
            ):
                slow._swept_at = time.monotonic() - 20  # its last sweep, 20 s ago
                await fleet._redis.set(f"{fleet.prefix}poller", "another-job")  # neither polls
                await fleet._redis.set(key, json.dumps(aged), px=60_000)
                service.reset_requests()
                await slow.list_run_views([run])
                assert (slow.shared, slow.requests) == (1, 0)
                await fleet._redis.set(key, json.dumps(aged), px=60_000)
                await quick.list_run_views([run])
                assert (quick.shared, quick.requests) == (0, 1)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
_START_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["test", "project", "delete", ""]) | st.text(max_size=8),
        "target": st.sampled_from(["t_search", "p_demo", "../../admin", "t_$(x)"])
        | st.text(max_size=20),
        "body": st.fixed_dictionaries(
            {},
            optional={
                "mode": st.sampled_from(["auto", "cold", "rm -rf"]) | _JSONISH,
                "buildId": st.sampled_from(["ab_1", "ab_$(x)"]) | _JSONISH,
                "buildIds": st.lists(st.sampled_from(["ab_1", "x"]), max_size=3) | _JSONISH,
                "extra": _JSONISH,
            },
        )
        | _JSONISH,
    },
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    key=st.binary(max_size=300) | st.text(max_size=300),
    raw=st.binary(max_size=600) | _START_FIELDS.map(json.dumps) | _JSONISH.map(json.dumps),
)
def test_a_start_the_ledger_holds_is_taken_only_as_the_session_would_send_it(
    key: object, raw: object
) -> None:
    """Whatever a hostile ledger holds for a dead job's unanswered start: no crash, and a
    start is taken only when its kind, target, body and key are what the session itself
    checks and sends (the reaper asks it again); everything else is None."""
    from asyncclient._core import _checks
    from asyncclient.fleet import Start

    start = Start.from_ledger(key, raw)
    if start is None:
        return
    assert start.kind in ("test", "project")
    assert is_id(start.kind, start.target)
    assert set(start.body) <= {"mode", "buildId", "buildIds"}
    assert start.body.get("mode") in (None, "auto", "cold", "warm")
    assert all(is_id("build", b) for b in [start.body.get("buildId") or "ab_x"])
    assert _checks.check_idempotency_key(start.key) == start.key
    # Written back, it reads the same: nothing was read loosely.
    assert Start.from_ledger(start.key, start.to_json()) == start


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    raw=st.binary(max_size=300)
    | st.fixed_dictionaries(
        {},
        optional={
            "at": st.integers(-(2**40), 2**64) | _JSONISH,
            "view": st.fixed_dictionaries(
                {},
                optional={
                    "id": st.sampled_from(["j_1", "j_2"]) | _JSONISH,
                    "status": st.sampled_from(["passed", "failed", "running", "queued"]) | _JSONISH,
                },
            )
            | _JSONISH,
            "sig": st.text(max_size=70) | _JSONISH,
        },
    )
    .map(json.dumps)
    .map(str.encode),
)
def test_a_shared_view_is_taken_only_still_going_or_signed(raw: bytes) -> None:
    """Whatever the ledger holds under a run's view: no crash, and a verdict is taken only
    with the HMAC of the key's secret over its time and view (here, never: the examples
    cannot know the secret)."""
    from asyncclient.fleet._views import _view

    now = int(time.time() * 1000)
    view = _view(raw, "j_1", now, 60_000, b"s" * 32)
    if view is not None:
        assert view["id"] == "j_1"
        assert view["status"] in ("queued", "running")


# --- each test's history, shared ------------------------------------------------------------------


async def test_a_second_job_reads_a_tests_history_from_the_fleet_without_asking_the_service(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    from asyncclient.eta import HISTORY_RUNS, read_history
    from asyncclient.fleet._views import SharedViews

    await _started(session, "t_search", "t_search")
    async with Fleet(redis.url) as fleet:
        first = SharedViews(session, fleet, "job-1")
        second = SharedViews(session, fleet, "job-2")
        service.reset_requests()
        mine = await read_history(first, ["t_search"], shared=True)
        assert len(service.requests_for("list_runs")) == 1
        theirs = await read_history(second, ["t_search"], shared=True)
        assert theirs == mine
        assert len(mine["t_search"]) == 2
        assert len(service.requests_for("list_runs")) == 1  # nothing more was asked
        assert (second.requests, second.shared_histories) == (0, 1)
        # Unless asked to share (a job that reuses passes), a job reads its own.
        service.reset_requests()
        await read_history(second, ["t_search"])
        (listing,) = service.requests_for("list_runs")
        assert listing.query == {"testId": "t_search", "limit": str(HISTORY_RUNS)}


async def test_a_history_is_taken_from_the_fleet_only_signed_with_the_keys_secret_fresh_and_whole(
    redis: RedisServer, service: FakeService, session: AsyncSession
) -> None:
    """A writer to the ledger could plant a history that steers a job (a test with no runs
    is new, one that always failed is known broken): one is taken only as a job of the same
    key published it, signed with the key's secret, for this test and limit, at most
    HISTORY_SECONDS old and no longer than asked; anything else is read from the service."""
    import hashlib
    import hmac

    from asyncclient.fleet._views import _PURPOSE, HISTORY_SECONDS, SharedViews

    (run,) = await _started(session, "t_search")
    secret = session.key_digest(_PURPOSE)
    other = AsyncSession("another-key-0f9e8d7c", service.url).key_digest(_PURPOSE)
    now = int(time.time() * 1000)
    empty = {"at": now, "test": "t_search", "limit": 50, "runs": []}

    def signed(body: dict[str, object], key: bytes = secret) -> bytes:
        data = json.dumps(body).encode()
        return hmac.new(key, data, hashlib.sha256).hexdigest().encode() + data

    old = int((HISTORY_SECONDS + 1) * 1000)
    runs = [{"id": f"j_{n:012x}", "status": "passed", "testId": "t_search"} for n in range(51)]
    forged = {
        "unsigned": json.dumps(empty).encode(),
        "another key's": signed(empty, other),
        "another test's": signed({**empty, "test": "t_onboarding"}),
        "another limit's": signed({**empty, "limit": 10}),
        "too old": signed({**empty, "at": now - old}),
        "from the future": signed({**empty, "at": now + old}),
        "longer than asked": signed({**empty, "runs": runs}),
        "not a history": signed({"at": now}),  # type: ignore[dict-item]
        "cut short": signed(empty)[:-1],
    }
    async with Fleet(redis.url) as fleet:
        key = f"{fleet.prefix}history:t_search:50"
        for why, planted in forged.items():
            await fleet._redis.set(key, planted, px=60_000)
            service.reset_requests()
            views = SharedViews(session, fleet, "job-1")
            found = await views.test_history("t_search", 50)
            assert [r.id for r in found] == [run], why  # the service's answer
            assert len(service.requests_for("list_runs")) == 1, why
            assert views.shared_histories == 0, why
        # What a job of this key published is read, with no request.
        await fleet._redis.set(key, signed(empty), px=60_000)
        service.reset_requests()
        views = SharedViews(session, fleet, "job-1")
        assert await views.test_history("t_search", 50) == []
        assert service.requests_for("list_runs") == []


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(planted=st.binary(max_size=400))
async def test_whatever_bytes_the_ledger_holds_for_a_history_the_service_is_asked(
    redis: RedisServer, service: FakeService, session: AsyncSession, planted: bytes
) -> None:
    from asyncclient.fleet._views import SharedViews

    async with Fleet(redis.url) as fleet:
        await fleet._redis.set(f"{fleet.prefix}history:t_search:50", planted, px=60_000)
        service.reset_requests()
        views = SharedViews(session, fleet, "job-1")
        await views.test_history("t_search", 50)
        assert len(service.requests_for("list_runs")) == 1
        assert views.shared_histories == 0
