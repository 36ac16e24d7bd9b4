"""The fleet's run ledger on Redis: jobs sharing one device plan see each other's runs. Runs of
dead jobs are reaped once, older commits of a ref superseded, starts queued by priority, runs
polled and builds uploaded once per fleet (docs/guides/one-fleet.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

import attrs

from asyncclient._core._checks import is_id
from asyncclient._local._batches import stop_runs
from asyncclient.fleet import _scripts
from asyncclient.fleet._common import (
    FleetError,
    JobEnded,
    log,
    mark_stopped,
    redact_url,
    run_ids,
    shown,
    text,
)
from asyncclient.fleet._starts import STARTS_KEPT, GovernedSession, Start, starts_in

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession

__all__ = [
    "Fleet",
    "FleetError",
    "FleetJob",
    "GovernedSession",
    "Identity",
    "JobEnded",
    "JobInfo",
    "Reaped",
    "Start",
]


DEFAULT_LEASE: Final = 30.0
URL_ENV: Final = "ASYNCCLIENT_FLEET"
LEASE_ENV: Final = "ASYNCCLIENT_FLEET_LEASE"
#: How often a job beats (renews its lease, records new runs, reads whether it was superseded),
#: at most: a third of the lease when that is shorter.
BEAT_SECONDS: Final = 1.0
#: The head start in the governor's queue of each priority class, in seconds: a pull request
#: waiting longer than 10 minutes goes before a newly arrived main job. Other names: none.
HEAD_START: Final = {"release": 1200.0, "main": 600.0, "pr": 0.0}
#: How often a waiting start asks for its turn.
ACQUIRE_POLL: Final = 0.5
MAX_RUNS_ENV: Final = "ASYNCCLIENT_FLEET_MAX_RUNS"
#: Runs of one job a status reads, at most (and a reap claims: the Lua script's own bound).
RUNS_SHOWN: Final = 10_000
#: Jobs claimed by one reap, at most (a cron's call ends in bounded time whatever the ledger).
REAP_MOST: Final = 500
#: How long a limit taught by the service's answers (overage, 402 not_started) holds.
LEARNED_SECONDS: Final = 600.0
_REF: Final = re.compile(r"[A-Za-z0-9._/!#@+:-]{1,200}")
_COMMIT: Final = re.compile(r"[0-9a-fA-F]{4,64}|[A-Za-z0-9._-]{1,64}")
_JOB: Final = re.compile(r"[A-Za-z0-9._:/-]{1,120}")


@attrs.frozen
class Identity:
    """Who a job is in the fleet: its id, its ref, its commit, the number that orders its
    commits among the ref's (a CI run number; None: the time it starts) and whether it
    supersedes older commits of its ref by default (merge requests: yes; main, tags: no)."""

    job_id: str
    ref: str | None = None
    commit: str | None = None
    order: int | None = None
    order_kind: str = "start"
    supersede: bool = False
    priority: str = "pr"


def identity_from_ci(environ: Mapping[str, str] | None = None) -> Identity:
    """The job's identity from GitHub Actions' or GitLab CI's variables (a random job id and
    nothing else outside CI). Values that do not look like a ref or a commit are left out."""
    env = os.environ if environ is None else environ

    def clean(value: str | None, pattern: re.Pattern[str]) -> str | None:
        return value if value and pattern.fullmatch(value) else None

    if env.get("GITHUB_ACTIONS") == "true":
        run = env.get("GITHUB_RUN_ID", "")
        job = clean(
            f"gh:{run}:{env.get('GITHUB_RUN_ATTEMPT', '1')}:{env.get('GITHUB_JOB', '')}", _JOB
        )
        pr = env.get("GITHUB_EVENT_NAME", "").startswith("pull_request")
        ref = f"pr/{env.get('GITHUB_HEAD_REF', '')}" if pr else env.get("GITHUB_REF_NAME", "")
        number = env.get("GITHUB_RUN_NUMBER", "")
        tag = env.get("GITHUB_REF_TYPE") == "tag"
        return Identity(
            job_id=job or _random_job(),
            ref=clean(ref, _REF),
            commit=clean(env.get("GITHUB_SHA"), _COMMIT),
            order=int(number) if number.isdigit() else None,
            order_kind="github-run" if number.isdigit() else "start",
            supersede=pr,
            priority="pr" if pr else ("release" if tag else "main"),
        )
    if env.get("GITLAB_CI") == "true":
        mr = env.get("CI_MERGE_REQUEST_IID", "")
        ref = f"mr/{mr}" if mr.isdigit() else env.get("CI_COMMIT_REF_NAME", "")
        number = env.get("CI_PIPELINE_IID", "")
        tag = bool(env.get("CI_COMMIT_TAG"))
        return Identity(
            job_id=clean(f"gl:{env.get('CI_JOB_ID', '')}", _JOB) or _random_job(),
            ref=clean(ref, _REF),
            commit=clean(env.get("CI_COMMIT_SHA"), _COMMIT),
            order=int(number) if number.isdigit() else None,
            order_kind="gitlab-pipeline" if number.isdigit() else "start",
            supersede=mr.isdigit(),
            priority="pr" if mr.isdigit() else ("release" if tag else "main"),
        )
    return Identity(job_id=_random_job())


def _random_job() -> str:
    return f"local:{os.getpid()}:{secrets.token_hex(6)}"


@attrs.frozen
class Reaped:
    """A dead job's runs, claimed by this reaper: those stopped, those already ended, and
    those that could not be stopped (with why)."""

    job_id: str
    ref: str | None
    commit: str | None
    stopped: tuple[str, ...]
    ended: tuple[str, ...] = ()
    errors: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class JobInfo:
    """A job in the ledger, as `fleet status` shows it."""

    job_id: str
    ref: str | None
    commit: str | None
    runs: tuple[str, ...]
    lease_left: float | None  # seconds; None: expired (it will be reaped)
    superseded_by: str | None
    priority: str | None = None
    in_flight: int = 0  # device slots it holds (the governor's count)
    queued: int = 0  # its starts waiting for a slot


class Fleet:
    """A connection to the fleet's ledger (a Redis URL: `redis://[:password@]host:port/db`,
    `rediss://` for TLS, `unix://path`).

    Args:
        url: The Redis URL (its password is never shown: `redact_url`).
        lease: Seconds a job lives without renewing (default 30).
        max_runs: The fleet's runs in flight at most (the device plan's slots); None: starts
            are not governed.
        namespace: The keys' prefix, so that several fleets may share a server.
    """

    def __init__(
        self,
        url: str,
        *,
        lease: float = DEFAULT_LEASE,
        max_runs: int | None = None,
        namespace: str = "asyncclient",
    ) -> None:
        if max_runs is not None and not (1 <= max_runs <= 100_000):
            raise ValueError(f"the fleet's max_runs must be 1 to 100000, not {max_runs}")
        if not (2.0 <= lease <= 3600.0):
            raise ValueError(f"the fleet lease must be 2 to 3600 seconds, not {lease:g}")
        if not re.fullmatch(r"(rediss?|unix|valkeys?)://\S+", url):
            raise ValueError(
                f"the fleet URL {redact_url(url)!r} is not a Redis URL: give "
                "redis://host:6379/0 (rediss:// for TLS, unix:///path for a socket)"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", namespace):
            raise ValueError("the fleet namespace is 1 to 40 letters, digits, '_', '.' or '-'")
        self.url = url
        self.lease = float(lease)
        self.max_runs = max_runs
        self.prefix = f"{namespace}:fleet:"
        self._redis: Any = None
        self._scripts: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Fleet({redact_url(self.url)!r}, lease={self.lease:g})"

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Connect and check that the server answers (FleetError when it does not)."""
        try:
            import redis.asyncio as aioredis
        except ImportError:  # pragma: no cover - said plainly where the extra is missing
            raise FleetError("the fleet needs redis-py: pip install 'asyncclient[fleet]'") from None
        url = self.url.replace("valkey", "redis", 1)
        try:
            self._redis = aioredis.Redis.from_url(
                url, socket_timeout=10, socket_connect_timeout=10, decode_responses=False
            )
            await self._redis.ping()
        except Exception as exc:
            await self.close()
            raise FleetError(
                f"the fleet's Redis at {redact_url(self.url)} could not be used: "
                f"{type(exc).__name__}: {redact_url(str(exc))}"
            ) from None
        for name in _scripts.__all__:
            self._scripts[name] = self._redis.register_script(getattr(_scripts, name))

    async def close(self) -> None:
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()
            self._redis = None

    async def _script(self, name: str, *args: Any) -> list[Any]:
        if self._redis is None:
            raise FleetError("the fleet is not connected: use `async with Fleet(url)`")
        try:
            answer = await self._scripts[name](args=[self.prefix, *args])
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # ours: the job is being cancelled
            # Not ours: the client's own read gave up (its timeout) by cancelling itself.
            raise FleetError(
                f"the fleet's Redis at {redact_url(self.url)} did not answer in time"
            ) from None
        except Exception as exc:
            raise FleetError(
                f"the fleet's Redis at {redact_url(self.url)} failed: "
                f"{type(exc).__name__}: {redact_url(str(exc))}"
            ) from None
        return list(answer) if isinstance(answer, list) else []

    def job(
        self,
        session: AsyncSession,
        identity: Identity | None = None,
        *,
        ref: str | None = None,
        commit: str | None = None,
        supersede: bool | None = None,
        priority: str | None = None,
        built_at: datetime | None = None,
    ) -> FleetJob:
        """This job in the ledger (an async context manager): its identity from the CI's
        variables (`identity_from_ci`), with `ref`, `commit` and `supersede` over them.
        `built_at` (the time its build was made) orders its commit among its ref's when the
        CI gives no run number; with neither, the job that starts later is the newer."""
        ident = identity or identity_from_ci()
        if built_at is not None and ident.order is None:
            ident = attrs.evolve(
                ident, order=int(built_at.timestamp() * 1000), order_kind="build-time"
            )
        if ref is not None:
            if not _REF.fullmatch(ref):
                raise ValueError(f"--ref {ref!r} is not a branch or merge request name")
            ident = attrs.evolve(ident, ref=ref)
        if commit is not None:
            if not _COMMIT.fullmatch(commit):
                raise ValueError(f"--commit {commit!r} is not a commit (hex, 4 to 64 digits)")
            ident = attrs.evolve(ident, commit=commit)
        if supersede is not None:
            ident = attrs.evolve(ident, supersede=supersede)
        if priority is not None:
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,30}", priority):
                raise ValueError(
                    f"--priority {priority!r}: give main, release, pr or a lower-case name"
                )
            ident = attrs.evolve(ident, priority=priority)
        return FleetJob(self, session, ident)

    async def reap(self, session: AsyncSession) -> list[Reaped]:
        """Claim the jobs whose lease expired and stop their queued or running runs, each
        once across the fleet (the claim is atomic); returns what was done."""
        answer = await self._script("REAP", REAP_MOST, STARTS_KEPT)
        reaped: list[Reaped] = []
        at = 0
        while at + 5 <= len(answer):
            job, ref, commit = (shown(v) for v in answer[at : at + 3])
            count = int(answer[at + 3])
            runs = list(run_ids(answer[at + 4 : at + 4 + count]))
            at += 4 + count
            asked = int(answer[at]) if at < len(answer) else 0
            starts = starts_in(answer[at + 1 : at + 1 + 2 * asked])
            at += 1 + 2 * asked
            # Unrecorded starts: asked again, same key.
            for found in await asyncio.gather(*(s.ask_again(session) for s in starts)):
                runs.extend(r for r in found if r not in runs)
            stopped, ended, failed = await stop_runs(session, runs)
            await mark_stopped(self, stopped + ended)
            errors = {r: str(exc) for r, exc in failed.items()}
            reaped.append(Reaped(job, ref or None, commit or None, stopped, ended, errors))
            log.warning(
                "reaped job %s (its lease expired): stopped %d run(s) %s",
                job,
                len(stopped),
                " ".join(stopped),
            )
        return reaped

    async def learned_limit(self) -> tuple[int, float] | None:
        """The runs in flight the service's answers taught the fleet (overage, 402
        not_started), and the seconds it holds yet; None when nothing was learned."""
        if self._redis is None:
            raise FleetError("the fleet is not connected: use `async with Fleet(url)`")
        try:
            value, left = (
                await self._redis.get(self.prefix + "limit"),
                await self._redis.pttl(self.prefix + "limit"),
            )
        except Exception as exc:
            raise FleetError(
                f"the fleet's Redis at {redact_url(self.url)} failed: {type(exc).__name__}"
            ) from None
        try:
            limit = int(text(value)) if value is not None else 0
        except ValueError:
            return None
        return (limit, left / 1000) if 1 <= limit <= 100_000 and left > 0 else None

    async def status(self) -> list[JobInfo]:
        """Every job of the ledger with its runs and the seconds its lease has left."""
        if self._redis is None:
            raise FleetError("the fleet is not connected: use `async with Fleet(url)`")
        r, p = self._redis, self.prefix
        try:
            jobs: list[str] = []
            async for member in r.sscan_iter(p + "jobs", count=100):  # bounded, whatever it holds
                jobs.append(text(member))
                if len(jobs) >= REAP_MOST:
                    break
            jobs.sort()
            flying = {text(k): int(v) for k, v in (await r.hgetall(p + "inflight")).items()}
            waiting: dict[str, int] = {}
            for ticket in await r.zrange(p + "queue", 0, 9_999):
                owner = text(ticket).rpartition("|")[0]
                waiting[owner] = waiting.get(owner, 0) + 1
            infos: list[JobInfo] = []
            for job in jobs:
                known = ("ref", "commit", "superseded_by", "priority")
                values = await r.hmget(f"{p}job:{job}", known)  # the fields we read, no others
                fields = {k: text(v) for k, v in zip(known, values, strict=True) if v is not None}
                held: list[Any] = []
                async for run in r.sscan_iter(f"{p}job:{job}:runs", count=500):
                    held.append(run)
                    if len(held) >= RUNS_SHOWN:
                        break
                runs = run_ids(held)
                left = await r.pttl(f"{p}lease:{job}")
                infos.append(
                    JobInfo(
                        shown(job),
                        shown(fields["ref"]) if fields.get("ref") else None,
                        shown(fields["commit"]) if fields.get("commit") else None,
                        runs,
                        left / 1000 if left >= 0 else None,
                        shown(fields["superseded_by"]) if fields.get("superseded_by") else None,
                        shown(fields["priority"]) if fields.get("priority") else None,
                        flying.get(job, 0),
                        waiting.get(job, 0),
                    )
                )
        except Exception as exc:
            raise FleetError(
                f"the fleet's Redis at {redact_url(self.url)} failed: {type(exc).__name__}"
            ) from None
        return infos


