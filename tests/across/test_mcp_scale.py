"""The tool server at scale, as an agent meets it: 300 builds, a suite of 2,000 tests (so 2,000
runs), 150 tester endpoints and a run with 1,500 failed requirements, through the SDK's client
over stdio. Every result stays within its budget (16,000 characters, 32,000 for wait_for_runs
and run_project), its structured content is the same JSON as its text, and it says what it left
out and how to ask for it. Then the choice of tools: --toolsets, --tools, --exclude-tools,
--read-only and their variables, together.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import Calls, Progress, stdio_server, text_of

pytest.importorskip("mcp")

from asyncclient.mcp_server._budget import LIST_BUDGET, MIN_BUDGET, WAIT_BUDGET
from asyncclient.mcp_server._launch import LIST_BUDGET_DEFAULT, MIN_RESULT_CHARS
from asyncclient.mcp_server._server import READ_TOOLS, TOOLS, TOOLSETS
from asyncclient.testing import FakeService, demo_seed_data

RUN_KEY = "scale-run-key-51c0e7"
EDIT_KEY = "scale-edit-key-9a4d22"
SUITE = 2000
BUILDS = 300
ENDPOINTS = 150
HUGE_REQUIREMENTS = 1500
# One test in ten fails, one in twenty ends in error, one in forty is blocked.
OUTCOME_EVERY = (("failed", 10, 3), ("error", 20, 7), ("blocked", 40, 9))

# The slow tier (pytest -m slow): hundreds of runs, builds and endpoints through the server.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _outcome(i: int) -> str:
    for outcome, every, at in OUTCOME_EVERY:
        if i % every == at:
            return outcome
    return "passed"


def _big_seed() -> dict[str, Any]:
    data = demo_seed_data(history=False)
    data["projects"].append(
        {"id": "p_big", "name": "Big suite", "plan": "paid", "includedRuns": 100_000}
    )
    data["keys"] = [
        {"key": RUN_KEY, "capability": "run", "projects": ["p_demo", "p_big"]},
        {"key": EDIT_KEY, "capability": "edit", "projects": ["p_demo", "p_big"]},
    ]
    tests = []
    for i in range(SUITE):
        outcome = _outcome(i)
        tests.append(
            {
                "id": f"t_big_{i:04d}",
                "project": "p_big",
                "title": f"Suite check {i:04d}: the shop keeps the cart across a restart",
                "target": "android",
                "appId": "com.example.big",
                "outcome": outcome,
                "requirements": [
                    {
                        "title": f"Requirement {n} of check {i:04d} holds",
                        "result": "passed" if outcome == "passed" or n else "failed",
                        "reason": f"Check {i:04d}, requirement {n}: "
                        + "the screen showed it. " * 4,
                    }
                    for n in range(3)
                ],
                "headline": f"Check {i:04d} ended {outcome}.",
                "durationSeconds": 30,
                "queuedSeconds": 1,
            }
        )
    # One run an agent cannot read whole: 1,500 failed requirements and 300 captured values.
    tests[0] |= {
        "outcome": "failed",
        "requirements": [
            {
                "title": f"Price rule {n:04d} applies to the cart",
                "result": "failed",
                "reason": f"Rule {n:04d} was not applied: the total stayed the same. " * 3,
            }
            for n in range(HUGE_REQUIREMENTS)
        ],
        "captures": {f"value_{n:03d}": "x" * 80 for n in range(300)},
    }
    data["tests"].extend(tests)
    data["builds"].extend(
        {
            "id": f"ab_big_{i:03d}",
            "project": "p_big",
            "platform": "android" if i % 2 else "ios",
            "appId": "com.example.big" if i % 2 else "com.example.big.ios",
            "appName": "Big shop",
            "version": f"2.{i}.0",
            "versionCode": str(1000 + i),
            "label": f"commit-{i:04d}",
        }
        for i in range(BUILDS)
    )
    data["endpoints"].extend(
        {
            "id": f"ep_big_{i:03d}",
            "project": "p_big",
            "name": f"hook_{i:03d}",
            "description": f"Hook {i:03d}. " + "Creates what a test needs in the shop. " * 15,
            "method": "POST",
            "url": f"https://shop.example.com/hooks/{i:03d}",
            "headers": {"X-Token": f"hook-secret-{i:03d}"},
        }
        for i in range(ENDPOINTS)
    )
    return data


@pytest.fixture
async def service() -> AsyncIterator[FakeService]:
    async with FakeService(_big_seed(), clock="manual") as svc:
        yield svc


def _size(result: Any) -> int:
    return len(json.dumps(result, ensure_ascii=False, separators=(",", ":")))


class Bounded(Calls):
    """Calls whose every result is checked against its budget, text and structured alike."""

    async def within(self, budget: int, name: str, arguments: dict[str, Any], **kw: Any) -> Any:
        result = await self.call(name, arguments, **kw)
        assert not result.is_error, f"{name}: {text_of(result)}"
        assert len(text_of(result)) <= budget, (name, len(text_of(result)))
        assert result.structured_content == json.loads(text_of(result))
        return result.structured_content


async def test_every_tool_stays_within_its_budget_at_scale(
    service: FakeService, tmp_path: Path
) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    async with stdio_server(service, RUN_KEY, tmp_path, "--download-dir", str(downloads)) as (
        client,
        errlog,
    ):
        calls = Bounded(client)

        # --- builds: a page of 20 newest first, the total, and how to ask for the next page.
        first = await calls.within(LIST_BUDGET, "list_builds", {"project_id": "p_big"})
        assert first["total"] == BUILDS
        assert len(first["builds"]) == 20
        assert first["nextOffset"] == 20
        assert "builds 1-20 of 300 shown" in first["leftOut"][0]
        assert "offset=20" in first["leftOut"][0]
        seen: list[str] = []
        offset: int | None = 0
        pages = 0
        while offset is not None:
            page = await calls.within(
                LIST_BUDGET,
                "list_builds",
                {"project_id": "p_big", "offset": offset, "page_size": 100},
            )
            assert page["offset"] == offset
            assert page["builds"], page  # every page moves on
            seen += [build["id"] for build in page["builds"]]
            offset = page["nextOffset"]
            pages += 1
        # Every build once, newest first as the service ordered them; pages cut by size.
        assert sorted(seen) == sorted(f"ab_big_{i:03d}" for i in range(BUILDS))
        assert seen[:20] == [build["id"] for build in first["builds"]]
        assert pages > 3
        ios = await calls.within(
            LIST_BUDGET, "list_builds", {"project_id": "p_big", "platform": "ios"}
        )
        assert ios["total"] == BUILDS // 2
        assert all(build["platform"].lower().startswith("ios") for build in ios["builds"])
        one = await calls.within(
            LIST_BUDGET, "list_builds", {"project_id": "p_big", "label": "commit-0007"}
        )
        assert (one["total"], one["nextOffset"], "leftOut" in one) == (1, None, False)
        assert [build["id"] for build in one["builds"]] == ["ab_big_007"]
        assert "page_size must be from 1 to 100" in await calls.error(
            "list_builds", {"project_id": "p_big", "page_size": 500}
        )

        # --- a suite of 2,000 tests: the start, then the wait, each within 32,000 characters.
        started = await calls.within(WAIT_BUDGET, "run_project", {"project_id": "p_big"})
        all_ids = list(service.backend.run_store.runs)
        assert len(all_ids) == SUITE
        assert started["runIds"] == all_ids[: len(started["runIds"])]
        assert started["started"] == []  # the details go first, the ids last
        assert any(f"of {SUITE:,} shown" in note for note in started["leftOut"])

        progress = Progress()

        async def finish_once_polled() -> None:
            await progress.first.wait()
            service.advance(3600)

        mover = asyncio.create_task(finish_once_polled())
        waited = await calls.within(
            WAIT_BUDGET,
            "wait_for_runs",
            {"run_ids": all_ids, "timeout_seconds": 120},
            progress_callback=progress,
        )
        await mover
        expected = Counter(_outcome(i) for i in range(SUITE))
        expected["passed"] -= 1  # the huge one fails
        expected["failed"] += 1
        assert waited["done"] is True
        assert waited["counts"] == {
            status: expected[status]
            for status in ("passed", "failed", "blocked", "error")
            if expected[status]
        }
        assert sum(waited["counts"].values()) == SUITE
        not_passed = SUITE - expected["passed"]
        shown = len(waited["notPassed"])
        assert 20 < shown < not_passed
        assert all(run["outcome"] != "passed" for run in waited["notPassed"])
        # The failures come in the order asked, with their failed requirements and reasons.
        assert [run["id"] for run in waited["notPassed"]] == [
            run_id for run_id in all_ids if run_id in {r["id"] for r in waited["notPassed"]}
        ][:shown]
        huge = waited["notPassed"][0]
        assert huge["testId"] == "t_big_0000"
        assert len(huge["failedRequirements"]) == 10
        assert huge["failedRequirements"][0]["reason"].startswith("Rule 0000 was not applied")
        notes = "\n".join(waited["leftOut"])
        assert f"notPassed: {shown:,} of {not_passed:,} shown; get_run gives any run" in notes
        passed = len(waited["passed"])
        assert f"passed: {passed} of {expected['passed']:,} shown" in notes
        assert all(line.split()[1] == "passed" for line in waited["passed"])
        assert "notPassed[].failedRequirements" in notes
        assert waited["pending"] == waited["unknown"] == []

        # --- one run too long to show whole: cut, and the cuts named.
        run = await calls.within(LIST_BUDGET, "get_run", {"run_id": huge["id"]})
        assert run["run"]["id"] == huge["id"]
        assert 1 <= len(run["failedRequirements"]) < HUGE_REQUIREMENTS
        assert run["failedRequirements"][0]["title"] == "Price rule 0000 applies to the cart"
        assert any(note.startswith("run.requirements") for note in run["leftOut"])
        assert "screenshots/01.png" in run["files"]

        # --- list_runs: 200 list views, or 50 full views, within 16,000 characters.
        listed = await calls.within(LIST_BUDGET, "list_runs", {"project_id": "p_big", "limit": 200})
        assert 20 < len(listed["runs"]) < 200
        assert any(f"runs: {len(listed['runs'])} of 200 shown" in n for n in listed["leftOut"])
        full = await calls.within(LIST_BUDGET, "list_runs", {"ids": all_ids[:50]})
        assert [r["id"] for r in full["runs"]] == all_ids[: len(full["runs"])]
        assert "fewer ids" in "\n".join(full["leftOut"])

        # --- endpoints: paged like builds; header values never shown.
        endpoints = await calls.within(LIST_BUDGET, "list_endpoints", {"project_id": "p_big"})
        assert endpoints["total"] == ENDPOINTS
        assert 0 < len(endpoints["endpoints"]) <= 20
        assert endpoints["nextOffset"] == len(endpoints["endpoints"])
        last = await calls.within(
            LIST_BUDGET,
            "list_endpoints",
            {"project_id": "p_big", "offset": ENDPOINTS - 5, "page_size": 20},
        )
        assert [e["name"] for e in last["endpoints"]] == [
            f"hook_{i:03d}" for i in range(ENDPOINTS - 5, ENDPOINTS)
        ]
        assert last["nextOffset"] is None

        # The small results stay small; a file of the huge run still downloads.
        single = await calls.within(LIST_BUDGET, "run_test", {"test_id": "t_big_0001"})
        stopped = await calls.within(LIST_BUDGET, "stop_run", {"run_id": single["runId"]})
        assert stopped["id"] == single["runId"]
        assert (await calls.within(LIST_BUDGET, "get_build", {"build_id": "ab_big_001"}))["build"][
            "id"
        ] == "ab_big_001"
        saved = await calls.within(
            LIST_BUDGET, "download_run_file", {"run_id": huge["id"], "file": "screenshots/01.png"}
        )
        assert (downloads / saved["path"]).stat().st_size == saved["size"]

    texts = "\n".join(calls.texts)
    assert RUN_KEY not in texts
    assert "hook-secret" not in texts
    assert RUN_KEY not in errlog.read_text()


async def test_a_smaller_budget_is_kept_too(service: FakeService, tmp_path: Path) -> None:
    async with stdio_server(service, RUN_KEY, tmp_path, "--result-chars", "4000") as (client, _):
        calls = Bounded(client)
        page = await calls.within(4000, "list_builds", {"project_id": "p_big"})
        assert 0 < len(page["builds"]) < 20
        assert page["nextOffset"] == len(page["builds"])
        run_id = service.backend.run_store.create_runs("t_big_0000", 1)[0].id
        service.advance(3600)
        waited = await calls.within(8000, "wait_for_runs", {"run_ids": [run_id]})
        assert waited["counts"] == {"failed": 1}
        assert len(waited["notPassed"]) == 1
        got = await calls.within(4000, "get_run", {"run_id": run_id})
        assert got["leftOut"]


# --- choosing tools ------------------------------------------------------------------------------


async def _offered(service: FakeService, tmp_path: Path, *args: str, **env: str) -> list[str]:
    async with stdio_server(service, RUN_KEY, tmp_path, *args, env=env) as (client, _):
        return [tool.name for tool in (await client.list_tools()).tools]


async def test_toolsets_tools_and_read_only_together(service: FakeService, tmp_path: Path) -> None:
    runs = list(TOOLSETS["runs"])
    assert await _offered(service, tmp_path) == list(TOOLS)
    assert await _offered(service, tmp_path, "--toolsets", "runs") == runs
    # Toolsets and single tools add up, in the server's order; repeated flags add up too.
    assert await _offered(
        service, tmp_path, "--toolsets", "builds", "--tools", "wait_for_runs,get_run"
    ) == ["list_builds", "get_build", "upload_build", "delete_build", "get_run", "wait_for_runs"]
    assert await _offered(
        service, tmp_path, "--tools", "get_run", "--tools", "download_run_file"
    ) == ["get_run", "download_run_file"]
    # --read-only wins over both.
    assert await _offered(
        service, tmp_path, "--toolsets", "runs,endpoints", "--tools", "delete_build", "--read-only"
    ) == [
        "list_runs",
        "get_run",
        "wait_for_runs",
        "flaky_tests",
        "failure_clusters",
        "fleet_status",
        "list_endpoints",
    ]
    assert await _offered(
        service, tmp_path, "--toolsets", "all", "--exclude-tools", "delete_build,delete_endpoint"
    ) == [name for name in TOOLS if name not in ("delete_build", "delete_endpoint")]
    # The same through the environment; a flag wins over its variable.
    assert await _offered(
        service,
        tmp_path,
        ASYNCCLIENT_MCP_TOOLSETS="files,builds",
        ASYNCCLIENT_MCP_READ_ONLY="1",
    ) == ["list_builds", "get_build", "download_run_file"]
    assert await _offered(
        service, tmp_path, "--tools", "get_build", ASYNCCLIENT_MCP_TOOLS="list_builds"
    ) == ["get_build"]
    # A tool left out cannot be called either.
    async with stdio_server(service, RUN_KEY, tmp_path, "--toolsets", "builds", "--read-only") as (
        client,
        _,
    ):
        refused = await client.call_tool("wait_for_runs", {"run_ids": ["j_1"]})
        assert refused.is_error
        assert "wait_for_runs" in text_of(refused)
        assert not (await client.call_tool("list_builds", {"project_id": "p_big"})).is_error
    assert set(READ_TOOLS) >= {"list_builds", "get_build"}


def _start(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": "/usr/bin:/bin",
        "ASYNCCLIENT_BASE_URL": "http://127.0.0.1:9",
        "ASYNCCLIENT_API_KEY": RUN_KEY,
    }
    return subprocess.run(
        [sys.executable, "-m", "asyncclient", "mcp", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--tools", "list_build"],
            {},
            "--tools list_build: no such tool (did you mean list_builds?); the tools are "
            + ", ".join(TOOLS),
        ),
        (
            ["--toolsets", "build,runs"],
            {},
            "--toolsets build: no such toolset (did you mean builds?); the toolsets are "
            "builds, runs, endpoints, files (or all)",
        ),
        (
            [],
            {"ASYNCCLIENT_MCP_EXCLUDE_TOOLS": "nope"},
            "ASYNCCLIENT_MCP_EXCLUDE_TOOLS nope: no such tool; the tools are " + ", ".join(TOOLS),
        ),
        (
            ["--tools", "delete_build", "--read-only"],
            {},
            "no tool is left to offer read-only (--read-only or ASYNCCLIENT_MCP_READ_ONLY), which "
            "keeps only the tools that change nothing: choose among " + ", ".join(READ_TOOLS),
        ),
        (
            [],
            {"ASYNCCLIENT_MCP_READ_ONLY": "maybe"},
            "ASYNCCLIENT_MCP_READ_ONLY='maybe': give 1 (read-only) or 0",
        ),
        (
            ["--result-chars", "100"],
            {},
            f"--result-chars 100 is too small: give at least {MIN_RESULT_CHARS:,}",
        ),
    ],
)
def test_a_bad_choice_of_tools_is_one_line_at_start(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    # The service address is a closed port: the choice is refused before any connection.
    done = _start(*args, **env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {expected}"]
    assert done.stdout == ""


def test_the_cli_repeats_the_servers_budgets() -> None:
    assert (LIST_BUDGET_DEFAULT, MIN_RESULT_CHARS) == (LIST_BUDGET, MIN_BUDGET)
    assert WAIT_BUDGET == 2 * LIST_BUDGET
