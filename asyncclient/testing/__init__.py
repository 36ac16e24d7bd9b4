"""The embedded Test-Run Service (an aiohttp emulator of every operation) and its test helpers.

`async with FakeService() as svc:` serves the demo seed on 127.0.0.1; `svc.url` is the base URL.
"""

from asyncclient.testing._app import RequestRecord
from asyncclient.testing._backend import ServiceSettings
from asyncclient.testing._conditions import FAULT_KINDS, OPERATIONS, Fault, NetworkConditions
from asyncclient.testing._seed import Seed, SeedError, demo_seed, demo_seed_data, load_seed
from asyncclient.testing.server import FakeService

__all__ = [
    "FAULT_KINDS",
    "OPERATIONS",
    "FakeService",
    "Fault",
    "NetworkConditions",
    "RequestRecord",
    "Seed",
    "SeedError",
    "ServiceSettings",
    "demo_seed",
    "demo_seed_data",
    "load_seed",
]