def status_json(
    jobs: Sequence[JobInfo], max_runs: int | None, learned: tuple[int, float] | None = None
) -> dict[str, Any]:
    """The ledger as JSON (`fleet status --json`, the MCP tool fleet_status): each job, the
    fleet's runs in flight against its limit (set, or `learned` from the service's answers:
    `Fleet.learned_limit`), and the starts waiting by class."""
    queued: dict[str, int] = {}
    for job in jobs:
        if job.queued:
            name = job.priority or "pr"
            queued[name] = queued.get(name, 0) + job.queued
    return {
        "jobs": [
            {
                "jobId": j.job_id,
                "ref": j.ref,
                "commit": j.commit,
                "priority": j.priority,
                "runs": list(j.runs),
                "leaseLeft": j.lease_left,
                "supersededBy": j.superseded_by,
                "inFlight": j.in_flight,
                "queuedStarts": j.queued,
            }
            for j in jobs
        ],
        "inFlight": sum(j.in_flight for j in jobs),
        "maxRuns": max_runs,
        "learnedLimit": (
            {"runs": learned[0], "secondsLeft": round(learned[1], 1)}
            if learned is not None and max_runs is None
            else None
        ),
        "queuedStarts": queued,
    }


class FleetJob:
    """One job in the ledger, from `async with` to its end: registered on entry (then
    `superseded_by` says whether a newer commit of its ref is there already), beating in the
    background (its lease, the runs given to `hold`, whether it was superseded, and the
    reaping of dead jobs), released on exit however the job ends.

    `ended` is set when the fleet ends this job: `superseded_by` (a newer commit of its ref:
    the job stops its runs itself at once, `stopped`, those told `finished` left alone; `ended`
    is set once the stops are answered, so a follower cancelled then need not stop them). A
    ledger that cannot be reached costs one line to `warn` and the job goes on alone
    (ungoverned, unshared); `lost` says the fleet took it for dead meanwhile (its lease
    lapsed: its runs may have been reaped).

    `waiting(place, in_flight)` is told while a start waits its turn for a device slot (place
    -1 when it goes): the command shows it in its live table or as a line. `limit` is the
    fleet's limit of runs in flight as the governor last said it (set, or learned)."""

    def __init__(self, fleet: Fleet, session: AsyncSession, identity: Identity) -> None:
        self.fleet = fleet
        self.identity = identity
        self._session = session
        self.superseded_by: str | None = None
        self.lost = False
        self.ended = asyncio.Event()
        #: Where the job's one line about an unreachable ledger goes (the command: its stderr).
        self.warn: Any = log.warning
        self._alone = False
        self.marked: tuple[str, ...] = ()  # older jobs this one superseded on entry
        self.reaped: list[Reaped] = []
        # This job's runs it stopped itself on being superseded.
        self.stopped: tuple[str, ...] = ()
        self._pending: set[str] = set()
        self._held: set[str] = set()
        self._finished: set[str] = set()  # held runs seen final: never stopped
        self._starts: dict[str, Start] = {}  # recorded, not yet answered
        self._answered: set[str] = set()  # answered: forgotten at the next beat
        self.waiting: Any = None  # (place, in flight) while waiting; place -1: it went
        self.limit: int | None = fleet.max_runs
        self._learned_said = False
        self._wake = asyncio.Event()
        self._closing = False
        self._tickets = 0
        self._freed = 0
        self._task: asyncio.Task[None] | None = None
        self._interval = min(BEAT_SECONDS, fleet.lease / 3)

    @property
    def job_id(self) -> str:
        return self.identity.job_id

    @property
    def held(self) -> frozenset[str]:
        """The runs recorded for this job."""
        return frozenset(self._held | self._pending)

    async def __aenter__(self) -> Self:
        ident = self.identity
        answer = await self.fleet._script(
            "REGISTER",
            ident.job_id,
            ident.ref or "",
            ident.commit or "",
            "" if ident.order is None else str(ident.order),
            ident.order_kind,
            int(self.fleet.lease * 1000),
            "1" if ident.supersede else "0",
            ident.priority,
        )
        state = text(answer[0]) if answer else "ok"
        if state == "superseded":
            self.superseded_by = shown(answer[1]) or "a newer commit"
            self.ended.set()
            return self
        self.marked = tuple(text(j) for j in answer[3:])
        self._task = asyncio.create_task(self._beat_forever(), name="asyncclient-fleet-beat")
        # A job entering is a good time to look for the dead.
        with contextlib.suppress(FleetError):
            self.reaped.extend(await self.fleet.reap(self._session))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None
        if task is not None:
            # A flag as well as the cancel: redis-py may swallow a cancel that lands inside
            # one of its reads, and the beat must end all the same.
            self._closing = True
            self._wake.set()
            task.cancel()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await asyncio.gather(task, return_exceptions=True)
        if self.superseded_by is not None and not self._held and not self._pending:
            return  # never registered, or nothing to release
        if self._starts:
            # Unanswered starts: asked again, their runs stopped.
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(10):
                    await asyncio.shield(self._stop_unanswered())
        # Released even when the job is cancelled: shielded, bounded.
        with contextlib.suppress(FleetError, TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(10):
                await asyncio.shield(self.fleet._script("RELEASE", self.identity.job_id))

    async def _stop_unanswered(self) -> None:
        starts, self._starts = list(self._starts.values()), {}
        found = await asyncio.gather(*(start.ask_again(self._session) for start in starts))
        runs = sorted({r for ids in found for r in ids})
        stopped, _, errors = await stop_runs(self._session, runs)
        if stopped:
            log.warning("stopped %d run(s) of starts left unanswered: %s", len(stopped), stopped)
        for run_id, error in errors.items():
            log.warning("could not stop run %s of a start left unanswered: %s", run_id, error)

    async def intend(self, start: Start) -> None:
        """Record a start before it is sent (see `Start`); `answered` forgets it."""
        if self._alone or self.ended.is_set() or self.superseded_by is not None:
            return
        try:
            done = await self.fleet._script(
                "INTEND", self.identity.job_id, start.key, start.to_json(), STARTS_KEPT
            )
        except FleetError as exc:
            self._went_alone(exc)
            return
        if done and int(done[0]) == 1:
            self._starts[start.key] = start

    def answered(self, start: Start, run_ids: Iterable[str]) -> None:
        """The service answered `start` (with these runs, or refused it): the runs are held
        and the start forgotten in one beat (the next, or at once when woken)."""
        self.hold(run_ids)
        if self._starts.pop(start.key, None) is not None:
            self._answered.add(start.key)
            self._wake.set()

    async def learn(self, why: str, *, less: int = 0) -> None:
        """The service said a start went past the plan (`why`: overage, 402 not_started):
        without a set limit the fleet keeps to the runs it has in flight now (less `less`
        counted for a start that began none), for LEARNED_SECONDS (said once)."""
        if self.fleet.max_runs is not None or self._alone:
            return
        try:
            answer = await self.fleet._script("LEARN", int(LEARNED_SECONDS * 1000), less)
            limit = int(answer[0]) if answer else 0
        except (FleetError, ValueError) as exc:
            if isinstance(exc, FleetError):
                self._went_alone(exc)
            return
        if limit and not self._learned_said:
            self._learned_said = True
            self.warn(
                f"the service answered {why}: the fleet keeps to {limit} run(s) in flight for "
                f"{LEARNED_SECONDS / 60:g} minutes (set ASYNCCLIENT_FLEET_MAX_RUNS to choose)"
            )

    async def acquire(self, runs: int = 1, *, strict: bool = True, on_wait: Any = None) -> None:
        """Wait for `runs` device slots of the fleet in its fair queue: a higher priority
        class goes first, a lower one ages up as it waits (`HEAD_START`). The limit is
        `Fleet.max_runs`, else the one the service's answers taught (`learn`), else none (the
        start goes at once, counted). strict=False admits as soon as one slot is free (a
        project's start, whose number of runs is known only after it). `on_wait(place,
        in_flight)` (default `waiting`) is called when the place in line changes, and with
        place -1 when the start goes after a wait."""
        most = self.fleet.max_runs
        on_wait = on_wait if on_wait is not None else self.waiting
        if self._alone:
            return
        self._tickets += 1
        ticket = f"{self.identity.job_id}|{self._tickets}"
        head_start = int(HEAD_START.get(self.identity.priority, 0) * 1000)
        shown: int | None = None
        while True:
            if self.ended.is_set() or self.superseded_by is not None:
                raise JobEnded(self.superseded_by)  # superseded while it waited
            try:
                answer = await self.fleet._script(
                    "ACQUIRE", self.identity.job_id, ticket, runs,
                    "" if most is None else most, head_start, "1" if strict else "0",
                )  # fmt: skip
            except FleetError as exc:
                self._went_alone(exc)
                return  # no governor to wait for: the start goes ahead
            granted, place, used, limit = (int(v) for v in answer[:4])
            self.limit = limit if limit > 0 else None
            if place == -2:  # taken for dead meanwhile: nobody governs it now
                self._went_alone(FleetError("the fleet took this job for dead while it waited"))
                return
            if granted:
                if shown is not None and on_wait is not None:
                    on_wait(-1, used)
                return
            if place != shown and on_wait is not None:
                on_wait(place, used)
            shown = place
            await asyncio.sleep(ACQUIRE_POLL)

    def free(self, runs: int = 1) -> None:
        """Give back slots of runs that ended (written at the next beat, at once when woken);
        a negative count charges more (a project's start that began more runs than asked)."""
        if runs:
            self._freed += runs
            self._wake.set()

    @property
    def not_going(self) -> tuple[str, ...]:
        """Held runs known not to be going: those `stopped`, those seen final (`finished`)
        and those a stop found ended already (what a cancel after `ended` need not stop)."""
        return (*self.stopped, *sorted(self._finished - set(self.stopped)))

    def finished(self, run_ids: Iterable[str]) -> None:
        """Held runs seen final: each one's slot given back (as `free`), and never stopped
        when the job is superseded (a stop of an ended run is a request for nothing).

        Args:
            run_ids: Runs of this job the service showed final (others are ignored).
        """
        ended = {r for r in run_ids if r in self._held or r in self._pending} - self._finished
        self._finished |= ended
        self.free(len(ended))

    def hold(self, run_ids: Iterable[str]) -> None:
        """Record runs this job started (written at the next beat, at once when woken)."""
        new = {r for r in run_ids if is_id("run", r)} - self._held
        if new:
            self._pending |= new
            self._wake.set()

    async def flush(self) -> bool:
        """Write the runs given to `hold` now (and beat); False when the ledger could not be
        reached (logged; the beat tries again)."""
        try:
            await self._beat()
        except FleetError as exc:
            self._went_alone(exc)
            return False
        return True

    async def _beat(self) -> None:
        freed, self._freed = self._freed, 0
        if freed:
            try:
                await self.fleet._script("FREE", self.identity.job_id, freed)
            except FleetError:
                self._freed += freed
                raise
        pending, answered = sorted(self._pending), sorted(self._answered)
        answer = await self.fleet._script(
            "BEAT", self.identity.job_id, int(self.fleet.lease * 1000), len(pending), *pending,
            *answered,
        )  # fmt: skip
        state = text(answer[0]) if answer else "ok"
        if state == "gone":
            self.lost = True
            return
        self._held |= set(pending)
        self._pending -= set(pending)
        self._answered -= set(answered)
        if state == "superseded" and self.superseded_by is None:
            # `ended` follows the stops (_beat_forever); with no beat, the follower's cancel.
            self.superseded_by = shown(answer[1]) or "a newer commit"
            self._wake.set()
            if self._task is None or self._task.done():
                self.ended.set()

    def _went_alone(self, exc: FleetError) -> None:
        """The ledger is out of reach: said once; the job goes on alone."""
        if not self._alone:
            self._alone = True
            self.warn(
                f"{exc}; this job goes on alone (starts not governed, polls not shared; "
                f"after {self.fleet.lease:g} s other jobs may take it for dead)"
            )

    async def _beat_forever(self) -> None:
        next_reap = time.monotonic() + self.fleet.lease
        while not self.ended.is_set() and not self._closing and not self.lost:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            try:
                await self._beat()
                if self.lost:
                    self.warn(
                        "the fleet took this job for dead while its ledger was out of reach: "
                        "its runs may have been stopped; it goes on alone"
                    )
                    return
                if self._alone:
                    self._alone = False
                    log.info("the fleet's ledger is reached again")
                if self.superseded_by is not None:
                    await self._stop_superseded()
                    return
                if time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + self.fleet.lease
                    self.reaped.extend(await self.fleet.reap(self._session))
            except FleetError as exc:
                self._went_alone(exc)

    async def _stop_superseded(self) -> None:
        """A newer commit of our ref: our runs not seen final stop now, by us (we hold
        them), once; then `ended` says so."""
        try:
            going = sorted(self.held - self._finished)
            self.stopped, ended, errors = await stop_runs(self._session, going)
            await mark_stopped(self.fleet, self.stopped + ended)
            self._finished |= set(ended)
            for run_id, error in errors.items():
                log.warning("could not stop superseded run %s: %s", run_id, error)
        finally:
            self.ended.set()
