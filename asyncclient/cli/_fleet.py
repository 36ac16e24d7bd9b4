"""The fleet on the command line: `run ... --wait` and `watch` join its ledger when one is set
(ASYNCCLIENT_FLEET, or `url` in the user file's `[fleet]`; never a project file, which a pull
request can change); `fleet reap` and `fleet status` look after it (asyncclient.fleet)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_NOT_PASSED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    CommandError,
    add_command,
    add_group,
    open_session,
)
from asyncclient.cli._options import read
from asyncclient.cli._output import Output

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.fleet import FleetJob

_EXAMPLES = """\
  export ASYNCCLIENT_FLEET=redis://ci-redis:6379/0
  asyncclient fleet status                          # the jobs, their refs, commits and runs
  asyncclient fleet reap                            # stop the runs of dead jobs (a cron's line)
"""


# Set once this command said it goes on without its unreachable ledger (said once).
_ALONE: contextvars.ContextVar[bool] = contextvars.ContextVar("asyncclient_alone", default=False)


@attrs.frozen(kw_only=True)
class FleetOptions:
    """Where the ledger is and who this job is in it."""

    fleet_config: Mapping[str, Any] = attrs.field(factory=dict)
    ref: str | None = None
    commit: str | None = None
    supersede: bool | None = None
    priority: str | None = None


def add_fleet_options(parser: argparse.ArgumentParser) -> None:
    """The flags of a job in the fleet (they matter only when a ledger is set)."""
    group = parser.add_argument_group("fleet (with ASYNCCLIENT_FLEET set)")
    group.add_argument(
        "--ref",
        help="the branch or merge request this job tests (default: from the CI's variables)",
    )
    group.add_argument("--commit", help="its commit (default: from the CI's variables)")
    group.add_argument(
        "--supersede",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stop the runs of this ref's jobs at older commits (default: on for merge "
        "requests, off for main and tags)",
    )
    group.add_argument(
        "--priority",
        metavar="CLASS",
        help="this job's class in the queue for device slots (ASYNCCLIENT_FLEET_MAX_RUNS): "
        "release, main or pr go first in that order, a waiting lower class ages up; default "
        "from the CI's variables",
    )


def _settings(options: FleetOptions) -> tuple[str, float, int | None] | None:
    """The ledger's URL, lease and limit of runs in flight, or None when no ledger is set."""
    import os

    from asyncclient.config import user_config_path
    from asyncclient.fleet import DEFAULT_LEASE, LEASE_ENV, URL_ENV

    url = os.environ.get(URL_ENV, "").strip()
    table = options.fleet_config
    if not url and "url" in table:
        setting = table["url"]
        where = str(setting.origin).rsplit(":", 1)[0]
        if Path(where) != user_config_path():
            raise CommandError(
                f"{setting.origin}: a project file may not name the fleet's ledger (it tells "
                f"jobs which runs to stop); set {URL_ENV} or `url` in your user file's [fleet]"
            )
        url = str(setting.value)
    if not url:
        return None
    text = os.environ.get(LEASE_ENV, "").strip()
    lease: Any = text or (table["lease"].value if "lease" in table else DEFAULT_LEASE)
    try:
        lease = float(lease)
    except ValueError:
        raise CommandError(f"{LEASE_ENV}={text!r} is not a number of seconds") from None
    from asyncclient.fleet import MAX_RUNS_ENV

    text = os.environ.get(MAX_RUNS_ENV, "").strip()
    most: Any = text or (table["max_runs"].value if "max_runs" in table else None)
    if most is not None:
        try:
            most = int(most)
        except ValueError:
            raise CommandError(f"{MAX_RUNS_ENV}={text!r} is not a number of runs") from None
    return url, lease, most


