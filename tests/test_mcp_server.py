"""`asyncclient mcp` as an MCP client sees it: the command runs as a real subprocess (stdio, and
once streamable HTTP), driven by the mcp SDK's own ClientSession against the emulator.

The emulator runs in the test's event loop on a manual clock: the test moves service time, the
server's wait_for_runs polls every 0.1 s, so no test waits for minutes of runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import Calls, Progress, by_name, env_for, stdio_server, text_of
from network_support import Network

pytest.importorskip("mcp")

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from asyncclient.cli._mcp import INSTALL_HINT
from asyncclient.mcp_server._launch import LaunchError, is_loopback, parse_http
from asyncclient.mcp_server._server import DESTRUCTIVE_TOOLS, READ_TOOLS, TOOLS, WRITE_TOOLS
from asyncclient.testing import FakeService, ServiceSettings, demo_seed_data
from asyncclient.testing.builders import build_apk

RUN_KEY = "run-key-7f3a9c1e5b0d"
EDIT_KEY = "edit-key-2d8e6b4a0c91"
HEADER_SECRET = "Bearer shop-token-9c2f71aa"

# Over HTTPS and a proxy too: the agent-facing upload and download must work on real networks.
pytestmark = [pytest.mark.timeout(90), pytest.mark.networks]


def _seed() -> dict[str, Any]:
    """The demo seed with keys no result could contain by chance, and without its flaky test
    (re-runs have a test of their own below): each run ends as its test's outcome says."""
    data = demo_seed_data(history=False)
    for key in data["keys"]:
        key["key"] = RUN_KEY if key["capability"] == "run" else EDIT_KEY
    for test in data["tests"]:
        test.pop("flakyRuns", None)
    return data


@pytest.fixture
async def service(dialect: str, network: Network) -> AsyncIterator[FakeService]:
    # Small parts, so that a sample app goes up in several parts with progress between them;
    # in each wire dialect, and over HTTPS and a proxy (tests/conftest.py).
    settings = ServiceSettings(part_bytes=64 * 1024)
    emulator = FakeService(
        _seed(), clock="manual", settings=settings, dialect=dialect, **network.service_options
    )
    async with network.serve(emulator) as svc:
        yield svc


# --- the tools and their schemas -----------------------------------------------------------------


async def test_lists_every_tool_with_the_specs_rules_in_its_schema(
    service: FakeService, tmp_path: Path
) -> None:
    async with stdio_server(service, RUN_KEY, tmp_path) as (client, _):
        tools = by_name((await client.list_tools()).tools)

    assert list(tools) == list(TOOLS)
    from spec_support import spec_operations

    spec_tools = {tool for _, tool in spec_operations().values() if tool}
    # The spec's tools, then the server's own (the REST-only upload and download, made tools).
    assert set(TOOLS) == spec_tools | {
        "upload_build",
        "wait_for_runs",
        "download_run_file",
        "flaky_tests",
        "failure_clusters",
        "fleet_status",
        "verify_fix",
        "bisect",
        "exonerate",
    }

    def props(name: str) -> dict[str, Any]:
        schema = tools[name].input_schema
        assert schema["type"] == "object"
        result: dict[str, Any] = schema["properties"]
        return result

    assert props("get_build")["build_id"]["pattern"] == "^ab_"
    assert tools["get_build"].input_schema["required"] == ["build_id"]
    assert props("list_builds")["project_id"]["pattern"] == "^p_"
    assert props("run_test")["test_id"]["pattern"] == "^t_"
    assert props("get_run")["run_id"]["pattern"] == "^j_"
    assert props("delete_endpoint")["endpoint_id"]["pattern"] == "^ep_"
    assert props("run_test")["mode"]["enum"] == ["auto", "cold", "warm"]
    assert props("run_project")["build_ids"]["items"]["pattern"] == "^ab_"
    assert props("run_project")["build_ids"]["maxItems"] == 50
    runs = props("list_runs")
    assert runs["ids"]["maxItems"] == 50
    assert runs["ids"]["items"]["pattern"] == "^j_"
    assert runs["limit"] == {**runs["limit"], "type": "integer", "minimum": 1, "maximum": 200}
    assert set(runs["status"]["enum"]) == {
        "queued",
        "running",
        "passed",
        "failed",
        "blocked",
        "inconclusive",
        "error",
        "cancelled",
    }
    endpoint = props("add_endpoint")
    assert endpoint["name"]["maxLength"] == 40
    assert endpoint["description"]["maxLength"] == 600
    assert endpoint["url"]["pattern"] == "^https://"
    assert endpoint["method"]["enum"] == ["DELETE", "GET", "PATCH", "POST", "PUT"]
    assert endpoint["headers"]["maxProperties"] == 20
    assert set(tools["add_endpoint"].input_schema["required"]) == {
        "project_id",
        "name",
        "description",
        "url",
    }
    assert "maxItems" not in props("wait_for_runs")["run_ids"]  # any number: batched
    assert props("wait_for_runs")["timeout_seconds"]["maximum"] == 3600
    assert "ctx" not in props("upload_build")  # the SDK's context is not an argument

    for name, tool in tools.items():
        assert tool.description is not None, name
        assert len(tool.description) > 40, name
        assert tool.output_schema is not None, name
        assert tool.output_schema["type"] == "object", name
        annotations = tool.annotations
        assert annotations is not None, name
        if name in DESTRUCTIVE_TOOLS:
            assert annotations.destructive_hint is True, name
            assert annotations.read_only_hint is False, name
        elif name in READ_TOOLS and name != "download_run_file":
            assert annotations.read_only_hint is True, name
        else:
            assert annotations.read_only_hint is False, name
            assert annotations.destructive_hint is False, name
    assert {"delete_build", "delete_endpoint", "stop_run"} == DESTRUCTIVE_TOOLS
    assert set(tools["wait_for_runs"].output_schema["properties"]) >= {
        "done",
        "counts",
        "notPassed",
        "passed",
        "pending",
        "leftOut",
    }
    assert {"offset", "page_size", "status", "app_id", "platform", "label"} <= set(
        props("list_builds")
    )
    assert props("list_builds")["page_size"]["maximum"] == 100


