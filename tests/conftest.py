"""Shared fixtures: the emulator with the demo seed on a manual clock, sessions against it,
waits recorded instead of slept, and real app files built with asyncclient.testing.builders."""

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from body_paths import BodyPath
from hypothesis import HealthCheck, settings

from asyncclient import AsyncSession
from asyncclient.testing import DIALECTS, FakeService, recorded_retry_waits
from asyncclient.testing.builders import build_apk

MakeApk = Callable[..., Path]

# Property tests: a fixed, derandomized budget in CI (the same examples every run, so a red CI is
# reproducible); a larger random one locally (HYPOTHESIS_PROFILE=dev, the default outside CI).
settings.register_profile(
    "ci", max_examples=150, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


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


@pytest.fixture(params=list(DIALECTS))
def dialect(request: pytest.FixtureRequest) -> str:
    """Each wire dialect of the emulator in turn: the client must read every one of them."""
    name: str = request.param
    return name


@pytest.fixture
async def service(dialect: str) -> AsyncIterator[FakeService]:
    """The emulator with the demo seed, in each dialect; time moves only through
    service.advance(seconds)."""
    async with FakeService(clock="manual", dialect=dialect) as svc:
        yield svc


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
def body_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> "BodyPath":
    """How a PartBody leaves: by sendfile (plain TCP), or read and written because the loop
    refused sendfile as asyncio does (SendfileNotAvailableError) or as uvloop does
    (NotImplementedError). Counts the sendfile slices sent and refused."""
    counts = BodyPath(request.param)
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
