"""The fleet from the command line, in real processes against a real Redis and the emulator:
a job superseded by a newer commit ends 130 with its runs stopped; a job killed with SIGKILL
leaves runs that `fleet reap` stops once; `fleet status`; a project file may not name the
ledger."""

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis_support import RedisServer

from asyncclient import AsyncSession
from asyncclient.fleet import Fleet, Identity
from asyncclient.testing import FakeService

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX here")


def _env(service: FakeService, redis: RedisServer, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ASYNCCLIENT_", "GITHUB_", "GITLAB_", "CI_"))
    }
    env.update(
        ASYNCCLIENT_BASE_URL=service.url,
        ASYNCCLIENT_API_KEY=service.run_key,
        ASYNCCLIENT_FLEET=redis.url,
    )
    return {**env, **extra}


#: The command under Windows' rules (no fcntl, no POSIX-only os functions, open files kept).
_WINDOWS_RULES = (str(Path(__file__).resolve().parent.parent / "foreign_os.py"), "asyncclient")


async def _cli(
    env: dict[str, str], *argv: str, cwd: Path | None = None, windows: bool = False
) -> tuple[int, str, str]:
    command = _WINDOWS_RULES if windows else ("-m", "asyncclient")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *command, *argv, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(120):  # a hang fails here, with what it said
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def ledger(redis: RedisServer) -> AsyncIterator[Fleet]:
    async with Fleet(redis.url) as fleet:
        yield fleet


async def _job_holding(fleet: Fleet, runs: int) -> str:
    """The id of the one job in the ledger once it holds `runs` runs (the child's first beat)."""
    async with asyncio.timeout(60):
        while True:
            jobs = [j for j in await fleet.status() if len(j.runs) >= runs]
            if jobs:
                return jobs[0].job_id
            await asyncio.sleep(0.05)


def _stopped(service: FakeService, run_id: str) -> bool:
    run = service.backend.run_store.find_run(run_id)
    return run is not None and run.stopped_at is not None


@pytest.mark.parametrize("windows", [False, True], ids=["posix", "windows-rules"])
async def test_a_job_superseded_by_a_newer_commit_stops_its_runs_and_exits_130(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession, windows: bool
) -> None:
    env = _env(service, redis)
    with service.hold("t_search", "t_onboarding", state="running"):
        job = asyncio.create_task(
            _cli(
                env, "run", "project", "p_demo", "--wait", "--interval", "0.05",
                "--ref", "mr/7", "--commit", "aaaa1111", "--supersede", "--json",
                windows=windows,
            )
        )  # fmt: skip
        old_job = await _job_holding(ledger, 2)
        (old,) = await ledger.status()
        async with asyncio.timeout(60):  # its first sweep (then a cancel reports the runs)
            while not all(await ledger._redis.mget([f"{ledger.prefix}view:{r}" for r in old.runs])):  # noqa: ASYNC110 (Redis)
                await asyncio.sleep(0.02)
        service.reset_requests()
        newer = Identity(job_id="newer", ref="mr/7", commit="bbbb2222", supersede=True)
        async with ledger.job(session, newer) as new:
            assert new.marked == (old_job,)
            code, out, err = await asyncio.wait_for(job, 60)
    assert code == 130, err
    assert "superseded by bbbb2222" in err
    # Its report: the runs as they ended, not as the fleet had last published them.
    assert sorted((r["id"], r["final"]) for r in json.loads(out)) == [
        (r, True) for r in sorted(old.runs)
    ]
    assert all(_stopped(service, r) for r in old.runs)
    # Each run stopped once: by the fleet, not again by the job's own cancel.
    stops = sorted(r.path for r in service.requests_for("stop_run"))
    assert stops == sorted(f"/api/v1/runs/{r}/stop" for r in old.runs)
    # Released on its way out: nothing of it is left to reap.
    assert await ledger.status() == []


async def test_a_job_for_an_older_commit_starts_nothing(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession
) -> None:
    # Workflow run 7 holds the newer commit of the pull request; run 5 starts after it.
    newer = Identity(
        job_id="gh:7", ref="pr/feature", commit="bbbb2222", order=7, order_kind="github-run",
        supersede=True,
    )  # fmt: skip
    github = {
        "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_HEAD_REF":
        "feature", "GITHUB_SHA": "aaaa1111", "GITHUB_RUN_NUMBER": "5", "GITHUB_RUN_ID": "5",
        "GITHUB_JOB": "test",
    }  # fmt: skip
    async with ledger.job(session, newer):
        service.reset_requests()
        code, _, err = await _cli(
            _env(service, redis, **github), "run", "project", "p_demo", "--wait"
        )
    assert code == 130, err
    assert "superseded by bbbb2222" in err
    assert "nothing started" in err
    assert service.requests_for("run_project") == []