async def test_read_only_offers_only_the_read_tools(service: FakeService, tmp_path: Path) -> None:
    async with stdio_server(service, RUN_KEY, tmp_path, "--read-only") as (client, _):
        names = [tool.name for tool in (await client.list_tools()).tools]
        refused = await client.call_tool("delete_build", {"build_id": "ab_x"})
        listed = await client.call_tool("list_builds", {"project_id": "p_demo"})

    assert set(names) == set(READ_TOOLS)
    assert not set(names) & set(WRITE_TOOLS)
    assert refused.is_error
    assert "delete_build" in text_of(refused)
    assert not listed.is_error
    assert service.requests_for("delete_build") == []


# --- the whole job over stdio ---------------------------------------------------------------------


async def test_every_tool_over_stdio_against_the_emulator(
    service: FakeService, tmp_path: Path
) -> None:
    apk = build_apk(tmp_path / "shop.apk", version_code=7, filler_bytes=300_000)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    upload_progress = Progress()
    wait_progress = Progress()

    async with stdio_server(service, RUN_KEY, tmp_path, "--download-dir", str(downloads)) as (
        client,
        errlog,
    ):
        calls = Calls(client)

        # Upload a real sample app: parallel parts, checked by the service, progress in bytes.
        uploaded = await calls.ok(
            "upload_build",
            {"project_id": "p_demo", "path": str(apk), "label": "abc123"},
            progress_callback=upload_progress,
        )
        build = uploaded["build"]
        assert build["id"].startswith("ab_")
        assert build["status"].lower() == "ready"  # the service's own word (READY elsewhere)
        assert build["appId"] == "com.example.shop"
        assert build["label"] == "abc123"
        assert build["sha256"]
        assert len(service.requests_for("upload_part")) >= 5
        assert upload_progress.seen
        assert upload_progress.seen[-1][:2] == (apk.stat().st_size, apk.stat().st_size)
        assert "shop.apk" in (upload_progress.seen[-1][2] or "")

        listed = await calls.ok("list_builds", {"project_id": "p_demo"})
        assert build["id"] in [b["id"] for b in listed["builds"]]
        assert listed["partBytes"] == 64 * 1024
        got = await calls.ok("get_build", {"build_id": build["id"]})
        assert got["build"]["versionCode"] == "7"

        # Run the project with that build, then wait for the runs while service time moves.
        started = await calls.ok("run_project", {"project_id": "p_demo", "build_id": build["id"]})
        run_ids = started["runIds"]
        assert len(run_ids) == 4
        assert started["skipped"] == []
        assert {s["testId"] for s in started["started"]} >= {"t_login", "t_checkout"}

        async def advance_once_polled() -> None:
            await wait_progress.first.wait()
            service.advance(3600)

        mover = asyncio.create_task(advance_once_polled())
        waited = await calls.ok(
            "wait_for_runs",
            {"run_ids": run_ids, "timeout_seconds": 60},
            progress_callback=wait_progress,
        )
        await mover
        assert waited["done"] is True
        assert waited["pending"] == []
        assert waited["unknown"] == []
        assert waited["summary"] == "4 runs: 3 passed, 1 failed"
        assert waited["counts"] == {"passed": 3, "failed": 1}
        assert "leftOut" not in waited  # everything fits
        # The run that did not pass in full, the passed ones in one line each.
        (checkout,) = waited["notPassed"]
        assert checkout["testId"] == "t_checkout"
        assert [line.split()[0] for line in waited["passed"]] == [
            run_id for run_id in run_ids if run_id != checkout["id"]
        ]
        assert all(line.split()[1] == "passed" for line in waited["passed"])
        assert any('t_login "Log in with a valid account"' in line for line in waited["passed"])
        assert checkout["status"] == "failed"
        assert checkout["headline"] == "The voucher was accepted but the total did not change."
        assert checkout["failedRequirements"] == [
            {
                "id": checkout["failedRequirements"][0]["id"],
                "title": "A voucher code reduces the total",
                "reason": "The voucher SAVE10 from create_voucher was accepted, but the total "
                "stayed $42.00 instead of $37.80.",
            }
        ]
        assert checkout["link"].endswith(f"/runs/{checkout['id']}")
        assert wait_progress.seen[-1][:2] == (4, 4)
        assert "4 of 4 runs final" in (wait_progress.seen[-1][2] or "")
        assert service.requests_for("get_run") == []  # batched list_runs, never one by one

        run = await calls.ok("get_run", {"run_id": checkout["id"]})
        assert run["run"]["status"] == "failed"
        assert run["captures"]["voucher"] == "SAVE10"  # read from any dialect's shape
        assert run["failedRequirements"] == checkout["failedRequirements"]
        assert "screenshots/01.png" in run["files"]

        few = await calls.ok("list_runs", {"project_id": "p_demo", "status": "failed"})
        assert [r["id"] for r in few["runs"]] == [checkout["id"]]
        full = await calls.ok("list_runs", {"ids": run_ids})
        assert [r["id"] for r in full["runs"]] == run_ids

        # Files go into the download folder, and nowhere else.
        saved = await calls.ok(
            "download_run_file", {"run_id": checkout["id"], "file": "screenshots/01.png"}
        )
        assert saved["path"] == f"{checkout['id']}/screenshots/01.png"
        on_disk = downloads / saved["path"]
        assert on_disk.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert saved["size"] == on_disk.stat().st_size
        for escape in ("../outside.png", str(tmp_path / "abs.png"), "a/../../x.png"):
            message = await calls.error(
                "download_run_file",
                {"run_id": checkout["id"], "file": "screenshots/01.png", "save_as": escape},
            )
            assert "download folder" in message
        (downloads / "link").symlink_to(tmp_path)
        message = await calls.error(
            "download_run_file",
            {"run_id": checkout["id"], "file": "video.mp4", "save_as": "link/video.mp4"},
        )
        assert "outside the download folder" in message
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".png", ".mp4")) == []
        # Links planted at the partial file and its validator are replaced, never written through.
        victims = [tmp_path / "victim-part.txt", tmp_path / "victim-etag.txt"]
        for victim, name in zip(victims, ("video.mp4.part", "video.mp4.part.etag"), strict=True):
            victim.write_text("precious")
            (downloads / checkout["id"] / name).symlink_to(victim)
        video = await calls.ok("download_run_file", {"run_id": checkout["id"], "file": "video.mp4"})
        assert [victim.read_text() for victim in victims] == ["precious", "precious"]
        saved_video = downloads / video["path"]
        assert not saved_video.is_symlink()
        assert saved_video.stat().st_size == video["size"]
        assert sorted(p.name for p in saved_video.parent.iterdir()) == ["screenshots", "video.mp4"]

        endpoints = await calls.ok("list_endpoints", {"project_id": "p_demo"})
        assert [e["name"] for e in endpoints["endpoints"]] == ["create_voucher"]

        # A run that is still going can be stopped.
        single = await calls.ok("run_test", {"test_id": "t_search", "mode": "cold"})
        assert single["runId"].startswith("j_")
        stopped = await calls.ok("stop_run", {"run_id": single["runId"]})
        assert stopped["id"] == single["runId"]
        assert stopped["status"] in ("cancelled", "stopped", "canceled")  # the service's word

        # Errors come back as tool errors with the CLI's one-line message; the server lives on.
        capability = await calls.error("delete_build", {"build_id": build["id"]})
        assert capability.startswith("403 ")  # permission_denied, forbidden, ... by dialect
        assert "use a key that can also create and edit tests" in capability
        validation = await calls.error("get_build", {"build_id": "j_1"})
        assert validation == (
            "j_1 is not a build id: build ids start with ab_ (j_1 looks like a run id); "
            "check the build_id argument"
        )
        too_many = await calls.error("list_runs", {"ids": [f"j_{i}" for i in range(51)]})
        assert "at most 50 ids" in too_many
        assert "limit must be from 1 to 200" in await calls.error("list_runs", {"limit": 500})
        assert "mode must be one of auto, cold, warm" in await calls.error(
            "run_test", {"test_id": "t_login", "mode": "hot"}
        )
        not_found = await calls.error("get_run", {"run_id": "j_nope"})
        assert not_found.startswith("404 not_found")
        assert (await calls.ok("get_build", {"build_id": build["id"]}))["build"]["id"]

    texts = "\n".join(calls.texts)
    assert RUN_KEY not in texts
    assert RUN_KEY not in errlog.read_text()


