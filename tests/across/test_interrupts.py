"""Ctrl-C during `run project --wait`, sent to the real command in a child process.

The emulator runs in the test's loop on a manual clock, so the runs stay queued or running
for as long as the test needs; the test waits for known lines of the child's output before
each signal instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncclient.testing import FakeService, NetworkConditions

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="SIGINT to a child process is POSIX here"
)

KEY = "int-run"
TESTS = ("t_a", "t_b", "t_c", "t_d")
SEED = {
    "projects": [{"id": "p_int", "name": "Interrupted", "plan": "paid"}],
    "keys": [{"key": KEY, "capability": "run", "projects": ["p_int"]}],
    "tests": [
        {
            "id": test_id,
            "project": "p_int",
            "title": f"Test {test_id}",
            "target": "web",
            "url": "https://shop.example",
            "queuedSeconds": 1,
            "durationSeconds": 3600,
        }
        for test_id in TESTS
    ],
}


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService(SEED, clock="manual") as service:
        yield service


class Child:
    """`asyncclient ARGS` in a child process, its stderr read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.err: list[str] = []

    async def line_starting(self, prefix: str) -> str:
        assert self.proc.stderr is not None
        async with asyncio.timeout(30):
            while True:
                line = (await self.proc.stderr.readline()).decode()
                assert line, "the command ended early:\n" + "".join(self.err)
                self.err.append(line)
                if line.startswith(prefix):
                    return line

    async def finish(self) -> tuple[int, str, str]:
        async with asyncio.timeout(30):
            out, rest = await self.proc.communicate()
        self.err.append(rest.decode())
        assert self.proc.returncode is not None
        return self.proc.returncode, out.decode(), "".join(self.err)


async def start(svc: FakeService, tmp_path: Path, *argv: str) -> Child:
    env = {
        **os.environ,
        "ASYNCCLIENT_BASE_URL": svc.url,
        "ASYNCCLIENT_API_KEY": KEY,
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "PYTHONUNBUFFERED": "1",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    return Child(proc)


async def started_runs(child: Child) -> list[str]:
    """The run ids the child started, once its watcher has seen them (its first sweep)."""
    ids = []
    for _ in TESTS:
        ids.append((await child.line_starting("started j_")).split()[1])
    await child.line_starting("j_")  # the first sweep's answer: the watch is under way
    return ids


def status(svc: FakeService, run_id: str) -> str:
    return str(svc.backend.runs[run_id].status_at(svc.backend.now()))


@pytest.fixture
async def kill_leftovers() -> AsyncIterator[list[Child]]:
    children: list[Child] = []
    yield children
    for child in children:
        if child.proc.returncode is None:
            child.proc.kill()
            await child.proc.wait()


@pytest.mark.parametrize("json_output", [False, True])
async def test_one_ctrl_c_stops_the_runs_and_reports_them_as_the_service_has_them(
    svc: FakeService, tmp_path: Path, kill_leftovers: list[Child], json_output: bool
) -> None:
    junit = tmp_path / "r.xml"
    argv = ["run", "project", "p_int", "--wait", "--interval", "0.05", "--junit", str(junit)]
    child = await start(svc, tmp_path, *argv, *(["--json"] if json_output else []))
    kill_leftovers.append(child)
    ids = await started_runs(child)
    svc.advance(5)  # every run is running now, as in a real suite
    assert {status(svc, run_id) for run_id in ids} == {"running"}

    child.proc.send_signal(signal.SIGINT)
    code, out, err = await child.finish()

    assert code == 130, err
    assert [status(svc, run_id) for run_id in ids] == ["cancelled"] * 4
    assert f"stopped 4 run(s): {' '.join(ids)}" in err
    # Every report shows what the service now says: cancelled, a skip in JUnit.
    if json_output:
        assert [(run["id"], run["status"]) for run in json.loads(out)] == [
            (run_id, "cancelled") for run_id in ids
        ]
        summary = err
    else:
        summary = out
    assert "4 runs: 4 cancelled" in summary
    assert "not final" not in summary
    suite = ET.parse(junit).getroot()
    assert suite.get("skipped") == "4"
    assert suite.get("errors") == "0"
    cases = suite.findall(".//testcase")
    assert [case.get("classname") for case in cases] == list(TESTS)
    for case in cases:
        assert case.find("error") is None
        skipped = case.find("skipped")
        assert skipped is not None
        assert skipped.get("message") == "The run was stopped before it finished."
    step_summary = (tmp_path / "summary.md").read_text()
    assert "4 runs\\: 4 cancelled" in step_summary  # Markdown escaped: shown as text


async def test_a_run_the_stop_missed_stays_an_error_in_the_report(
    svc: FakeService, tmp_path: Path, kill_leftovers: list[Child]
) -> None:
    junit = tmp_path / "r.xml"
    # --retry-deadline 0: a 503 counts against the retries instead of being waited out.
    argv = ["run", "project", "p_int", "--wait", "--interval", "0.05", "--junit", str(junit)]
    argv += ["--retry-deadline", "0"]
    child = await start(svc, tmp_path, *argv)
    kill_leftovers.append(child)
    ids = await started_runs(child)
    # The service refuses every stop (a 500 or 503 each attempt, retries included): the runs
    # go on.
    svc.conditions = NetworkConditions(error_rate=1.0, ops={"stop_run"})

    child.proc.send_signal(signal.SIGINT)
    code, _out, err = await child.finish()

    assert code == 130, err
    assert {status(svc, run_id) for run_id in ids} == {"queued"}
    assert f"could not stop {ids[0]}" in err
    suite = ET.parse(junit).getroot()
    assert suite.get("skipped") == "0"
    assert suite.get("errors") == "4"
    for case in suite.findall(".//testcase"):
        error = case.find("error")
        assert error is not None
        assert error.get("type") == "not_final"


async def test_a_second_ctrl_c_names_the_runs_still_going_and_how_to_stop_them(
    svc: FakeService, tmp_path: Path, kill_leftovers: list[Child]
) -> None:
    child = await start(svc, tmp_path, "run", "project", "p_int", "--wait", "--interval", "0.05")
    kill_leftovers.append(child)
    ids = await started_runs(child)
    svc.advance(5)
    # Every request from now on is held for 10 minutes: the stops stay in flight.
    svc.conditions = NetworkConditions(latency_ms=600_000)

    child.proc.send_signal(signal.SIGINT)
    await child.line_starting("interrupted: cleaning up")
    child.proc.send_signal(signal.SIGINT)
    code, _out, err = await child.finish()

    assert code == 130, err
    assert {status(svc, run_id) for run_id in ids} == {"running"}
    joined = " ".join(ids)
    lines = err.splitlines()
    assert (
        f"exiting before the service confirmed the stops: 4 run(s) may still be going: {joined}"
        in lines
    )
    assert f"stop them with: asyncclient runs stop {joined}" in lines
