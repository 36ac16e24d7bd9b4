"""Benchmark: one build's upload over a real bottleneck, the default number of parts in flight
beside fixed ones. Linux only, as root: a network namespace of its own holds the emulator, a
veth pair joins it, and Linux's `tbf` shapes the link from the client's side (iproute2).

Shapes:
- slow shared: 20 MB/s, one connection fills it (the emulator takes parts as fast as they come);
- long fat: 100 MB/s, the emulator takes 4 MB/s a part and answers 80 ms late.

Each upload is the real command (`asyncclient -v upload`) in a process of its own; printed side
by side for each shape: the time, the throughput of the whole command, when the first part was
stored (the first part's answer), and the numbers the default went through. --busy keeps both
cores busy with two spinning processes meanwhile.

    sudo .venv/bin/python benchmarks/bench_netns_link.py                 # ~3 min
    sudo .venv/bin/python benchmarks/bench_netns_link.py --busy --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

NS, OUTSIDE, INSIDE = "acbench", "acb0", "acb1"
CLIENT, SERVER = "10.231.0.1", "10.231.0.2"  # this benchmark's own namespace only
SHAPES = {  # name -> (tbf rate, tbf burst, emulator options, file MB, fixed settings)
    "slow shared": ("160mbit", "256kb", [], 200, [2, 4, 16]),
    "long fat": ("800mbit", "1mb", ["--part-bandwidth", "4000000", "--latency-ms", "80"], 1024,
                 [16, 64]),
}  # fmt: skip
BIN = Path(sys.executable).parent


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@contextlib.contextmanager
def link(rate: str, burst: str) -> Iterator[None]:
    """The namespace, its veth pair and the tbf bottleneck; all removed afterwards."""
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    sh("ip", "netns", "add", NS)
    try:
        sh("ip", "link", "add", OUTSIDE, "type", "veth", "peer", "name", INSIDE)
        sh("ip", "link", "set", INSIDE, "netns", NS)
        sh("ip", "addr", "add", f"{CLIENT}/24", "dev", OUTSIDE)
        sh("ip", "link", "set", OUTSIDE, "up")
        sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{SERVER}/24", "dev", INSIDE)
        sh("ip", "netns", "exec", NS, "ip", "link", "set", INSIDE, "up")
        sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        sh("tc", "qdisc", "add", "dev", OUTSIDE, "root", "tbf", "rate", rate, "burst", burst,
           "latency", "100ms")  # fmt: skip
        yield
    finally:
        subprocess.run(["ip", "link", "del", OUTSIDE], capture_output=True)
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


@contextlib.contextmanager
def emulator(options: list[str]) -> Iterator[str]:
    port = "8811"
    proc = subprocess.Popen(
        ["ip", "netns", "exec", NS, str(BIN / "asyncclient"), "serve", "--host", SERVER,
         "--port", port, "--speed", "60", *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        while "emulator on" not in (proc.stdout.readline() or "emulator on"):
            pass
        yield f"http://{SERVER}:{port}"
    finally:
        proc.terminate()
        proc.wait()


Row = tuple[float, float, float, str]


def upload(url: str, path: Path, state: Path, fixed: int | None) -> Row:
    """(seconds, first part's answer in seconds, the parts' seconds, the default's numbers) of
    one upload; the parts' seconds run from the service's answer to the start to the last
    part's answer: what the link carried, without the command's start, hash and complete."""
    env = {**os.environ, "ASYNCCLIENT_BASE_URL": url, "ASYNCCLIENT_API_KEY": "demo-run",
           "ASYNCCLIENT_STATE_DIR": str(state)}  # fmt: skip
    extra = [] if fixed is None else ["--max-parts-in-flight", str(fixed), "--concurrency",
                                      str(fixed)]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(
        [str(BIN / "asyncclient"), "-v", "upload", "p_demo", str(path), "--quiet", *extra],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    took = time.perf_counter() - began
    stamps = re.findall(r"(\d\d):(\d\d):(\d\d),(\d{3}) DEBUG asyncclient\.(\w+) (.*)", done.stderr)

    def at(stamp: tuple[str, ...]) -> float:
        h, m, s, ms = (int(x) for x in stamp[:4])
        return h * 3600 + m * 60 + s + ms / 1000

    first_request = next((at(s) for s in stamps if s[4] == "requests"), None)
    first_part = next((at(s) for s in stamps if s[4] == "requests" and "/parts/" in s[5]
                       and "-> 200" in s[5]), None)  # fmt: skip
    stored = (first_part - first_request) if first_part and first_request else float("nan")
    started = next((at(s) for s in stamps if "start_upload" in s[5]), None)
    last_part = [at(s) for s in stamps if "/parts/" in s[5] and "-> 200" in s[5]]
    parts = (last_part[-1] - started) if started and last_part else float("nan")
    moves = [re.findall(r"flight (\d+) -> (\d+)", s[5])[0] for s in stamps
             if "parts in flight" in s[5]]  # fmt: skip
    levels = [moves[0][0], *(to for _, to in moves)] if moves else []
    return took, stored, parts, " ".join(levels) if fixed is None else ""


def main(args: argparse.Namespace) -> None:
    if os.geteuid() != 0 or not shutil.which("tc"):
        sys.exit("bench_netns_link: run as root, with iproute2 (ip, tc) installed")
    from asyncclient.testing.builders import build_apk

    work = Path(tempfile.mkdtemp(prefix="bench-netns-"))
    spinners = []
    if args.busy:
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in "12"]
    try:
        for name, (rate, burst, options, mb, fixed) in SHAPES.items():
            if name not in args.shapes:
                continue
            path = work / f"{mb}.apk"
            build_apk(path, filler_bytes=mb * 1_000_000)
            size = path.stat().st_size
            with link(rate, burst), emulator(options) as url:
                rows: dict[str, list[Row]] = {}
                for _ in range(args.rounds):
                    for setting in [None, *fixed]:
                        label = "default" if setting is None else f"fixed {setting}"
                        rows.setdefault(label, []).append(upload(url, path, work, setting))
            print(f"\n{name}: tbf {rate}, {mb} MB, {args.rounds} round(s), medians"
                  + (", both cores busy" if args.busy else ""))  # fmt: skip
            link_mbs = int(rate.removesuffix("mbit")) / 8
            best = min(statistics.median(r[2] for r in runs) for runs in rows.values())
            for label, runs in rows.items():
                took = statistics.median(r[0] for r in runs)
                stored = statistics.median(r[1] for r in runs)
                parts = statistics.median(r[2] for r in runs)
                print(f"  {label:9} {took:6.2f} s  parts {size / parts / 1e6:5.1f} MB/s "
                      f"{size / parts / 1e6 / link_mbs:4.0%} of the link {best / parts:5.0%} "
                      f"of the best  first part stored {stored:5.2f} s")  # fmt: skip
                for took_r, _, parts_r, levels in runs if label == "default" else []:
                    print(f"    a round: {took_r:6.2f} s, parts {size / parts_r / 1e6:5.1f} MB/s,"
                          f" parts in flight {levels}")  # fmt: skip
    finally:
        for spinner in spinners:
            spinner.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--busy", action="store_true", help="both cores busy meanwhile")
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    main(parser.parse_args())