async def test_endpoint_and_delete_tools_with_an_edit_key(
    service: FakeService, tmp_path: Path
) -> None:
    # -v: every request is logged on stderr, and the log must hold no secret either.
    async with stdio_server(service, EDIT_KEY, tmp_path, "-v") as (client, errlog):
        calls = Calls(client)
        added = await calls.ok(
            "add_endpoint",
            {
                "project_id": "p_demo",
                "name": "refund_order",
                "description": "Refunds an order; call it when a test needs a refunded order.",
                "url": "https://shop.example.com/test/refunds",
                "method": "post",
                "headers": {"Authorization": HEADER_SECRET},
                "body_template": '{"order": "{{order}}"}',
            },
        )
        assert added["id"].startswith("ep_")
        listed = await calls.ok("list_endpoints", {"project_id": "p_demo"})
        refund = next(e for e in listed["endpoints"] if e["id"] == added["id"])
        assert refund["method"] == "POST"
        assert "headers" not in refund

        http = await calls.error(
            "add_endpoint",
            {
                "project_id": "p_demo",
                "name": "plain",
                "description": "Plain http is refused.",
                "url": "http://shop.example.com/x",
                "headers": {"Authorization": HEADER_SECRET},
            },
        )
        assert "https://" in http
        long_name = await calls.error(
            "add_endpoint",
            {"project_id": "p_demo", "name": "n" * 41, "description": "d", "url": "https://a.b"},
        )
        assert "1 to 40 characters" in long_name

        assert await calls.ok("delete_endpoint", {"endpoint_id": added["id"]}) == {
            "id": added["id"],
            "ok": True,
        }
        builds = await calls.ok("list_builds", {"project_id": "p_demo"})
        ios = builds["builds"][0]["id"]
        assert await calls.ok("delete_build", {"build_id": ios}) == {"id": ios, "ok": True}

    texts = "\n".join(calls.texts)
    stderr = errlog.read_text()
    # One line per request, in the CLI's format: the SDK's root log handler (rich) must not
    # print each one a second time.
    requests = [line for line in stderr.splitlines() if "/api/v1/" in line]
    assert any("POST /api/v1/projects/p_demo/endpoints" in line for line in requests)
    stamp = r"\d{4}-\d\d-\d\d [\d:,]+ DEBUG asyncclient\.requests "
    assert all(re.match(stamp, line) for line in requests)
    for secret in (EDIT_KEY, HEADER_SECRET, "shop-token"):
        assert secret not in texts
        assert secret not in stderr


