"""FakeService: the emulator started and stopped from Python, on 127.0.0.1 and a free port.

`async with FakeService() as svc:` or `await svc.start()` / `await svc.stop()` (the CLI's way).
"""

import asyncio
import os
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from aiohttp.log import access_logger

from asyncclient._core._operations import OPERATIONS
from asyncclient.testing._app import make_app
from asyncclient.testing._backend import Backend
from asyncclient.testing._clock import Clock, make_clock
from asyncclient.testing._conditions import Fault, FaultPlan, NetworkConditions
from asyncclient.testing._hold import Hold
from asyncclient.testing._http import AppState, RequestRecord
from asyncclient.testing._listening import listen
from asyncclient.testing._seed import Seed
from asyncclient.testing._seed_load import demo_seed, load_seed
from asyncclient.testing._state import ServiceSettings
from asyncclient.testing._tls import TlsFiles
from asyncclient.testing.dialects import Dialect, DialectSpec, get_dialect

__all__ = ["FakeService"]

SeedSource = Seed | str | os.PathLike[str] | Mapping[str, Any] | None


class FakeService:
    """The embedded Test-Run Service over real HTTP.

    seed: None for the demo seed, a .json/.toml path, a dict of the same shape, or a Seed.
    dialect: how the service writes what the API spec leaves open: "asyncclient" (default),
    "flat", "enveloped", "package.module:ClassName", or a Dialect (class or instance); None
    takes the seed's "dialect", if it names one.
    speed: service seconds per wall second (clock="scaled"); clock="manual" moves time only
    through `advance`. data_dir: where builds are kept; None is a temp dir removed on stop.

    TLS: tls=True serves HTTPS with a certificate for 127.0.0.1, ::1 and localhost from a
    throwaway CA made at start; `ca_file` is that CA's PEM file and `ssl_context()` a client
    context that trusts it. tls_cert/tls_key serve a pair of your own instead (`ca_file` is then
    tls_ca, if given). require_client_cert=True asks every client for a certificate from the
    throwaway CA (`client_cert_file` is one, key included); client_ca names the CA file that
    client certificates must come from when you bring your own.

    Args:
        seed: None for the demo seed, a `.json`/`.toml` path, a dict of the same shape, or a
            `Seed`.
        host: The address to listen on.
        port: The port; 0 picks a free one (`svc.url` says which).
        speed: Service seconds per wall second (clock "scaled").
        clock: "scaled" (time runs `speed` times faster) or "manual" (only `advance()`).
        settings: Limits and device capabilities (`ServiceSettings`).
        conditions: Latency, bandwidth and random faults (`NetworkConditions`).
        data_dir: Where builds are kept; None: a temporary folder removed on stop.
        access_log: Log every request (aiohttp's access log).
        dialect: How the service writes what the spec leaves open (a name or a `Dialect`).
        tls: Serve HTTPS with a certificate from a throwaway CA (`svc.ca_file`).
        tls_cert: Serve HTTPS with this PEM certificate.
        tls_key: The key of `tls_cert`, if not in its file.
        tls_ca: The CA file of `tls_cert`, given to clients.
        require_client_cert: Ask every client for a certificate (mutual TLS).
        client_ca: With `tls_cert`: accept client certificates from this CA.

    Raises:
        SeedError: A seed that does not load (one line naming the file and place).
        ValueError: An unknown dialect or clock, or TLS options that do not fit.
    """

    def __init__(
        self,
        seed: SeedSource = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        speed: float = 60.0,
        clock: str = "scaled",
        settings: ServiceSettings | None = None,
        conditions: NetworkConditions | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        access_log: bool = False,
        dialect: DialectSpec = None,
        tls: bool = False,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        tls_ca: str | os.PathLike[str] | None = None,
        require_client_cert: bool = False,
        client_ca: str | os.PathLike[str] | None = None,
    ) -> None:
        # Load now: a bad seed fails before any port is taken.
        self.seed = demo_seed() if seed is None else load_seed(seed)
        self.dialect: Dialect = get_dialect(dialect if dialect is not None else self.seed.dialect)
        self.clock: Clock = make_clock(clock, speed)
        self.settings = settings or ServiceSettings()
        self._plan = FaultPlan(conditions)
        self.host = host
        self._port = port
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._own_dir: Path | None = None
        self._access_log = access_log
        self._runner: web.AppRunner | None = None
        self._state: AppState | None = None
        self._tls = TlsFiles.check(
            tls=tls,
            cert=tls_cert,
            key=tls_key,
            ca=tls_ca,
            require_client_cert=require_client_cert,
            client_ca=client_ca,
        )
        self._server_ssl: ssl.SSLContext | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> Self:
        """Seed the state and serve on the host and port given (0: a free one); returns self."""
        if self._runner is not None:
            raise RuntimeError("the service is already running")
        if self._data_dir is None:
            self._own_dir = Path(tempfile.mkdtemp(prefix="asyncclient-emulator-"))
        data_dir = self._data_dir or self._own_dir
        assert data_dir is not None
        runner: web.AppRunner | None = None
        try:
            # Seeding writes and inspects real apps: blocking, so a thread.
            backend = await asyncio.to_thread(
                Backend, self.seed, clock=self.clock, settings=self.settings, data_dir=data_dir
            )
            state = AppState(backend, self._plan, dialect=self.dialect)
            runner = web.AppRunner(
                make_app(state),
                access_log=access_logger if self._access_log else None,
                handle_signals=False,
                shutdown_timeout=1.0,
                # 64 KiB reads: a modelled link is acknowledged in small steps.
                read_bufsize=1 << 16,
            )
            await runner.setup()
            if self._tls is not None:
                self._server_ssl = await asyncio.to_thread(self._tls.server_context)
            listening = await asyncio.to_thread(listen, self.host, self._port)
            await web.SockSite(runner, listening, ssl_context=self._server_ssl).start()
        except BaseException:
            if runner is not None:
                await runner.cleanup()
            await self.stop()
            raise
        self._state, self._runner = state, runner
        return self

    async def stop(self) -> None:
        """Stop serving, close every connection and remove the service's files. It can be started
        again (with a fresh state from its seed)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            # Abort what graceful shutdown leaves open (a paused TLS reader).
            server = runner.server
            transports = [h.transport for h in server.connections] if server is not None else []
            await runner.cleanup()
            for transport in transports:
                if transport is not None:
                    transport.abort()  # nothing when it is closed already
            await asyncio.sleep(0)  # an aborted transport closes on the next turn
        if self._state is not None:
            await self._state.backend.aclose()
        if self._tls is not None:
            self._tls.cleanup()
        own, self._own_dir = self._own_dir, None
        if own is not None:
            await asyncio.to_thread(shutil.rmtree, own, True)

    async def serve_forever(self) -> None:
        """Start (if needed) and serve until cancelled, then stop."""
        if self._runner is None:
            await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def __repr__(self) -> str:
        where = self.url if self._runner is not None else "stopped"
        return f"<FakeService {where} seed={self.seed.source!r} dialect={self.dialect.name!r}>"

    # --- where and who ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether it serves now."""
        return self._runner is not None

    def _running(self) -> AppState:
        if self._state is None or self._runner is None:
            raise RuntimeError("the service is not running; use 'async with' or await start()")
        return self._state

    @property
    def port(self) -> int:
        """The port it listens on (once started)."""
        self._running()
        assert self._runner is not None
        return int(self._runner.addresses[0][1])

    @property
    def url(self) -> str:
        """The base URL, e.g. http://127.0.0.1:PORT or https://... with TLS (operation paths
        start with /api/v1)."""
        # A wildcard bind is reached through loopback.
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    @property
    def tls(self) -> bool:
        """Whether it serves HTTPS."""
        return self._tls is not None

    @property
    def ca_file(self) -> Path | None:
        """The PEM file of the CA that signed the service's certificate (the throwaway CA, or
        tls_ca); None without TLS. Give it to clients: ca_file=, --ca-file or SSL_CERT_FILE."""
        self._running()
        return self._tls.ca_file if self._tls is not None else None

    @property
    def client_cert_file(self) -> Path | None:
        """With require_client_cert and the throwaway CA: a client certificate and its key in
        one PEM file, which the service accepts (client_cert=, --client-cert)."""
        self._running()
        return self._tls.client_cert_file if self._tls is not None else None

    def ssl_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        """A client SSLContext that trusts the service's CA (and carries the client
        certificate, when the service asks for one and client_cert is true).

        Args:
            client_cert: Carry the client certificate, when the service asks for one.

        Returns:
            An `ssl.SSLContext` for aiohttp (`ssl=`) or `AsyncSession(ca_file=svc.ca_file)`.
        """
        self._running()
        if self._tls is None or self._tls.ca_file is None:
            raise RuntimeError("the service does not serve TLS with a CA it knows (tls=True)")
        context = ssl.create_default_context(cafile=str(self._tls.ca_file))
        if client_cert and self._tls.client_cert_file is not None:
            context.load_cert_chain(str(self._tls.client_cert_file))
        return context

    @property
    def backend(self) -> Backend:
        """The emulator's state (builds, runs, endpoints), for tests that look inside."""
        return self._running().backend

    @property
    def run_key(self) -> str:
        """The seed's first key that can run tests (demo: "demo-run")."""
        return self._first_key("run")

    @property
    def edit_key(self) -> str:
        """The seed's first key that can also create and edit tests (demo: "demo-edit")."""
        return self._first_key("edit")

    def _first_key(self, capability: str) -> str:
        key = self.seed.first_key(capability)
        if key is None:
            raise LookupError(f"the seed has no key with capability {capability!r}")
        return key

    def seed_info(self) -> dict[str, Any]:
        """The projects and keys of the seed as JSON-ready dicts (what `asyncclient serve` prints).

        `{"projects": [{"id", "name", "plan", "includedRuns"}], "keys": [{"key", "capability",
        "projects"}]}`. The keys are the secrets to use: show them only to their owner.
        """
        return {
            "projects": [
                {"id": p.id, "name": p.name, "plan": p.plan, "includedRuns": p.included_runs}
                for p in self.seed.projects
            ],
            "keys": [
                {"key": k.key, "capability": k.capability, "projects": list(k.projects)}
                for k in self.seed.keys
            ],
        }

    @property
    def project_id(self) -> str:
        """The seed's first project (demo: "p_demo")."""
        return self.seed.projects[0].id

    # --- time ---------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move service time forward (with either clock).

        Args:
            seconds: How far to move service time; the runs move with it.
        """
        self.clock.advance(seconds)

    def now(self) -> float:
        """The service's clock now (seconds)."""
        return self.clock.now()

    def hold(self, *test_ids: str, state: str = "queued") -> Hold:
        """Keep the tests' runs in `state` until the hold is released, however long the clock
        runs: the runs not past it now, and every run of these tests started meanwhile.

        For a test that needs an order between the client and the service (stop a run while it
        is queued, start a re-run before the first one ends) without racing the clock:

            with service.hold("t_login"):
                ...  # t_login's runs stay queued here
            # released: each goes on from now (what was left of its queue, then its whole run)

        Args:
            test_ids: The seed's tests whose runs to hold.
            state: "queued" (the runs never start) or "running" (they start, never end).
        """
        return Hold(self.backend, test_ids, state)

    # --- requests, conditions and faults ------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request answered so far (the latest 100,000), oldest first."""
        return list(self._running().log)

    def requests_for(self, op: str) -> list[RequestRecord]:
        """The requests of one operation (its tool name: list_runs, upload_part, ...).

        Args:
            op: The operation's tool name (`list_runs`, `upload_part`, ...).

        Returns:
            Its `RequestRecord`s, oldest first.
        """
        if op not in OPERATIONS:
            # A misspelt name would make "no request" pass.
            raise ValueError(f"unknown operation {op!r}: give one of {', '.join(OPERATIONS)}")
        return [r for r in self._running().log if r.op == op]

    def reset_requests(self) -> None:
        """Forget the requests recorded so far (the log and the counts)."""
        state = self._running()
        state.log.clear()
        state.counts.clear()
        state.max_ids = 0

    def request_counts(self) -> dict[str, int]:
        """Requests per operation since the start (or the last reset_requests)."""
        return dict(self._running().counts)

    @property
    def conditions(self) -> NetworkConditions:
        """The network conditions in force (latency, bandwidth, random faults)."""
        return self._plan.conditions

    @conditions.setter
    def conditions(self, value: NetworkConditions) -> None:
        self._plan.conditions = value

    def inject(self, op: str, fault: Fault) -> None:
        """Answer the next `fault.times` requests of `op` with `fault` (after earlier faults).

        Args:
            op: The operation's tool name (`get_run`, `upload_part`, ...).
            fault: What to answer, and how many times.
        """
        self._plan.inject(op, fault)

    def clear_faults(self) -> None:
        """Remove every fault injected with inject()."""
        self._plan.clear_faults()
