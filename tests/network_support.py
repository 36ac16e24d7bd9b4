"""Real networks for the tests: the emulator over TLS, and a real forward proxy (proxy.py, a
package: CONNECT tunnels, Basic auth, an access log) in a process of its own on loopback.

A test module marked `pytest.mark.networks` runs its client-level tests three ways (see
tests/conftest.py): plain HTTP in every dialect, then HTTPS, then HTTPS through the proxy with
credentials. The CA file and the proxy reach every session of the test, the library's and the
CLI's (and the MCP server's subprocess), through the environment, as they reach a user's:
ASYNCCLIENT_CA_FILE and HTTPS_PROXY.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest

from asyncclient.testing import FakeService

NETWORK_KINDS = ("plain", "tls", "proxy")
#: The conftest's `serve_emulator` fixture: `async with serve_emulator(seed, **options) as svc`.
ServeEmulator = Callable[..., contextlib.AbstractAsyncContextManager[FakeService]]
PROXY_USER = "ci-runner"
PROXY_PASSWORD = "pr0xy-s3cret-42"
_ACCESS = re.compile(r" - CONNECT (?P<target>\S+) - (?P<bytes>\d+) bytes")


class ForwardProxy:
    """proxy.py on 127.0.0.1 and a free port, logging every tunnel it served."""

    def __init__(self, folder: Path, *, credentials: bool, args: tuple[str, ...] = ()) -> None:
        self.folder = folder
        self.credentials = credentials
        self.args = args
        self.log = folder / "proxy.log"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ForwardProxy:
        self.folder.mkdir(parents=True, exist_ok=True)
        port_file = self.folder / "proxy.port"
        auth = ["--basic-auth", f"{PROXY_USER}:{PROXY_PASSWORD}"] if self.credentials else []
        command = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0"]
        command += ["--port-file", str(port_file), "--num-acceptors", "1", "--num-workers", "1"]
        command += ["--log-file", str(self.log), "--log-level", "INFO", *auth, *self.args]
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text:
                self.port = int(text)
                return self
            if self._process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("proxy.py did not start; is the test extra installed?")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    @property
    def url(self) -> str:
        """The address a client is given, with the credentials when it has them."""
        auth = f"{PROXY_USER}:{PROXY_PASSWORD}@" if self.credentials else ""
        return f"http://{auth}127.0.0.1:{self.port}"

    def tunnels(self, port: int | None = None) -> list[tuple[str, int]]:
        """The CONNECT tunnels it served (target, bytes), to one port of loopback or all."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        found = [(m["target"], int(m["bytes"])) for m in _ACCESS.finditer(text)]
        if port is None:
            return [t for t in found if t[0] != "None:None"]
        return [t for t in found if t[0] == f"127.0.0.1:{port}"]

    async def wait_for_tunnel(self, port: int) -> list[tuple[str, int]]:
        """The tunnels to `port`, waiting up to 10 s for the first to be logged (proxy.py logs
        a tunnel when it closes)."""
        deadline = time.monotonic() + 10.0
        while True:
            found = self.tunnels(port)
            if found or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.05)


@attrs.define
class Network:
    """How a test reaches its emulator: plain, tls or proxy (TLS through ForwardProxy)."""

    kind: str
    monkeypatch: pytest.MonkeyPatch
    proxy: ForwardProxy | None = None

    @property
    def tls(self) -> bool:
        return self.kind != "plain"

    @property
    def service_options(self) -> dict[str, Any]:
        return {"tls": True} if self.tls else {}

    def apply(self, service: FakeService) -> None:
        """Point every session of the test at the service's CA and through the proxy."""
        if service.ca_file is not None:
            self.monkeypatch.setenv("ASYNCCLIENT_CA_FILE", str(service.ca_file))
        if self.proxy is not None:
            self.monkeypatch.setenv("HTTPS_PROXY", self.proxy.url)

    @contextlib.asynccontextmanager
    async def serve(self, service: FakeService) -> AsyncIterator[FakeService]:
        """Start the service, apply the network to the test, and after the test check that
        its requests went through the proxy (when there is one)."""
        async with service:
            self.apply(service)
            yield service
            if self.proxy is not None and service.requests:
                assert await self.proxy.wait_for_tunnel(service.port), (
                    "the service was asked, but the proxy served no tunnel to it"
                )


@contextlib.contextmanager
def forward_proxy(
    folder: Path, *, credentials: bool, args: tuple[str, ...] = ()
) -> Iterator[ForwardProxy]:
    proxy = ForwardProxy(folder, credentials=credentials, args=args).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def secrets_in(text: str) -> list[str]:
    """Which of the tests' secrets a text shows (the proxy password, raw or URL-quoted)."""
    return [s for s in (PROXY_PASSWORD,) if s in text]


def raw_client(service: FakeService) -> aiohttp.ClientSession:
    """A bare aiohttp session that reaches the service directly, trusting its CA if it has one
    (for tests that look at the service without asyncclient)."""
    if not service.tls:
        return aiohttp.ClientSession()
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=service.ssl_context()))


async def read_serve_info(proc: asyncio.subprocess.Process) -> Any:
    """The JSON object `asyncclient serve --json` prints first, read line by line until whole."""
    assert proc.stdout is not None
    text = ""
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        assert line, "serve ended before printing its address"
        text += line.decode()
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            continue