async def test_wait_for_runs_returns_what_is_still_going_when_its_time_is_up(
    service: FakeService, tmp_path: Path
) -> None:
    async with stdio_server(service, RUN_KEY, tmp_path) as (client, _):
        calls = Calls(client)
        started = await calls.ok("run_test", {"test_id": "t_search"})
        waited = await calls.ok(
            "wait_for_runs", {"run_ids": [started["runId"], "j_unknown"], "timeout_seconds": 0.5}
        )
    assert waited["done"] is False
    assert waited["pending"] == [started["runId"]]
    assert waited["unknown"] == ["j_unknown"]
    assert waited["counts"] == {"queued": 1}
    assert waited["notPassed"] == waited["passed"] == []
    assert "still going" in waited["summary"]


async def test_verify_fix_runs_a_test_n_times_and_states_the_bound(tmp_path: Path) -> None:
    """verify_fix on the demo's stable t_search: 5 runs started (no more), all passed, the bound
    stated; the tool is not read-only; a call beyond its bounds is refused before any run."""
    async with (
        FakeService(speed=1000.0) as demo,
        stdio_server(demo, demo.run_key, tmp_path) as (client, _),
    ):
        tools = by_name((await client.list_tools()).tools)
        calls = Calls(client)
        told = await calls.ok("verify_fix", {"test_ids": ["t_search"], "runs": 5})
        again = await calls.ok(
            "verify_fix", {"test_ids": ["t_search"], "runs": 3, "idempotency_key": "fix-1"}
        )
        repeated = await calls.ok(
            "verify_fix", {"test_ids": ["t_search"], "runs": 3, "idempotency_key": "fix-1"}
        )
        too_many = await calls.error("verify_fix", {"test_ids": ["t_search"], "runs": 51})
        starts = len(demo.requests_for("run_test"))
    annotations = tools["verify_fix"].annotations
    assert annotations is not None
    assert annotations.read_only_hint is False
    assert told["fixed"] is True
    assert told["summary"] == [
        "t_search: 5 of 5 passed: its failure rate is below 46 % at 95 % confidence"
    ]
    (test,) = told["tests"]
    assert (test["passed"], test["failed"], len(test["runs"])) == (5, 0, 5)
    assert test["failureRateBound"] == 0.4507
    assert [r["id"] for r in again["tests"][0]["runs"]] == [
        r["id"] for r in repeated["tests"][0]["runs"]
    ]
    assert starts == 5 + 3 + 3  # the same key answered the repeated call with the same runs
    assert "runs" in too_many


