"""Shared fixtures: the emulator with the demo seed on a manual clock, sessions against it,
waits recorded instead of slept, real app files built with asyncclient.testing.builders, and
the `asyncclient` command run in-process (run_cli)."""

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs
import pytest
from body_paths import BodyPath
from hypothesis import HealthCheck, settings
from network_support import NETWORK_KINDS, ForwardProxy, Network, ServeEmulator, forward_proxy
from otel_support import otel  # noqa: F401  (the fixture, for every folder)

from asyncclient import AsyncSession
from asyncclient.cli import main
from asyncclient.testing import DIALECTS, FakeService, demo_seed_data, recorded_retry_waits
from asyncclient.testing.builders import build_apk

MakeApk = Callable[..., Path]

# Property tests: a fixed, derandomized budget (the same examples every run, so the README's
# command and CI pass or fail alike, and a red run is reproducible); a larger random one on
# request (HYPOTHESIS_PROFILE=dev). How long examples take to make is the machine's load, never
# the code's: no profile fails a test for it (LOAD_BOUND), nor does a test's own settings.
LOAD_BOUND = (HealthCheck.too_slow,)
settings.register_profile(
    "ci", max_examples=150, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=LOAD_BOUND,
)  # fmt: skip
settings.register_profile("dev", max_examples=300, deadline=None, suppress_health_check=LOAD_BOUND)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# The variables that would send a test's requests elsewhere or change what it trusts.
NETWORK_VARIABLES = (
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "ASYNCCLIENT_PROXY", "ASYNCCLIENT_CA_FILE", "ASYNCCLIENT_CLIENT_CERT", "ASYNCCLIENT_CLIENT_KEY",
)  # fmt: skip


@pytest.fixture(autouse=True)
def _no_network_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test connects as it says: proxy and trust variables of the machine are cleared
    (the network tests set their own)."""
    for name in NETWORK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _slow_tier(config: pytest.Config) -> bool:
    return "slow" in (config.getoption("markexpr", "") or "").replace("not slow", "")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` for the default tier: two workers a core. It waits more than it computes
    (sockets, child processes, emulated time): on 2 cores 4 workers took 289 s where 2 took
    355 s. The slow tier builds virtual environments: a worker a core."""
    cores = os.cpu_count() or 1
    return cores if _slow_tier(config) else 2 * cores


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The default tier steals work (the last slow module does not run alone); the slow tier
    keeps a module on one worker, so that each of its modules builds its environments once."""
    if _slow_tier(config) and getattr(config.option, "dist", "no") == "worksteal":
        config.option.dist = "loadscope"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `linux(reason)` need a tool only Linux has here (a tmpfs mount, /proc,
    Debian's Chromium): on macOS and Windows they are skipped, saying which."""
    if sys.platform == "linux":
        return
    for item in items:
        marker = item.get_closest_marker("linux")
        if marker is not None:
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"Linux only: {reason}"))


def _dialects() -> list[str]:
    """The wire dialects the tests run in: all, or those ASYNCCLIENT_TEST_DIALECTS names (tox
    runs the other Pythons in the default one only: reading a dialect is the same code on every
    interpreter, and .ci/run's first pass reads them all)."""
    chosen = os.environ.get("ASYNCCLIENT_TEST_DIALECTS", "").replace(",", " ").split()
    unknown = sorted(set(chosen) - set(DIALECTS))
    if unknown:
        raise pytest.UsageError(f"ASYNCCLIENT_TEST_DIALECTS: no dialect {unknown[0]!r}")
    return chosen or list(DIALECTS)


