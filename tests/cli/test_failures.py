"""`asyncclient failures PROJECT` and the failure categories file on the command line, against
the emulator's demo seed (its history: an outage across four tests, device blips, t_checkout's
voucher bug and t_onboarding's missing Continue button)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]

SLOW_REGEX = "[[category]]\nname = 'slow'\nkind = 'app'\nregex = '(a+)+$'\n"


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
async def test_a_regex_that_could_backtrack_is_refused_before_any_request(
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
    assert "failure-categories.toml: category 'slow': regex '(a+)+$' refused" in line
    assert svc.request_counts() == {}


async def test_rerun_known_needs_retry_failed(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "project", "p_demo", "--wait", "--rerun-known", env=env)
    assert result.code == 2
    assert "--rerun-known needs --retry-failed N" in result.stderr
    assert svc.request_counts() == {}
