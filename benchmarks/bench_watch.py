"""Benchmark: following 10,000 runs with RunWatcher vs a naive GET /runs/{id} poller.

The emulator runs in its own process on a manual clock; each watcher's pause moves that clock
(POST /_emulator/advance), so both see the same service minute of runs finishing and no time is
spent waiting. Prints both figures side by side with their ratio; exits 1 if a target is missed.

    .venv/bin/python benchmarks/bench_watch.py [--runs 10000] [--rounds 5] [--networks plain,tls]
    .venv/bin/python benchmarks/bench_watch.py --scale --networks plain --rounds 3

By default it runs over plain HTTP, then over HTTPS (the emulator with a throwaway CA).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import resource
import ssl
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

from asyncclient import AsyncSession
from asyncclient._core._checks import IDS_PER_REQUEST
from asyncclient.models import Run
from asyncclient.watch import RunWatcher

KEY = "bench-run"
OUTCOMES = ("passed", "failed", "blocked", "inconclusive", "error")
INTERVAL = 3.0  # service seconds between sweeps, the same for both watchers
NAIVE_CONCURRENCY = 64  # GET /runs/{id} in flight at once (the session's connection limit)
STOP_FRACTION = 0.01  # runs stopped right after creation, so "cancelled" is among the answers


def seed() -> dict[str, Any]:
    web = {"project": "p_bench", "target": "web", "url": "https://shop.example"}
    # Runs queue 2 s, then run 30 s +-95%: they finish spread over a service minute.
    tests = [
        {
            "id": f"t_{outcome}",
            "title": f"Ends {outcome}",
            "outcome": outcome,
            "queuedSeconds": 2,
            "durationSeconds": 30,
            "durationJitter": 0.95,
            **web,
        }
        for outcome in OUTCOMES
    ]
    tests.append({"id": "t_parked", "title": "Queued for a day", "queuedSeconds": 86400, **web})
    return {
        "projects": [{"id": "p_bench", "name": "Bench", "plan": "paid", "includedRuns": 10**7}],
        "keys": [{"key": KEY, "capability": "run", "projects": ["p_bench"]}],
        "tests": tests,
    }


# --- the emulator, in its own process -------------------------------------------------------------


def serve(seed_path: str, conn: Connection, tls: bool = False) -> None:
    async def main() -> None:
        from asyncclient.testing import FakeService

        async with FakeService(seed_path, clock="manual", tls=tls) as svc:
            conn.send((svc.url, str(svc.ca_file) if svc.ca_file else None))
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)

    asyncio.run(main())


class Emulator:
    """The admin routes of the emulator, over a plain aiohttp session (independent of ours)."""

    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url = url
        self.http = http
        self.headers = {"Authorization": f"Bearer {KEY}"}

    async def stats(self) -> dict[str, Any]:
        async with self.http.get(f"{self.url}/_emulator/stats") as answer:
            result: dict[str, Any] = await answer.json()
            return result

    async def advance(self, seconds: float) -> None:
        body = {"seconds": seconds}
        async with self.http.post(f"{self.url}/_emulator/advance", json=body) as answer:
            answer.raise_for_status()

    async def create(self, test_id: str, count: int) -> list[str]:
        body = {"testId": test_id, "count": count}
        async with self.http.post(f"{self.url}/_emulator/runs", json=body) as answer:
            answer.raise_for_status()
            ids: list[str] = (await answer.json())["runIds"]
            return ids

    async def create_spread(self, total: int) -> list[str]:
        """`total` runs over the five outcomes, interleaved; 1% of them stopped at once."""
        per_test = [await self.create(f"t_{o}", total // len(OUTCOMES)) for o in OUTCOMES]
        ids = [run_id for group in zip(*per_test, strict=True) for run_id in group]
        for run_id in ids[:: int(1 / STOP_FRACTION)]:
            url = f"{self.url}/api/v1/runs/{run_id}/stop"
            async with self.http.post(url, headers=self.headers) as answer:
                answer.raise_for_status()
        return ids

    async def truth(self, ids: list[str]) -> dict[str, str]:
        """The emulator's own final status of each run (raw HTTP, not asyncclient)."""
        statuses: dict[str, str] = {}
        for start in range(0, len(ids), IDS_PER_REQUEST):
            query = {"ids": ",".join(ids[start : start + IDS_PER_REQUEST])}
            url = f"{self.url}/api/v1/runs"
            async with self.http.get(url, params=query, headers=self.headers) as answer:
                for run in (await answer.json())["runs"]:
                    statuses[run["id"]] = run["status"]
        return statuses


