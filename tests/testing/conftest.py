"""Fixtures for the emulator's tests: a manual-clock demo service and raw clients for it."""

from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from emulator_support import SMALL_SEED, Http

from asyncclient.testing import FakeService
from asyncclient.testing.pytest_plugin import FakeServiceFactory


@pytest.fixture
async def svc(fake_service_factory: FakeServiceFactory) -> FakeService:
    """The demo seed on the manual clock: time moves only with svc.advance()."""
    return await fake_service_factory(clock="manual")


@pytest.fixture
async def session(svc: FakeService) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(svc.url) as client:
        yield client


@pytest.fixture
def http(session: aiohttp.ClientSession, svc: FakeService) -> Http:
    """A raw client with the demo run key."""
    return Http(session, svc.run_key)


@pytest.fixture
def edit(http: Http, svc: FakeService) -> Http:
    """A raw client with the demo edit key."""
    return http.as_key(svc.edit_key)


@pytest.fixture
async def clients() -> AsyncIterator[Callable[..., Http]]:
    """`clients(service, key)`: a raw client of any service with any key (closed afterwards)."""
    sessions: list[aiohttp.ClientSession] = []

    def make(service: FakeService, key: str | None) -> Http:
        sessions.append(aiohttp.ClientSession(service.url))
        return Http(sessions[-1], key)

    yield make
    for opened in sessions:
        await opened.close()


@pytest.fixture
async def small(fake_service_factory: FakeServiceFactory) -> FakeService:
    """SMALL_SEED on the manual clock."""
    return await fake_service_factory(SMALL_SEED, clock="manual")


@pytest.fixture
async def a_run(clients: Callable[..., Http], small: FakeService) -> Http:
    return clients(small, "k-run")


@pytest.fixture
async def a_edit(clients: Callable[..., Http], small: FakeService) -> Http:
    return clients(small, "k-edit")
