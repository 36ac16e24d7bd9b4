"""What the benchmarks share: the emulator in a process of its own, and its admin routes.
A separate process keeps the emulator's CPU out of the client's getrusage figures.

    with Emulator(part_bytes=8 << 20) as emu:
        emu.set_conditions(latency_ms=50, part_bandwidth=100_000_000)
        ... emu.url, emu.run_key, emu.edit_key, emu.project_id ...
"""

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

_SERVER = """
import asyncio, json, sys
from asyncclient.testing import FakeService, ServiceSettings

async def main():
    options = json.loads(sys.argv[1])
    settings = ServiceSettings(**options.get("settings", {}))
    async with FakeService(options.get("seed"), port=0, settings=settings,
                           data_dir=options.get("data_dir"), tls=options.get("tls", False),
                           speed=options.get("speed", 60.0)) as svc:
        ca_file = str(svc.ca_file) if svc.ca_file else None
        print(json.dumps({"url": svc.url, "run_key": svc.run_key, "edit_key": svc.edit_key,
                          "project_id": svc.project_id, "ca_file": ca_file}), flush=True)
        # Serve until the parent closes stdin (or dies).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def scratch_dir(prefix: str) -> Path:
    """A new temporary folder, in memory (/dev/shm) where there is one: benchmarks of uploads
    should not measure the disk's writeback."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


class Emulator:
    """The embedded service started with `python -c` in a child process; stopped on exit.

    settings: ServiceSettings fields (part_bytes, max_bytes, ...). Its builds are kept in a
    scratch_dir() removed on exit. tls=True: HTTPS with a throwaway CA (`ca_file`). seed: a
    seed dict (written to a file there) instead of the demo. speed: service seconds per wall
    second.
    """

    def __init__(
        self,
        *,
        tls: bool = False,
        seed: dict[str, Any] | None = None,
        speed: float = 60.0,
        **settings: Any,
    ) -> None:
        self.settings = settings
        self.speed = speed
        self.tls = tls
        self.seed = seed
        self.ca_file: str | None = None
        self._data_dir: Path | None = None
        self._proc: subprocess.Popen[str] | None = None
        self.url = self.run_key = self.edit_key = self.project_id = ""

    def __enter__(self) -> Self:
        self._data_dir = scratch_dir("bench-emulator-")
        seed_file = None
        if self.seed is not None:
            seed_file = self._data_dir / "seed.json"
            seed_file.write_text(json.dumps(self.seed))
        options = json.dumps(
            {
                "settings": self.settings,
                "data_dir": str(self._data_dir),
                "tls": self.tls,
                "speed": self.speed,
                "seed": None if seed_file is None else str(seed_file),
            }
        )
        self._proc, info = _started([sys.executable, "-c", _SERVER, options], "the emulator")
        self.url, self.run_key = info["url"], info["run_key"]
        self.edit_key, self.project_id = info["edit_key"], info["project_id"]
        self.ca_file = info["ca_file"]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _stop(self._proc)
        self._proc = None
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    @property
    def pid(self) -> int | None:
        """The emulator's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def _call(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if key is not None:
            request.add_header("Authorization", f"Bearer {key}")
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        with urllib.request.urlopen(request, timeout=60, context=context) as answer:
            return json.loads(answer.read() or b"null")

    def set_conditions(self, **conditions: Any) -> None:
        """PUT /_emulator/conditions; names as NetworkConditions (latency_ms, part_bandwidth,
        error_rate, drop_rate, ops, seed, ...); everything not given is off."""
        from asyncclient.testing import NetworkConditions

        self._call("PUT", "/_emulator/conditions", NetworkConditions(**conditions).to_json())

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/_emulator/stats")
        return result

    def delete_builds(self, build_ids: list[str]) -> None:
        """Free the emulator's disk between runs (needs the edit key)."""
        for build_id in build_ids:
            self._call("DELETE", f"/api/v1/builds/{build_id}", key=self.edit_key)


class PlainService:
    """benchmarks/plain_service.py in a child process: a service that is not the emulator
    (fixed answers, nothing hashed), with the Emulator's url, run_key and ca_file."""

    project_id = "p_demo"

    def __init__(self, *, tls: bool = False, **_settings: Any) -> None:
        self.tls = tls
        self.ca_file: str | None = None
        self.url = self.run_key = self.edit_key = ""
        self._proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(
            self.url + "/_emulator/stats", timeout=60, context=self._tls()
        ) as answer:
            result: dict[str, Any] = json.loads(answer.read())
        return result

    def delete_builds(self, build_ids: list[str]) -> None:
        """Nothing to free: the plain service keeps no build."""

    def _tls(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None

    def __enter__(self) -> Self:
        script = Path(__file__).resolve().parent / "plain_service.py"
        argv = [sys.executable, str(script), *(["--tls"] if self.tls else [])]
        self._proc, info = _started(argv, "the plain service")
        self.url, self.run_key, self.ca_file = info["url"], info["run_key"], info["ca_file"]
        self.edit_key = self.run_key
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _stop(self._proc)
        self._proc = None


def _started(argv: list[str], what: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """A service started in a child process (its stdin its lifeline), and the JSON line it
    prints once it serves."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        _stop(proc)
        raise RuntimeError(f"{what} did not start")
    return proc, json.loads(line)


def _stop(proc: subprocess.Popen[str] | None) -> None:
    """End a service started with its stdin as its lifeline: close it, wait, then kill."""
    if proc is None:
        return
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
