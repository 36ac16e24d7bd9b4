"""Running the `asyncclient` command in-process against an emulator started by the test.

The command runs its own event loop, so it runs in a worker thread while the emulator keeps
serving on the test's loop; stdout and stderr are captured by pytest's capsys.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import pytest

from asyncclient.cli import main


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


def service_env(service: Any, key: str | None = None) -> dict[str, str]:
    """The environment that points the command at an emulator with one of its keys."""
    return {"ASYNCCLIENT_BASE_URL": service.url, "ASYNCCLIENT_API_KEY": key or service.run_key}
