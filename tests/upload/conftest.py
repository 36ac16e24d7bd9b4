"""The emulator with 64 KiB parts in each dialect and network, and a session against it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from network_support import Network
from upload_support import PART

from asyncclient import AsyncSession
from asyncclient.testing import FakeService, ServiceSettings


@pytest.fixture
async def svc(dialect: str, network: Network) -> AsyncIterator[FakeService]:
    """The emulator in each wire dialect, and over HTTPS and a proxy (tests/conftest.py)."""
    emulator = FakeService(
        settings=ServiceSettings(part_bytes=PART), dialect=dialect, **network.service_options
    )
    async with network.serve(emulator) as service:
        yield service


@pytest.fixture
async def client(svc: FakeService, waits: list[float]) -> AsyncIterator[AsyncSession]:
    """A session whose retry waits are recorded instead of slept."""
    async with AsyncSession(svc.run_key, svc.url) as session:
        yield session


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal"
