"""`asyncclient run test`, `run project` and `watch` against the emulator over loopback.

The emulator runs fast (speed 1000: a 10 s run takes 10 ms) so --wait ends in milliseconds.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sys
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from network_support import ServeEmulator

from asyncclient.testing import FakeService

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks

# The run_cli fixture (tests/cli/conftest.py) runs `asyncclient` in a worker thread and returns
# its exit code, stdout and stderr.
RunCli = Callable[..., Awaitable[Any]]

KEY = "cli-run"
WEB = {"target": "web", "url": "https://shop.example"}


def web_test(test_id: str, project: str, **fields: Any) -> dict[str, Any]:
    return {"id": test_id, "project": project, **WEB, "queuedSeconds": 1, **fields}


SEED: dict[str, Any] = {
    "projects": [
        {"id": p, "name": p, "plan": "paid", "includedRuns": 1000}
        for p in ("p_cli", "p_one", "p_mix", "p_nobuild", "p_empty", "p_apps", "p_slow")
    ],
    "keys": [
        {
            "key": KEY,
            "capability": "run",
            "projects": ["p_cli", "p_one", "p_mix", "p_nobuild", "p_empty", "p_apps", "p_slow"],
        }
    ],
    "tests": [
        web_test(
            "t_pass",
            "p_cli",
            title="Log in",
            outcome="passed",
            durationSeconds=5,
            headline="Signed in as Dana.",
            captures={"greeting": "Welcome back, Dana"},
        ),
        web_test(
            "t_fail",
            "p_cli",
            title="Cart total",
            outcome="failed",
            durationSeconds=8,
            headline="The cart total was wrong.",
            requirements=[
                {"title": "Cart opens", "result": "passed", "reason": "It opened."},
                {"title": "Total matches", "result": "failed", "reason": "Expected 10, saw 12."},
            ],
        ),
        web_test("t_only", "p_one", title="Only", outcome="passed", durationSeconds=5),
        web_test("t_mixweb", "p_mix", title="Web", outcome="passed", durationSeconds=5),
        {"id": "t_mixapp", "project": "p_mix", "target": "android", "appId": "com.example.none"},
        {"id": "t_nb1", "project": "p_nobuild", "target": "android", "appId": "com.example.a"},
        {"id": "t_nb2", "project": "p_nobuild", "target": "ios", "appId": "com.example.b"},
        {
            "id": "t_and",
            "project": "p_apps",
            "target": "android",
            "appId": "com.example.shop",
            "durationSeconds": 5,
        },
        {
            "id": "t_ios",
            "project": "p_apps",
            "target": "ios",
            "appId": "com.example.shop.ios",
            "durationSeconds": 5,
        },
        web_test("t_slow", "p_slow", title="Forever", outcome="passed", durationSeconds=86400),
    ],
    "builds": [
        {"id": "ab_and1", "project": "p_apps", "platform": "android", "appId": "com.example.shop"},
        {"id": "ab_and2", "project": "p_apps", "platform": "android", "appId": "com.example.shop"},
        {"id": "ab_ios1", "project": "p_apps", "platform": "ios", "appId": "com.example.shop.ios"},
    ],
}

FAST = ("--interval", "0.01")


@pytest.fixture
async def svc(serve_emulator: ServeEmulator) -> AsyncIterator[FakeService]:
    """The emulator in each wire dialect, and over HTTPS and a proxy (tests/conftest.py)."""
    async with serve_emulator(SEED, speed=1000.0) as service:
        yield service


def service_env(svc: FakeService) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}


@pytest.fixture
def env(svc: FakeService) -> dict[str, str]:
    return service_env(svc)


def status_in_emulator(svc: FakeService, run_id: str) -> str:
    return str(svc.backend.runs[run_id].status_at(svc.backend.now()))


def progress_lines(result: Any) -> list[list[str]]:
    return [line.split() for line in result.stderr.splitlines() if line.startswith("j_")]


# --- without --wait ------------------------------------------------------------------------------


async def test_run_test_prints_the_run_id(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "test", "t_pass", env=env)
    assert result.code == 0, result.stderr
    (run_id,) = result.stdout.split()
    assert run_id.startswith("j_")
    assert svc.backend.runs[run_id].test.id == "t_pass"


async def test_run_test_json_is_the_start_answer(run_cli: RunCli, env: dict[str, str]) -> None:
    result = await run_cli("run", "test", "t_pass", "--mode", "cold", "--json", env=env)
    assert result.code == 0, result.stderr
    answer = result.json()
    assert answer["runId"].startswith("j_")
    assert answer["mode"] == "cold"
    assert answer["overage"] is False
    assert answer["link"].endswith(answer["runId"])


async def test_the_same_idempotency_key_starts_nothing_new(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    first = await run_cli("run", "test", "t_pass", "--idempotency-key", "ci-42", env=env)
    again = await run_cli("run", "test", "t_pass", "--idempotency-key", "ci-42", env=env)
    assert first.code == again.code == 0
    assert first.stdout == again.stdout
    assert len(svc.backend.runs) == 1


async def test_run_project_prints_ids_and_skipped_reasons(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "project", "p_mix", "--quiet", env=env)
    assert result.code == 0, result.stderr
    (run_id,) = result.stdout.split()
    assert svc.backend.runs[run_id].test.id == "t_mixweb"
    (skipped,) = result.stderr.splitlines()
    assert skipped.startswith("skipped t_mixapp: no ready android build of com.example.none")


async def test_run_project_json_without_wait(run_cli: RunCli, env: dict[str, str]) -> None:
    result = await run_cli("run", "project", "p_mix", "--json", env=env)
    assert result.code == 0, result.stderr
    answer = result.json()
    assert [s["testId"] for s in answer["started"]] == ["t_mixweb"]
    assert [s["testId"] for s in answer["skipped"]] == ["t_mixapp"]


async def test_several_builds_go_as_build_ids_one_as_build_id(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    both = await run_cli(
        "run", "project", "p_apps", "--build", "ab_and2", "--build", "ab_ios1", "--json", env=env
    )
    assert both.code == 0, both.stderr
    assert {s["testId"]: s["buildId"] for s in both.json()["started"]} == {
        "t_and": "ab_and2",
        "t_ios": "ab_ios1",
    }
    one = await run_cli("run", "project", "p_apps", "--build", "ab_and1", "--json", env=env)
    assert one.code == 0, one.stderr
    started = {s["testId"]: s["buildId"] for s in one.json()["started"]}
    assert started["t_and"] == "ab_and1"
    assert len(svc.requests_for("run_project")) == 2


async def test_nothing_started_exits_3_with_the_skipped_reasons(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "project", "p_nobuild", "--wait", env=env)
    assert result.code == 3
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: 402 not_started")
    assert "skipped t_nb1: " in result.stderr
    assert "skipped t_nb2: " in result.stderr
    empty = await run_cli("run", "project", "p_empty", env=env)
    assert empty.code == 3
    assert empty.stderr.startswith("error: 400 empty")
    assert svc.requests_for("list_runs") == []


# --- --wait and reports --------------------------------------------------------------------------


async def test_wait_for_a_passing_test_exits_0_with_summary(
    run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "test", "t_pass", "--wait", *FAST, env=env)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    run_id = lines[0].split()[1]
    assert lines[0].split()[:3] == ["passed", run_id, "t_pass"]
    assert "Log in" in lines[0]
    assert any(line.strip() == "Signed in as Dana." for line in lines)
    assert any(line.strip().endswith(run_id) and "://" in line for line in lines)
    assert lines[-1] == "1 run: 1 passed"
    # Plain progress lines on stderr (not a terminal): each status seen once, in order (a fast
    # run may skip past queued or running between two polls).
    statuses = [p[2] for p in progress_lines(result)]
    assert statuses[-1] == "passed"
    assert statuses == [s for s in ("queued", "running", "passed") if s in statuses]
    assert {p[0] for p in progress_lines(result)} == {run_id}
    assert result.stderr.splitlines()[0].startswith(f"started {run_id}  t_pass  mode ")


async def test_wait_on_a_project_reports_json_junit_and_step_summary(
    run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    junit = tmp_path / "report.xml"
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = await run_cli(
        "run",
        "project",
        "p_cli",
        "--wait",
        *FAST,
        "--junit",
        str(junit),
        "--json",
        env={**env, "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert result.code == 1, result.stderr
    runs = result.json()
    assert [(r["testId"], r["status"], r["final"]) for r in runs] == [
        ("t_pass", "passed", True),
        ("t_fail", "failed", True),
    ]
    # The open fields as the service sent them, and read the same in every dialect:
    assert runs[1]["summary"]["headline"] == "The cart total was wrong."
    assert runs[1]["summary"]["outcome"] == "failed"
    assert runs[1]["summary"]["failedRequirements"]
    assert runs[0]["summary"]["captures"] == {"greeting": "Welcome back, Dana"}

    suite = ET.parse(junit).getroot()
    assert suite is not None
    assert (suite.attrib["name"], suite.attrib["tests"], suite.attrib["failures"]) == (
        "p_cli",
        "2",
        "1",
    )
    cases = suite.findall("testcase")
    assert [(c.attrib["name"], c.attrib["classname"]) for c in cases] == [
        ("Log in", "t_pass"),
        ("Cart total", "t_fail"),
    ]
    assert float(cases[0].attrib["time"]) == pytest.approx(5.0, abs=0.01)
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None
    assert failure.attrib["message"] == "The cart total was wrong."
    assert failure.text is not None
    assert "Total matches: Expected 10, saw 12." in failure.text
    props = {p.attrib["name"]: p.attrib["value"] for p in suite.iter("property")}
    run_id = runs[0]["id"]
    assert (cases[0].findtext("system-out") or "").startswith(f"run {run_id}")
    assert props[f"{run_id}.link"] == runs[0]["link"]
    assert props[f"{run_id}.capture.greeting"] == "Welcome back, Dana"

    text = summary.read_text()
    assert text.startswith("earlier step\n### p\\_cli: 2 runs\\: 1 passed, 1 failed\n")
    assert text.count("\n| ") == 3  # the header and one row per run
    assert "Total matches\\: Expected 10, saw 12." in text
    assert "JUnit report: " in result.stderr


async def test_watch_follows_given_runs(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    ok = svc.backend.run_store.create_runs("t_pass", 2)
    bad = svc.backend.run_store.create_runs("t_fail", 1)
    ids = [r.id for r in ok + bad]
    result = await run_cli("watch", *ids, ids[0], *FAST, "--json", "-q", env=env)
    assert result.code == 1
    assert [(r["id"], r["status"]) for r in result.json()] == [
        (ids[0], "passed"),
        (ids[1], "passed"),
        (ids[2], "failed"),
    ]
    assert result.stderr == ""
    passing = await run_cli("watch", *ids[:2], *FAST, env=env)
    assert passing.code == 0, passing.stderr
    assert passing.stdout.splitlines()[-1] == "2 runs: 2 passed"
    assert svc.requests_for("get_run") == []


async def test_watch_an_unknown_run_exits_3(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    (known,) = svc.backend.run_store.create_runs("t_pass", 1)
    result = await run_cli("watch", known.id, "j_nosuchrun", *FAST, env=env)
    assert result.code == 3
    assert "does not know 1 run id(s): j_nosuchrun" in result.stderr
    assert result.stdout.splitlines()[-1] == "1 run: 1 passed"


async def test_timeout_exits_1_and_can_stop_the_runs(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    junit = tmp_path / "r.xml"
    left = await run_cli(
        "run", "test", "t_slow", "--wait", *FAST, "--timeout", "0.05", "--junit", str(junit),
        env=env,
    )  # fmt: skip
    assert left.code == 1
    assert "1 run(s) not final after 0.05 s" in left.stderr
    run_id = left.stdout.split()[1]
    assert status_in_emulator(svc, run_id) == "running"
    error = ET.parse(junit).getroot().find("testcase/error")
    assert error is not None
    assert error.attrib["type"] == "not_final"

    stopped = await run_cli(
        "run", "test", "t_slow", "--wait", *FAST, "--timeout", "0.05", "--stop-on-timeout",
        "--junit", str(junit), "--json", env=env,
    )  # fmt: skip
    assert stopped.code == 1
    (run,) = stopped.json()
    assert run["summary"]["status"] == "cancelled"  # `stopped`, `canceled` in other dialects
    assert status_in_emulator(svc, run["id"]) == "cancelled"
    assert f"stopped 1 run(s): {run['id']}" in stopped.stderr
    assert ET.parse(junit).getroot().find("testcase/skipped") is not None


# --- exit codes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "test", "p_cli"], "p_cli is not a test id"),
        (["run", "test", "t_pass", "--build", "j_1"], "j_1 is not a build id"),
        (["run", "test", "t_pass", "--mode", "hot"], "invalid choice"),
        (["run", "test", "t_pass", "--junit", "r.xml"], "--junit need --wait"),
        (["run", "test", "t_pass", "--wait", "--timeout", "0"], "--timeout 0 must be"),
        (["run", "test", "t_pass", "--wait", "--interval", "-1"], "--interval -1 must be"),
        (["run", "test", "t_pass", "--wait", "--stop-on-timeout"], "needs --timeout"),
        (["run", "project", "p_cli", "--wait", "--junit", "/dev/null/r.xml"], "not a directory"),
        (["run", "project", "p_cli", "--build", "ab_1", "--build", "t_x"], "t_x is not a build"),
        (["watch", "j_1", "t_2"], "t_2 is not a run id"),
        (["watch"], "the following arguments are required"),
    ],
)
async def test_bad_input_exits_2_and_sends_nothing(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], argv: list[str], message: str
) -> None:
    result = await run_cli(*argv, env=env)
    assert result.code == 2
    assert message in result.stderr
    assert svc.requests == []


async def test_refusals_exit_3(svc: FakeService, run_cli: RunCli, env: dict[str, str]) -> None:
    bad_key = await run_cli("run", "test", "t_pass", env={**env, "ASYNCCLIENT_API_KEY": "nope"})
    assert bad_key.code == 3
    assert "check the key" in bad_key.stderr
    assert "nope" not in bad_key.stderr
    unknown = await run_cli("run", "test", "t_nosuch", "--wait", env=env)
    assert unknown.code == 3
    assert unknown.stderr.startswith("error: 404 not_found")


async def test_unreachable_exits_4(run_cli: RunCli) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"ASYNCCLIENT_BASE_URL": f"http://127.0.0.1:{port}", "ASYNCCLIENT_API_KEY": KEY}
    # The watcher gives up after 10 failed polls in a row, the pause doubling from --interval.
    result = await run_cli("watch", "j_1", "--interval", "0.001", env=env)
    assert result.code == 4
    assert "check --base-url" in result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX here")
async def test_ctrl_c_stops_the_runs_and_exits_130(svc: FakeService, tmp_path: Path) -> None:
    child_env = {**os.environ, **service_env(svc)}
    child_env.pop("GITHUB_STEP_SUMMARY", None)
    junit = tmp_path / "report.xml"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "run", "project", "p_slow", "--wait", *FAST,
        "--junit", str(junit),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_env,
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(20):
            while True:
                line = (await proc.stderr.readline()).decode()
                assert line, "".join(seen)
                seen.append(line)
                if line.startswith("j_"):  # the watcher's first sweep is done
                    break
            proc.send_signal(signal.SIGINT)
            _, rest = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, "".join(seen) + rest.decode()
    run_id = seen[-1].split()[0]
    assert status_in_emulator(svc, run_id) == "cancelled"
    assert f"stopped 1 run(s): {run_id}" in rest.decode()
    # The interrupted job still leaves a report for an `if: always()` publish step, with the
    # run as the service has it after the stop (tests/across/test_interrupts.py has the rest).
    suite = ET.parse(junit).getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) == 1
    assert cases[0].find("skipped") is not None
    assert cases[0].find("error") is None


async def test_the_help_lists_the_commands(run_cli: RunCli) -> None:
    result = await run_cli("run", "project", "--help")
    assert result.code == 0
    assert "--build BUILD_ID" in result.stdout
    assert "--allow-skipped" in result.stdout
    assert "exit codes:" in result.stdout
    watch = await run_cli("watch", "--help")
    assert "--stop-on-interrupt" in watch.stdout


class Terminal(io.StringIO):
    """A stream that says it is a terminal, so the command draws its live table."""

    def isatty(self) -> bool:
        return True


async def test_a_terminal_gets_a_live_table(svc: FakeService) -> None:
    from asyncclient.cli import build_parser
    from asyncclient.cli._output import Output
    from asyncclient.cli._run import watch

    ids = [run.id for run in svc.backend.run_store.create_runs("t_pass", 2)]
    ids += [run.id for run in svc.backend.run_store.create_runs("t_fail", 1)]
    argv = ["--base-url", svc.url, "--api-key", KEY, "watch", *ids, *FAST]
    stdout, stderr = io.StringIO(), Terminal()
    assert await watch(build_parser().parse_args(argv), Output(stdout=stdout, stderr=stderr)) == 1
    screen = stderr.getvalue()
    assert "\x1b[" in screen  # drawn and redrawn in place
    assert all(run_id in screen for run_id in ids)
    assert "3 runs: 2 passed, 1 failed" in screen
    assert stdout.getvalue().splitlines()[-1] == "3 runs: 2 passed, 1 failed"


async def test_an_interrupted_jobs_live_table_ends_on_the_runs_as_stopped(
    svc: FakeService,
) -> None:
    """Ctrl-C with --stop-on-interrupt: the table left on the terminal says the run was
    stopped, not what it said before (running, its time left)."""
    from asyncclient.cli import build_parser
    from asyncclient.cli._output import Output
    from asyncclient.cli._run import watch

    (run_id,) = [run.id for run in svc.backend.run_store.create_runs("t_slow", 1)]
    argv = ["--base-url", svc.url, "--api-key", KEY, "watch", run_id, *FAST]
    stderr = Terminal()
    args = build_parser().parse_args([*argv, "--stop-on-interrupt"])
    job = asyncio.ensure_future(watch(args, Output(stdout=io.StringIO(), stderr=stderr)))
    async with asyncio.timeout(30):
        while "1 run: 1 running" not in stderr.getvalue():  # noqa: ASYNC110 (a stream)
            await asyncio.sleep(0.01)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    screen = stderr.getvalue()
    last = screen[screen.rindex(f"stopped 1 run(s): {run_id}") :]
    assert "running" not in last
    assert any(f"1 run: 1 {s}" in last for s in ("cancelled", "canceled", "stopped"))


async def test_a_job_interrupted_before_its_first_sweep_still_reports_its_runs(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while it reads the tests' history (a newer commit, a Ctrl-C): its --json still
    lists the run it started, as last known, and the run is stopped."""
    from asyncclient.cli import build_parser
    from asyncclient.cli._output import Output
    from asyncclient.cli._run import run_project
    from asyncclient.suite._loop import SuiteRun

    reading = asyncio.Event()

    async def held(self: SuiteRun) -> None:
        reading.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(SuiteRun, "_read_history", held)
    argv = ["--base-url", svc.url, "--api-key", KEY, "run", "project", "p_slow", "--wait"]
    args = build_parser().parse_args([*argv, *FAST, "--json"])
    stdout = io.StringIO()
    out = Output(json_mode=True, stdout=stdout, stderr=io.StringIO())
    job = asyncio.ensure_future(run_project(args, out))
    async with asyncio.timeout(30):
        await reading.wait()
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    (run,) = json.loads(stdout.getvalue())
    assert run["testId"] == "t_slow"
    assert status_in_emulator(svc, run["id"]) == "cancelled"