async def test_failure_clusters_groups_the_projects_failures_by_cause(tmp_path: Path) -> None:
    """The demo seed's history: an outage across four tests, device blips, two app bugs."""
    async with (
        FakeService() as demo,
        stdio_server(demo, demo.run_key, tmp_path) as (client, _),
    ):
        tools = by_name((await client.list_tools()).tools)
        assert tools["failure_clusters"].annotations is not None
        assert tools["failure_clusters"].annotations.read_only_hint is True
        calls = Calls(client)
        found = await calls.ok("failure_clusters", {"project_id": "p_demo"})
        refused = await calls.error("failure_clusters", {"project_id": "p_demo", "days": 0})
        url = demo.url
    assert (found["failures"], len(found["clusters"])) == (15, 4)
    first = found["clusters"][0]
    assert (first["runs"], first["tests"], first["category"]["kind"]) == (5, ["t_checkout"], "app")
    kinds = Counter(c["category"]["kind"] for c in found["clusters"])
    assert kinds == {"infrastructure": 2, "app": 2}
    outage = next(c for c in found["clusters"] if "connection refused" in c["signature"])
    assert (outage["runs"], outage["testCount"], outage["new"]) == (4, 4, False)
    assert outage["example"]["link"].startswith(url)
    assert "days" in refused


async def test_flaky_tests_tells_a_known_flake_from_a_breakage(tmp_path: Path) -> None:
    """The demo seed's two weeks of history: t_checkout broken, t_onboarding flaky."""
    async with (
        FakeService() as demo,
        stdio_server(demo, demo.run_key, tmp_path) as (client, _),
    ):
        tools = by_name((await client.list_tools()).tools)
        assert tools["flaky_tests"].annotations is not None
        assert tools["flaky_tests"].annotations.read_only_hint is True
        calls = Calls(client)
        found = await calls.ok("flaky_tests", {"project_id": "p_demo"})
        one = await calls.ok(
            "flaky_tests", {"project_id": "p_demo", "test_ids": ["t_onboarding"], "days": 30}
        )
        refused = await calls.error("flaky_tests", {"project_id": "p_demo", "days": 0})
    states = {test["testId"]: test["state"] for test in found["tests"]}
    assert states == {
        "t_checkout": "broken",
        "t_onboarding": "flaky",
        "t_login": "stable",
        "t_search": "stable",
    }
    assert [test["testId"] for test in found["tests"]][:2] == ["t_checkout", "t_onboarding"]
    (onboarding,) = one["tests"]
    assert (onboarding["flakyBuilds"], onboarding["builds"], one["days"]) == (2, 3, 30)
    assert "days" in refused


# --- streamable HTTP ------------------------------------------------------------------------------