async def test_a_killed_jobs_runs_are_reaped_once_by_the_cron_command(
    redis: RedisServer, ledger: Fleet, service: FakeService
) -> None:
    env = _env(service, redis)
    with service.hold("t_search", "t_onboarding", state="running"):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "asyncclient", "run", "project", "p_demo", "--wait",
            "--interval", "0.05", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            job_id = await _job_holding(ledger, 2)
        finally:
            proc.send_signal(signal.SIGKILL)  # no cleanup at all: the runner died
            await proc.wait()
        (dead,) = await ledger.status()
        assert not any(_stopped(service, r) for r in dead.runs)
        # Its lease lapses (as 30 s of silence would make it).
        await ledger._redis.delete(f"{ledger.prefix}lease:{job_id}")
        service.reset_requests()
        code, out, err = await _cli(env, "fleet", "reap", "--json")
        assert code == 0, err
        (reaped,) = json.loads(out)["reaped"]
        assert reaped["jobId"] == job_id
        assert sorted(reaped["stopped"]) == sorted(dead.runs)
        assert all(_stopped(service, r) for r in dead.runs)
        assert len(service.requests_for("stop_run")) == 2
        # A second cron finds nothing: once.
        code, out, _ = await _cli(env, "fleet", "reap")
        assert (code, out.strip()) == (0, "no dead job")


async def test_fleet_status_lists_the_jobs(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession
) -> None:
    ident = Identity(job_id="gh:1:1:test", ref="main", commit="cccc3333")
    async with ledger.job(session, ident) as job:
        job.hold(["j_aaaaaaaaaaaa"])
        await job.flush()
        code, out, err = await _cli(_env(service, redis), "fleet", "status", "--json")
        assert code == 0, err
        (shown,) = json.loads(out)["jobs"]
        assert shown["jobId"] == "gh:1:1:test"
        assert shown["runs"] == ["j_aaaaaaaaaaaa"]
        assert shown["ref"] == "main"
        assert 0 < shown["leaseLeft"] <= 30
        code, out, _ = await _cli(_env(service, redis), "fleet", "status")
        assert "gh:1:1:test  ref main  commit cccc3333  1 run(s)" in out
        assert "runs in flight: 0 (no limit set: ASYNCCLIENT_FLEET_MAX_RUNS)" in out


async def test_a_project_file_may_not_name_the_ledger(
    redis: RedisServer, service: FakeService, tmp_path: Path
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "asyncclient.toml").write_text(f'[fleet]\nurl = "{redis.url}"\n')
    env = _env(service, redis)
    del env["ASYNCCLIENT_FLEET"]
    env["XDG_CONFIG_HOME"] = str(tmp_path / "home")
    service.reset_requests()
    code, _, err = await _cli(env, "run", "project", "p_demo", "--wait", cwd=tmp_path)
    assert code == 2
    assert "a project file may not name the fleet's ledger" in err
    assert len(err.strip().splitlines()) == 1
    assert service.requests_for("run_project") == []


async def test_an_unreachable_ledger_costs_one_line_and_the_job_goes_on_alone(
    redis: RedisServer, service: FakeService
) -> None:
    env = _env(service, redis, ASYNCCLIENT_FLEET="redis://:s3cretpw@127.0.0.1:1/0")
    service.reset_requests()
    job = asyncio.create_task(_cli(env, "run", "project", "p_demo", "--wait", "--interval", "0.05"))
    async with asyncio.timeout(60):
        while not service.requests_for("run_project"):  # noqa: ASYNC110 (a child)
            await asyncio.sleep(0.02)
    service.advance(3600)  # its runs end
    code, _, err = await asyncio.wait_for(job, 120)
    assert code in (0, 1), err  # the runs' verdict: it ran, alone
    assert "s3cretpw" not in err
    assert err.count("goes on alone") == 1, err