def _networks() -> list[str]:
    """The networks of modules marked `networks`: all, or those ASYNCCLIENT_TEST_NETWORKS
    names (tox leaves the proxy out on the other Pythons: the proxy is another process, the
    same on every interpreter; TLS, which each Python's ssl module makes, stays)."""
    chosen = os.environ.get("ASYNCCLIENT_TEST_NETWORKS", "").replace(",", " ").split()
    unknown = sorted(set(chosen) - set(NETWORK_KINDS))
    if unknown:
        raise pytest.UsageError(f"ASYNCCLIENT_TEST_NETWORKS: no network {unknown[0]!r}")
    return chosen or list(NETWORK_KINDS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses `dialect` runs in each dialect. Modules marked `networks` run over
    plain HTTP in every dialect, then over HTTPS and over HTTPS through a forward proxy (in the
    default dialect: the wire reading is the same)."""
    marked = metafunc.definition.get_closest_marker("networks") is not None
    wants_network = marked and "network" in metafunc.fixturenames
    if "dialect" in metafunc.fixturenames:
        dialects = _dialects()
        if wants_network:
            combos = [(name, "plain") for name in dialects]
            combos += [("asyncclient", kind) for kind in _networks() if kind != "plain"]
            ids = [name if kind == "plain" else kind for name, kind in combos]
            metafunc.parametrize(("dialect", "network_kind"), combos, ids=ids)
        else:
            metafunc.parametrize("dialect", dialects)
    elif wants_network:
        metafunc.parametrize("network_kind", _networks())


@pytest.fixture(
    params=[pytest.param(1, id="once"), pytest.param(None, id="all", marks=pytest.mark.slow)]
)
def repetitions(request: pytest.FixtureRequest) -> int | None:
    """How many times a many-process test repeats its round: once in the default tier, every
    repetition (None: the test's own count) in the slow tier (`pytest -m slow`)."""
    value: int | None = request.param
    return value


@pytest.fixture
def network_kind() -> str:
    """plain, tls or proxy: plain unless the module is marked `networks`."""
    return "plain"


@pytest.fixture(scope="session")
def proxy_with_credentials(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    """A real forward proxy (proxy.py) that wants a user name and password."""
    with forward_proxy(tmp_path_factory.mktemp("proxy-auth"), credentials=True) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def open_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    """A real forward proxy that asks for no credentials."""
    with forward_proxy(tmp_path_factory.mktemp("proxy-open"), credentials=False) as proxy:
        yield proxy


@pytest.fixture
def network(
    network_kind: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Network:
    """How the test reaches its emulator (tests/network_support.py)."""
    proxy = request.getfixturevalue("proxy_with_credentials") if network_kind == "proxy" else None
    return Network(network_kind, monkeypatch, proxy)


@pytest.fixture
def dialect() -> str:
    """Each wire dialect of the emulator in turn (pytest_generate_tests above parametrizes
    every test that uses it): the client must read every one of them."""
    return "asyncclient"


@pytest.fixture
def serve_emulator(dialect: str, network: Network) -> ServeEmulator:
    """`async with serve_emulator(seed, clock="manual") as svc:` the emulator with `seed` (None:
    the demo) and FakeService's options, in the test's wire dialect, and over HTTPS or a
    proxy in modules marked `networks`: the one place a test's emulator meets both."""

    def serve(
        seed: Any = None, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[FakeService]:
        emulator = FakeService(seed, dialect=dialect, **network.service_options, **options)
        return network.serve(emulator)

    return serve


@pytest.fixture
async def service(serve_emulator: ServeEmulator) -> AsyncIterator[FakeService]:
    """The emulator with the demo seed (without its history: these tests count the runs they
    start), in each dialect (and network, in modules marked `networks`); time moves only
    through service.advance(seconds)."""
    async with serve_emulator(demo_seed_data(history=False), clock="manual") as svc:
        yield svc


RERUN_BUILD = "ab_b1"


def _rerun_seed(
    *,
    flaky: bool = True,
    broken: bool = True,
    extra: int = 0,
    failing: int = 0,
    tests: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    app = {"project": "p_ci", "target": "android", "appId": "com.example.shop"}
    chosen = [{"id": "t_pass", "title": "Passes", **app, "durationSeconds": 20}]
    if flaky:
        chosen.append({"id": "t_flaky", "title": "Flaky", **app, "durationSeconds": 25,
                       "flakyRuns": 1})  # fmt: skip
    if broken:
        chosen.append({"id": "t_broken", "title": "Always fails", **app, "outcome": "failed",
                       "durationSeconds": 30})  # fmt: skip
    for test in chosen:
        test.update((tests or {}).get(test["id"], {}))
    for i in range(extra):
        chosen.append(
            {"id": f"t_{i:04d}", "project": "p_ci", "target": "web", "url": "https://x.example",
             "outcome": "failed" if i < failing else "passed", "durationSeconds": 10,
             "queuedSeconds": 0}
        )  # fmt: skip
    return {
        "projects": [{"id": "p_ci", "plan": "paid", "includedRuns": 100000}],
        "keys": [{"key": "ci-run", "capability": "run", "projects": ["p_ci"]}],
        "builds": [
            {
                "id": RERUN_BUILD,
                "project": "p_ci",
                "platform": "android",
                "appId": "com.example.shop",
            },
            {
                "id": "ab_b2",
                "project": "p_ci",
                "platform": "android",
                "appId": "com.example.shop",
                "versionCode": "2",
            },
        ],
        "tests": chosen,
    }


@pytest.fixture
def rerun_seed() -> Callable[..., dict[str, Any]]:
    """The seed of the re-run tests (library and CLI): project p_ci, key ci-run, builds
    ab_b1 and ab_b2, tests t_pass, t_flaky (fails its first run; flaky=False leaves it out)
    and t_broken (always fails; broken=False leaves it out), and `extra` web tests of which
    the first `failing` fail. `tests={"t_pass": {"title": ...}}` changes a test's fields."""
    return _rerun_seed


@pytest.fixture
async def session(service: FakeService) -> AsyncIterator[AsyncSession]:
    """A session with the run key (may do everything but delete builds and manage endpoints)."""
    async with AsyncSession(service.run_key, service.url) as s:
        yield s


@pytest.fixture
async def edit_session(service: FakeService) -> AsyncIterator[AsyncSession]:
    """A session with the edit key."""
    async with AsyncSession(service.edit_key, service.url) as s:
        yield s


@pytest.fixture
def waits() -> Iterator[list[float]]:
    """The waits the retry loop chose between attempts, in order; nothing actually sleeps (every
    session of the test, the CLI's too: asyncclient.testing.recorded_retry_waits)."""
    with recorded_retry_waits() as recorded:
        yield recorded


@pytest.fixture
def make_apk(tmp_path: Path) -> MakeApk:
    """make_apk(name="shop.apk", **build_apk options) -> the path of a real .apk in tmp_path."""
    counter = 0

    def make(name: str | None = None, **options: Any) -> Path:
        nonlocal counter
        counter += 1
        return build_apk(tmp_path / (name or f"app{counter}.apk"), **options)

    return make


@pytest.fixture(params=["sendfile", "refused", "not implemented"])
def body_path(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, network_kind: str
) -> "BodyPath":
    """How a PartBody leaves: by sendfile (plain TCP), or read and written because the loop
    refused sendfile as asyncio does (SendfileNotAvailableError) or as uvloop does
    (NotImplementedError). Counts the sendfile slices sent and refused."""
    counts = BodyPath(request.param, tls=network_kind != "plain")
    original = asyncio.BaseEventLoop.sendfile

    async def sendfile(self: asyncio.BaseEventLoop, *args: Any, **kwargs: Any) -> int:
        if counts.mode == "refused":
            counts.refused += 1
            raise asyncio.SendfileNotAvailableError("refused by the test")
        if counts.mode == "not implemented":
            counts.refused += 1
            raise NotImplementedError
        counts.sent += 1
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "sendfile", sendfile)
    return counts


@attrs.frozen
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class RunCli(Protocol):
    def __call__(self, *argv: str, env: dict[str, str] | None = None) -> Awaitable[CliResult]: ...


@pytest.fixture
def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Awaitable[CliResult]]:
    """`await run_cli("builds", "list", "p_demo", env={...})` -> CliResult.

    The command runs its own event loop in a worker thread while the emulator serves on the
    test's loop; pytest's capsys captures its output.

    `env` sets ASYNCCLIENT_* variables for this call; unset ones are removed so the user's own
    environment never leaks into a test.
    """

    async def run(*argv: str, env: dict[str, str] | None = None) -> CliResult:
        for name in (
            "ASYNCCLIENT_BASE_URL",
            "ASYNCCLIENT_API_KEY",
            "ASYNCCLIENT_LOG",
            "GITHUB_STEP_SUMMARY",
        ):
            monkeypatch.delenv(name, raising=False)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = await asyncio.to_thread(main, list(argv))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
