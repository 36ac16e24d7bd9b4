"""`asyncclient failures PROJECT` and the failure categories file on the command line, against
the emulator's demo seed (its history: an outage across four tests, device blips, t_checkout's
voucher bug and t_onboarding's missing Continue button)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]

SLOW_REGEX = "[[category]]\nname = 'slow'\nkind = 'app'\nregex = '(a)\\1'\n"


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService(clock="manual") as service:
        yield service


@pytest.fixture
def env(svc: FakeService) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key}


async def test_the_table_ranks_the_causes_widest_first(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("failures", "p_demo", env=env)
    assert result.code == 0, result.stderr
    rows = result.stdout.splitlines()
    assert rows[0].split()[:4] == ["RUNS", "TESTS", "BUILDS", "CATEGORY"]
    assert [row.split()[:3] for row in rows[1:]] == [
        ["5", "1", "3"],  # the voucher bug: t_checkout on builds 43, 44, 45
        ["4", "4", "3"],  # the device blips, on three builds
        ["4", "4", "2"],  # the outage: two builds (t_search is a web test: none)
        ["2", "1", "2"],  # the missing Continue button
    ]
    assert "app or test (app)" in rows[1]
    assert "run error (infrastructure)" in rows[2]
    assert "15 failed runs over 14 days in 4 causes; 8 of them the infrastructure's" in (
        result.stderr
    )


async def test_json_says_each_cause_with_a_recent_run(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("--json", "failures", "p_demo", "--days", "5", env=env)
    assert result.code == 0, result.stderr
    data = result.json()
    assert (data["projectId"], data["days"], data["failures"]) == ("p_demo", 5.0, 9)
    first = data["clusters"][0]
    assert {"clusterId", "signature", "status", "category", "runs", "tests", "testCount",
            "builds", "firstAt", "lastAt", "new", "example"} <= set(first)  # fmt: skip
    assert first["example"]["link"].startswith(svc.url)


async def test_a_categories_file_names_the_causes_and_flaky_leaves_them_out(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    categories = tmp_path / "cats.toml"
    categories.write_text(
        '[[category]]\nname = "staging unreachable"\nkind = "infrastructure"\n'
        'regex = "connection refused by \\\\S+"\n'
        '[[category]]\nname = "no Continue button"\nkind = "infrastructure"\n'
        'match = "no continue button"\n'
    )
    result = await run_cli("failures", "p_demo", "--categories", str(categories), env=env)
    assert result.code == 0, result.stderr
    assert "staging unreachable (infrastructure)" in result.stdout
    # With the Continue button called the infrastructure's, t_onboarding flakes no more.
    flaky = await run_cli("flaky", "p_demo", "--categories", str(categories), env=env)
    assert flaky.code == 0, flaky.stderr
    onboarding = next(line for line in flaky.stdout.splitlines() if "t_onboarding" in line)
    assert onboarding.split()[1] == "stable"
    assert "10 runs that failed for the infrastructure are left out" in flaky.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ("failures", "p_demo"),
        ("flaky", "p_demo"),
        ("run", "project", "p_demo", "--wait"),
        ("watch", "j_00000001"),
    ],
)
async def test_a_regex_re2_cannot_run_is_refused_before_any_request(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
) -> None:
    # The default file, where the command runs (the repository's root in CI).
    (tmp_path / "failure-categories.toml").write_text(SLOW_REGEX)
    monkeypatch.chdir(tmp_path)
    result = await run_cli(*argv, env=env)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "failure-categories.toml: category 'slow': regex '(a)\\\\1' refused" in line
    assert "back-references cannot be matched in linear time" in line
    assert svc.request_counts() == {}


async def test_rerun_known_needs_retry_failed(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "project", "p_demo", "--wait", "--rerun-known", env=env)
    assert result.code == 2
    assert "--rerun-known needs --retry-failed N" in result.stderr
    assert svc.request_counts() == {}


# --- an outage across devices, in a job and across jobs ------------------------------------------

DEVICES = (
    "Pixel 7 (emulator-5554)",
    "Galaxy S22 Ultra (R5CT20ABCD)",
    "moto g(8) power lite",
    "Pixel 6a (device-17)",
    "OnePlus 9",
    "Xperia 5 II (QV7112)",
    "Redmi Note 12",
    "iPhone 15 Pro (00008110-001A2B3C4D5E)",
    "iPad Air (5th generation)",
)


def outage_across_devices() -> dict[str, Any]:
    """p_out: 9 tests lose their device on their first run (each another device, time and
    session in the text), then pass; 2 fail the app's way, each its own."""
    tests: list[dict[str, Any]] = [
        {
            "id": f"t_dev_{i}",
            "project": "p_out",
            "title": f"Screen {i}",
            "target": "android",
            "appId": "com.example.out",
            "outcome": "passed",
            "flakyRuns": 1,
            "flakyStatus": "error",
            "flakyReason": f"The device {device} lost its connection to the tester at "
            f"2026-12-0{i + 1}T10:{i:02d}:00Z (session s_{i:06x}{i}).",
            "durationSeconds": 20,
            "queuedSeconds": 1,
        }
        for i, device in enumerate(DEVICES)
    ]
    for i, said in enumerate(("The total stayed $40.00.", "No results for 'shoes'.")):
        tests.append(
            {
                "id": f"t_app_{i}",
                "project": "p_out",
                "title": f"Pay {i}",
                "target": "android",
                "appId": "com.example.out",
                "outcome": "failed",
                "headline": said,
                "durationSeconds": 20,
                "queuedSeconds": 1,
            }
        )
    return {
        "projects": [{"id": "p_out", "name": "Outage", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "k", "capability": "run", "projects": ["p_out"]}],
        "tests": tests,
        "builds": [
            {"id": "ab_out_1", "project": "p_out", "platform": "android",
             "appId": "com.example.out", "appName": "Out", "version": "1.0", "versionCode": "1"}
        ],
    }  # fmt: skip


