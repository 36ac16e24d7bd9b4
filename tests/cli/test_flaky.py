"""`asyncclient flaky PROJECT` against the emulator's demo seed, which holds two weeks of history:
t_checkout broken since build 43, t_onboarding flaky on two builds, t_login and t_search stable."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncclient.quarantine import load_quarantine
from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService(clock="manual") as service:
        yield service


@pytest.fixture
def env(svc: FakeService) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key}


async def test_the_table_puts_what_hurts_most_first(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("flaky", "p_demo", env=env)
    assert result.code == 0, result.stderr
    rows = [line.split()[:2] for line in result.stdout.splitlines()[1:]]
    assert rows == [
        ["t_checkout", "broken"],
        ["t_onboarding", "flaky"],
        ["t_login", "stable"],
        ["t_search", "stable"],
    ]
    onboarding = result.stdout.splitlines()[2]
    assert "2/3" in onboarding  # flaky builds of builds
    assert onboarding.rstrip().endswith("✓✗✓✓✓✗✓✓")  # its runs, oldest first
    assert "4 tests over 14 days: 1 broken, 1 flaky" in result.stderr
    # The outage and the device blips: the infrastructure's, left out of every test's runs.
    assert "8 runs that failed for the infrastructure are left out" in result.stderr


async def test_json_has_the_fields_ci_scripts_read(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("--json", "flaky", "p_demo", "--test", "t_onboarding", env=env)
    assert result.code == 0, result.stderr
    data = result.json()
    (test,) = data["tests"]
    assert test["testId"] == "t_onboarding"
    assert {"testId", "state", "runs", "notPassed", "builds", "flakyBuilds", "failureRate",
            "lastFlakyAt"} <= set(test)  # fmt: skip
    assert (test["state"], test["runs"], test["notPassed"], test["flakyBuilds"]) == (
        "flaky",
        8,
        2,
        2,
    )
    assert test["lastFlakyAt"].endswith("Z")
    assert svc.request_counts()["list_runs"] == 1  # one listing for the one test named
    assert test["infrastructure"] == 2


async def test_write_quarantine_adds_the_flaky_test_never_the_broken_one(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "quarantine.toml"
    path.write_text("# Owned by the mobile team; reviewed each Monday.\n")
    result = await run_cli("flaky", "p_demo", "--write-quarantine", str(path), env=env)
    assert result.code == 0, result.stderr
    entries = load_quarantine(path).entries
    assert [e.test for e in entries] == ["t_onboarding"]
    assert entries[0].reason.startswith("flaky on 2 of 3 builds in 14 days")
    assert path.read_text().startswith("# Owned by the mobile team; reviewed each Monday.\n")
    assert "t_checkout is broken, not flaky: not quarantined (fix or revert it)" in result.stderr
    again = await run_cli("flaky", "p_demo", "--write-quarantine", str(path), env=env)
    assert f"{path}: no test to add" in again.stderr
    assert [e.test for e in load_quarantine(path).entries] == ["t_onboarding"]


async def test_a_quarantined_test_that_keeps_passing_is_a_candidate_to_lift(
    run_cli: RunCli, tmp_path: Path
) -> None:
    seed = {
        "projects": [{"id": "p_x"}],
        "keys": [{"key": "k", "capability": "run", "projects": ["p_x"]}],
        "tests": [
            {"id": "t_fixed", "project": "p_x", "target": "web", "url": "https://x.example",
             "history": [{"daysAgo": 5 - i / 10, "status": "passed"} for i in range(25)]},
        ],
    }  # fmt: skip
    path = tmp_path / "quarantine.toml"
    path.write_text('[[quarantine]]\ntest = "t_fixed"\nreason = "flaked"\nuntil = 2099-01-01\n')
    async with FakeService(seed) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "k"}
        result = await run_cli("flaky", "p_x", "--write-quarantine", str(path), env=env)
    assert result.code == 0, result.stderr
    assert (
        f"candidate to lift: t_fixed passed its last 20 runs; remove its entry from {path}"
        in result.stderr
    )


async def test_bad_input_is_refused_before_any_request(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    days = await run_cli("flaky", "p_demo", "--days", "-1", env=env)
    assert days.code == 2
    assert "days must be a number of days above 0" in days.stderr
    test = await run_cli("flaky", "p_demo", "--test", "p_demo", env=env)
    assert test.code == 2
    assert "--test" in test.stderr
    assert svc.requests == []
