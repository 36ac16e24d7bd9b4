"""Upload speed, client CPU and memory: asyncclient's uploader at concurrency 1/4/8/16 side by side
with one aiohttp PUT and `curl -T` of the whole file, against the emulator in a separate process.

    .venv/bin/python benchmarks/bench_upload.py            # the full run, a few minutes
    .venv/bin/python benchmarks/bench_upload.py --quick    # smaller files, one round
    .venv/bin/python benchmarks/bench_upload.py --only a,c --rounds 5
    .venv/bin/python benchmarks/bench_upload.py --only b --networks tls
    .venv/bin/python benchmarks/bench_upload.py --only f --rounds 7 --pin

Scenarios (a) and (b) run over plain HTTP and over TLS (the emulator with a throwaway CA; the
baselines over the same TLS server: aiohttp trusting the CA, `curl --cacert`).

Every client configuration runs in a fresh process, so its peak RSS (ru_maxrss, the whole process
including the interpreter and aiohttp) and its CPU (user + sys while uploading, hashing thread
included; curl's from RUSAGE_CHILDREN) are its own. Figures are medians over --rounds.
"sha256" compares the checksum the emulator computed from the bytes it received with the local
file's. MB is 10^6 bytes, MiB 2^20.

Scenarios:
  (a) network-bound: each part connection capped at 100 MB/s, 50 ms added per request, 8 MiB parts
  (b) unbounded loopback, 8 MiB parts
  (c) memory: 64 MiB parts at concurrency 8
  (d) many builds: 20 builds of 32 MiB, max_parts_in_flight=16, against one of 640 MiB at c16
  (e) faults: 10% of part requests fail (5% answered 500/503, 5% dropped mid-body)
  (f) the many-builds curve: the same bytes in 1, 20 and 200 builds, beside the floor (the three
      calls alone, for 1 and 200 builds); and `asyncclient upload` of 200 builds on a
      pseudo-terminal against the same with stderr to a file. --pin: the emulator on a CPU of
      its own, the clients on the others (Linux)

The uploader's resume journals go to the work folder (in memory where /dev/shm exists), or to
--journal-dir.
"""

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import platform
import resource
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Emulator, PlainService, scratch_dir

MiB = 1 << 20
MB = 1e6

# --- the client side: one configuration per process -----------------------------------------