async def test_the_job_over_streamable_http(service: FakeService, tmp_path: Path) -> None:
    env = {**os.environ, **env_for(service, RUN_KEY, tmp_path)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "asyncclient",
        "mcp",
        "--http",
        "127.0.0.1:0",
        "--poll-interval",
        "0.1",
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", line)
        assert found, line
        url = found.group(0)
        progress = Progress()
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            calls = Calls(client)
            names = [tool.name for tool in (await client.list_tools()).tools]
            assert names == list(TOOLS)
            started = await calls.ok("run_project", {"project_id": "p_demo"})
            # No Android build yet: the two Android tests are skipped, with the reason.
            assert {s["testId"] for s in started["skipped"]} == {"t_login", "t_checkout"}
            assert all(s["reason"] for s in started["skipped"])

            async def advance_once_polled() -> None:
                await progress.first.wait()
                service.advance(3600)

            mover = asyncio.create_task(advance_once_polled())
            waited = await calls.ok(
                "wait_for_runs",
                {"run_ids": started["runIds"]},
                progress_callback=progress,
            )
            await mover
            assert waited["done"] is True
            assert waited["counts"] == {"passed": len(started["runIds"])}
            assert waited["notPassed"] == []
            validation = await calls.error("get_run", {"run_id": "ab_1"})
            assert validation.startswith("ab_1 is not a run id")
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)
        stderr = line + (await process.stderr.read()).decode() if process.stderr else ""
    assert RUN_KEY not in "\n".join(calls.texts)
    assert RUN_KEY not in stderr