async def test_a_skipped_test_fails_the_wait_and_is_in_the_reports(
    run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    junit, summary = tmp_path / "r.xml", tmp_path / "s.md"
    result = await run_cli(
        "run", "project", "p_mix", "--wait", *FAST, "--junit", str(junit),
        env={**env, "GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip
    # The one run that started passed, but part of the suite never ran: not green.
    assert result.code == 1, result.stderr
    assert result.stdout.splitlines()[-2] == "1 run: 1 passed"
    assert result.stdout.splitlines()[-1].startswith("not started t_mixapp: no ready android")
    assert result.stderr.splitlines()[-1] == (
        "error: 1 test(s) of p_mix did not start (see above); pass --allow-skipped to accept that"
    )
    cases = ET.parse(junit).getroot().findall("testcase")
    assert [c.attrib["classname"] for c in cases] == ["t_mixweb", "t_mixapp"]
    assert cases[1].find("skipped") is not None
    assert "Not started (1):\n- `t_mixapp`: no ready android build" in summary.read_text()


async def test_allow_skipped_accepts_tests_that_did_not_start(
    run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "project", "p_mix", "--wait", "--allow-skipped", *FAST, env=env)
    assert result.code == 0, result.stderr
    assert "skipped t_mixapp: " in result.stderr
    assert "error:" not in result.stderr
    failing = await run_cli("run", "project", "p_cli", "--wait", "--allow-skipped", *FAST, env=env)
    assert failing.code == 1  # a run that started and failed still fails the command


@pytest.mark.parametrize("allow", [[], ["--allow-skipped"]])
async def test_a_start_with_no_run_exits_1_even_with_allow_skipped(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    allow: list[str],
) -> None:
    # A service that answers 201 {"started": [], "skipped": []} (the spec says 402 or 400).
    monkeypatch.setattr(svc.backend.run_store, "run_project", lambda *args: ([], []))
    result = await run_cli("run", "project", "p_cli", "--wait", *allow, *FAST, env=env)
    assert result.code == 1, result.stderr
    assert result.stdout.splitlines() == ["0 runs"]
    assert result.stderr.splitlines()[-1] == "error: no test of p_cli started: nothing ran"
    assert svc.requests_for("list_runs") == []
    # Without --wait nothing is judged: the (empty) answer is printed and the command exits 0.
    started = await run_cli("run", "project", "p_cli", "--json", env=env)
    assert started.code == 0, started.stderr
    assert started.json() == {"started": [], "skipped": []}


async def test_allow_skipped_needs_wait(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "project", "p_mix", "--allow-skipped", env=env)
    assert result.code == 2
    assert "--allow-skipped need --wait" in result.stderr
    assert svc.requests == []


async def test_the_live_table_is_drawn_a_few_times_a_second_not_per_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asyncclient.cli._output import Output
    from asyncclient.cli._progress import Progress
    from asyncclient.models import Run, RunStatus

    now = 0.0
    ids = [f"j_{n:04d}" for n in range(1000)]
    stderr = Terminal()
    progress = Progress(Output(stdout=io.StringIO(), stderr=stderr), ids, clock=lambda: now)
    renders = 0
    render = progress._render

    def counting_render() -> Any:
        nonlocal renders
        renders += 1
        return render()

    monkeypatch.setattr(progress, "_render", counting_render)
    with progress:
        for status in (RunStatus.RUNNING, RunStatus.PASSED):
            for run_id in ids:
                now += 0.001  # 2,000 changes over 2 seconds of the injected clock
                progress.update(Run(id=run_id, status=status, test_id="t_pass"))
    # At most 4 a second (8 here), plus the first table and the last state on exit.
    assert renders <= 10, renders
    screen = stderr.getvalue()
    assert "1000 runs: 1000 passed" in screen  # the final state was drawn
    assert render().row_count < 50  # only the rows a terminal can show are built


def test_following_thousands_of_runs_shows_counts_the_going_and_the_latest_finished() -> None:
    """10,000 runs on a 30-line terminal: the caption counts every run, the rows are the runs
    still going, then the ones that finished last, newest first; never thousands of rows."""
    from rich.console import Console

    from asyncclient.cli._output import Output
    from asyncclient.cli._progress import Progress
    from asyncclient.models import Run, RunStatus

    ids = [f"j_{n:05d}" for n in range(10_000)]
    progress = Progress(Output(stdout=io.StringIO(), stderr=io.StringIO()), ids)
    progress._console = Console(height=30, file=io.StringIO())
    for run_id in ids:
        progress.update(Run(id=run_id, status=RunStatus.RUNNING, test_id="t"))
    for n, run_id in enumerate(ids[:9_990]):
        status = RunStatus.FAILED if n % 1000 == 0 else RunStatus.PASSED
        progress.update(Run(id=run_id, status=status, test_id="t"))
    table = progress._render()
    assert table.row_count == 22 + 1  # room for 22 rows on 30 lines, and "... more"
    shown = [str(cell) for cell in table.columns[0]._cells][:22]
    assert shown[:10] == ids[9_990:]  # the 10 still going first
    assert shown[10:] == list(reversed(ids[9_978:9_990]))  # then the latest to finish
    assert str(table.caption) == "10000 runs: 9980 passed, 10 failed, 10 running"


def test_a_start_waiting_for_the_fleets_device_slot_shows_its_place_in_the_live_table() -> None:
    from asyncclient.cli._output import Output
    from asyncclient.cli._progress import Progress
    from asyncclient.models import Run, RunStatus

    stderr = Terminal()
    progress = Progress(Output(stdout=io.StringIO(), stderr=stderr), ["j_0001"], {"j_0001": "t"})
    with progress:
        progress.tell_wait("2 start(s) ahead; 8 of 8 runs in flight")
        caption = str(progress._render().caption)
        assert caption.endswith(
            "; a start waits for a device slot: 2 start(s) ahead; 8 of 8 runs in flight"
        )
        progress.tell_wait(None)  # it went
        assert "device slot" not in str(progress._render().caption)
        progress.update(Run(id="j_0001", status=RunStatus.PASSED, test_id="t"))
    assert "2 start(s) ahead" in stderr.getvalue()  # drawn, not only built
    # Without a live table: a line.
    plain = io.StringIO()
    lines = Progress(Output(stdout=io.StringIO(), stderr=plain), ["j_0001"])
    with lines:
        lines.tell_wait("next; 1 of 1 runs in flight")
    assert "fleet: waiting for a device slot (next; 1 of 1 runs in flight)" in plain.getvalue()


def test_the_live_tables_rows_keep_the_order_the_runs_started_in() -> None:
    """A run that ends keeps its row: rows that jump as runs finish are hard to follow."""
    from asyncclient.cli._output import Output
    from asyncclient.cli._progress import Progress
    from asyncclient.models import Run, RunStatus

    ids = ["j_0001", "j_0002", "j_0003"]
    progress = Progress(
        Output(stdout=io.StringIO(), stderr=Terminal()), ids, dict.fromkeys(ids, "t")
    )
    with progress:
        for run_id in ids:
            progress.update(Run(id=run_id, status=RunStatus.RUNNING, test_id="t"))
        progress.update(Run(id="j_0001", status=RunStatus.PASSED, test_id="t"))
        rows = list(progress._render().columns[0].cells)
    assert [str(row) for row in rows] == ids
