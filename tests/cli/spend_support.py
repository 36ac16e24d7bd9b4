"""Project p_dt and its helpers, for the device-time tests of `run` and the job's trace."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]
SPEED = 100.0
FAST = ("--interval", "0.02")
APP = {"project": "p_dt", "target": "android", "appId": "com.example.shop"}


def seed(**extra_tests: dict[str, Any]) -> dict[str, Any]:
    """p_dt: t_pass passes (20 s), t_broken always fails (10 s); more tests as given."""
    tests = [
        {"id": "t_pass", "title": "Passes", **APP, "durationSeconds": 20, "queuedSeconds": 5},
        {"id": "t_broken", "title": "Always fails", **APP, "outcome": "failed",
         "durationSeconds": 10, "queuedSeconds": 5},
    ]  # fmt: skip
    tests += [{"id": test_id, **APP, **fields} for test_id, fields in extra_tests.items()]
    return {
        "projects": [{"id": "p_dt", "plan": "paid", "includedRuns": 100000}],
        "keys": [{"key": "dt-run", "capability": "run", "projects": ["p_dt"]}],
        "tests": tests,
    }


def env_of(svc: FakeService) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "dt-run"}


async def upload(run_cli: RunCli, svc: FakeService, path: Path) -> str:
    result = await run_cli("upload", "p_dt", str(path), "--json", env=env_of(svc))
    assert result.code == 0, result.stderr
    (build,) = result.json()["builds"]
    return str(build["id"])
