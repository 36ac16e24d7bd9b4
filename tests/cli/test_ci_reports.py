"""What a CI job needs reaches it in every wire dialect of the service: each failed requirement's
reason in the terminal, JUnit and the GitHub summary; each skipped test's reason on a 402; what
the devices cannot run on a rejected upload."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from commands_support import env_for
from network_support import read_serve_info

from asyncclient.testing import FakeService, demo_seed_data
from asyncclient.testing.builders import build_apk


def one_error_line(stderr: str) -> str:
    [line] = [line for line in stderr.splitlines() if line.startswith("error: ")]
    return line.removeprefix("error: ")


RunCli = Callable[..., Awaitable[Any]]

REASON = (
    "The voucher SAVE10 from create_voucher was accepted, but the total stayed $42.00 "
    "instead of $37.80."
)


@pytest.fixture
async def svc(dialect: str) -> AsyncIterator[FakeService]:
    seed = demo_seed_data()
    seed["projects"].append({"id": "p_locked", "name": "No app", "plan": "paid"})
    for key in seed["keys"]:
        key["projects"].append("p_locked")
    seed["tests"].append(
        {
            "id": "t_lonely",
            "project": "p_locked",
            "title": "Needs an app",
            "target": "android",
            "appId": "com.example.none",
            "outcome": "passed",
        }
    )
    async with FakeService(seed, speed=5000.0, dialect=dialect) as service:
        yield service


async def test_failed_requirements_reach_terminal_junit_and_step_summary(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=240)
    env = env_for(svc)
    uploaded = await run_cli("upload", "p_demo", str(apk), "--quiet", env=env)
    assert uploaded.code == 0, uploaded.stderr
    build_id = uploaded.stdout.strip()
    junit = tmp_path / "r.xml"
    summary = tmp_path / "summary.md"

    result = await run_cli(
        "run", "project", "p_demo", "--build", build_id, "--wait", "--junit", str(junit),
        "--retry-failed", "1", "--interval", "0.05",
        env={**env, "GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip

    assert result.code == 1, result.stderr
    # The terminal: the failed requirement with its reason under the failed run.
    assert re.search(rf"^ +failed (r2 )?A voucher code reduces the total: {re.escape(REASON)}$",
                     result.stdout, re.M)  # fmt: skip
    assert result.stdout.splitlines()[-1] == (
        "4 tests: 2 passed, 1 flaky (passed on attempt 2), 1 failed after 2 attempts"
    )
    # JUnit: the reason inside the <failure> of t_checkout.
    cases = {c.attrib["classname"]: c for c in ET.parse(junit).getroot().iter("testcase")}
    failure = cases["t_checkout"].find("failure")
    assert failure is not None
    assert REASON in (failure.text or "")
    assert failure.attrib["message"] == "The voucher was accepted but the total did not change."
    assert len(cases["t_checkout"].findall("rerunFailure")) == 1
    assert all(cases[t].find("failure") is None for t in ("t_login", "t_search", "t_onboarding"))
    # The flaky test (the seed's t_onboarding fails its first run) passed, its failure kept.
    assert len(cases["t_onboarding"].findall("flakyFailure")) == 1
    assert "Flaky tests (1)" in summary.read_text()
    # The GitHub step summary: the same reason under "Runs that did not pass".
    markdown = summary.read_text()
    # Escaped as Markdown (shown as the text it is): read without the escapes.
    shown = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)
    assert "A voucher code reduces the total: " + REASON in shown


async def test_a_402_shows_each_skipped_tests_reason(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("run", "project", "p_locked", env=env_for(svc))

    assert result.code == 3
    assert re.match(r"402 \w+: no test of p_locked could start", one_error_line(result.stderr))
    assert re.search(
        r"^ +skipped t_lonely: no ready android build of com\.example\.none in p_locked",
        result.stderr,
        re.M,
    )


async def test_a_rejected_upload_exits_3_and_names_what_the_devices_cannot_run(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    apk = build_apk(tmp_path / "old.apk", abis=("armeabi-v7a",))

    result = await run_cli("upload", "p_demo", str(apk), env=env_for(svc))

    assert result.code == 3
    assert "422 build_rejected" in result.stderr
    assert re.search(r"cannot run: .*armeabi-v7a", result.stderr)


async def test_serve_takes_a_dialect(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "serve", "--port", "0", "--json",
        "--dialect", "enveloped", stdout=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        info = await read_serve_info(proc)
        assert info["dialect"] == "enveloped"
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{info['baseUrl']}/api/v1/runs", headers={"Authorization": "Bearer x"}) as r,
        ):
            assert r.status == 401
            assert isinstance((await r.json())["error"], str)  # {"error": "text"}
    finally:
        proc.terminate()
        await proc.wait()


async def test_serve_refuses_an_unknown_dialect(run_cli: RunCli) -> None:
    result = await run_cli("serve", "--port", "0", "--dialect", "klingon")
    assert result.code == 2
    assert "unknown dialect 'klingon': use one of asyncclient, flat, enveloped" in result.stderr