async def test_http_refuses_a_host_header_that_is_not_loopback(
    service: FakeService, tmp_path: Path
) -> None:
    """DNS rebinding: a page on another origin must not reach the loopback server."""
    import httpx2

    env = {**os.environ, **env_for(service, RUN_KEY, tmp_path)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "mcp", "--http", "0", env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
        found = re.search(r"http://127\.0\.0\.1:\d+/mcp", line)
        assert found, line
        async with httpx2.AsyncClient() as http:
            answer = await http.post(
                found.group(0),
                headers={"Host": "evil.example.com", "Content-Type": "application/json"},
                content=b"{}",
            )
        assert answer.status_code in (403, 421)
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


# --- the command without the SDK, and its options ---------------------------------------------


def _without_sdk(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`asyncclient ARGV` in a fresh interpreter where `import mcp` fails, as in a base install."""
    script = (
        "import sys\n"
        "sys.modules['mcp'] = None  # import mcp now raises ImportError\n"
        "from asyncclient.cli import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_without_the_extra_mcp_says_how_to_install_it() -> None:
    result = _without_sdk("mcp", env={"ASYNCCLIENT_API_KEY": RUN_KEY})
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {INSTALL_HINT}")
    assert "pip install 'asyncclient[mcp]'" in result.stderr


def test_without_the_extra_every_other_command_works() -> None:
    helped = _without_sdk("--help")
    assert helped.returncode == 0
    assert "mcp" in helped.stdout
    inspected = _without_sdk("mcp", "--help")
    assert inspected.returncode == 0
    assert "asyncclient[mcp]" in inspected.stdout


def test_the_cli_and_the_package_do_not_load_the_sdk() -> None:
    script = (
        "import sys, asyncclient\n"
        "from asyncclient.cli import build_parser\n"
        "build_parser()\n"
        "print('\\n'.join(sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert not [name for name in loaded if name == "mcp" or name.startswith("mcp.")]
    # The server's options (`_launch`, no SDK) only: `asyncclient mcp --help` shows them.
    server = [name for name in loaded if name.startswith("asyncclient.mcp_server.")]
    assert server == ["asyncclient.mcp_server._launch"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8765", ("127.0.0.1", 8765)),
        (":8765", ("127.0.0.1", 8765)),
        ("0", ("127.0.0.1", 0)),
        ("localhost:9000", ("localhost", 9000)),
        ("[::1]:9000", ("::1", 9000)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
    ],
)
def test_http_addresses(value: str, expected: tuple[str, int]) -> None:
    assert parse_http(value) == expected


@pytest.mark.parametrize("value", ["", "host:", "127.0.0.1:99999", "::1:80", "port"])
def test_bad_http_addresses_are_refused(value: str) -> None:
    with pytest.raises(LaunchError, match="--http"):
        parse_http(value)


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.0.2.1")


def test_a_missing_download_folder_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "asyncclient", "mcp", "--download-dir", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "ASYNCCLIENT_BASE_URL": "http://127.0.0.1:9",
            "ASYNCCLIENT_API_KEY": "k",
        },
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "--download-dir" in result.stderr
    assert "is not a folder" in result.stderr


# --- the HTTP transport's token -------------------------------------------------------------------

TOKEN = "tok-3c9e1f0a7b5d2e8c"


async def _start_http(
    service: FakeService, tmp_path: Path, address: str, *extra: str, token_env: str | None = None
) -> tuple[asyncio.subprocess.Process, str]:
    env = {**os.environ, **env_for(service, RUN_KEY, tmp_path)}
    if token_env is not None:
        env["ASYNCCLIENT_MCP_HTTP_TOKEN"] = token_env
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "mcp", "--http", address, *extra, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
    found = re.search(r":(\d+)/mcp", line)
    assert found, line
    # Whatever the bound address, the test connects through loopback only.
    return process, f"http://127.0.0.1:{found.group(1)}/mcp"


async def _stop(process: asyncio.subprocess.Process) -> str:
    process.terminate()
    await asyncio.wait_for(process.wait(), 30)
    return (await process.stderr.read()).decode() if process.stderr else ""


def test_off_loopback_without_a_token_is_refused_before_serving(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "asyncclient", "mcp", "--http", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ASYNCCLIENT_API_KEY": RUN_KEY, "ASYNCCLIENT_BASE_URL": "http://x"},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "--http 0.0.0.0:0 is not loopback" in result.stderr
    assert "--http-token or ASYNCCLIENT_MCP_HTTP_TOKEN" in result.stderr


@pytest.mark.parametrize(
    ("address", "how"),
    [("127.0.0.1:0", "flag"), ("0.0.0.0:0", "flag"), ("0.0.0.0:0", "variable")],
)
async def test_the_token_is_required_and_checked(
    service: FakeService, tmp_path: Path, address: str, how: str
) -> None:
    import httpx2

    extra = ("--http-token", TOKEN) if how == "flag" else ()
    process, url = await _start_http(
        service, tmp_path, address, *extra, token_env=TOKEN if how == "variable" else None
    )
    try:
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
        json_headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        async with httpx2.AsyncClient() as http:
            for auth in (None, "Bearer wrong-token-0000000", f"Basic {TOKEN}", f"Bearer {TOKEN}x"):
                headers = dict(json_headers)
                if auth is not None:
                    headers["Authorization"] = auth
                answer = await http.post(url, headers=headers, content=body)
                assert answer.status_code == 401, auth
                assert answer.headers["WWW-Authenticate"].startswith("Bearer")
                assert TOKEN not in answer.text
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as authorized,
            streamable_http_client(url, http_client=authorized) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            names = [tool.name for tool in (await client.list_tools()).tools]
            assert names == list(TOOLS)
    finally:
        stderr = await _stop(process)
    assert TOKEN not in stderr
    assert RUN_KEY not in stderr


def test_a_short_or_misplaced_token_is_refused() -> None:
    env = {**os.environ, "ASYNCCLIENT_API_KEY": RUN_KEY, "ASYNCCLIENT_BASE_URL": "http://x"}
    for argv, words in [
        (["--http", "0", "--http-token", "short"], "too short"),
        (["--http-token", TOKEN], "--http-token goes with --http"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "asyncclient", "mcp", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert result.returncode == 2, result.stderr
        assert words in result.stderr


# --- re-runs in wait_for_runs -----------------------------------------------------------------


async def test_wait_for_runs_reruns_what_failed_and_marks_flaky_tests(tmp_path: Path) -> None:
    def web(test_id: str, **fields: Any) -> dict[str, Any]:
        return {"id": test_id, "project": "p_ci", "target": "web", "url": "https://x.example",
                "queuedSeconds": 1, "durationSeconds": 20, **fields}  # fmt: skip

    seed = {
        "projects": [{"id": "p_ci", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": RUN_KEY, "capability": "run", "projects": ["p_ci"]}],
        "tests": [
            web("t_pass"),
            web("t_flaky", flakyRuns=1),
            web("t_broken", outcome="failed"),
        ],
    }
    async with (
        FakeService(seed, speed=1000.0) as service,
        stdio_server(service, RUN_KEY, tmp_path) as (client, _),
    ):
        calls = Calls(client)
        started = await calls.ok("run_project", {"project_id": "p_ci"})
        waited = await calls.ok("wait_for_runs", {"run_ids": started["runIds"], "retry_failed": 2})
        refused = await calls.error(
            "wait_for_runs", {"run_ids": started["runIds"], "retry_failed": 11}
        )
        runs = {run.test.id: 0 for run in service.backend.runs.values()}
        for run in service.backend.runs.values():
            runs[run.test.id] += 1

    assert runs == {"t_pass": 1, "t_flaky": 2, "t_broken": 3}
    assert waited["done"] is True
    assert waited["summary"] == (
        "3 tests: 1 passed, 1 flaky (passed on attempt 2), 1 failed after 3 attempts"
    )
    (flaky,) = waited["flaky"]
    assert flaky.startswith("t_flaky passed on attempt 2 (earlier: j_")
    assert [v["testId"] for v in waited["notPassed"]] == ["t_broken"]
    assert len(waited["passed"]) == 2
    assert "retry_failed" in refused


async def test_bisect_finds_the_first_bad_build_within_its_budgets(tmp_path: Path) -> None:
    """bisect over the real stdio server against a seed with a regression: the first bad build
    and its confidence; the same key answers again with the same runs (none new); a budget
    beyond the tool's bound is refused before any run; the tool is not read-only."""
    from asyncclient.testing import regression_seed

    async with (
        FakeService(regression_seed(builds=16, broken_at=6), speed=6000.0) as shop,
        stdio_server(shop, "shop-run-key", tmp_path) as (client, _),
    ):
        tools = by_name((await client.list_tools()).tools)
        calls = Calls(client)
        args = {
            "project_id": "p_shop", "test_id": "t_checkout", "good": "ab_shop_000",
            "bad": "ab_shop_015", "idempotency_key": "agent-1",
        }  # fmt: skip
        found = await calls.ok("bisect", args)
        starts = len(shop.requests_for("run_test"))
        runs_before = len(shop.backend.run_store.runs)
        again = await calls.ok("bisect", args)
        runs_after = len(shop.backend.run_store.runs)
        too_much = await calls.error("bisect", {**args, "budget_minutes": 601})
        refused_starts = len(shop.requests_for("run_test"))
    assert (found["firstBad"], found["lastGood"]) == ("ab_shop_006", "ab_shop_005")
    assert found["confidence"] >= 0.95
    assert found["summary"].startswith("t_checkout first fails on ab_shop_006")
    assert found["runs"] == starts == sum(len(step["runs"]) for step in found["steps"])
    assert again["firstBad"] == "ab_shop_006"
    assert runs_after == runs_before  # asked again with its key: the same runs, none new
    assert "budget_minutes" in too_much
    assert refused_starts == 2 * starts
    annotations = tools["bisect"].annotations
    assert annotations is not None
    assert annotations.read_only_hint is False


async def test_exonerate_tells_a_pre_existing_failure_from_the_changes(tmp_path: Path) -> None:
    """exonerate over the real stdio server: a failure main's build has too is pre-existing,
    one it does not is the change's; more runs than the tool's bound are refused before any
    run; the tool is not read-only."""
    from asyncclient import AsyncSession
    from asyncclient.testing import baseline_seed

    async with (
        FakeService(baseline_seed(), speed=6000.0) as shop,
        stdio_server(shop, "shop-run-key", tmp_path) as (client, _),
        AsyncSession("shop-run-key", shop.url) as session,
    ):
        failed = {}
        for test in ("t_orders", "t_wishlist"):
            start = await session.run_test(test, build_id="ab_shop_change")
            await session.wait_for_runs([start.run_id], interval=0.02)
            failed[test] = start.run_id
        tools = by_name((await client.list_tools()).tools)
        calls = Calls(client)
        before = await calls.ok(
            "exonerate", {"run_id": failed["t_orders"], "baseline": "ab_shop_main"}
        )
        change = await calls.ok(
            "exonerate", {"run_id": failed["t_wishlist"], "baseline": "ab_shop_main"}
        )
        starts = len(shop.requests_for("run_test"))
        too_many = await calls.error(
            "exonerate", {"run_id": failed["t_orders"], "baseline": "ab_shop_main", "runs": 6}
        )
        refused_starts = len(shop.requests_for("run_test"))
    assert (before["state"], before["preExisting"]) == ("pre-existing", True)
    assert before["summary"].startswith("t_orders: fails on the baseline ab_shop_main too")
    assert (change["state"], change["preExisting"]) == ("new", False)
    assert "runs" in too_many
    assert refused_starts == starts
    annotations = tools["exonerate"].annotations
    assert annotations is not None
    assert annotations.read_only_hint is False
