"""The embedded Test-Run Service (an aiohttp emulator of every operation) and its test helpers.

`async with FakeService() as svc:` serves the demo seed on 127.0.0.1; `svc.url` is the base URL.
Importing the package is cheap (the pytest plugin is loaded in every pytest run): each name
loads its module, and aiohttp's server, on first use.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncclient._client._retrying import recorded_retry_waits
    from asyncclient.testing._conditions import FAULT_KINDS, OPERATIONS, Fault, NetworkConditions
    from asyncclient.testing._hold import Hold
    from asyncclient.testing._http import RequestRecord
    from asyncclient.testing._regression_seed import baseline_seed, regression_seed
    from asyncclient.testing._seed import Seed, SeedError
    from asyncclient.testing._seed_load import demo_seed, demo_seed_data, load_seed
    from asyncclient.testing._state import ServiceSettings
    from asyncclient.testing.dialects import DIALECTS, Dialect, get_dialect
    from asyncclient.testing.server import FakeService

# Public name -> its module, imported on first access (PEP 562).
_LAZY = {
    "DIALECTS": "asyncclient.testing.dialects",
    "Dialect": "asyncclient.testing.dialects",
    "get_dialect": "asyncclient.testing.dialects",
    "FAULT_KINDS": "asyncclient.testing._conditions",
    "OPERATIONS": "asyncclient.testing._conditions",
    "FakeService": "asyncclient.testing.server",
    "Hold": "asyncclient.testing._hold",
    "Fault": "asyncclient.testing._conditions",
    "NetworkConditions": "asyncclient.testing._conditions",
    "RequestRecord": "asyncclient.testing._http",
    "Seed": "asyncclient.testing._seed",
    "SeedError": "asyncclient.testing._seed",
    "ServiceSettings": "asyncclient.testing._state",
    "demo_seed": "asyncclient.testing._seed_load",
    "demo_seed_data": "asyncclient.testing._seed_load",
    "load_seed": "asyncclient.testing._seed_load",
    "recorded_retry_waits": "asyncclient._client._retrying",
    "regression_seed": "asyncclient.testing._regression_seed",
    "baseline_seed": "asyncclient.testing._regression_seed",
}

__all__ = [
    "DIALECTS",
    "FAULT_KINDS",
    "OPERATIONS",
    "Dialect",
    "FakeService",
    "Fault",
    "Hold",
    "NetworkConditions",
    "RequestRecord",
    "Seed",
    "SeedError",
    "ServiceSettings",
    "baseline_seed",
    "demo_seed",
    "demo_seed_data",
    "get_dialect",
    "load_seed",
    "recorded_retry_waits",
    "regression_seed",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'asyncclient.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