# --- the two watchers ---------------------------------------------------------------------------


class Tally:
    """What one watcher reported: final events per run, sweeps, client-side request count."""

    def __init__(self) -> None:
        self.finals: Counter[str] = Counter()
        self.final_status: dict[str, str] = {}
        self.events = 0
        self.sweeps = 0
        self.requests = 0
        self.per_sweep: list[tuple[int, int]] = []  # (requests, runs unfinished before it)

    def saw(self, run: Run) -> None:
        self.events += 1
        if run.is_final:
            self.finals[run.id] += 1
            self.final_status[run.id] = str(run.status)


async def ours(
    session: AsyncSession, ids: list[str], sleep: Callable[[float], Awaitable[None]], **pace: Any
) -> Tally:
    tally = Tally()
    marks = [0]
    unfinished = [len(ids)]
    clock = [0.0]  # the watcher's clock: service seconds, moved only by its own pauses

    async def pause(seconds: float) -> None:
        tally.per_sweep.append((watcher.requests - marks[-1], unfinished[-1]))
        marks.append(watcher.requests)
        unfinished.append(len(watcher.pending))
        clock[0] += seconds
        await sleep(seconds)

    watcher = RunWatcher(session, ids, sleep=pause, clock=lambda: clock[0], **pace)
    async for run in watcher:
        tally.saw(run)
    tally.per_sweep.append((watcher.requests - marks[-1], unfinished[-1]))
    tally.sweeps, tally.requests = watcher.sweeps, watcher.requests
    return tally


async def naive(
    session: AsyncSession, ids: list[str], sleep: Callable[[float], Awaitable[None]]
) -> Tally:
    """What one writes without the watcher: get_run for each unfinished run, every interval."""
    tally = Tally()
    semaphore = asyncio.Semaphore(NAIVE_CONCURRENCY)
    last: dict[str, str] = {}

    async def get(run_id: str) -> Run:
        async with semaphore:
            return await session.get_run(run_id)

    pending = list(ids)
    while True:
        runs = await asyncio.gather(*(get(run_id) for run_id in pending))
        tally.sweeps += 1
        tally.requests += len(pending)
        tally.per_sweep.append((len(pending), len(pending)))
        for run in runs:
            if last.get(run.id) != run.status:
                last[run.id] = str(run.status)
                tally.saw(run)
        pending = [run.id for run in runs if not run.is_final]
        if not pending:
            return tally
        await sleep(INTERVAL)


# --- measuring ----------------------------------------------------------------------------------


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measured(emulator: Emulator, work: Awaitable[Tally]) -> dict[str, Any]:
    before = await emulator.stats()
    cpu0, wall0 = cpu(), time.perf_counter()
    tally = await work
    cpu1, wall1 = cpu(), time.perf_counter()
    after = await emulator.stats()
    counts = Counter(after["requests"])
    counts.subtract(before["requests"])
    return {
        "tally": tally,
        "client_cpu": cpu1 - cpu0,
        "wall": wall1 - wall0,
        "server_requests": counts["list_runs"] + counts["get_run"],
        "server_cpu": after["cpuSeconds"] - before["cpuSeconds"],
        "max_ids": after["maxIds"],
    }


async def one_sweep_ours(session: AsyncSession, ids: list[str]) -> tuple[float, float, int]:
    """Wall and client CPU seconds of one RunWatcher sweep over `ids` (all unfinished)."""
    watcher = RunWatcher(session, ids)
    cpu0, wall0 = cpu(), time.perf_counter()
    await watcher.__anext__()  # the first sweep: every run is new, so it yields at once
    wall, used = time.perf_counter() - wall0, cpu() - cpu0
    await watcher.aclose()
    return wall, used, watcher.requests


async def one_sweep_naive(session: AsyncSession, ids: list[str]) -> tuple[float, float, int]:
    semaphore = asyncio.Semaphore(NAIVE_CONCURRENCY)

    async def get(run_id: str) -> Run:
        async with semaphore:
            return await session.get_run(run_id)

    cpu0, wall0 = cpu(), time.perf_counter()
    await asyncio.gather(*(get(run_id) for run_id in ids))
    return time.perf_counter() - wall0, cpu() - cpu0, len(ids)


