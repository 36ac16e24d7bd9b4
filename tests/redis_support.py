"""A real Redis server for a test: Debian's `redis-server` (or `valkey-server`), started on a
free loopback port with nothing saved to disk, stopped (and its files removed) when the test
ends. `.ci/run` installs it where it is missing; a machine without it fails these tests with a
line saying so rather than skipping them."""

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import attrs


@attrs.frozen
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _binary() -> str:
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name) or (
            f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None
        )
        if found:
            return found
    raise RuntimeError(
        "no redis-server or valkey-server on this machine: `.ci/run` installs it "
        "(apt-get install redis-server)"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")
    return False


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[RedisServer]:
    """A Redis server of the test's own; tries another port when one was taken meanwhile."""
    binary = _binary()
    for _ in range(5):
        port = _free_port()
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(folder), "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30  # the server's start, on a busy machine
        while process.poll() is None and time.monotonic() < deadline and not _answers(port):
            time.sleep(0.02)
        if process.poll() is None and _answers(port):
            break
        process.kill()
        process.wait()
    else:
        raise RuntimeError("redis-server did not start on a free loopback port")
    try:
        yield RedisServer(port, process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
