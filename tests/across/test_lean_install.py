"""The lean install: `pip install asyncclient` is the library alone, the command and the
emulator's TLS come with extras (docs/dependencies.md). Proven here in processes where every
package an extra brings is missing (tests/without_extras.py); .ci/run proves it again in a
fresh virtual environment made by `pip install .`."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from asyncclient._core._extras import EXTRAS
from asyncclient.testing import FakeService

ROOT = Path(__file__).resolve().parents[2]
WITHOUT = str(ROOT / "tests" / "without_extras.py")
NO_CLI = "error: the asyncclient command needs the cli extra (rich is not installed): "
NO_CLI += "pip install 'asyncclient[cli]'"


async def without(blocked: str, *argv: str, env: dict[str, str] | None = None) -> Any:
    """Run `python ARGV` with `blocked` packages missing; (exit code, stdout, stderr)."""
    import os

    process = await asyncio.create_subprocess_exec(
        sys.executable, WITHOUT, blocked, *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})}, cwd=ROOT,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode, out.decode(), err.decode()


def test_the_blocked_packages_are_every_extras() -> None:
    from without_extras import EXTRAS as BLOCKED

    assert {package for packages in EXTRAS.values() for package in packages} <= set(BLOCKED)


async def test_the_library_works_with_no_extra() -> None:
    """Every module of the library imports; an upload, a run of a project, its runs watched and
    re-run, a download, JUnit and CTRF, the flakiness read; and each extra's feature names the
    extra in an ImportError."""
    code, out, err = await without("extras", "tests/core_alone.py", "--core")
    assert code == 0, err
    assert "imported" in out
    assert "4 tests: 2 passed, 1 flaky (passed on attempt 2), 1 failed after 2 attempts" in out
    assert "pip install 'asyncclient[tls]'" in out


@pytest.mark.parametrize(
    "argv",
    [
        ("demo",),
        ("serve", "--tls"),
        ("run", "project", "p_demo", "--wait"),
        ("builds", "list", "p_demo"),
    ],
)
async def test_the_command_without_the_cli_extra_says_so_in_one_line(argv: tuple[str, ...]) -> None:
    code, out, err = await without("extras", "-m", "asyncclient", *argv)
    assert (code, out, err) == (2, "", NO_CLI + "\n")


async def test_the_ci_step_without_the_cli_extra_says_so_in_one_line() -> None:
    code, _, err = await without(
        "extras", "-m", "asyncclient.ci", "github", env={"INPUT_PROJECT": "p_demo"}
    )
    assert code == 2
    assert err == (
        "error: the CI step (python -m asyncclient.ci) needs the cli extra (rich is not "
        "installed): pip install 'asyncclient[cli]'\n"
    )


async def test_the_mcp_module_without_the_mcp_extra_says_so_in_one_line() -> None:
    """Before, `python -m asyncclient.mcp_server` without the extra was a traceback."""
    code, out, err = await without("mcp", "-m", "asyncclient.mcp_server")
    assert (code, out) == (2, "")
    assert err == (
        "error: the MCP server (python -m asyncclient.mcp_server) needs the mcp extra (mcp is "
        "not installed): pip install 'asyncclient[mcp]'\n"
    )


async def test_the_mcp_module_with_the_extra_serves_on_its_own(tmp_path: Path) -> None:
    """`python -m asyncclient.mcp_server` starts the server itself (it imports no module of
    the command line): its --help has the server's options, and over stdio it serves the
    emulator's tools with the key from the environment."""
    module = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient.mcp_server", "--help",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    out, _ = await module.communicate()
    assert module.returncode == 0
    for option in (
        "--toolsets",
        "--tools",
        "--exclude-tools",
        "--read-only",
        "--http",
        "--http-token",
        "--download-dir",
        "--poll-interval",
        "--result-chars",
    ):
        assert option in out.decode()  # fmt: skip
    probe = await asyncio.create_subprocess_exec(
        sys.executable, "-c",
        "import sys, runpy; sys.argv = ['x', '--help']\n"
        "try:\n    runpy.run_module('asyncclient.mcp_server', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('asyncclient.cli')))",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    loaded, _ = await probe.communicate()
    assert loaded.decode().strip().splitlines()[-1] == "[]"
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async with FakeService() as svc:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "asyncclient.mcp_server", "--read-only"],
            env={**os.environ, "ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key},
            cwd=tmp_path,
        )
        with (tmp_path / "stderr.txt").open("w") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                tools = {tool.name for tool in (await client.list_tools()).tools}
                builds = await client.call_tool("list_builds", {"project_id": "p_demo"})
    assert "list_builds" in tools
    assert "delete_build" not in tools  # --read-only
    assert not builds.is_error
    assert svc.run_key not in str(builds.model_dump_json())
    assert "read-only" in (tmp_path / "stderr.txt").read_text()


async def test_serve_tls_without_the_tls_extra_names_it() -> None:
    code, out, err = await without("trustme,cryptography", "-m", "asyncclient", "serve", "--tls")
    assert (code, out) == (2, "")
    assert err == (
        "error: serve --tls needs the tls extra (trustme is not installed): "
        "pip install 'asyncclient[tls]'\n"
    )


async def test_a_feature_whose_extra_is_missing_says_so_before_any_request(
    tmp_path: Path,
) -> None:
    """--html without jinja2, --write-quarantine and --lift without tomlkit: exit 2, one line
    naming the extra, no request sent."""
    quarantine = tmp_path / "q.toml"
    quarantine.write_text('[[quarantine]]\ntest = "t_search"\nreason = "x"\nuntil = 2099-01-01\n')
    async with FakeService() as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key}
        html = await without(
            "jinja2", "-m", "asyncclient", "run", "project", "p_demo", "--wait", "--html",
            str(tmp_path / "r.html"), env=env,
        )  # fmt: skip
        write = await without(
            "tomlkit", "-m", "asyncclient", "flaky", "p_demo", "--write-quarantine",
            str(quarantine), env=env,
        )  # fmt: skip
        lift = await without(
            "tomlkit", "-m", "asyncclient", "quarantine", "verify", "t_search", "--lift",
            str(quarantine), env=env,
        )  # fmt: skip
        sent = sum(svc.request_counts().values())
    assert sent == 0
    extra = "needs the cli extra ({} is not installed): pip install 'asyncclient[cli]'\n"
    assert html == (2, "", "error: the HTML report (--html) " + extra.format("jinja2"))
    assert write == (2, "", "error: --write-quarantine " + extra.format("tomlkit"))
    assert lift == (2, "", "error: --lift " + extra.format("tomlkit"))
