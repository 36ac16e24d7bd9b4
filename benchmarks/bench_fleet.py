"""A fleet of 40 CI jobs (40 processes of `asyncclient run project --wait`) sharing one device
plan over 10 minutes of the service's time, without a ledger and then with one (a real
redis-server), side by side. What happens to each job is drawn from a seed, the same on both
sides:

- its class (main, release or a pull request's), its launch time, and its ref and commit (a
  later job of the same pull request is a new push: it supersedes the older one);
- its fate: it runs to its end, its runner dies (SIGKILL), or it is cancelled hard (SIGTERM,
  then SIGKILL a moment later, as a runner with a short grace does), a while after its runs
  started.

The service (the emulator, at `--speed` service seconds a wall second) has a device plan of
`--devices` slots: with no ledger the service's own FIFO decides who runs; with the ledger the
fleet's governor (ASYNCCLIENT_FLEET_MAX_RUNS = the slots) does, by class.

It prints, beside each other: device minutes billed to runs of jobs that were gone (dead,
cancelled or superseded) by then, how long after its lease lapsed each such run was stopped,
the queue wait (launch to the run's start) of each class at p95 and at worst, every request the
service answered per run started, and for one 64 MiB file uploaded by 10 jobs at once, the bytes
sent against the bytes asked.

    .venv/bin/python benchmarks/bench_fleet.py [--seed 1] [--jobs 40] [--minutes 10]

Times are the service's (runs of 180 s, polls every 4 s of it) but the lease, which is the
jobs' own clock. One side takes about 6 wall minutes with the defaults.
"""

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _support import Emulator
from redis_support import redis_server

from asyncclient import AsyncSession

KEY = "bench-fleet-key"
TESTS = ("t_login", "t_search", "t_checkout")


def seed_data(run_seconds: float) -> dict[str, Any]:
    """One project of three web tests whose runs take `run_seconds` (+-50 %)."""
    return {
        "projects": [{"id": "p_fleet", "name": "Fleet", "plan": "paid", "includedRuns": 100_000}],
        "keys": [
            {"key": KEY, "capability": "run", "projects": ["p_fleet"]},
            {"key": KEY + "-edit", "capability": "edit", "projects": ["p_fleet"]},
        ],
        "tests": [
            {
                "id": test,
                "project": "p_fleet",
                "title": test,
                "target": "web",
                "url": "https://shop.example.com",
                "outcome": "passed",
                "queuedSeconds": 1,
                "durationSeconds": run_seconds,
                "durationJitter": 0.5,
            }
            for test in TESTS
        ],
    }


@attrs.frozen
class Job:
    name: str
    priority: str  # main, release, pr
    ref: str
    commit: str
    launch: float  # service seconds after the start
    fate: str  # "end", "killed", "cancelled"
    fate_after: float  # service seconds after its launch


def draw_jobs(seed: int, jobs: int, minutes: float) -> list[Job]:
    """The fleet's jobs, drawn from `seed`: launches over the first 80 % of the window."""
    rng = random.Random(seed)
    window = minutes * 60 * 0.8
    drawn: list[Job] = []
    pushes: dict[str, int] = {}
    for n in range(jobs):
        roll = rng.random()
        priority = "main" if roll < 0.25 else "release" if roll < 0.30 else "pr"
        if priority == "pr":
            ref = f"pr/{rng.randint(1, max(1, jobs // 5))}"
            pushes[ref] = pushes.get(ref, 0) + 1
            commit = f"{pushes[ref]:04x}{n:04x}"  # a later push of the ref: a later commit
        else:
            ref = "main" if priority == "main" else f"release/{n}"
            commit = f"c0de{n:04x}"
        fate_roll = rng.random()
        fate = "killed" if fate_roll < 0.15 else "cancelled" if fate_roll < 0.25 else "end"
        drawn.append(
            Job(
                name=f"job{n:02d}",
                priority=priority,
                ref=ref,
                commit=commit,
                launch=rng.uniform(0, window),
                fate=fate,
                fate_after=rng.uniform(20, 120),
            )
        )
    # Launch order decides which push of a pull request is the newer one.
    drawn.sort(key=lambda job: job.launch)
    counts: dict[str, int] = {}
    renamed = []
    for job in drawn:
        if job.priority == "pr":
            counts[job.ref] = counts.get(job.ref, 0) + 1
            job = attrs.evolve(job, commit=f"{counts[job.ref]:04x}{job.commit[4:]}")
        renamed.append(job)
    return renamed