def check_correct(tally: Tally, ids: list[str], truth: dict[str, str]) -> tuple[bool, str]:
    once = all(tally.finals[run_id] == 1 for run_id in ids) and len(tally.finals) == len(ids)
    same = all(tally.final_status.get(run_id) == truth.get(run_id) for run_id in ids)
    mix = Counter(truth[run_id] for run_id in ids)
    detail = ", ".join(f"{mix[s]} {s}" for s in (*OUTCOMES, "cancelled") if mix[s])
    return once and same, detail


# --- the report ---------------------------------------------------------------------------------


def ratio(base: float, our: float, word: str) -> str:
    return f"{base / our:.1f}x {word}" if our > 0 else "n/a"


def median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The last round's tally (the counts are the same every round) with median timings."""
    merged = dict(results[-1])
    for key in ("client_cpu", "server_cpu", "wall"):
        merged[key] = statistics.median(r[key] for r in results)
    merged["client_cpu_rounds"] = [r["client_cpu"] for r in results]
    return merged


async def bench(url: str, total: int, rounds: int, minutes: int, ca_file: str | None = None) -> int:
    tls = ssl.create_default_context(cafile=ca_file) if ca_file else True
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as http,
        AsyncSession(api_key=KEY, base_url=url, ca_file=ca_file, proxy="direct") as s,
    ):
        emulator = Emulator(url, http)
        over = "HTTPS" if ca_file else "plain HTTP"
        print(
            f"asyncclient watch benchmark over {over}: {total:,} runs, emulator in its own "
            f"process ({url})"
        )
        print(
            f"  runs queue 2 s, then take 30 s +-95% of service time ({', '.join(OUTCOMES)};\n"
            f"  {STOP_FRACTION:.0%} stopped at once). Both watchers pause {INTERVAL:g} s of "
            "service time between sweeps (fixed, no\n  jitter); each pause moves the emulator's "
            "manual clock, so nobody waits."
        )
        # The whole minute, on fresh runs for each watcher: ours, the naive one, ours again
        # with its default pace (jitter, growth).
        # The machine is noisy: the minute is run `minutes` times, alternating which watcher
        # goes first, and the CPU and wall figures are medians.
        fixed = {"interval": INTERVAL, "jitter": 0.0, "growth": 1.0}
        rounds_ours: list[dict[str, Any]] = []
        rounds_naive: list[dict[str, Any]] = []
        correct_ours: list[bool] = []
        correct_naive: list[bool] = []
        for minute in range(minutes):
            for side in ("ours", "naive") if minute % 2 == 0 else ("naive", "ours"):
                ids = await emulator.create_spread(total)
                if side == "ours":
                    work = ours(s, ids, emulator.advance, **fixed)
                else:
                    work = naive(s, ids, emulator.advance)
                result = await measured(emulator, work)
                ok, mix = check_correct(result["tally"], ids, await emulator.truth(ids))
                (rounds_ours if side == "ours" else rounds_naive).append(result)
                (correct_ours if side == "ours" else correct_naive).append(ok)
        result_ours, result_naive = median_result(rounds_ours), median_result(rounds_naive)
        ids_default = await emulator.create_spread(total)
        result_default = await measured(emulator, ours(s, ids_default, emulator.advance))
        truth_default = await emulator.truth(ids_default)
        # One sweep over `total` unfinished runs (queued for a day), several rounds each.
        parked = await emulator.create("t_parked", total)
        sweeps_ours = [await one_sweep_ours(s, parked) for _ in range(rounds)]
        sweeps_naive = [await one_sweep_naive(s, parked) for _ in range(max(1, rounds // 2))]

    t_ours, t_naive, t_default = (
        result_ours["tally"],
        result_naive["tally"],
        result_default["tally"],
    )
    ok_ours, ok_naive = all(correct_ours), all(correct_naive)
    ok_default, _ = check_correct(t_default, ids_default, truth_default)
    per_sweep_ok = all(got == math.ceil(left / 50) for got, left in t_ours.per_sweep)
    polls_ours = sum(left for _, left in t_ours.per_sweep)
    polls_naive = sum(left for _, left in t_naive.per_sweep)
    wall_o = statistics.median(w for w, _, _ in sweeps_ours)
    cpu_o = statistics.median(c for _, c, _ in sweeps_ours)
    wall_n = statistics.median(w for w, _, _ in sweeps_naive)
    cpu_n = statistics.median(c for _, c, _ in sweeps_naive)
    req_n, req_o = result_naive["server_requests"], result_ours["server_requests"]
    cpu_tn, cpu_to = result_naive["client_cpu"], result_ours["client_cpu"]
    srv_n, srv_o = result_naive["server_cpu"], result_ours["server_cpu"]

    lines = [
        ("", "naive get_run", "RunWatcher", "RunWatcher vs naive"),
        ("whole minute: sweeps", f"{t_naive.sweeps}", f"{t_ours.sweeps}", ""),
        ("  runs polled (sum over sweeps)", f"{polls_naive:,}", f"{polls_ours:,}", ""),
        ("  requests (emulator's count)", f"{req_n:,}", f"{req_o:,}", ratio(req_n, req_o, "fewer")),
        ("  requests (client's count)", f"{t_naive.requests:,}", f"{t_ours.requests:,}", ""),
        (
            f"  client CPU (s), median of {minutes}",
            f"{cpu_tn:.2f}",
            f"{cpu_to:.2f}",
            ratio(cpu_tn, cpu_to, "less"),
        ),
        (
            "  client CPU per round (s)",
            "/".join(f"{c:.1f}" for c in result_naive["client_cpu_rounds"]),
            "/".join(f"{c:.2f}" for c in result_ours["client_cpu_rounds"]),
            "",
        ),
        (
            "  client CPU per run polled (us)",
            f"{cpu_tn / polls_naive * 1e6:.1f}",
            f"{cpu_to / polls_ours * 1e6:.1f}",
            "",
        ),
        ("  emulator CPU (s)", f"{srv_n:.2f}", f"{srv_o:.2f}", ratio(srv_n, srv_o, "less")),
        ("  wall time (s)", f"{result_naive['wall']:.2f}", f"{result_ours['wall']:.2f}", ""),
        ("  status changes reported", f"{t_naive.events:,}", f"{t_ours.events:,}", ""),
        (f"one sweep over {total:,} unfinished", "", "", ""),
        ("  wall time (s)", f"{wall_n:.3f}", f"{wall_o:.3f}", ratio(wall_n, wall_o, "faster")),
        ("  client CPU (s)", f"{cpu_n:.3f}", f"{cpu_o:.3f}", ratio(cpu_n, cpu_o, "less")),
        (
            "  client CPU per run (us)",
            f"{cpu_n / total * 1e6:.1f}",
            f"{cpu_o / total * 1e6:.1f}",
            "",
        ),
        ("  requests", f"{sweeps_naive[0][2]:,}", f"{sweeps_ours[0][2]:,}", ""),
    ]
    print()
    for label, base, our, note in lines:
        print(f"  {label:<36}{base:>16} {our:>15}   {note}".rstrip())
    print(
        f"  (one sweep: median of {len(sweeps_ours)} rounds for RunWatcher, "
        f"{len(sweeps_naive)} for naive)"
    )
    print()
    first_req, first_left = t_ours.per_sweep[0]
    print(
        f"requests per sweep == ceil(unfinished / 50) in all {len(t_ours.per_sweep)} sweeps: "
        f"{'yes' if per_sweep_ok else 'NO'} (first: {first_req} requests for {first_left:,} "
        f"runs); most ids in one request: {result_ours['max_ids']}"
    )
    print(
        f"every run reported exactly once as final, with the emulator's status: "
        f"{'yes' if ok_ours else 'NO'} ({mix}); naive: {'yes' if ok_naive else 'NO'}"
    )
    print(
        f"RunWatcher with its default pace (3 s +-20%, x1.5 while nothing changes): "
        f"{t_default.sweeps} sweeps, {result_default['server_requests']:,} requests, "
        f"client CPU {result_default['client_cpu']:.2f} s, all reported once: "
        f"{'yes' if ok_default else 'NO'}"
    )
    targets = [
        (">= 45x fewer requests", req_n / req_o >= 45, f"{req_n / req_o:.1f}x"),
        (">= 10x less client CPU", cpu_tn / cpu_to >= 10, f"{cpu_tn / cpu_to:.1f}x"),
        (f"one sweep over {total:,} unfinished < 1 s", wall_o < 1.0, f"{wall_o:.3f} s"),
        ("requests per sweep = ceil(unfinished / 50)", per_sweep_ok, ""),
        ("every run final exactly once, right status", ok_ours and ok_default, ""),
    ]
    print()
    for name, passed, figure in targets:
        print(f"  {'PASS' if passed else 'FAIL'}  {name}  {figure}".rstrip())
    return 0 if all(passed for _, passed, _ in targets) else 1


def _rss() -> int:
    """This process's resident memory now, in bytes (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


async def scale(url: str, sizes: list[int], rounds: int, ca_file: str | None = None) -> int:
    """One RunWatcher sweep over 1k / 10k / 100k unfinished runs, side by side: client CPU per
    run, wall time, and for the largest the memory the watch holds per run."""
    over = "HTTPS" if ca_file else "plain HTTP"
    print(f"asyncclient watch, the curve over {over}: one first sweep over N unfinished runs")
    tls = ssl.create_default_context(cafile=ca_file) if ca_file else True
    rows: list[tuple[int, float, float, float]] = []
    held = 0.0
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as http,
        AsyncSession(api_key=KEY, base_url=url, ca_file=ca_file, proxy="direct") as s,
    ):
        emulator = Emulator(url, http)
        for size in sizes:
            parked = await emulator.create("t_parked", size)
            sweeps = []
            for _ in range(rounds):
                before = _rss()
                watcher = RunWatcher(s, parked)
                cpu0, wall0 = cpu(), time.perf_counter()
                await watcher.__anext__()  # the first sweep: every run is new
                sweeps.append((time.perf_counter() - wall0, cpu() - cpu0))
                if size == sizes[-1]:
                    held = max(held, (_rss() - before) / size)
                await watcher.aclose()
                del watcher
            wall = statistics.median(w for w, _ in sweeps)
            used = statistics.median(c for _, c in sweeps)
            rows.append((size, wall, used, used / size * 1e6))
    print(f"  {'runs':>9}{'sweep s':>10}{'client CPU s':>14}{'CPU us/run':>12}")
    for size, wall, used, per_run in rows:
        print(f"  {size:>9,}{wall:>10.3f}{used:>14.3f}{per_run:>12.2f}")
    first, last = rows[0], rows[-1]
    growth = last[3] / first[3]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"  a watch of {last[0]:,} runs: peak RSS of this process {peak:.0f} MiB; "
        f"{held:,.0f} bytes held per run after its first sweep"
    )
    targets = [
        (
            f"CPU per run at {last[0]:,} <= 1.25x at {first[0]:,}",
            growth <= 1.25,
            f"{growth:.2f}x",
        ),
        (f"one sweep over {last[0]:,} unfinished < 1 s", last[1] < 1.0, f"{last[1]:.3f} s"),
    ]
    for name, passed, figure in targets:
        print(f"  {'PASS' if passed else 'FAIL'}  {name}  {figure}")
    return 0 if all(passed for _, passed, _ in targets) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runs", type=int, default=10_000, help="runs per scenario (default 10000)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the one-sweep timing")
    parser.add_argument(
        "--minutes", type=int, default=3, help="rounds of the whole minute (medians; default 3)"
    )
    parser.add_argument(
        "--networks",
        default="plain,tls",
        help="plain, tls or both (default): over HTTPS the emulator has a throwaway CA",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="instead: one sweep over 1,000, 10,000 and 100,000 runs, side by side",
    )
    args = parser.parse_args(argv)
    total = max(len(OUTCOMES) * 100, args.runs // len(OUTCOMES) * len(OUTCOMES))
    codes = [
        run_over(total, args, tls=network == "tls")
        for network in [n.strip() for n in args.networks.split(",") if n.strip()]
    ]
    return max(codes, default=0)


def run_over(total: int, args: argparse.Namespace, *, tls: bool) -> int:
    """The benchmark against an emulator in its own process, over HTTPS if `tls`."""
    with tempfile.TemporaryDirectory() as tmp:
        seed_path = Path(tmp) / "bench-seed.json"
        seed_path.write_text(json.dumps(seed()))
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(str(seed_path), child, tls), daemon=True)
        proc.start()
        try:
            if not parent.poll(60):
                print("the emulator did not start within 60 s", file=sys.stderr)
                return 1
            url, ca_file = parent.recv()
            if args.scale:
                sizes = [1_000, 10_000, 100_000]
                return asyncio.run(scale(url, sizes, args.rounds, ca_file))
            return asyncio.run(bench(url, total, args.rounds, args.minutes, ca_file))
        finally:
            parent.send("stop")
            proc.join(10)
            if proc.is_alive():
                proc.terminate()


if __name__ == "__main__":
    sys.exit(main())