@contextlib.asynccontextmanager
async def fleet_job(
    args: argparse.Namespace, out: Output, session: AsyncSession, build: str | None = None
) -> AsyncIterator[FleetJob | None]:
    """This job in the fleet's ledger for the block (None without a ledger). A job superseded
    before it starts anything ends here: 130, "superseded by COMMIT". `build`: the build it
    runs, whose time orders its commit when the CI gives no run number."""
    options = read(FleetOptions, args)
    found = _settings(options)
    if found is None:
        if options.ref or options.commit or options.priority or options.supersede is not None:
            out.warning(
                "--ref, --commit, --supersede and --priority need a fleet ledger "
                "(ASYNCCLIENT_FLEET)"
            )
        yield None
        return
    from asyncclient.fleet import Fleet, FleetError
    from asyncclient.fleet._common import redact_url

    url, lease, most = found
    built_at = None
    if build is not None:
        from asyncclient.errors import AsyncClientError

        with contextlib.suppress(AsyncClientError):  # unread: the start order decides
            built_at = (await session.get_build(build)).created_at
        if built_at is not None and built_at > datetime.now(UTC) + timedelta(minutes=5):
            built_at = None  # a build from the future orders nothing: the start order decides
    try:
        fleet = Fleet(url, lease=lease, max_runs=most)
        job = fleet.job(
            session,
            ref=options.ref,
            commit=options.commit,
            supersede=options.supersede,
            priority=options.priority,
            built_at=built_at,
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    try:
        await fleet.connect()
        entered = await job.__aenter__()
    except FleetError as exc:
        out.warning(f"{exc}; this job goes on alone, outside the fleet")
        _ALONE.set(True)
        await fleet.close()
        yield None
        return
    job.warn = out.warning
    try:
        async with _entered(entered):
            if job.superseded_by is not None:
                raise CommandError(
                    f"superseded by {job.superseded_by}: a newer commit of "
                    f"{job.identity.ref} is running in the fleet; nothing started",
                    EXIT_INTERRUPTED,
                )
            ident = job.identity
            out.info(
                f"fleet: job {ident.job_id} in {redact_url(url)}"
                + (f", ref {ident.ref}" if ident.ref else "")
                + (f" at {ident.commit[:12]}" if ident.commit else "")
                + (f"; superseded {len(job.marked)} older job(s)" if job.marked else "")
                + (f"; at most {most} in flight, class {ident.priority}" if most else "")
            )
            for reaped in job.reaped:
                out.info(
                    f"fleet: reaped dead job {reaped.job_id}: stopped {len(reaped.stopped)} "
                    "run(s)" + (" " + " ".join(reaped.stopped) if reaped.stopped else "")
                )
            yield job
    finally:
        await fleet.close()


def governed(session: AsyncSession, job: FleetJob | None, out: Output) -> Any:
    """The session whose starts are recorded in the fleet's ledger before they are sent and
    wait their turn for its device slots (the session itself without a ledger); a wait is said
    when the place in line changes: a line, or the live table's caption while it is drawn."""
    if job is None:
        return session
    from asyncclient.fleet import GovernedSession

    def waiting(place: int, in_flight: int) -> None:
        if place >= 0:
            out.info(f"fleet: waiting for a device slot ({place_text(job, place, in_flight)})")

    job.waiting = waiting
    return GovernedSession(session, job)


@contextlib.asynccontextmanager
async def ended_before_start(job: FleetJob | None) -> AsyncIterator[None]:
    """A first start the fleet ended while it waited for a device slot (a newer commit
    superseded the job): 130, "superseded by COMMIT: ... nothing started"."""
    if job is None:
        yield
        return
    from asyncclient.fleet import JobEnded

    try:
        yield
    except JobEnded as exc:
        raise CommandError(
            f"superseded by {exc.superseded_by or 'a newer commit'} while waiting for a device "
            f"slot: a newer commit of {job.identity.ref} is running in the fleet; nothing "
            "started",
            EXIT_INTERRUPTED,
        ) from None


def place_text(job: FleetJob, place: int, in_flight: int) -> str:
    """A start's place in the fleet's line, in words."""
    ahead = "next" if place == 0 else f"{place} start(s) ahead"
    limit = f" of {job.limit}" if job.limit else ""
    return f"{ahead}; {in_flight}{limit} runs in flight"


@contextlib.asynccontextmanager
async def _entered(job: FleetJob) -> AsyncIterator[FleetJob]:
    """A job already entered, left (released) when the block ends."""
    try:
        yield job
    finally:
        await job.__aexit__(None, None, None)


def fleet_ended(job: FleetJob, out: Output) -> int:
    """What a job the fleet ended says, and its exit code (as for a cancel)."""
    out.error(
        f"superseded by {job.superseded_by}: a newer commit of {job.identity.ref} started; "
        f"this job's runs were stopped"
    )
    return EXIT_INTERRUPTED


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = add_group(
        sub, "fleet", parents, help="the fleet's run ledger on Redis", examples=_EXAMPLES
    )
    add_command(
        group,
        "status",
        parents,
        handler="asyncclient.cli._fleet:status",
        help="the jobs of the ledger: ref, commit, runs held, lease left",
    )
    add_command(
        group,
        "reap",
        parents,
        handler="asyncclient.cli._fleet:reap",
        help="stop the queued and running runs of jobs whose lease expired (once each)",
    )


async def _connected(args: argparse.Namespace) -> Any:
    from asyncclient.fleet import Fleet, FleetError

    found = _settings(read(FleetOptions, args))
    if found is None:
        raise CommandError(
            "no fleet ledger: set ASYNCCLIENT_FLEET=redis://host:6379/0 (or `url` in your user "
            "file's [fleet] table)"
        )
    try:
        fleet = Fleet(found[0], lease=found[1], max_runs=found[2])
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    try:
        await fleet.connect()
    except FleetError as exc:
        raise CommandError(str(exc), EXIT_UNREACHABLE) from None
    return fleet


async def status(args: argparse.Namespace, out: Output) -> int:
    from asyncclient._core._untrusted import line
    from asyncclient.fleet import status_json

    fleet = await _connected(args)
    try:
        jobs = await fleet.status()
        learned = await fleet.learned_limit() if fleet.max_runs is None else None
    finally:
        await fleet.close()
    shown = status_json(jobs, fleet.max_runs, learned)
    if out.json_mode:
        out.json(shown)
        return EXIT_OK
    if not jobs:
        out.data("no job in the fleet")
    for j in jobs:
        left = f"{j.lease_left:.0f} s" if j.lease_left is not None else "expired"
        by = f"  superseded by {line(j.superseded_by)}" if j.superseded_by else ""
        slots = f"  {j.in_flight} in flight" if j.in_flight else ""
        waits = f"  {j.queued} start(s) waiting" if j.queued else ""
        out.data(
            f"{line(j.job_id)}  ref {line(j.ref or '-')}  commit {line((j.commit or '-')[:12])}  "
            f"{len(j.runs)} run(s)  lease {left}{slots}{waits}{by}"
        )
    most = shown["maxRuns"]
    limit = f" of {most}" if most else " (no limit set: ASYNCCLIENT_FLEET_MAX_RUNS)"
    if learned is not None and not most:
        limit = (
            f" of {learned[0]} (learned from the service's answers, for "
            f"{learned[1] / 60:.0f} more min)"
        )
    waiting = (
        ", ".join(f"{line(name)} {n}" for name, n in sorted(shown["queuedStarts"].items()))
        or "none"
    )
    out.data(f"runs in flight: {shown['inFlight']}{limit}; starts waiting by class: {waiting}")
    return EXIT_OK


async def reap(args: argparse.Namespace, out: Output) -> int:
    from asyncclient._core._untrusted import line

    fleet = await _connected(args)
    try:
        async with open_session(args) as session:
            reaped = await fleet.reap(session)
    finally:
        await fleet.close()
    code = EXIT_NOT_PASSED if any(r.errors for r in reaped) else EXIT_OK
    if out.json_mode:
        out.json(
            {
                "reaped": [
                    {
                        "jobId": r.job_id,
                        "ref": r.ref,
                        "commit": r.commit,
                        "stopped": list(r.stopped),
                        "ended": list(r.ended),
                        "errors": dict(r.errors),
                    }
                    for r in reaped
                ]
            }
        )
        return code
    if not reaped:
        out.data("no dead job")
    for r in reaped:
        ended = f" ({len(r.ended)} run(s) had ended already)" if r.ended else ""
        out.data(f"reaped {line(r.job_id)}: stopped {' '.join(r.stopped) or 'nothing'}{ended}")
        for run_id, error in r.errors.items():
            out.warning(f"could not stop {run_id}: {error}")
    # A run left going is worth a red cron job.
    return EXIT_NOT_PASSED if any(r.errors for r in reaped) else EXIT_OK


async def upload_once(
    args: argparse.Namespace,
    out: Output,
    session: AsyncSession,
    items: list[Any],
    project_id: str,
    upload_many: Any,
    display: Any,
) -> list[Any] | None:
    """`upload --reuse-build` in a fleet: each file (by sha256) is uploaded by the first job
    to claim it; the others wait and reuse its build once it reads back as this file's, in
    this project, ready; a claim whose holder dies or fails is taken over. None without a
    ledger (the caller reuses a ready build with the same sha256 alone)."""
    import hashlib

    from asyncclient.fleet import Fleet, FleetError, identity_from_ci
    from asyncclient.fleet._uploads import UploadClaims, reusable
    from asyncclient.upload import UploadResult

    found = _settings(read(FleetOptions, args))
    if found is None:
        return None
    try:
        fleet = Fleet(found[0], lease=found[1])
        await fleet.connect()
    except (ValueError, FleetError) as exc:
        raise CommandError(str(exc), EXIT_UNREACHABLE) from None

    def digest(path: Path) -> str:
        sha = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                sha.update(chunk)
        return sha.hexdigest()

    claims = UploadClaims(fleet, identity_from_ci().job_id)
    try:
        shas = await asyncio.gather(*(asyncio.to_thread(digest, Path(i.path)) for i in items))
        results: list[Any] = [None] * len(items)

        async def upload(indexes: list[int]) -> None:
            done = await upload_many([items[i] for i in indexes])
            for index, result in zip(indexes, done, strict=True):
                results[index] = result
                ok = result.ok and result.build is not None
                await claims.done(project_id, shas[index], result.build.id if ok else None)

        async def follow(index: int, holder: str) -> None:
            item, sha = items[index], shas[index]
            display.waiting(
                index, f"waiting for fleet job {holder or '?'}'s upload of {Path(item.path).name}"
            )
            while True:
                build_id, held = await claims.published(project_id, sha)
                if build_id is not None:
                    build = await reusable(session, build_id, project_id, sha)
                    if build is not None:
                        results[index] = UploadResult(
                            Path(item.path), item.label, build=build, sha256=sha,
                            verified=True, joined=True,
                        )  # fmt: skip
                        display.finished(results[index])
                        return
                    # Published, but not this file's ready build: never reused.
                    out.warning(
                        f"{Path(item.path).name}: the fleet's build {build_id} is not this "
                        "file's ready build in this project: uploading it here"
                    )
                    await upload([index])
                    return
                if not held and await claims.claim(project_id, sha) is None:
                    await upload([index])  # its holder died or failed: ours now
                    return
                await asyncio.sleep(0.5)

        ours: list[int] = []
        waits = []
        for index, sha in enumerate(shas):
            holder = await claims.claim(project_id, sha)
            if holder is None:
                ours.append(index)
            else:
                waits.append(follow(index, holder))
        await asyncio.gather(*([upload(ours)] if ours else []), *waits)
        return results
    except FleetError as exc:
        raise CommandError(str(exc), EXIT_UNREACHABLE) from None
    finally:
        await claims.close()
        await fleet.close()


@contextlib.asynccontextmanager
async def shared_views(
    args: argparse.Namespace, out: Output, session: Any, job: FleetJob | None
) -> AsyncIterator[Any]:
    """The session whose run views are shared across the fleet (one sweep for the fleet:
    asyncclient.fleet._views), the session itself without a ledger or when it cannot be
    reached (said once)."""
    from asyncclient.fleet import Fleet, FleetError, identity_from_ci
    from asyncclient.fleet._views import SharedViews

    if job is not None:
        views = SharedViews(session, job.fleet, job.job_id)
        try:
            yield views
        finally:
            await views.close()
        return
    found = _settings(read(FleetOptions, args))
    if found is None or _ALONE.get():
        yield session
        return
    try:
        fleet = Fleet(found[0], lease=found[1])
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    try:
        await fleet.connect()
    except FleetError as exc:
        out.warning(f"{exc}; this job goes on alone, outside the fleet")
        yield session
        return
    views = SharedViews(session, fleet, identity_from_ci().job_id)
    try:
        yield views
    finally:
        await views.close()
        await fleet.close()