@attrs.define
class Ran:
    job: Job
    launched: float = 0.0  # wall
    ended: float | None = None  # wall: killed, cancelled, or when a newer push launched
    code: int | None = None
    runs: list[str] = attrs.Factory(list)


async def _follow(proc: asyncio.subprocess.Process, ran: Ran, log: Path | None) -> None:
    assert proc.stderr is not None
    with open(log, "w") if log is not None else contextlib.nullcontext() as kept:
        while True:
            line = (await proc.stderr.readline()).decode()
            if not line:
                break
            if kept is not None:
                kept.write(line)
            if line.startswith("started j_"):
                ran.runs.append(line.split()[1])
    ran.code = await proc.wait()


async def _one(
    job: Job, env: dict[str, str], speed: float, interval: float, t0: float, ran: Ran,
    logs: Path | None,
) -> None:  # fmt: skip
    await asyncio.sleep(max(0.0, t0 + job.launch / speed - time.time()))
    argv = [
        sys.executable, "-m", "asyncclient", "run", "project", "p_fleet", "--wait",
        "--interval", f"{interval / speed:g}", "--ref", job.ref, "--commit", job.commit,
        "--priority", job.priority,
        "--supersede" if job.priority == "pr" else "--no-supersede",
    ]  # fmt: skip
    ran.launched = time.time()
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    log = None if logs is None else logs / f"{job.name}.log"
    following = asyncio.create_task(_follow(proc, ran, log))
    if job.fate != "end":
        # The runner dies (or is cancelled) a while after the job's runs started.
        while not ran.runs and not following.done():  # noqa: ASYNC110 (a child's line)
            await asyncio.sleep(0.1)
        done, _ = await asyncio.wait({following}, timeout=job.fate_after / speed)
        if not done:
            ran.ended = time.time()
            if job.fate == "cancelled":
                proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.3)  # a short grace, then the runner is gone
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
    await following


def _env(emu: Emulator, fleet_url: str | None, devices: int, lease: float) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ASYNCCLIENT_", "GITHUB_", "GITLAB_", "CI_"))
    }
    env.update(ASYNCCLIENT_BASE_URL=emu.url, ASYNCCLIENT_API_KEY=KEY)
    if fleet_url:
        env.update(
            ASYNCCLIENT_FLEET=fleet_url,
            ASYNCCLIENT_FLEET_LEASE=str(lease),
            ASYNCCLIENT_FLEET_MAX_RUNS=str(devices),
        )
    return env


