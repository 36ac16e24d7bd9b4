"""What exporting a job's trace costs the job: the seconds from the summary's last line to
the command's exit, for the same `run project --wait` job with no OTEL_* variable (the
baseline), a collector that takes the data, one that refuses connections (nothing listens),
and one that takes the connection and never answers.

    .venv/bin/python benchmarks/bench_export.py [--rounds 3]

The emulator and the collectors run beside the command (the collector: an OTLP/HTTP receiver
that answers 200; the silent one: a socket that never answers). Rounds alternate the cases;
the figures are medians. The wait is asyncclient.cli._telemetry.EXPORT_BOUND (4.5 s).
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Emulator, scratch_dir

from asyncclient.testing.builders import build_apk

COMMAND = [sys.executable, "-m", "asyncclient"]


class _Collector(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _silent() -> tuple[socket.socket, int]:
    """A listening socket whose connections are never answered (the backlog takes them)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener, listener.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(env: dict[str, str], build: str) -> float:
    """Seconds from the summary's counts line to the command's exit."""
    proc = subprocess.Popen(
        [*COMMAND, "run", "project", "p_demo", "--build", build, "--mode", "cold", "--wait",
         "--retry-failed", "2", "--interval", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    last = None
    for line in proc.stdout:
        if " tests: " in line:
            last = time.monotonic()
    proc.wait()
    ended = time.monotonic()
    if last is None:
        raise RuntimeError(f"the job printed no summary (exit code {proc.returncode})")
    return ended - last


def main(args: argparse.Namespace) -> None:
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    silent, silent_port = _silent()
    cases = {
        "no export (baseline)": None,
        "a collector": f"http://127.0.0.1:{collector.server_address[1]}",
        "nothing listens": f"http://127.0.0.1:{_free_port()}",
        "never answers": f"http://127.0.0.1:{silent_port}",
    }
    found: dict[str, list[float]] = {case: [] for case in cases}
    with Emulator(speed=600.0) as emu:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ASYNCCLIENT_"))}
        base.update({"ASYNCCLIENT_BASE_URL": emu.url, "ASYNCCLIENT_API_KEY": emu.run_key})
        scratch = scratch_dir("bench-export-")
        try:
            apk = build_apk(scratch / "shop.apk")
            build = subprocess.run(
                [*COMMAND, "upload", "p_demo", str(apk), "--quiet"],
                env=base, capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        for round_no in range(args.rounds):
            order = list(cases.items())
            if round_no % 2:
                order.reverse()
            for case, endpoint in order:
                env = dict(base)
                if endpoint is not None:
                    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
                found[case].append(_tail(env, build))
            print(
                f"round {round_no + 1}: "
                + ", ".join(f"{c} {v[-1]:.2f} s" for c, v in found.items())
            )
    collector.shutdown()
    silent.close()
    baseline = statistics.median(found["no export (baseline)"])
    print(f"\nfrom the summary to the exit, median of {args.rounds} rounds:")
    for case, values in found.items():
        median = statistics.median(values)
        print(f"{case:22s} {median:5.2f} s   ({median - baseline:+.2f} s against no export)")
    print("target: at most 5 s more (the command waits EXPORT_BOUND, 4.5 s, then exits)")
    worst = max(statistics.median(values) for values in found.values()) - baseline
    if worst > 5.0:
        sys.exit(f"missed: a collector costs the job {worst:.2f} s more")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    main(parser.parse_args())
