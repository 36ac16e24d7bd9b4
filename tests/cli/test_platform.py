"""The command on a Windows runner's console (cp1252) and under macOS's open-files limit (256),
as real processes against the emulator."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from commands_support import env_for

from asyncclient.testing import FakeService, ServiceSettings, demo_seed_data
from asyncclient.testing.builders import build_apk

TITLE = "Anmeldung 日本語 ✓"


pytestmark = pytest.mark.linux(reason="the open-files limit is set with the resource module")


def _command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "asyncclient", *argv]


async def run(
    *argv: str, env: dict[str, str], limit: tuple[int, int] | None = None
) -> tuple[int, str, str]:
    import resource

    def limited() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, limit)

    proc = await asyncio.create_subprocess_exec(
        *_command(*argv),
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=limited,
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode("cp1252"), err.decode("cp1252")


async def test_a_cp1252_console_gets_every_report_and_json_keeps_every_character() -> None:
    data = demo_seed_data()
    data["tests"].append(
        {"id": "t_intl", "project": "p_demo", "title": TITLE, "target": "web",
         "url": "https://shop.example", "durationSeconds": 1, "queuedSeconds": 0,
         "headline": "Angemeldet ✓ 日本語"}
    )  # fmt: skip
    async with FakeService(data, speed=600.0) as svc:
        env = {**env_for(svc), "PYTHONIOENCODING": "cp1252"}
        code, out, err = await run("run", "test", "t_intl", "--wait", "--interval", "0.05", env=env)
        assert code == 0, err
        assert "Traceback" not in err
        assert "Anmeldung \\u65e5\\u672c\\u8a9e \\u2713" in out  # escaped, not lost
        code, out, err = await run("--json", "runs", "list", "--project", "p_demo", env=env)
        assert code == 0, err
        runs = json.loads(out)
        titles = {run.get("testTitle") for run in runs.get("runs", runs)}
        assert TITLE in titles  # the JSON is valid on cp1252 and keeps the title whole


@pytest.mark.processes
@pytest.mark.timeout(600)
async def test_150_builds_under_a_soft_limit_of_256_open_files(tmp_path: Path) -> None:
    """macOS's default: 256 open files (the hard limit higher). The command raises its soft
    limit, and the uploads fit what they open to what they may."""
    apks = [
        build_apk(tmp_path / f"app{i}.apk", seed=i, version_code=i + 1, filler_bytes=64 << 10)
        for i in range(150)
    ]
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    async with FakeService(settings=ServiceSettings(part_bytes=16 << 10)) as svc:
        env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        argv = ["upload", svc.project_id, *map(str, apks), "--max-parts-in-flight", "128"]
        code, out, err = await run(*argv, "--quiet", env=env, limit=(256, hard))
        assert code == 0, err[-2000:]
        ids = out.split()
        assert len(ids) == 150
        assert all(svc.backend.builds[i].status == "ready" for i in ids)

        # With the hard limit at 256 too (nothing to raise), and 400 parts asked for: it still
        # succeeds, with fewer in flight (without the fitting: "Too many open files", exit 5).
        (tmp_path / "state").rename(tmp_path / "state-1")
        argv = ["upload", svc.project_id, *map(str, apks), "--max-parts-in-flight", "400"]
        code, out, err = await run(*argv, "--quiet", env=env, limit=(256, 256))
        assert code == 0, err[-2000:]
        assert len(out.split()) == 150