async def side(
    jobs: list[Job], fleet_url: str | None, *, devices: int, speed: float, lease: float,
    run_seconds: float, interval: float, logs: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    with Emulator(seed=seed_data(run_seconds), speed=speed, device_slots=devices) as emu:
        env = _env(emu, fleet_url, devices, lease)
        async with AsyncSession(KEY, emu.url) as session:
            # The service's times against ours: a run's createdAt is its wall-clock now.
            probe = await session.run_test(TESTS[0])
            wall_at_probe = time.time()
            await session.stop_run(probe.run_id)
            created = (await session.get_run(probe.run_id)).created_at
            assert created is not None
            before = dict(emu.stats()["requests"])
            t0 = time.time()
            ran = [Ran(job) for job in jobs]
            await asyncio.gather(*(_one(r.job, env, speed, interval, t0, r, logs) for r in ran))
            # The jobs' requests only: the listing below is this benchmark's own.
            after = emu.stats()["requests"]
            # A newer push makes an older job of its pull request useless from its launch.
            for r in ran:
                newer = [
                    o.launched for o in ran
                    if o.job.ref == r.job.ref and o.job.priority == "pr" and o.launched > r.launched
                ]  # fmt: skip
                if newer and r.job.fate == "end":
                    r.ended = min(newer)
            # The runs of gone jobs that nobody stopped end by themselves.
            every: dict[str, Any] = {}
            while True:
                listed = []
                for test in TESTS:
                    listed += await session.list_runs(test_id=test, limit=200)
                every = {r.id: r for r in listed if r.id != probe.run_id}
                if all(r.is_final for r in every.values()):
                    break
                await asyncio.sleep(2)
            by_op = {op: n - before.get(op, 0) for op, n in after.items() if n > before.get(op, 0)}
            requests = sum(by_op.values())

    def wall(at: datetime | None) -> float | None:
        # The emulator shows a run's times on the wall (its durations in device time).
        if at is None:
            return None
        return wall_at_probe + (at - created).total_seconds()

    gone_minutes = 0.0
    stopped_after_lapse: list[float] = []
    orphans = 0
    waits: dict[str, list[float]] = {"main": [], "release": [], "pr": []}
    never_started: dict[str, int] = {"main": 0, "release": 0, "pr": 0}
    for r in ran:
        views = [every[i] for i in r.runs if i in every]
        if views:
            first = min((wall(v.started_at) or float("inf")) for v in views)
            if first < float("inf"):
                waits[r.job.priority].append((first - r.launched) * speed)
        elif r.job.fate == "end" and r.ended is None:  # not superseded: it wanted to run
            never_started[r.job.priority] += 1
        if r.ended is None:
            continue
        for view in views:
            end = wall(view.finished_at)
            begin = wall(view.started_at)
            if end is None or begin is None or end <= r.ended:
                continue
            if view.status_kind != "cancelled":
                orphans += 1
                gone_minutes += (end - max(begin, r.ended)) * speed / 60
            elif r.job.fate == "killed":
                stopped_after_lapse.append(end - (r.ended + lease))
    started = len(every)
    return {
        "gone_minutes": gone_minutes,
        "orphans": orphans,
        "stopped_after_lapse": stopped_after_lapse,
        "waits": waits,
        "never_started": never_started,
        "requests": requests,
        "by_op": by_op,
        "runs": started,
        "codes": sorted({r.code for r in ran if r.code is not None}),
    }


async def uploads(fleet_url: str | None, jobs: int, apk: Path) -> dict[str, Any]:
    """`jobs` processes uploading the same file at once, each with a state folder of its own
    (as on runners of their own: no lock on one machine joins them)."""
    with Emulator(speed=1.0, part_bytes=8 << 20) as emu:
        # 4 s an upload, longer than the processes take to start: they upload at once.
        emu.set_conditions(link_bandwidth=16 << 20)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCCLIENT_", "GITHUB_"))}
        env.update(ASYNCCLIENT_BASE_URL=emu.url, ASYNCCLIENT_API_KEY=emu.run_key)
        if fleet_url:
            env.update(ASYNCCLIENT_FLEET=fleet_url)
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "asyncclient",
                "upload",
                emu.project_id,
                str(apk),
                "--reuse-build",
                env={**env, "ASYNCCLIENT_STATE_DIR": tempfile.mkdtemp()},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            for _ in range(jobs)
        ]
        outs = await asyncio.gather(*(p.communicate() for p in procs))
        parts = emu.stats()["requests"].get("upload_part", 0)
    builds = {out.decode().strip() for out, _ in outs}
    return {"parts": parts, "builds": len(builds), "codes": sorted({p.returncode for p in procs})}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--minutes", type=float, default=10.0, help="of the service's time")
    parser.add_argument("--speed", type=float, default=4.0, help="service seconds a second")
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--run-seconds", type=float, default=180.0, help="of the service's time")
    parser.add_argument(
        "--interval", type=float, default=4.0, help="each job's polls, in the service's seconds"
    )
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--no-upload", action="store_true")
    parser.add_argument(
        "--logs", type=Path, metavar="DIR", help="keep each job's stderr, a folder per side"
    )
    args = parser.parse_args()
    jobs = draw_jobs(args.seed, args.jobs, args.minutes)
    fates = {f: sum(j.fate == f for j in jobs) for f in ("end", "killed", "cancelled")}
    classes = {c: sum(j.priority == c for j in jobs) for c in ("main", "release", "pr")}
    prs = [j.ref for j in jobs if j.priority == "pr"]
    pushes = len(prs) - len(set(prs))
    print(
        f"seed {args.seed}: {len(jobs)} jobs over {args.minutes:g} service minutes (speed "
        f"{args.speed:g}), {args.devices} devices, runs of {args.run_seconds:g} s +-50 %, polls "
        f"every {args.interval:g} s, lease {args.lease:g} s of our clock; classes {classes}; "
        f"fates {fates}; {pushes} newer push(es)"
    )
    options = {
        "devices": args.devices, "speed": args.speed, "lease": args.lease,
        "run_seconds": args.run_seconds, "interval": args.interval,
    }  # fmt: skip
    with redis_server(Path(tempfile.mkdtemp())) as redis:
        for name in ("alone", "fleet"):
            if args.logs is not None:
                (args.logs / name).mkdir(parents=True, exist_ok=True)
        logs = {n: None if args.logs is None else args.logs / n for n in ("alone", "fleet")}
        alone = asyncio.run(side(jobs, None, logs=logs["alone"], **options))  # type: ignore[arg-type]
        fleet = asyncio.run(side(jobs, redis.url, logs=logs["fleet"], **options))  # type: ignore[arg-type]
        if not args.no_upload:
            from asyncclient.testing.builders import build_apk

            apk = build_apk(Path(tempfile.mkdtemp()) / "shop.apk", filler_bytes=64 << 20)
            alone_up = asyncio.run(uploads(None, 10, apk))
            fleet_up = asyncio.run(uploads(redis.url, 10, apk))
    print(f"\n{'':46s}{'no ledger':>14s}{'fleet ledger':>14s}")

    def row(label: str, a: str, b: str, note: str = "") -> None:
        print(f"{label:46s}{a:>14s}{b:>14s}  {note}")

    saved = 1 - fleet["gone_minutes"] / alone["gone_minutes"] if alone["gone_minutes"] else 0.0
    row(
        "device min. of gone jobs' runs (after gone)",
        f"{alone['gone_minutes']:.1f}",
        f"{fleet['gone_minutes']:.1f}",
        f"{saved:.0%} less (goal 95 %)",
    )
    row("their runs that ran on", str(alone["orphans"]), str(fleet["orphans"]))
    lapse = fleet["stopped_after_lapse"]
    row(
        "killed job's runs stopped after lease lapsed",
        "never",
        f"{max(lapse):.1f} s max" if lapse else "-",
        f"median {statistics.median(lapse):.1f} s; goal within one lease ({args.lease:g} s)"
        if lapse
        else "",
    )
    for cls in ("main", "release", "pr"):
        a, b = alone["waits"][cls], fleet["waits"][cls]
        if not (a or b):
            continue
        row(
            f"queue wait of {cls} (launch to start), p95",
            f"{_p95(a):.0f} s",
            f"{_p95(b):.0f} s",
            f"worst {max(a, default=0):.0f} / {max(b, default=0):.0f} s"
            + (f"; {_p95(b) / _p95(a):.2f}x" if _p95(a) else ""),
        )
    row(
        "jobs to their end that never started a run",
        str(sum(alone["never_started"].values())),
        str(sum(fleet["never_started"].values())),
        "(a starved class would show here)",
    )
    per_run = [s["requests"] / max(1, s["runs"]) for s in (alone, fleet)]
    row(
        "requests to the service per run",
        f"{per_run[0]:.1f}",
        f"{per_run[1]:.1f}",
        f"{per_run[0] / per_run[1]:.1f}x fewer (goal 5x); "
        f"{alone['requests']} / {fleet['requests']} requests, "
        f"{alone['runs']} / {fleet['runs']} runs",
    )
    for label, s in (("no ledger", alone), ("fleet", fleet)):
        ops = ", ".join(f"{op} {n}" for op, n in sorted(s["by_op"].items(), key=lambda i: -i[1]))
        print(f"  requests, {label}: {ops}")
    print(f"exit codes: no ledger {alone['codes']}, fleet {fleet['codes']}")
    if not args.no_upload:
        size = apk.stat().st_size
        print(
            f"\n10 jobs uploading one {size / 2**20:.0f} MiB file at once, `upload --reuse-build`:"
        )
        for label, up in (("no ledger", alone_up), ("fleet ledger", fleet_up)):
            print(
                f"  {label:13s} {up['parts'] * 8:4d} MiB sent for {size / 2**20:.0f} MiB asked "
                f"({up['parts']} parts of 8 MiB), {up['builds']} build(s), exit codes "
                f"{up['codes']}"
            )


if __name__ == "__main__":
    main()