def _usage(who: int) -> tuple[float, int]:
    """(user + sys CPU seconds, peak RSS bytes) of this process or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def _instrument(session: Any, marks: dict[str, float]) -> None:
    """Record when start_upload answered, when the last part was answered and complete's time."""
    for name in ("start_upload", "upload_part", "complete_upload"):
        original = getattr(session, name)

        def wrapped(*args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            async def timed() -> Any:
                began = time.perf_counter()
                answer = await _original(*args, **kw)
                ended = time.perf_counter()
                marks.setdefault(f"{_name}_first_end", ended)
                marks[f"{_name}_last_end"] = ended
                marks[f"{_name}_total"] = marks.get(f"{_name}_total", 0.0) + ended - began
                return answer

            return timed()

        setattr(session, name, wrapped)


def _session(spec: dict[str, Any]) -> Any:
    from asyncclient import AsyncSession

    return AsyncSession(
        spec["key"], spec["url"], timeout=600.0, ca_file=spec.get("ca_file"), proxy="direct"
    )


def _measured(
    spec: dict[str, Any], builds: Sequence[Any], cpu0: float, began: float
) -> dict[str, Any]:
    """A client's row, taken as soon as its uploads are done: wall and CPU since `began` and
    `cpu0`, peak RSS, bytes sent, and what the service computed of each build."""
    wall = time.perf_counter() - began
    cpu1, rss = _usage(resource.RUSAGE_SELF)
    return _row(
        wall,
        cpu1 - cpu0,
        rss,
        sum(os.path.getsize(f) for f in spec["files"]),
        [b.sha256 for b in builds],
        build_ids=[b.id for b in builds],
        parts_phase=None,
        complete_time=None,
    )


def _row(
    wall: float, cpu: float, rss: int, size: int, sha256s: list[Any] | None, **more: Any
) -> dict[str, Any]:
    """A client's figures as the parent reads them; `sha256s`: what the service computed of
    each file sent (None: nothing was sent)."""
    return {"wall": wall, "cpu": cpu, "rss": rss, "bytes": size, "server_sha256": sha256s, **more}


def _without_process_locks() -> None:
    """Every upload takes its lock at once, with no file: what the locks between processes
    cost is then the difference from the same run with them."""
    from asyncclient._local._locks import Claim
    from asyncclient.upload import _transfer

    class _NoLock:
        def release(self, outcome: Any = None) -> None:
            pass

    async def claim(path: Any, **_: Any) -> Any:
        return Claim(_NoLock(), None, False)  # type: ignore[arg-type]

    _transfer.claim = claim  # type: ignore[assignment]


async def _ours(spec: dict[str, Any]) -> dict[str, Any]:
    marks: dict[str, float] = {}
    if not spec.get("locks", True):
        _without_process_locks()
    journal = tempfile.mkdtemp(prefix="bench-journal-", dir=spec.get("journal_base"))
    try:
        async with _session(spec) as session:
            _instrument(session, marks)
            cpu0, _ = _usage(resource.RUSAGE_SELF)
            began = time.perf_counter()
            if len(spec["files"]) == 1:
                build = await session.upload_build(
                    spec["project"],
                    spec["files"][0],
                    concurrency=spec["concurrency"],
                    journal_dir=journal,
                )
                builds = [build]
            else:
                results = await session.upload_builds(
                    spec["files"],
                    project_id=spec["project"],
                    max_parts_in_flight=spec["max_parts_in_flight"],
                    journal_dir=journal,
                )
                failed = [r.error for r in results if not r.ok]
                if failed:
                    raise RuntimeError(f"{len(failed)} uploads failed: {failed[0]}")
                builds = [r.build for r in results if r.build is not None]
            row = _measured(spec, builds, cpu0, began)
    finally:
        shutil.rmtree(journal, ignore_errors=True)
    row["parts_phase"] = marks["upload_part_last_end"] - marks["start_upload_first_end"]
    row["complete_time"] = marks.get("complete_upload_total", 0.0)
    return row


async def _calls(spec: dict[str, Any]) -> dict[str, Any]:
    """The protocol's three requests alone, through the same AsyncSession: start, each part
    (sent from the open file as the uploader sends it), complete; at most 16 parts in flight.
    No pre-flight, no hashing, no journal, no sha256 check: the floor under the uploader."""
    from asyncclient._local._bodies import PartBody

    parts_at_once = asyncio.Semaphore(16)
    async with _session(spec) as session:
        await session.list_builds(spec["project"])  # as the uploader does, outside the figure

        async def part(
            build_id: str, number: int, step: int, path: str, size: int, file: Any
        ) -> Any:
            offset = (number - 1) * step
            body = PartBody(path, offset, min(step, size - offset), file=file)
            async with parts_at_once:
                return await session.upload_part(build_id, number, body)

        async def one(path: str) -> Any:
            size = os.path.getsize(path)
            start = await session.start_upload(spec["project"], os.path.basename(path), size)
            step = start.part_bytes
            with open(path, "rb", buffering=0) as file:
                numbers = range(1, -(-size // step) + 1)
                sent = await asyncio.gather(
                    *(part(start.id, n, step, path, size, file) for n in numbers)
                )
            return await session.complete_upload(start.id, sent)

        cpu0, _ = _usage(resource.RUSAGE_SELF)
        began = time.perf_counter()
        builds = await asyncio.gather(*(one(path) for path in spec["files"]))
        return _measured(spec, builds, cpu0, began)


async def _aiohttp_put(spec: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    path = spec["files"][0]
    timeout = aiohttp.ClientTimeout(total=600.0)
    ca_file = spec.get("ca_file")
    tls = ssl.create_default_context(cafile=ca_file) if ca_file else True
    connector = aiohttp.TCPConnector(ssl=tls)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        cpu0, _ = _usage(resource.RUSAGE_SELF)
        began = time.perf_counter()
        with open(path, "rb") as body:
            async with http.put(spec["url"] + "/_emulator/sink", data=body) as answer:
                answer.raise_for_status()
                sink = await answer.json()
        wall = time.perf_counter() - began
        cpu1, rss = _usage(resource.RUSAGE_SELF)
    return _row(wall, cpu1 - cpu0, rss, sink["bytes"], [sink["sha256"]])


def _curl(spec: dict[str, Any]) -> dict[str, Any]:
    path = spec["files"][0]
    began = time.perf_counter()
    trust = ["--cacert", spec["ca_file"]] if spec.get("ca_file") else []
    done = subprocess.run(
        ["curl", "-sS", "-f", *trust, "-T", path, spec["url"] + "/_emulator/sink"],
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - began
    cpu, rss = _usage(resource.RUSAGE_CHILDREN)
    sink = json.loads(done.stdout)
    return _row(wall, cpu, rss, sink["bytes"], [sink["sha256"]])


def _sha256_only(spec: dict[str, Any]) -> dict[str, Any]:
    """What the uploader's hashing thread does, alone: its sequential reads into sha256."""
    from asyncclient.upload._hashing import HASH_CHUNK

    path = spec["files"][0]
    cpu0, _ = _usage(resource.RUSAGE_SELF)
    began = time.perf_counter()
    digest = hashlib.sha256()
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while got := handle.readinto(buffer):
            digest.update(view[:got])
    wall = time.perf_counter() - began
    cpu1, rss = _usage(resource.RUSAGE_SELF)
    return _row(wall, cpu1 - cpu0, rss, os.path.getsize(path), None)


def child_main(spec: dict[str, Any]) -> None:
    kind = spec["kind"]
    if kind == "ours":
        result = asyncio.run(_ours(spec))
    elif kind == "calls":
        result = asyncio.run(_calls(spec))
    elif kind == "aiohttp_put":
        result = asyncio.run(_aiohttp_put(spec))
    elif kind == "curl":
        result = _curl(spec)
    else:
        result = _sha256_only(spec)
    print(json.dumps(result))


# --- the orchestrator -----------------------------------------------------------------------


class Config:
    def __init__(self, label: str, kind: str, **options: Any) -> None:
        self.label = label
        self.kind = kind
        self.options = options


# Where the uploader's journals go: --journal-dir, else the work folder (in memory, like the
# apps and the emulator's files). Creating a file on this machine's disk costs 15 us in most
# folders and up to 650 us in others, which would measure the disk's luck, not the client.
JOURNAL_BASE: str | None = None
SERVICE = "emulator"  # --service: what (b) uploads to
PIN = False  # --pin: the emulator on a core of its own, the clients on the others


@contextlib.contextmanager
def _apart(emu: Emulator, pin: bool) -> Iterator[None]:
    """With `pin`, the emulator (every thread it has and makes) on the last CPU, this process
    and the clients it starts on the others, until the block ends: the service no longer takes
    turns with the client on the same cores."""
    if not pin:
        yield
        return
    mine = sorted(os.sched_getaffinity(0))
    print(f"  pinned: the emulator on CPU {mine[-1]}, the clients on {mine[:-1]}")
    assert emu.pid is not None
    for thread in os.listdir(f"/proc/{emu.pid}/task"):
        os.sched_setaffinity(int(thread), {mine[-1]})
    os.sched_setaffinity(0, set(mine[:-1]))
    try:
        yield
    finally:
        os.sched_setaffinity(0, set(mine))


def run_client(emu: Emulator, config: Config, files: Sequence[Path]) -> dict[str, Any]:
    spec = {
        "kind": config.kind,
        "url": emu.url,
        "ca_file": emu.ca_file,
        "key": emu.run_key,
        "project": emu.project_id,
        "files": [str(f) for f in files],
        "journal_base": JOURNAL_BASE,
        **config.options,
    }
    server_cpu = emu.stats()["cpuSeconds"]
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{config.label} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["server_cpu"] = emu.stats()["cpuSeconds"] - server_cpu
    if result.get("build_ids"):
        emu.delete_builds(result["build_ids"])
    return result


_SHA_CACHE: dict[Path, str] = {}


def local_sha256(path: Path) -> str:
    if path not in _SHA_CACHE:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(MiB):
                digest.update(chunk)
        _SHA_CACHE[path] = digest.hexdigest()
    return _SHA_CACHE[path]


def make_apk(directory: Path, name: str, size: int, seed: int = 0) -> Path:
    """A real apk of exactly `size` bytes (its filler asset makes up the rest)."""
    from asyncclient.testing.builders import build_apk

    path = directory / name
    if not path.exists() or path.stat().st_size != size:
        overhead = build_apk(path, filler_bytes=1, seed=seed).stat().st_size - 1
        build_apk(path, filler_bytes=size - overhead, seed=seed)
        if path.stat().st_size != size:  # the zip64 switch added a few bytes: once more
            extra = path.stat().st_size - size
            build_apk(path, filler_bytes=size - overhead - extra, seed=seed)
    return path


def measure(
    emu: Emulator, configs: Sequence[Config], files: Sequence[Path], rounds: int
) -> dict[str, dict[str, Any]]:
    """Each configuration `rounds` times (order reversed every other round); medians."""
    runs: dict[str, list[dict[str, Any]]] = {c.label: [] for c in configs}
    for round_no in range(rounds):
        order = list(configs) if round_no % 2 == 0 else list(reversed(configs))
        for config in order:
            runs[config.label].append(run_client(emu, config, files))
    return {config.label: summarise(config, runs[config.label], files) for config in configs}


def summarise(
    config: Config, results: Sequence[dict[str, Any]], files: Sequence[Path]
) -> dict[str, Any]:
    """One configuration's row: the medians of its rounds, and whether every sha256 matched."""
    expected = [local_sha256(f) for f in files]
    row: dict[str, Any] = {"kind": config.kind}
    for key in ("wall", "cpu", "rss", "parts_phase", "complete_time", "server_cpu"):
        values = [r[key] for r in results if r.get(key) is not None]
        row[key] = statistics.median(values) if values else None
    row["bytes"] = results[0]["bytes"]
    row["rounds"] = list(results)  # each round's own figures, for ratios taken round by round
    shas = [r["server_sha256"] for r in results]
    if shas[0] is None or all(s is None for s in shas[0]):  # a service that hashes nothing
        row["sha"] = "-"
    else:
        good = sum(s == expected for s in shas)
        row["sha"] = "match" if good == len(shas) else f"MISMATCH ({good}/{len(shas)})"
    return row


def print_table(
    summary: dict[str, dict[str, Any]], *, ideal: dict[str, float] | None = None
) -> None:
    header = (
        f"  {'client':<26}{'wall s':>8}{'MB/s':>8}{'parts s':>9}{'ideal s':>9}"
        f"{'CPU s/GB':>10}{'peak RSS MiB':>14}{'server CPU s/GB':>17}  sha256"
    )
    print(header)
    for label, row in summary.items():
        gb = row["bytes"] / 1e9
        rate = row["bytes"] / row["wall"] / MB
        parts = "" if row["parts_phase"] is None else f"{row['parts_phase']:.2f}"
        best = "" if not ideal or label not in ideal else f"{ideal[label]:.2f}"
        server = "" if row["kind"] == "sha256" else f"{row['server_cpu'] / gb:.2f}"
        print(
            f"  {label:<26}{row['wall']:>8.2f}{rate:>8.0f}{parts:>9}{best:>9}"
            f"{row['cpu'] / gb:>10.2f}{row['rss'] / MiB:>14.0f}"
            f"{server:>17}  {row['sha']}"
        )


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ideal_parts_phase(
    size: int, part_bytes: int, concurrency: int, latency: float, bw: float
) -> float:
    """The shortest time `concurrency` connections capped at `bw` bytes/s, each request delayed
    by `latency`, can move every part in (greedy in order, like the uploader's workers)."""
    parts = math.ceil(size / part_bytes)
    lengths = [min(part_bytes, size - i * part_bytes) for i in range(parts)]
    free = [0.0] * concurrency
    for length in lengths:
        start = min(free)
        free[free.index(start)] = start + latency + length / bw
    return max(free)


def whole_file_baselines() -> list[Config]:
    """One aiohttp PUT of the whole file, and `curl -T` where curl exists."""
    configs = [Config("aiohttp PUT (whole file)", "aiohttp_put")]
    if shutil.which("curl"):
        configs.append(Config("curl -T (whole file)", "curl"))
    return configs


def scenario_a(work: Path, quick: bool, rounds: int, tls: bool = False) -> None:
    size = (64 if quick else 256) * MiB
    part, latency, bw = 8 * MiB, 0.050, 100e6
    apk = make_apk(work, f"net-{size // MiB}.apk", size)
    real = apk.stat().st_size
    print(
        f"\n(a) network-bound{OVER_TLS if tls else ''}: {real / MiB:.0f} MiB apk, "
        f"{part // MiB} MiB parts "
        f"({math.ceil(real / part)}), each connection capped at {bw / MB:.0f} MB/s, "
        f"{latency * 1000:.0f} ms added per request"
    )
    configs = [Config(f"asyncclient c{c}", "ours", concurrency=c) for c in (1, 4, 8, 16)]
    configs += whole_file_baselines()
    with Emulator(part_bytes=part, tls=tls) as emu:
        emu.set_conditions(latency_ms=latency * 1000, part_bandwidth=int(bw))
        summary = measure(emu, configs, [apk], rounds)
    ideal = {
        f"asyncclient c{c}": ideal_parts_phase(real, part, c, latency, bw) for c in (1, 4, 8, 16)
    }
    ideal["aiohttp PUT (whole file)"] = ideal["curl -T (whole file)"] = latency + real / bw
    print_table(summary, ideal=ideal)
    c1, c8 = summary["asyncclient c1"], summary["asyncclient c8"]
    speedup_parts = c1["parts_phase"] / c8["parts_phase"]
    speedup_wall = c1["wall"] / c8["wall"]
    over = c8["parts_phase"] / ideal["asyncclient c8"] - 1
    fixed = 3 * latency
    ideal_wall = ideal["asyncclient c8"] + fixed + c8["complete_time"] - latency
    target = 6.5 if tls else 6.8
    print(
        f"  parts phase (start answered -> last part answered): c8 {speedup_parts:.1f}x faster "
        f"than c1 (target >= {target}x): {verdict(speedup_parts >= target)}; "
        f"c8 {c8['parts_phase']:.2f} s "
        f"vs ideal {ideal['asyncclient c8']:.2f} s ({over:+.0%}, target <= +15%): "
        f"{verdict(over <= 0.15)}"
    )
    print(
        f"  whole upload: c8 {speedup_wall:.1f}x faster than c1; c8 {c8['wall']:.2f} s vs "
        f"{ideal_wall:.2f} s = ideal parts phase + 3 requests x {latency * 1000:.0f} ms (list, "
        f"start, complete) + the emulator's own complete ({c8['complete_time'] - latency:.2f} s: "
        f"the tail of its whole-file hash) ({c8['wall'] / ideal_wall - 1:+.0%})"
    )


def scenario_b(work: Path, quick: bool, rounds: int, tls: bool = False) -> None:
    size = (128 if quick else 512) * MiB
    part = 8 * MiB
    apk = make_apk(work, f"loop-{size // MiB}.apk", size)
    real = apk.stat().st_size
    print(
        f"\n(b) unbounded loopback{OVER_TLS if tls else ''}: {real / MiB:.0f} MiB apk, "
        f"{part // MiB} MiB parts"
    )
    configs = [Config(f"asyncclient c{c}", "ours", concurrency=c) for c in (1, 4, 8, 16)]
    configs += whole_file_baselines()
    configs.append(Config("sha256 alone (its reads)", "sha256"))
    service = PlainService if SERVICE == "plain service" else Emulator
    print(f"  against the {SERVICE}")
    with service(part_bytes=part, tls=tls) as emu:
        summary = measure(emu, configs, [apk], rounds)  # type: ignore[arg-type]
    print_table(summary)
    c4, put, sha = (
        summary["asyncclient c4"],
        summary["aiohttp PUT (whole file)"],
        summary["sha256 alone (its reads)"],
    )
    ratio = put["wall"] / c4["wall"]
    ratio_parts = put["wall"] / c4["parts_phase"]
    gb = real / 1e9
    cpu_gb, hash_gb, put_gb = c4["cpu"] / gb, sha["cpu"] / gb, put["cpu"] / gb
    transfer_gb = cpu_gb - hash_gb
    wanted = 0.90 if tls else 0.75
    print(
        f"  c4 throughput {ratio:.0%} of the single PUT's, whole upload (target >= "
        f"{wanted:.0%}): {verdict(ratio >= wanted)}; parts phase alone {ratio_parts:.0%}; the "
        f"emulator's complete {c4['complete_time']:.2f} s. Per byte the emulator computes a crc32 "
        "(the part's etag) and a sha256 (the build's) and the client a sha256, on the same 2 "
        "cores; for the single PUT the emulator's sink computes one sha256 and the client none"
    )
    if not tls:
        print(
            f"  c4 client CPU {cpu_gb:.2f} s/GB (target <= 0.5): {verdict(cpu_gb <= 0.5)}; of it "
            f"sha256 {hash_gb:.2f} s/GB (measured alone) and the transfer {transfer_gb:.2f} s/GB "
            f"(the single PUT's transfer: {put_gb:.2f} s/GB)"
        )
        return
    curl = summary.get("curl -T (whole file)")
    # Round by round (the rounds alternate their order; the machine's noise moves them together):
    # the transfer is the round's c4 CPU less its sha256 alone.
    transfers = [
        ours["cpu"] - alone["cpu"] for ours, alone in zip(c4["rounds"], sha["rounds"], strict=True)
    ]
    to_put = statistics.median(t / p["cpu"] for t, p in zip(transfers, put["rounds"], strict=True))
    line = (
        f"  c4 client CPU {cpu_gb:.2f} s/GB: sha256 {hash_gb:.2f} s/GB (measured alone) and the "
        f"transfer {transfer_gb:.2f} s/GB, against the single aiohttp PUT's {put_gb:.2f} s/GB: "
        f"{to_put:.2f}x, median of the rounds' ratios (target <= 1.0x): {verdict(to_put <= 1.0)}"
    )
    if curl is not None:
        to_curl = statistics.median(
            t / c["cpu"] for t, c in zip(transfers, curl["rounds"], strict=True)
        )
        line += (
            f"; against curl's {curl['cpu'] / gb:.2f} s/GB, {to_curl:.2f}x (target <= 1.3x): "
            f"{verdict(to_curl <= 1.3)}"
        )
    print(line)


def scenario_c(work: Path, quick: bool, rounds: int) -> None:
    size = (256 if quick else 1024) * MiB
    part = 64 * MiB
    apk = make_apk(work, f"mem-{size // MiB}.apk", size)
    real = apk.stat().st_size
    print(f"\n(c) memory: {real / MiB:.0f} MiB apk, {part // MiB} MiB parts, unbounded loopback")
    configs = [
        Config("asyncclient c8", "ours", concurrency=8),
        Config("aiohttp PUT (whole file)", "aiohttp_put"),
    ]
    with Emulator(part_bytes=part) as emu:
        summary = measure(emu, configs, [apk], rounds)
    print_table(summary)
    rss = summary["asyncclient c8"]["rss"] / MiB
    print(
        f"  c8 peak RSS {rss:.0f} MiB (target < 100 MiB): {verdict(rss < 100)}; parts in flight "
        f"hold {8 * part // MiB} MiB of file between them, never in memory"
    )


def scenario_d(work: Path, quick: bool, rounds: int) -> None:
    count, each = (10, 16 * MiB) if quick else (20, 32 * MiB)
    part = 8 * MiB
    small = [make_apk(work, f"many-{each // MiB}-{n}.apk", each, seed=n) for n in range(count)]
    big = make_apk(work, f"one-{count * each // MiB}.apk", count * each)
    print(
        f"\n(d) many builds: {count} apks of {each // MiB} MiB with max_parts_in_flight=16, "
        f"against one {count * each // MiB} MiB apk at concurrency 16; {part // MiB} MiB parts, "
        "unbounded loopback"
    )
    many = Config(f"asyncclient {count} builds", "ours", max_parts_in_flight=16)
    one = Config("asyncclient 1 build c16", "ours", concurrency=16)
    with Emulator(part_bytes=part) as emu:
        summary = measure(emu, [many], small, rounds)
        summary.update(measure(emu, [one], [big], rounds))
    print_table(summary)
    rate_many = summary[many.label]["bytes"] / summary[many.label]["wall"]
    rate_one = summary[one.label]["bytes"] / summary[one.label]["wall"]
    ratio = rate_many / rate_one
    print(
        f"  {count} builds reach {ratio:.0%} of the single upload's throughput (target >= 90%): "
        f"{verdict(ratio >= 0.9)}"
    )


def scenario_e(work: Path, quick: bool, rounds: int) -> None:
    size = (64 if quick else 256) * MiB
    part = 8 * MiB
    apk = make_apk(work, f"net-{size // MiB}.apk", size)
    real = apk.stat().st_size
    parts = math.ceil(real / part)
    print(
        f"\n(e) faults: {real / MiB:.0f} MiB apk, {parts} parts of {part // MiB} MiB at c8; 10% of "
        "part requests fail (5% answered 500/503, 5% dropped mid-body)"
    )
    config = Config("asyncclient c8", "ours", concurrency=8)
    sent = []
    summaries = []
    with Emulator(part_bytes=part) as emu:
        for round_no in range(rounds):
            emu.set_conditions(
                error_rate=0.05, drop_rate=0.05, ops=["upload_part"], seed=round_no + 1
            )
            before = emu.stats()["requests"].get("upload_part", 0)
            summaries.append(measure(emu, [config], [apk], 1))
            sent.append(emu.stats()["requests"].get("upload_part", 0) - before)
    summary = summaries[len(summaries) // 2]
    print_table(summary)
    ok = all(s[config.label]["sha"] == "match" for s in summaries)
    retried = ", ".join(str(s - parts) for s in sent)
    print(
        f"  completed with the right sha256 in {len(summaries)}/{rounds} round(s): "
        f"{verdict(ok)}; part requests that failed and were resent per round: {retried}"
    )


def _cli_wall(emu: Emulator, files: Sequence[Path], terminal: bool) -> float:
    """Wall time of `asyncclient upload` of these files, its stderr a pseudo-terminal (what a
    person sees: the live bars) or a file (a CI log), stdout (the build ids) to a file."""
    import pty

    command = Path(sys.executable).with_name("asyncclient")
    argv = [str(command), "upload", emu.project_id, *map(str, files)]
    env = {
        **os.environ,
        "ASYNCCLIENT_BASE_URL": emu.url,
        "ASYNCCLIENT_API_KEY": emu.run_key,
        "ASYNCCLIENT_STATE_DIR": tempfile.mkdtemp(prefix="bench-state-"),
        "ASYNCCLIENT_PROXY": "direct",
        "COLUMNS": "120",
        "LINES": "40",
    }
    with tempfile.TemporaryFile() as ids, tempfile.TemporaryFile() as log:
        began = time.perf_counter()
        if terminal:
            main_fd, side_fd = pty.openpty()
            proc = subprocess.Popen(argv, stdout=ids, stderr=side_fd, env=env)
            os.close(side_fd)
            with contextlib.suppress(OSError):  # EIO once the command has closed its side
                while os.read(main_fd, 65536):
                    pass
            os.close(main_fd)
        else:
            proc = subprocess.Popen(argv, stdout=ids, stderr=log, env=env)
        code = proc.wait()
        wall = time.perf_counter() - began
        ids.seek(0)
        build_ids = ids.read().decode().split()
    shutil.rmtree(env["ASYNCCLIENT_STATE_DIR"], ignore_errors=True)
    if code != 0 or len(build_ids) != len(files):
        raise RuntimeError(f"asyncclient upload exited {code} with {len(build_ids)} build ids")
    emu.delete_builds(build_ids)
    return wall


def scenario_f(work: Path, quick: bool, rounds: int) -> None:
    total = (64 if quick else 256) * MiB
    counts = (1, 20, 200)
    part = 8 * MiB
    print(
        f"\n(f) many builds, the curve: {total // MiB} MiB in 1, 20 and 200 apks, "
        f"max_parts_in_flight=16 (one build: concurrency 16); {part // MiB} MiB parts, unbounded "
        "loopback; then the CLI with 200 builds on a pseudo-terminal and with stderr to a file"
    )
    sets = {
        n: [make_apk(work, f"curve-{n}-{i}.apk", total // n, seed=1000 + i) for i in range(n)]
        for n in counts
    }
    configs = {
        n: Config("asyncclient 1 build c16", "ours", concurrency=16)
        if n == 1
        else Config(f"asyncclient {n} builds", "ours", max_parts_in_flight=16)
        for n in counts
    }
    # The floor under the uploader: the same requests through the same session, nothing else.
    floor = {
        1: Config("3 calls alone, 1 build", "calls"),
        200: Config("3 calls alone, 200 builds", "calls"),
    }
    # What the locks between processes cost: the 200 builds again, each lock taken without a file.
    unlocked = Config("asyncclient 200, no locks", "ours", max_parts_in_flight=16, locks=False)
    plan = (
        [(configs[n], sets[n]) for n in counts]
        + [(floor[n], sets[n]) for n in floor]
        + [(unlocked, sets[200])]
    )
    with Emulator(part_bytes=part) as emu, _apart(emu, PIN):
        # Round-robin, the order turned every other round: the machine's slow spells fall on
        # every size alike, and each round's 200 builds are compared with that round's one.
        runs: dict[str, list[dict[str, Any]]] = {config.label: [] for config, _ in plan}
        for round_no in range(rounds):
            for config, files in plan if round_no % 2 == 0 else plan[::-1]:
                runs[config.label].append(run_client(emu, config, files))
        summary = {
            config.label: summarise(config, runs[config.label], files) for config, files in plan
        }
        print_table(summary)
        rate, cpu, fixed, fixeds = _curve(runs[configs[1].label], runs[configs[200].label])
        rss = summary["asyncclient 200 builds"]["rss"] / MiB
        print(
            f"  200 builds against one of the same bytes (median of the {rounds} rounds' ratios): "
            f"throughput {rate:.2f}x (target >= 0.9x): {verdict(rate >= 0.9)}; client CPU per "
            f"GB {cpu:.2f}x (target <= 1.5x): {verdict(cpu <= 1.5)}; fixed CPU per extra build "
            f"{fixed:.2f} ms (target <= 1 ms; rounds {min(fixeds):.2f} to {max(fixeds):.2f}): "
            f"{verdict(fixed <= 1.0)}; peak RSS {rss:.0f} MiB (target < 80 MiB): "
            f"{verdict(rss < 80)}"
        )
        rate, cpu, fixed, fixeds = _curve(runs[floor[1].label], runs[floor[200].label])
        print(
            f"  the floor, the three calls alone (start, part, complete; no pre-flight, hashing, "
            f"journal or check): throughput {rate:.2f}x, client CPU per GB {cpu:.2f}x, fixed "
            f"CPU per extra build {fixed:.2f} ms (rounds {min(fixeds):.2f} to {max(fixeds):.2f})"
        )
        mine = _fixed_per_build(runs[configs[1].label], runs[configs[200].label])
        bare = _fixed_per_build(runs[floor[1].label], runs[floor[200].label])
        print(
            f"  fixed CPU per extra build against the floor's (median of the rounds' ratios): "
            f"{statistics.median(m / b for m, b in zip(mine, bare, strict=True)):.2f}x "
            f"(target <= 1.5x): {verdict(statistics.median(mine) <= 1.5 * statistics.median(bare))}"
        )
        locked = [r["cpu"] / 200 * 1000 for r in runs[configs[200].label]]
        free = [r["cpu"] / 200 * 1000 for r in runs[unlocked.label]]
        ratios = [a / b for a, b in zip(locked, free, strict=True)]
        print(
            f"  the locks between processes: client CPU per build {statistics.median(locked):.2f} "
            f"ms with them, {statistics.median(free):.2f} ms without; with against without, "
            f"median of the rounds' ratios {statistics.median(ratios):.2f}x (rounds "
            f"{min(ratios):.2f} to {max(ratios):.2f}; target: within the rounds' spread of 1x)"
        )
        walls: dict[bool, list[float]] = {True: [], False: []}
        for round_no in range(rounds):
            for terminal in (True, False) if round_no % 2 == 0 else (False, True):
                walls[terminal].append(_cli_wall(emu, sets[200], terminal))
    on_tty, off_tty = statistics.median(walls[True]), statistics.median(walls[False])
    print(
        f"  asyncclient upload, 200 builds: {on_tty:.2f} s on a terminal, {off_tty:.2f} s with "
        f"stderr to a file: {on_tty / off_tty:.2f}x (target <= 1.15x): "
        f"{verdict(on_tty <= 1.15 * off_tty)}"
    )


def _fixed_per_build(ones: list[dict[str, Any]], manys: list[dict[str, Any]]) -> list[float]:
    """Each round's CPU per extra build (ms): the 200 builds' CPU less the one build's for the
    same bytes, over the 199 builds more."""
    return [
        (many["cpu"] - one["cpu"] * many["bytes"] / one["bytes"]) / 199 * 1000
        for one, many in zip(ones, manys, strict=True)
    ]


def _curve(
    ones: list[dict[str, Any]], manys: list[dict[str, Any]]
) -> tuple[float, float, float, list[float]]:
    """200 builds against one of the same bytes, each round against its own: the medians of
    the throughput ratio, the CPU-per-GB ratio and the fixed CPU per extra build (ms), and the
    rounds' fixed costs."""
    rates, cpus = [], []
    for one, many in zip(ones, manys, strict=True):
        rates.append((many["bytes"] / many["wall"]) / (one["bytes"] / one["wall"]))
        cpus.append((many["cpu"] / many["bytes"]) / (one["cpu"] / one["bytes"]))
    fixeds = _fixed_per_build(ones, manys)
    rate, cpu, fixed = (statistics.median(v) for v in (rates, cpus, fixeds))
    return rate, cpu, fixed, fixeds


SCENARIOS: dict[str, Callable[..., None]] = {
    "a": scenario_a,
    "b": scenario_b,
    "c": scenario_c,
    "d": scenario_d,
    "e": scenario_e,
    "f": scenario_f,
}
# Scenarios that also run over TLS (--networks), with their baselines over the same TLS server.
OVER_TLS_TOO = frozenset("ab")
OVER_TLS = " over TLS"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller files, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per scenario (default 5)")
    parser.add_argument("--only", default="abcdef", help="scenarios to run, e.g. a,c")
    parser.add_argument("--workdir", help="where to keep the test apps (default: a temp dir)")
    parser.add_argument(
        "--journal-dir",
        help="where the uploader's resume journals go (default: the work folder, in memory "
        "where /dev/shm exists; give a folder on disk to count the disk's file creations)",
    )
    parser.add_argument(
        "--networks",
        default="plain,tls",
        help="plain, tls or both (default): scenarios a and b also run over HTTPS, baselines "
        "too (aiohttp with the CA, curl --cacert)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="(f) the emulator on one CPU of its own, the clients on the others (Linux, 2 CPUs "
        "or more): the curve without the service taking turns with the client",
    )
    parser.add_argument(
        "--service",
        choices=("emulator", "plain service"),
        default="emulator",
        help="what scenario (b) uploads to: the emulator, or benchmarks/plain_service.py (not "
        "ours: parts and the baselines' whole file read and dropped, nothing hashed)",
    )
    args = parser.parse_args()
    if args.pin and not (hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1):
        parser.error("--pin needs os.sched_setaffinity (Linux) and at least 2 CPUs")
    if args.child:
        child_main(json.loads(args.child))
        return 0
    rounds = args.rounds or (1 if args.quick else 5)
    print(
        f"bench_upload: Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}; rounds {rounds}"
        f"{' (quick)' if args.quick else ''}; medians"
    )
    work = Path(args.workdir) if args.workdir else scratch_dir("bench-upload-")
    work.mkdir(parents=True, exist_ok=True)
    global JOURNAL_BASE, PIN, SERVICE
    PIN = args.pin
    SERVICE = args.service
    JOURNAL_BASE = str(Path(args.journal_dir).resolve() if args.journal_dir else work)
    Path(JOURNAL_BASE).mkdir(parents=True, exist_ok=True)
    print(f"journals in {JOURNAL_BASE}")
    try:
        networks = {n.strip() for n in args.networks.split(",") if n.strip()}
        for key in args.only.replace(",", ""):
            if "plain" in networks or key not in OVER_TLS_TOO:
                SCENARIOS[key](work, args.quick, rounds)
            if "tls" in networks and key in OVER_TLS_TOO:
                SCENARIOS[key](work, args.quick, rounds, tls=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
