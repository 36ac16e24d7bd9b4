"""The command's logs: ASYNCCLIENT_LOG (or `log` in asyncclient.toml) turns them up without
changing the command line; a value that is not a level is refused before any request."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from asyncclient.testing import FakeService, Fault, recorded_retry_waits


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService() as service:
        yield service


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the working folder, no user file, no ASYNCCLIENT_* variable."""
    for name in list(os.environ):
        if name.startswith("ASYNCCLIENT_"):
            monkeypatch.delenv(name)
    (tmp_path / ".git").mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def env_of(svc: FakeService, **more: str) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key, **more}


REQUEST = "DEBUG asyncclient.requests GET /api/v1/projects/p_demo/builds -> 200"


async def test_asyncclient_log_sets_the_level(
    svc: FakeService, run_cli: Any, workdir: Path
) -> None:
    svc.inject("list_builds", Fault("500"))
    with recorded_retry_waits():
        debug = await run_cli("builds", "list", "p_demo", env=env_of(svc, ASYNCCLIENT_LOG="debug"))
    assert debug.code == 0, debug.stderr
    lines = debug.stderr.splitlines()
    assert any(REQUEST in line for line in lines)
    retried = [line for line in lines if " DEBUG asyncclient.retries " in line]
    assert len(retried) == 1
    assert "attempt 1 failed (500" in retried[0]
    assert svc.run_key not in debug.stderr
    svc.inject("list_builds", Fault("500"))
    with recorded_retry_waits():
        info = await run_cli("builds", "list", "p_demo", env=env_of(svc, ASYNCCLIENT_LOG="INFO"))
    assert info.code == 0
    assert info.stderr == ""  # a retry that worked says nothing above DEBUG
    quiet = await run_cli("builds", "list", "p_demo", env=env_of(svc, ASYNCCLIENT_LOG="warning"))
    assert quiet.stderr == ""
    assert quiet.stdout == debug.stdout


async def test_the_level_from_asyncclient_toml_and_the_variable_over_it(
    svc: FakeService, run_cli: Any, workdir: Path
) -> None:
    (workdir / "asyncclient.toml").write_text('log = "debug"\n')
    from_file = await run_cli("builds", "list", "p_demo", env=env_of(svc))
    assert any(REQUEST in line for line in from_file.stderr.splitlines())
    over = await run_cli("builds", "list", "p_demo", env=env_of(svc, ASYNCCLIENT_LOG="warning"))
    assert over.stderr == ""
    shown = await run_cli("config", "show", env=env_of(svc))
    assert "log" in shown.stdout
    assert "asyncclient.toml:1" in shown.stdout


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("env", "error: ASYNCCLIENT_LOG is 'loud', not a log level: give debug, info or warning"),
        ("file", "not a log level: give debug, info or warning"),
    ],
)
async def test_a_value_that_is_not_a_level_is_refused_before_any_request(
    svc: FakeService, run_cli: Any, workdir: Path, where: str, said: str
) -> None:
    env = env_of(svc)
    if where == "env":
        env["ASYNCCLIENT_LOG"] = "loud"
    else:
        (workdir / "asyncclient.toml").write_text('log = "loud"\n')
    result = await run_cli("builds", "list", "p_demo", env=env)
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert said in line
    if where == "file":
        assert line.startswith("error: log in ")
        assert "asyncclient.toml:1 is 'loud'" in line
    assert svc.requests_for("list_builds") == []


async def test_an_outage_is_said_once_at_info_too(run_cli: Any, workdir: Path) -> None:
    """With ASYNCCLIENT_LOG=info the outage lines come through the one handler, not twice.

    The deadline is 10 s of (recorded) waits: an outage's waits are at most 5 s (the outage
    cap), so a failure comes at least 5 s after the first one, past the 2 s threshold, however
    the jitter falls (with 6 s, a last long wait could leave every earlier failure before 2 s)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"ASYNCCLIENT_BASE_URL": f"http://127.0.0.1:{port}", "ASYNCCLIENT_API_KEY": "k"}
    with recorded_retry_waits():
        result = await run_cli(
            "builds",
            "list",
            "p_demo",
            "--retry-deadline",
            "10",
            env={**env, "ASYNCCLIENT_LOG": "info"},
        )
    assert result.code == 4
    lines = result.stderr.splitlines()
    warned = [line for line in lines if "WARNING asyncclient.outage service unreachable" in line]
    assert len(warned) == 1
    assert lines[-1].startswith("error: cannot connect to")
    assert len(lines) == 2