async def test_an_outage_across_devices_is_one_cause_first_in_the_job_and_across_jobs(
    run_cli: RunCli, tmp_path: Path
) -> None:
    from asyncclient.failures._agreement import adjusted_rand_index

    async with FakeService(outage_across_devices(), speed=1000) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "k",
               "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
        ctrf, summary = tmp_path / "ctrf.json", tmp_path / "summary.md"
        env["GITHUB_STEP_SUMMARY"] = str(summary)
        job = await run_cli(
            "run", "project", "p_out", "--build", "ab_out_1", "--wait", "--retry-failed", "1",
            "--interval", "0.01", "--json", "--ctrf", str(ctrf), env=env,
        )  # fmt: skip
        assert job.code == 1, job.stderr
        across = await run_cli("--json", "failures", "p_out", env=env)
        assert across.code == 0, across.stderr
    tests = {test["testId"]: test for test in job.json()}
    # Every test that failed carries its cause, the nine that passed on a re-run too.
    causes = {test_id: test["cause"]["clusterId"] for test_id, test in tests.items()}
    labels = {test_id: test_id.rsplit("_", 1)[0] + (test_id if "app" in test_id else "")
              for test_id in tests}  # fmt: skip
    order = sorted(tests)
    assert adjusted_rand_index([labels[t] for t in order], [causes[t] for t in order]) == 1.0
    outage = tests["t_dev_0"]["cause"]
    assert (outage["category"], outage["size"]) == ("infrastructure", 9)
    assert "<*>" in outage["signature"]
    # First in the summary, the step summary and CTRF.
    first = next(line for line in job.stderr.splitlines() if line.startswith("why it failed"))
    # 13: the nine, each app failure and its re-run.
    assert first.startswith("why it failed: 9 of 13 failures share: ")
    assert "9 of 13 failures share" in summary.read_text()
    assert json.loads(ctrf.read_text())["results"]["summary"]["extra"]["causes"][0]["size"] == 9
    # One grouping function, one result: `failures` finds the same cause by the same id.
    clusters = across.json()["clusters"]
    assert clusters[0]["clusterId"] == outage["clusterId"]
    assert (clusters[0]["runs"], clusters[0]["testCount"]) == (9, 9)


async def test_at_80_columns_each_cause_is_one_line_with_no_cut_link(
    svc: FakeService, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an 80-column terminal: a row a cause, and the recent run as its id (a link whole or
    none: a link cut to `http://12…` opens nothing)."""
    import io

    from asyncclient.cli import main
    from asyncclient.cli._output import Output

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "40")
    stdout = Terminal()
    original = Output.__init__

    def on_terminal(self: Output, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **{**kwargs, "stdout": stdout})

    monkeypatch.setattr(Output, "__init__", on_terminal)
    code = await asyncio.to_thread(main, ["failures", "p_demo"])
    assert code == 0
    shown = re.sub(r"\x1b\[[0-9;]*m", "", stdout.getvalue())  # as the terminal shows it
    drawn = [line for line in shown.splitlines() if line.strip()]

    rows = [line for line in drawn if " j_" in line]
    assert len(rows) == 4  # one line a cause
    assert all(len(line) <= 80 for line in drawn)
    assert "http" not in shown
