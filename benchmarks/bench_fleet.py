"""A fleet of 40 jobs (40 processes of `asyncclient run test --wait`) sharing one emulator,
without a ledger and then with one (a real redis-server), side by side:

- 10 jobs of main run to their end;
- 10 jobs of main are killed with SIGKILL once their run has started (a runner that died);
- 10 jobs of pull requests pr/1..pr/10 at commit aaaa1111, then, once theirs have started,
  10 jobs of the same pull requests at commit bbbb2222 (a new push).

It prints the GET /runs requests the service answered, the side's runs billed (the spec: a
stopped run is not counted), their device minutes, the runs of gone jobs that ran on, and how
long after the kill or the push their runs stopped.

    .venv/bin/python benchmarks/bench_fleet.py [--jobs-per-role 10] [--lease 5]

The emulator runs at the wall clock's pace (a run of t_search lasts about 20 s), so one side
takes about a minute.
"""

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _support import Emulator
from redis_support import redis_server

from asyncclient import AsyncSession


async def _job(env: dict[str, str], *argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "run", "test", "t_search", "--wait",
        "--interval", "1", *argv, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _started(proc: asyncio.subprocess.Process) -> str:
    """The run id the job says it started."""
    assert proc.stderr is not None
    while True:
        line = (await proc.stderr.readline()).decode()
        if not line:
            raise RuntimeError("a job ended before it started its run")
        if line.startswith("started j_"):
            return line.split()[1]


async def _drain(proc: asyncio.subprocess.Process) -> int:
    assert proc.stderr is not None
    while await proc.stderr.read(65536):
        pass
    return await proc.wait()


async def side(emu: Emulator, fleet_url: str | None, per_role: int, lease: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCCLIENT_", "GITHUB_"))}
    env.update(ASYNCCLIENT_BASE_URL=emu.url, ASYNCCLIENT_API_KEY=emu.run_key)
    if fleet_url:
        env.update(ASYNCCLIENT_FLEET=fleet_url, ASYNCCLIENT_FLEET_LEASE=str(lease))
    began = datetime.now(UTC) - timedelta(seconds=1)
    main = [await _job(env, "--ref", "main", "--commit", "cccc3333") for _ in range(per_role)]
    doomed = [await _job(env, "--ref", "main", "--commit", "cccc3333") for _ in range(per_role)]
    old = [
        await _job(env, "--ref", f"pr/{i}", "--commit", "aaaa1111", "--supersede")
        for i in range(per_role)
    ]
    doomed_runs = await asyncio.gather(*(_started(p) for p in doomed))
    old_runs = await asyncio.gather(*(_started(p) for p in old))
    await asyncio.sleep(1)  # each job's first beat has come and gone
    for proc in doomed:
        proc.send_signal(signal.SIGKILL)
    killed_at = time.time()
    new = [
        await _job(env, "--ref", f"pr/{i}", "--commit", "bbbb2222", "--supersede")
        for i in range(per_role)
    ]
    pushed_at = time.time()
    await asyncio.gather(*(p.wait() for p in doomed))
    codes = await asyncio.gather(*(_drain(p) for p in main + old + new))
    async with AsyncSession(emu.run_key, emu.url) as session:
        # Runs of the gone jobs still going (no ledger: nobody stops them) end by themselves.
        while True:
            views = await session.list_runs(ids=[*doomed_runs, *old_runs])
            if all(run.is_final for run in views):
                break
            await asyncio.sleep(1)
        listed = await session.list_runs(project_id=emu.project_id, limit=200)
        runs = [r for r in listed if r.created_at is not None and r.created_at >= began]

    def billed(run: Any) -> bool:
        return run.is_final and run.status_kind != "cancelled"

    gone = {r.id: r for r in views}
    orphans = [r for r in gone.values() if billed(r)]

    def stopped_after(ids: list[str], since: float) -> list[float]:
        return [
            gone[i].finished_at.timestamp() - since
            for i in ids
            if gone[i].status_kind == "cancelled" and gone[i].finished_at is not None
        ]

    return {
        "polls": emu.stats()["requests"].get("list_runs", 0),
        "billed": sum(billed(r) for r in runs),
        "device_minutes": sum((r.duration_ms or 0) for r in runs if billed(r)) / 60_000,
        "orphans": len(orphans),
        "orphan_minutes": sum((r.duration_ms or 0) for r in orphans) / 60_000,
        "reaped_after": stopped_after(list(doomed_runs), killed_at),
        "superseded_after": stopped_after(list(old_runs), pushed_at),
        "exit_codes": sorted(set(codes)),
    }


async def uploads(emu: Emulator, fleet_url: str | None, jobs: int, apk: Path) -> dict[str, Any]:
    """`jobs` processes uploading the same file at once, each with a state folder of its own
    (as on runners of their own: no lock on one machine joins them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCCLIENT_", "GITHUB_"))}
    env.update(ASYNCCLIENT_BASE_URL=emu.url, ASYNCCLIENT_API_KEY=emu.run_key)
    if fleet_url:
        env.update(ASYNCCLIENT_FLEET=fleet_url)
    before = emu.stats()["requests"].get("upload_part", 0)
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
    parts = emu.stats()["requests"].get("upload_part", 0) - before
    builds = {out.decode().strip() for out, _ in outs}
    return {"parts": parts, "builds": len(builds), "codes": sorted({p.returncode for p in procs})}


async def queueing(emu: Emulator, fleet_url: str | None, slots: int) -> dict[str, Any]:
    """A device plan of `slots` devices: 3 x `slots` pull request jobs, then `slots` main jobs,
    then `slots` more pull request jobs, one run each. Each job's queue wait: from its launch
    to its run's start (the service's clock is the wall clock here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCCLIENT_", "GITHUB_"))}
    env.update(ASYNCCLIENT_BASE_URL=emu.url, ASYNCCLIENT_API_KEY=emu.run_key)
    if fleet_url:
        env.update(ASYNCCLIENT_FLEET=fleet_url, ASYNCCLIENT_FLEET_MAX_RUNS=str(slots))
    classes = ["pr"] * (3 * slots) + ["main"] * slots + ["pr"] * slots
    launched: list[tuple[str, float, asyncio.subprocess.Process]] = []
    for priority in classes:
        launched.append((priority, time.time(), await _job(env, "--priority", priority)))
    run_ids = await asyncio.gather(*(_started(p) for _, _, p in launched))
    await asyncio.gather(*(_drain(p) for _, _, p in launched))
    async with AsyncSession(emu.run_key, emu.url) as session:
        runs = {r.id: r for r in await session.list_runs(ids=run_ids)}
    waits: dict[str, list[float]] = {"main": [], "pr": []}
    for (priority, at, _), run_id in zip(launched, run_ids, strict=True):
        started = runs[run_id].started_at
        if started is not None:
            waits[priority].append(started.timestamp() - at)
    return waits


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):5.1f} s" if values else "    -  "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs-per-role", type=int, default=10)
    parser.add_argument("--lease", type=float, default=5.0)
    args = parser.parse_args()
    n = args.jobs_per_role
    print(f"{4 * n} jobs: {n} main to the end, {n} killed, {n} pull requests superseded by {n}")
    from asyncclient.testing.builders import build_apk

    apk = build_apk(Path(tempfile.mkdtemp()) / "shop.apk", filler_bytes=64 << 20)
    with (
        Emulator(speed=1.0, part_bytes=8 << 20) as emu,
        redis_server(Path(tempfile.mkdtemp())) as redis,
    ):
        alone = asyncio.run(side(emu, None, n, args.lease))
        alone_up = asyncio.run(uploads(emu, None, n, apk))
        with Emulator(speed=1.0, part_bytes=8 << 20) as emu2:
            fleet = asyncio.run(side(emu2, redis.url, n, args.lease))
            fleet_up = asyncio.run(uploads(emu2, redis.url, n, apk))
        slots = max(2, n * 4 // 5)
        with Emulator(speed=1.0, device_slots=slots) as emu3:
            fifo = asyncio.run(queueing(emu3, None, slots))
        with Emulator(speed=1.0, device_slots=slots) as emu4:
            classes = asyncio.run(queueing(emu4, redis.url, slots))
    rows = [
        ("runs billed", "billed", "{:>9d}"),
        ("device minutes billed", "device_minutes", "{:9.1f}"),
        ("runs of gone jobs that ran on", "orphans", "{:>9d}"),
        ("their device minutes", "orphan_minutes", "{:9.1f}"),
        ("GET /runs requests (every job's polls)", "polls", "{:>9d}"),
    ]
    print(f"\n{'':34s}{'no ledger':>12s}{'fleet ledger':>14s}")
    for label, key, form in rows:
        print(f"{label:34s}{form.format(alone[key]):>12s}{form.format(fleet[key]):>14s}")
    print(
        f"{'killed job: runs stopped after':34s}{_median(alone['reaped_after']):>12s}"
        f"{_median(fleet['reaped_after']):>14s}  (median; lease {args.lease:g} s)"
    )
    print(
        f"{'new push: old runs stopped after':34s}{_median(alone['superseded_after']):>12s}"
        f"{_median(fleet['superseded_after']):>14s}  (median)"
    )
    print(f"exit codes: no ledger {alone['exit_codes']}, fleet {fleet['exit_codes']}")
    size = apk.stat().st_size
    print(
        f"\n{n} jobs uploading one {size / 2**20:.0f} MiB file at once (each on a runner of its "
        "own: its own state folder), `upload --reuse-build`:"
    )
    for label, up in (("no ledger", alone_up), ("fleet ledger", fleet_up)):
        print(
            f"  {label:13s} {up['parts']:4d} parts sent ({up['parts'] * 8} MiB at 8 MiB a part, "
            f"for {size / 2**20:.0f} MiB asked), {up['builds']} build(s), exit codes {up['codes']}"
        )
    print(
        f"\nA plan of {slots} devices, {5 * slots} jobs: {3 * slots} pull requests, then "
        f"{slots} of main, then {slots} pull requests (launch to run start):"
    )
    for label, waits in (("no ledger (the service's FIFO)", fifo), ("fleet, classes", classes)):
        print(
            f"  {label:31s} main p95 {_p95(waits['main']):5.1f} s, pull requests p95 "
            f"{_p95(waits['pr']):5.1f} s, longest {max(waits['pr']):5.1f} s "
            f"({len(waits['main']) + len(waits['pr'])} of {5 * slots} started)"
        )
    ratio = _p95(classes["main"]) / _p95(fifo["main"])
    print(f"  main's p95 wait with the fleet: {ratio:.2f}x the FIFO's (goal: at most 0.5x)")


if __name__ == "__main__":
    main()
