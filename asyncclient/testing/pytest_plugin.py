"""pytest fixtures for tests against the embedded service: `fake_service`, `fake_tls_service`,
`fake_service_factory` (the async ones need pytest-asyncio). Registered by the `pytest11`
entry point, so it stays cheap: the emulator loads when a fixture is used."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from asyncclient import testing

_asyncio_fixture: Callable[..., Any] | None
try:
    from pytest_asyncio import fixture as _asyncio_fixture
except ImportError:  # pragma: no cover - only without pytest-asyncio installed
    _asyncio_fixture = None

if TYPE_CHECKING:
    from asyncclient.testing.server import FakeService, SeedSource

__all__ = ["FakeServiceFactory", "fake_service", "fake_service_factory", "fake_tls_service"]


class FakeServiceFactory(Protocol):
    """`await factory(seed=None, **FakeService keyword arguments)`: a started FakeService."""

    async def __call__(self, seed: SeedSource = None, **kwargs: Any) -> FakeService: ...


def _async_fixture(func: Callable[[], AsyncIterator[Any]]) -> Any:
    """pytest_asyncio.fixture; without pytest-asyncio, a fixture that says what is missing."""
    if _asyncio_fixture is None:  # pragma: no cover - only without pytest-asyncio installed

        def missing() -> None:
            pytest.fail(f"the {func.__name__} fixture needs pytest-asyncio (pip install it)")

        return pytest.fixture(name=func.__name__)(missing)
    return _asyncio_fixture(func)


@_async_fixture
async def fake_service() -> AsyncIterator[FakeService]:
    """The emulator with the demo seed at speed 60 (a minute of service time per second)."""
    async with testing.FakeService() as service:
        yield service


@_async_fixture
async def fake_tls_service() -> AsyncIterator[FakeService]:
    """The emulator over HTTPS (demo seed, speed 60): a certificate for 127.0.0.1, ::1 and
    localhost from a throwaway CA, whose file is `.ca_file` (give it as ca_file=, --ca-file or
    ASYNCCLIENT_CA_FILE) and whose client context is `.ssl_context()`."""
    async with testing.FakeService(tls=True) as service:
        yield service


@_async_fixture
async def fake_service_factory() -> AsyncIterator[FakeServiceFactory]:
    """Starts emulators with any seed and settings; all are stopped after the test."""
    started: list[FakeService] = []

    async def make(seed: SeedSource = None, **kwargs: Any) -> FakeService:
        service = testing.FakeService(seed, **kwargs)
        await service.start()
        started.append(service)
        return service

    try:
        yield make
    finally:
        for service in reversed(started):
            await service.stop()