async def test_a_ledger_gone_mid_job_costs_one_line_and_the_job_goes_on(
    redis: RedisServer, ledger: Fleet, service: FakeService
) -> None:
    env = _env(service, redis)
    with service.hold("t_search", "t_onboarding", state="running") as hold:
        job = asyncio.create_task(
            _cli(env, "run", "project", "p_demo", "--wait", "--interval", "0.05")
        )
        await _job_holding(ledger, 2)
        await ledger.close()
        redis.process.kill()  # the ledger's server dies mid-job
        redis.process.wait()
        await asyncio.sleep(1.5)  # a beat or two meet the dead server
        hold.release()
        service.advance(3600)
        code, _, err = await asyncio.wait_for(job, 120)
    assert code in (0, 1), err
    assert err.count("goes on alone") == 1, err


async def test_a_start_waits_its_turn_for_the_fleets_device_slots(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession
) -> None:
    env = _env(service, redis, ASYNCCLIENT_FLEET_MAX_RUNS="1")
    full = Fleet(redis.url, max_runs=1)
    await full.connect()
    try:
        async with full.job(session, Identity(job_id="holder")) as holder:
            await holder.acquire(1)
            service.reset_requests()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "asyncclient", "run", "test", "t_search", "--wait",
                "--interval", "0.05", "--priority", "main", env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert proc.stderr is not None
            seen: list[str] = []
            try:
                async with asyncio.timeout(60):
                    while "waiting for a device slot" not in "".join(seen):
                        line = (await proc.stderr.readline()).decode()
                        if not line:
                            out, _ = await proc.communicate()
                            raise AssertionError(
                                f"exit {proc.returncode}: {''.join(seen)}{out.decode()}"
                            )
                        seen.append(line)
                # Its turn has not come: nothing started.
                assert service.requests_for("run_test") == []
                holder.free(1)
                async with asyncio.timeout(60):
                    while not service.requests_for("run_test"):  # noqa: ASYNC110 (a child)
                        await asyncio.sleep(0.02)
                service.advance(3600)  # the run ends
                async with asyncio.timeout(60):
                    _, rest = await proc.communicate()
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    finally:
        await full.close()
    said = "".join(seen) + rest.decode()
    assert "fleet: waiting for a device slot (next; 1 of 1 runs in flight)" in said
    assert proc.returncode in (0, 1), said  # the run's verdict; it ran
    assert len(service.requests_for("run_test")) == 1


# --- one upload per file across the fleet --------------------------------------------------------


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


