"""Benchmark: one build's upload over links of different shapes, at fixed numbers of parts in
flight, beside the link's capacity: how much of a link each setting reaches.

The emulator (a process of its own) models the link: `link_bandwidth` caps every upload
together, `part_bandwidth` each connection, `latency_ms` each request. The shapes:

- long fat: one connection carries 4 MB/s of a 100 MB/s link, 80 ms away (a runner in one
  region, the device cloud in another);
- short thin: the link (20 MB/s) is under what one connection carries, 5 ms away;
- halving: the long fat link, whose capacity halves halfway through the upload;
- doubling: the long fat link at 50 MB/s, doubling halfway.

Each upload is the real command (`asyncclient upload`, with its defaults, then with
`--max-parts-in-flight N --concurrency N`) in a process of its own, so its peak resident memory
is its own (wait4's ru_maxrss). Printed side by side for each shape: each setting's time,
throughput, share of the link's capacity and peak RSS. One run each (the link, not the machine,
sets the pace; --rounds for more).

    .venv/bin/python benchmarks/bench_link.py                    # 1 GiB builds, ~15 min
    .venv/bin/python benchmarks/bench_link.py --size 256 --fixed 4 16 64   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Emulator, scratch_dir
from bench_upload import make_apk

MB = 1_000_000
MiB = 1 << 20
PART_BYTES = 8 * MiB
FOLLOWED = 0.85  # of a changed link's new capacity, carried over a second

# name -> (link bytes/s at the start, link bytes/s after halfway or None, per-part bytes/s or
# None, latency ms)
SHAPES: dict[str, tuple[int, int | None, int | None, float]] = {
    "long fat": (100 * MB, None, 4 * MB, 80.0),
    "short thin": (20 * MB, None, 100 * MB, 5.0),
    "halving": (100 * MB, 50 * MB, 4 * MB, 80.0),
    "doubling": (50 * MB, 100 * MB, 4 * MB, 80.0),
}


def capacity(shape: tuple[int, int | None, int | None, float], size: int) -> float:
    """The link's best time for `size` bytes, in seconds (the latency of one request aside)."""
    first, then, _, _ = shape
    if then is None:
        return size / first
    return size / 2 / first + size / 2 / then


def upload(emu: Emulator, path: Path, parts: int) -> tuple[float, float, dict[str, Any]]:
    """One upload by the command in a process of its own (`parts` 0: the command's defaults):
    (seconds, peak RSS in MB, the command's --json)."""
    script = Path(sys.executable).with_name("asyncclient")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "asyncclient"]
    argv = [
        *command,
        "--quiet",
        "--json",
        "upload",
        emu.project_id,
        str(path),
    ]
    if parts:
        argv += ["--max-parts-in-flight", str(parts), "--concurrency", str(parts)]
    env = {
        **os.environ,
        "ASYNCCLIENT_BASE_URL": emu.url,
        "ASYNCCLIENT_API_KEY": emu.edit_key,
        "ASYNCCLIENT_STATE_DIR": str(path.parent / "state"),
    }
    began = time.monotonic()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    took = time.monotonic() - began
    out = child.stdout.read().decode() if child.stdout else ""
    err = child.stderr.read().decode() if child.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"upload with {parts} in flight failed: {err.strip()}")
    return took, usage.ru_maxrss / 1024, json.loads(out)


class LinkMeter(threading.Thread):
    """Reads the bytes the emulator's link has carried every TICK seconds while an upload
    runs: the throughput over time, to see how soon it follows a change of capacity."""

    TICK = 0.25

    def __init__(self, emu: Emulator) -> None:
        super().__init__(daemon=True)
        self.emu = emu
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.TICK):
            self.samples.append((time.monotonic(), self.emu.stats()["linkBytes"]))

    def followed(self, change: float, capacity: float) -> float | None:
        """Seconds from `change` until a second carried at least 85 % of `capacity`."""
        for i, (at, carried) in enumerate(self.samples):
            if at < change:
                continue
            later = [s for s in self.samples[i:] if s[0] >= at + 1.0]
            if not later:
                return None
            if (later[0][1] - carried) / (later[0][0] - at) >= FOLLOWED * capacity:
                return at - change
        return None


def run_shape(
    emu: Emulator, name: str, path: Path, size: int, fixed: list[int], rounds: int
) -> list[list[str]]:
    first, then, per_part, latency = SHAPES[name]
    best = capacity(SHAPES[name], size)
    rows = []
    for parts in fixed:
        times, peaks, settled, follows = [], [], [], []
        for _ in range(rounds):
            emu.set_conditions(latency_ms=latency, part_bandwidth=per_part, link_bandwidth=first)
            meter = LinkMeter(emu)
            meter.start()
            changed: list[float] = []
            timer = None
            if then is not None:  # the capacity changes halfway through the link's best time

                def change(changed: list[float] = changed) -> None:
                    emu.set_conditions(
                        latency_ms=latency, part_bandwidth=per_part, link_bandwidth=then
                    )
                    changed.append(time.monotonic())

                timer = threading.Timer(size / 2 / first, change)
                timer.start()
            try:
                took, peak, answer = upload(emu, path, parts)
            finally:
                if timer is not None:
                    timer.cancel()
                meter.stop.set()
                meter.join()
            emu.delete_builds([build["id"] for build in answer["builds"]])
            times.append(took)
            peaks.append(peak)
            flight = answer["partsInFlight"]
            settled.append(f"{flight['settled']} (peak {flight['peak']})")
            if then is not None and changed:
                follows.append(meter.followed(changed[0], then))
        took = statistics.median(times)
        follow = (
            ""
            if not follows
            else ", ".join("not within the upload" if f is None else f"{f:.1f} s" for f in follows)
        )
        rows.append(
            [
                f"fixed {parts}" if parts else "default",
                f"{took:.1f}",
                f"{size / took / MB:.1f}",
                f"{best / took:.0%}",
                ", ".join(settled),
                follow,
                f"{max(peaks):.0f}",
            ]
        )
    rows.append(["the link", f"{best:.1f}", f"{size / best / MB:.1f}", "100%", "", "", ""])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="MiB a build (default 1024)")
    parser.add_argument(
        "--fixed",
        type=int,
        nargs="+",
        default=[0, 1, 4, 16, 64],
        help="parts in flight to try; 0: the command's defaults (default: 0 1 4 16 64)",
    )
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    size = args.size * MiB
    work = scratch_dir("bench-link-")
    path = make_apk(work, "big.apk", size)
    size = path.stat().st_size
    print(
        f"bench_link: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; a build of "
        f"{size / MiB:.0f} MiB in parts of {PART_BYTES // MiB} MiB; rounds {args.rounds}"
    )
    try:
        with Emulator(part_bytes=PART_BYTES, max_bytes=4 << 30) as emu:
            for name in args.shapes:
                first, then, per_part, latency = SHAPES[name]
                said = f"link {first / MB:.0f} MB/s" + (
                    f" then {then / MB:.0f} MB/s halfway" if then else ""
                )
                part = f", {per_part / MB:.0f} MB/s a connection" if per_part else ""
                print(f"\n{name}: {said}{part}, {latency:.0f} ms")
                rows = run_shape(emu, name, path, size, args.fixed, args.rounds)
                header = [
                    "",
                    "seconds",
                    "MB/s",
                    "of the link",
                    "in flight at the end",
                    "85 % of the new capacity after",
                    "peak RSS MB",
                ]
                widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
                for row in [header, *rows]:
                    print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