async def _upload_cli(
    env: dict[str, str], apk: Path, state: Path
) -> tuple[asyncio.subprocess.Process, list[str]]:
    """`upload --reuse-build` in a child, once it says it waits for another job's upload."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "upload", "p_demo", str(apk), "--reuse-build",
        env={**env, "ASYNCCLIENT_STATE_DIR": str(state)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[str] = []
    async with asyncio.timeout(60):
        while "waiting for fleet job holder-a's upload" not in "".join(seen):
            line = (await proc.stderr.readline()).decode()
            assert line, "".join(seen)
            seen.append(line)
    return proc, seen


async def _finish(proc: asyncio.subprocess.Process) -> tuple[str, str]:
    try:
        async with asyncio.timeout(120):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return out.decode(), err.decode()


@pytest.fixture
def apk(tmp_path: Path) -> Path:
    from asyncclient.testing.builders import build_apk

    return build_apk(tmp_path / "shop.apk", version_code=7)


async def test_a_file_another_job_uploads_is_waited_for_and_its_build_reused(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession,
    apk: Path, tmp_path: Path,
) -> None:  # fmt: skip
    from asyncclient.fleet._uploads import UploadClaims

    sha = _sha256(apk)
    claims = UploadClaims(ledger, "holder-a")
    assert await claims.claim("p_demo", sha) is None  # the other job goes first
    try:
        proc, _ = await _upload_cli(_env(service, redis), apk, tmp_path / "state")
        assert service.requests_for("start_upload") == []
        build = await session.upload_build("p_demo", apk)
        await claims.done("p_demo", sha, build.id)
        out, err = await _finish(proc)
    finally:
        await claims.close()
    assert proc.returncode == 0, err
    assert out.strip() == build.id
    assert len(service.requests_for("start_upload")) == 1  # the file went once


async def test_a_published_build_that_is_not_the_files_is_never_reused(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession,
    apk: Path, tmp_path: Path,
) -> None:  # fmt: skip
    from asyncclient.fleet._uploads import UploadClaims
    from asyncclient.testing.builders import build_apk

    other = await session.upload_build("p_demo", build_apk(tmp_path / "other.apk"))
    sha = _sha256(apk)
    claims = UploadClaims(ledger, "holder-a")
    assert await claims.claim("p_demo", sha) is None
    try:
        proc, _ = await _upload_cli(_env(service, redis), apk, tmp_path / "state")
        await claims.done("p_demo", sha, other.id)  # a hostile or mistaken ledger
        out, err = await _finish(proc)
    finally:
        await claims.close()
    assert proc.returncode == 0, err
    built = out.strip()
    assert built not in ("", other.id)
    assert (await session.get_build(built)).sha256 == sha
    assert "is not this file's ready build in this project" in err


async def test_a_claim_whose_holder_died_is_taken_over(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession,
    apk: Path, tmp_path: Path,
) -> None:  # fmt: skip
    from asyncclient.fleet._uploads import UploadClaims

    sha = _sha256(apk)
    claims = UploadClaims(ledger, "holder-a")
    assert await claims.claim("p_demo", sha) is None
    try:
        proc, _ = await _upload_cli(_env(service, redis), apk, tmp_path / "state")
        await claims.close()  # the holder dies: no more renewals
        await ledger._redis.delete(f"{ledger.prefix}upload:p_demo:{sha}")  # its claim lapses
        out, err = await _finish(proc)
    finally:
        await claims.close()
    assert proc.returncode == 0, err
    assert (await session.get_build(out.strip())).sha256 == sha
    assert len(service.requests_for("start_upload")) == 1


async def test_watch_sweeps_through_the_fleets_shared_views(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession
) -> None:
    with service.hold("t_search", state="running") as hold:
        run = (await session.run_test("t_search")).run_id
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "asyncclient", "watch", run, "--interval", "0.05",
            env=_env(service, redis),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(60):
                while await ledger._redis.get(f"{ledger.prefix}view:{run}") is None:  # noqa: ASYNC110 (Redis)
                    await asyncio.sleep(0.02)
            assert await ledger._redis.zscore(f"{ledger.prefix}wanted", run) is not None
            assert await ledger._redis.get(f"{ledger.prefix}poller") is not None
            hold.release()
            service.advance(3600)
            _, err = await _finish(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode in (0, 1), err  # the run's verdict
    # What it wanted polled lapses by itself: an idle fleet's ledger empties.
    assert 0 < await ledger._redis.pttl(f"{ledger.prefix}wanted") <= 60_000


async def test_the_tool_server_reads_the_fleet_for_an_agent(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession, tmp_path: Path
) -> None:
    from mcp_support import Calls, by_name, stdio_server

    async with ledger.job(
        session, Identity(job_id="gh:9:1:test", ref="main", commit="cccc3333")
    ) as job:
        job.hold(["j_aaaaaaaaaaaa"])
        await job.flush()
        fleet_env = {"ASYNCCLIENT_FLEET": redis.url, "ASYNCCLIENT_FLEET_MAX_RUNS": "4"}
        async with stdio_server(service, service.run_key, tmp_path, env=fleet_env) as (client, _):
            tools = by_name((await client.list_tools()).tools)
            assert tools["fleet_status"].annotations is not None
            assert tools["fleet_status"].annotations.read_only_hint is True
            found = await Calls(client).ok("fleet_status", {})
        async with stdio_server(service, service.run_key, tmp_path) as (client, _):
            refused = await Calls(client).error("fleet_status", {})
    (shown,) = found["jobs"]
    assert (shown["jobId"], shown["runs"], shown["ref"]) == (
        "gh:9:1:test",
        ["j_aaaaaaaaaaaa"],
        "main",
    )
    assert (found["inFlight"], found["maxRuns"]) == (0, 4)
    assert "ASYNCCLIENT_FLEET" in refused


async def test_without_run_numbers_the_builds_time_orders_the_commits(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession, apk: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    """A job whose build is older than the build of a job already running for its ref is the
    older commit, though it starts later: it starts nothing."""
    from asyncclient.testing.builders import build_apk

    older = await session.upload_build("p_demo", apk)
    service.advance(600)
    newer = await session.upload_build("p_demo", build_apk(tmp_path / "new.apk", version_code=8))
    assert newer.created_at is not None
    assert older.created_at is not None
    assert newer.created_at > older.created_at
    running = ledger.job(
        session, Identity(job_id="newer", ref="pr/build", commit="bbbb2222", supersede=True),
        built_at=newer.created_at,
    )  # fmt: skip
    async with running:
        service.reset_requests()
        code, _, err = await _cli(
            _env(service, redis), "run", "test", "t_search", "--build", older.id, "--wait",
            "--ref", "pr/build", "--commit", "aaaa1111", "--supersede",
        )  # fmt: skip
    assert code == 130, err
    assert "superseded by bbbb2222" in err
    assert service.requests_for("run_test") == []


async def test_a_job_killed_mid_start_leaves_nothing_the_reaper_cannot_stop(
    redis: RedisServer, ledger: Fleet, service: FakeService
) -> None:
    """The child's start reaches the service (which starts the suite's runs) and the child is
    killed before the answer reaches it: the ledger holds the start, not the runs. `fleet
    reap` asks again with the start's key (the same runs, none new) and stops them."""
    from front_support import starting_front

    with service.hold("t_search", "t_onboarding", state="running"):
        async with starting_front(service) as front:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "asyncclient", "run", "project", "p_demo", "--wait",
                env=_env(service, redis, ASYNCCLIENT_BASE_URL=front.url),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                await asyncio.wait_for(front.answered.wait(), 60)
            finally:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        started = [s["runId"] for s in front.answers[0]["started"]]
        assert len(started) >= 2
        (dead,) = await ledger.status()
        assert dead.runs == ()  # the ledger never saw them
        await ledger._redis.delete(f"{ledger.prefix}lease:{dead.job_id}")
        before = len(service.backend.run_store.runs)
        code, out, err = await _cli(_env(service, redis), "fleet", "reap", "--json")
        assert code == 0, err
        (reaped,) = json.loads(out)["reaped"]
        assert sorted(reaped["stopped"]) == sorted(started)
        assert all(_stopped(service, r) for r in started)
        assert len(service.backend.run_store.runs) == before  # asked again: nothing new began


async def test_fleet_status_says_a_limit_the_services_answers_taught(
    redis: RedisServer, ledger: Fleet, service: FakeService, session: AsyncSession
) -> None:
    async with ledger.job(session, Identity(job_id="learner")) as job:
        await job.acquire(3)
        await job.learn("overage")
        code, out, err = await _cli(_env(service, redis), "fleet", "status")
        assert code == 0, err
        assert "runs in flight: 3 of 3 (learned from the service's answers, for 10 more min)" in out
        code, out, _ = await _cli(_env(service, redis), "fleet", "status", "--json")
        learned = json.loads(out)["learnedLimit"]
        assert learned["runs"] == 3
        assert 590 < learned["secondsLeft"] <= 600


async def _histories_made_fresh(fleet: Fleet, service: FakeService) -> None:
    """Each history in the ledger signed again as published now: the test does not depend
    on how long the jobs took to start (a history is shared for HISTORY_SECONDS)."""
    import hashlib
    import hmac
    import time

    from asyncclient.fleet._views import _PURPOSE, _SIG_CHARS

    secret = AsyncSession(service.run_key, service.url).key_digest(_PURPOSE)
    async for key in fleet._redis.scan_iter(f"{fleet.prefix}history:*"):
        body = json.loads((await fleet._redis.get(key))[_SIG_CHARS:])
        data = json.dumps({**body, "at": int(time.time() * 1000)}).encode()
        sig = hmac.new(secret, data, hashlib.sha256).hexdigest().encode()
        await fleet._redis.set(key, sig + data, px=30_000)


async def test_a_later_job_reads_the_tests_histories_an_earlier_one_shared(
    redis: RedisServer, ledger: Fleet, service: FakeService
) -> None:
    """The second job of a fleet reads each test's history from the ledger (no listing of
    its own); a job that reuses passes (--reuse-passed) reads its own, fresh."""
    env = _env(service, redis)

    async def job(*extra: str) -> int:
        service.reset_requests()
        argv = ("run", "project", "p_demo", "--wait", "--interval", "0.05", *extra)
        running = asyncio.create_task(_cli(env, *argv))
        async with asyncio.timeout(60):
            while not service.requests_for("run_project"):  # noqa: ASYNC110 (a child)
                await asyncio.sleep(0.02)
        service.advance(3600)  # its runs end
        code, _, err = await asyncio.wait_for(running, 120)
        assert code in (0, 1), err
        return sum("testId" in r.query for r in service.requests_for("list_runs"))

    first = await job()
    assert first >= 2  # one listing a test of the project
    await _histories_made_fresh(ledger, service)
    assert await job() == 0
    await _histories_made_fresh(ledger, service)
    assert await job("--reuse-passed", "7") == first
