"""`asyncclient builds`, `runs` and `endpoints`, and the global options, through the real entry
point against the emulator: output, --json shapes, exit codes and one-line errors."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from commands_support import (
    ANDROID_BUILD,
    HEADER_SECRET,
    PINNED_BUILD,
    closed_port,
    env_for,
    finished_run,
    library_message,
    seed,
    start_run,
)
from network_support import ServeEmulator

from asyncclient._core import _checks as checks
from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
RUN_STATUSES = "queued, running, passed, failed, blocked, inconclusive, error, cancelled"


@pytest.fixture
async def svc(serve_emulator: ServeEmulator) -> AsyncIterator[FakeService]:
    """The emulator in each wire dialect (the `dialect` fixture of tests/conftest.py)."""
    async with serve_emulator(seed(), clock="manual") as service:
        yield service


def one_error_line(stderr: str) -> str:
    """The single `error: ...` line a refused command prints (and nothing else)."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0][len("error: ") :]


# --- builds -------------------------------------------------------------------------------------


async def test_builds_list_prints_a_table_newest_first(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("builds", "list", "p_demo", env=env_for(svc))

    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "ID", "STATUS", "APP", "ID", "VERSION", "PLATFORM", "SIZE", "LABEL", "CREATED"
    ]  # fmt: skip
    assert len(lines) == 3
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {ANDROID_BUILD, PINNED_BUILD}
    android = rows[ANDROID_BUILD]
    # The service's own status word (READY, ready, ...), as it sent it.
    for cell in ("ready", "com.example.shop", "1.2.0 (120)", "android", "git-3f2a9c1"):
        assert cell in android.lower()
    # Plain text when piped: the columns line up.
    assert lines[0].index("STATUS") == android.lower().index("ready")
    assert [r.path for r in svc.requests] == ["/api/v1/projects/p_demo/builds"]


async def test_builds_list_json_is_the_wire_shape(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("builds", "list", "p_demo", "--json", env=env_for(svc))

    assert result.code == 0, result.stderr
    body = result.json()
    assert set(body) == {"builds", "maxBytes", "partBytes"}
    assert body["maxBytes"] == 4 * 1024**3
    assert body["partBytes"] == 8 * 1024**2
    build = next(b for b in body["builds"] if b["id"] == ANDROID_BUILD)
    assert {
        "id", "status", "fileName", "size", "platform", "appId", "appName", "version",
        "versionCode", "minOs", "abis", "warnings", "label", "createdAt", "readyAt",
    } <= set(build)  # fmt: skip
    assert build["status"].lower() == "ready"
    assert build["versionCode"] == "120"  # a number in some dialects: a string here
    assert build["abis"] == ["arm64-v8a", "x86_64"]
    assert ISO_MS.fullmatch(build["createdAt"])


async def test_builds_get_shows_fields_and_json(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("builds", "get", ANDROID_BUILD, env=env_for(svc))

    assert result.code == 0, result.stderr
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines() if " " in line)
    assert fields["id"] == ANDROID_BUILD
    assert fields["project"] == "p_demo"
    assert fields["status"].lower() == "ready"
    assert fields["platform"] == "android"
    assert re.fullmatch(r"[0-9a-f]{64}", fields["sha256"])

    result = await run_cli("builds", "get", ANDROID_BUILD, "--json", env=env_for(svc))
    assert result.code == 0, result.stderr
    build = result.json()["build"]
    assert build["id"] == ANDROID_BUILD
    assert build["projectId"] == "p_demo"
    assert build["sha256"] == fields["sha256"]


async def test_builds_delete_with_an_edit_key(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("builds", "delete", ANDROID_BUILD, env=env_for(svc, svc.edit_key))

    assert result.code == 0, result.stderr
    assert result.stdout == f"{ANDROID_BUILD}\n"
    assert result.stderr == f"deleted build {ANDROID_BUILD}\n"
    gone = await run_cli("builds", "get", ANDROID_BUILD, env=env_for(svc))
    assert gone.code == 3
    assert one_error_line(gone.stderr).startswith("404 not_found")


async def test_builds_delete_json(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli(
        "builds", "delete", ANDROID_BUILD, "--json", "-q", env=env_for(svc, svc.edit_key)
    )

    assert result.code == 0, result.stderr
    assert result.json() == {"id": ANDROID_BUILD, "ok": True}
    assert result.stderr == ""


async def test_builds_delete_needs_the_edit_capability(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("builds", "delete", ANDROID_BUILD, env=env_for(svc, svc.run_key))

    assert result.code == 3
    message = one_error_line(result.stderr)
    assert message.startswith("403 ")
    assert "needs a key that can also create and edit tests" in message
    assert "ASYNCCLIENT_API_KEY" in message
    assert result.stdout == ""
    still = await run_cli("builds", "get", ANDROID_BUILD, env=env_for(svc))
    assert still.code == 0


async def test_builds_delete_of_a_pinned_build_is_refused(
    svc: FakeService, run_cli: RunCli
) -> None:
    result = await run_cli("builds", "delete", PINNED_BUILD, env=env_for(svc, svc.edit_key))

    assert result.code == 3
    # 409, 400 or 422, as services choose; the message says why either way.
    assert re.match(
        r"(409|400|422) \w+: build \w+ is pinned by t_\w+", one_error_line(result.stderr)
    )


# --- runs ---------------------------------------------------------------------------------------


async def test_runs_list_passes_the_filters(svc: FakeService, run_cli: RunCli) -> None:
    failed = await start_run(svc, "t_checkout")
    passed = await start_run(svc, "t_search")
    svc.advance(3600)
    svc.reset_requests()

    result = await run_cli(
        "runs", "list", "--project", "p_demo", "--status", "FAILED", "--limit", "5",
        env=env_for(svc),
    )  # fmt: skip

    assert result.code == 0, result.stderr
    assert [(r.path, dict(r.query)) for r in svc.requests] == [
        ("/api/v1/runs", {"projectId": "p_demo", "status": "failed", "limit": "5"})
    ]
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "TEST", "TITLE", "STATUS", "MODE", "DURATION", "CREATED"]
    assert len(lines) == 2
    assert lines[1].split()[:2] == [failed, "t_checkout"]
    assert " failed " in lines[1]
    assert re.search(r" (\d+\.\d s|\d+ min \d\d s) ", lines[1])  # the duration, for people
    assert passed not in result.stdout

    for spelling in ("canceled", "stopped", "Cancelled"):
        other = await run_cli("runs", "list", "--status", spelling, "--json", env=env_for(svc))
        assert other.code == 0, other.stderr
        assert dict(svc.requests[-1].query) == {"status": "cancelled"}

    by_test = await run_cli("runs", "list", "--test", "t_search", "--json", env=env_for(svc))
    assert by_test.code == 0, by_test.stderr
    assert dict(svc.requests[-1].query) == {"testId": "t_search"}
    assert [r["id"] for r in by_test.json()["runs"]] == [passed]


async def test_runs_list_json_shape(svc: FakeService, run_cli: RunCli) -> None:
    run_id = await finished_run(svc, "t_search")

    result = await run_cli("runs", "list", "--json", env=env_for(svc))

    assert result.code == 0, result.stderr
    body = result.json()
    assert list(body) == ["runs"]
    (run,) = body["runs"]
    assert run["id"] == run_id
    assert run["testId"] == "t_search"
    assert run["testTitle"] == "Search the catalogue"
    assert run["status"] == "passed"
    assert run["mode"] == "cold"
    assert isinstance(run["durationMs"], int)
    assert ISO_MS.fullmatch(run["createdAt"])


async def test_runs_get_shows_verdict_reasons_captures_and_files(
    svc: FakeService, run_cli: RunCli
) -> None:
    run_id = await finished_run(svc, "t_checkout")

    result = await run_cli("runs", "get", run_id, env=env_for(svc))

    assert result.code == 0, result.stderr
    out = result.stdout
    assert re.search(r"^status +failed$", out, re.M)
    assert re.search(r"^final +yes$", out, re.M)
    assert re.search(r"^verdict +(failed|FAIL)$", out, re.M)
    assert re.search(
        r"^headline +The voucher was accepted but the total did not change\.$", out, re.M
    )
    assert re.search(r"^requirements +1 failed, 2 passed$", out, re.M)
    assert re.search(
        r"^ +failed - (r2 )?A voucher code reduces the total: The voucher SAVE10 from "
        r"create_voucher was accepted, but the total stayed \$42\.00 instead of \$37\.80\.$",
        out,
        re.M,
    )
    assert "The cart shows the added items" not in out  # passed checks are only counted
    assert re.search(r"^captures +voucher = SAVE10$", out, re.M)
    assert re.search(r"^ +total = \$42\.00$", out, re.M)
    assert re.search(r"^files +video\.mp4$", out, re.M)
    for n in range(1, 5):
        assert re.search(rf"^ +screenshots/0{n}\.png$", out, re.M)
    assert re.search(rf"^link +{re.escape(svc.url)}/runs/{run_id}$", out, re.M)
    # The build as an object (its app and version shown) or, in some dialects, its id alone.
    assert re.search(rf"^build +{ANDROID_BUILD}( com\.example\.shop 1\.2\.0 \(120\))?$", out, re.M)


async def test_runs_get_json_is_the_full_view(svc: FakeService, run_cli: RunCli) -> None:
    run_id = await finished_run(svc, "t_checkout")

    result = await run_cli("runs", "get", run_id, "--json", env=env_for(svc))

    assert result.code == 0, result.stderr
    body = result.json()
    assert list(body) == ["run"]
    run = body["run"]
    assert run["id"] == run_id
    assert run["final"] is True
    assert run["status"] == "failed"
    # The fields the spec leaves open as the service sent them, and read, in `summary`.
    summary = run["summary"]
    assert summary["outcome"] == "failed"
    assert summary["verdict"] in ("failed", "FAIL")
    assert [r["title"] or r["name"] for r in summary["failedRequirements"]] == [
        "A voucher code reduces the total"
    ]
    assert summary["failedRequirements"][0]["reason"].startswith("The voucher SAVE10")
    assert summary["captures"] == {"voucher": "SAVE10", "total": "$42.00", "order": "10023"}
    assert summary["files"][0].endswith("video.mp4")
    assert len(summary["files"]) == 5
    assert summary["buildId"] == ANDROID_BUILD
    assert ISO_MS.fullmatch(run["finishedAt"])


async def test_runs_get_of_a_run_in_progress(svc: FakeService, run_cli: RunCli) -> None:
    run_id = await start_run(svc, "t_search")

    result = await run_cli("runs", "get", run_id, env=env_for(svc))

    assert result.code == 0, result.stderr
    assert re.search(r"^status +queued$", result.stdout, re.M)
    assert re.search(
        r"^final +no \(verdict, results and files come once it ends\)$", result.stdout, re.M
    )
    assert not re.search(r"^(verdict|files) ", result.stdout, re.M)


async def test_runs_stop(svc: FakeService, run_cli: RunCli) -> None:
    run_id = await start_run(svc, "t_search")

    result = await run_cli("runs", "stop", run_id, env=env_for(svc))

    assert result.code == 0, result.stderr
    word = result.stdout.strip()  # the service's word for a stopped run
    assert word in ("cancelled", "stopped", "canceled")
    assert result.stderr == f"stopped run {run_id}: now {word}\n"
    again = await run_cli("runs", "stop", run_id, "--json", env=env_for(svc))
    assert again.code == 3
    assert one_error_line(again.stderr).startswith("409 invalid_state")


async def test_runs_stop_takes_several_runs_and_stops_all_it_can(
    svc: FakeService, run_cli: RunCli
) -> None:
    done = await finished_run(svc, "t_search")
    first, second = await start_run(svc, "t_search"), await start_run(svc, "t_login")

    result = await run_cli("runs", "stop", first, done, second, env=env_for(svc))

    assert result.code == 3  # the final run could not be stopped; the others were
    word = svc.dialect.run_statuses.get("cancelled", "cancelled")  # the service's word
    assert result.stdout.splitlines() == [f"{first}  {word}", f"{second}  {word}"]
    assert f"error: {done}: 409 invalid_state" in result.stderr
    assert "stopped 2 of 3 run(s)" in result.stderr
    third = await start_run(svc, "t_search")
    as_json = await run_cli("runs", "stop", third, first, "--json", env=env_for(svc))
    assert as_json.json() == {"runs": [{"id": third, "status": word}]}


async def test_runs_stop_json(svc: FakeService, run_cli: RunCli) -> None:
    run_id = await start_run(svc, "t_search")

    result = await run_cli("runs", "stop", run_id, "--json", env=env_for(svc))

    assert result.code == 0, result.stderr
    body = result.json()
    assert body["id"] == run_id
    assert body["status"] in ("cancelled", "stopped", "canceled")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--limit", "0"], "--limit 0 is out of range: give 1 to 200"),
        (["--limit", "201"], "--limit 201 is out of range: give 1 to 200"),
        (["--status", "done"], f"--status done is not a run status: use one of {RUN_STATUSES}"),
        (
            ["--project", "t_1"],
            library_message(checks.check_id, "project", "t_1", "--project"),
        ),
        (
            ["--test", "p_demo"],
            library_message(checks.check_id, "test", "p_demo", "--test"),
        ),
    ],
)
async def test_runs_list_refuses_bad_filters_before_sending(
    svc: FakeService, run_cli: RunCli, argv: list[str], message: str
) -> None:
    result = await run_cli("runs", "list", *argv, env=env_for(svc))

    assert result.code == 2
    assert one_error_line(result.stderr) == message
    assert result.stdout == ""
    assert svc.requests == []


# --- ids ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "kind", "value", "argument"),
    [
        (["builds", "list", "ab_1"], "project", "ab_1", "PROJECT_ID"),
        (["builds", "get", "j_1"], "build", "j_1", "BUILD_ID"),
        (["builds", "delete", "p_demo"], "build", "p_demo", "BUILD_ID"),
        (["runs", "get", "ab_1"], "run", "ab_1", "RUN_ID"),
        (["runs", "stop", "t_1"], "run", "t_1", "RUN_ID"),
        (["runs", "get", "j_"], "run", "j_", "RUN_ID"),
        (["runs", "get", "j_1/../x"], "run", "j_1/../x", "RUN_ID"),
        (["runs", "list", "--project", "demo"], "project", "demo", "--project"),
        (["download", "ab_1"], "run", "ab_1", "RUN_ID"),
        (["endpoints", "list", "ep_1"], "project", "ep_1", "PROJECT_ID"),
        (["endpoints", "delete", "p_demo"], "endpoint", "p_demo", "ENDPOINT_ID"),
        (["run", "test", "p_demo"], "test", "p_demo", "TEST_ID"),
        (["watch", "j_1", "t_2"], "run", "t_2", "RUN_ID"),
    ],
)
async def test_bad_ids_are_refused_before_sending(
    svc: FakeService, run_cli: RunCli, argv: list[str], kind: str, value: str, argument: str
) -> None:
    result = await run_cli(*argv, env=env_for(svc))

    assert result.code == 2
    # The library's own check, word for word, naming the argument to fix.
    assert one_error_line(result.stderr) == library_message(checks.check_id, kind, value, argument)
    assert argument in result.stderr
    assert svc.requests == []


# --- endpoints ----------------------------------------------------------------------------------


async def test_endpoints_list(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("endpoints", "list", "p_demo", env=env_for(svc))

    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "METHOD", "URL", "LAST", "USED"]
    assert lines[1].split() == [
        "ep_demo_voucher", "create_voucher", "POST",
        "https://shop.example.com/test-hooks/vouchers", "never",
    ]  # fmt: skip
    assert "demo-hook-secret" not in result.stdout + result.stderr


async def test_endpoints_list_json_shape(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli("endpoints", "list", "p_demo", "--json", env=env_for(svc))

    assert result.code == 0, result.stderr
    body = result.json()
    assert list(body) == ["endpoints"]
    (endpoint,) = body["endpoints"]
    assert set(endpoint) == {
        "id", "name", "description", "method", "url", "created_at", "last_used_at"
    }  # fmt: skip
    assert endpoint["id"] == "ep_demo_voucher"
    assert ISO_MS.fullmatch(endpoint["created_at"])
    assert endpoint["last_used_at"] is None
    assert "demo-hook-secret" not in result.stdout


async def test_endpoints_add_list_delete_never_shows_header_values(
    svc: FakeService, run_cli: RunCli
) -> None:
    edit = env_for(svc, svc.edit_key)
    result = await run_cli(
        "endpoints", "add", "p_demo", "--name", "reset_user",
        "--description", "Resets the test user; call it before a sign-up test.",
        "--url", "https://shop.example.com/test-hooks/reset", "--method", "delete",
        "--header", f"Authorization: {HEADER_SECRET}", "--header", "X-Env:staging",
        "--body-template", '{"user": "{{user}}"}', "--verbose",
        env=edit,
    )  # fmt: skip

    assert result.code == 0, result.stderr
    endpoint_id = result.stdout.strip()
    assert endpoint_id.startswith("ep_")
    assert f"added endpoint {endpoint_id} (reset_user, DELETE) with 2 header(s)" in result.stderr
    assert "POST /api/v1/projects/p_demo/endpoints" in result.stderr  # the --verbose request log
    assert "hdr-s3cret" not in result.stdout + result.stderr
    assert "staging" not in result.stdout + result.stderr
    stored = svc.backend.endpoints[endpoint_id]
    assert stored.method == "DELETE"
    assert stored.headers == {"Authorization": HEADER_SECRET, "X-Env": "staging"}
    assert stored.body_template == '{"user": "{{user}}"}'

    listed = await run_cli("endpoints", "list", "p_demo", "--json", "--verbose", env=edit)
    assert listed.code == 0, listed.stderr
    assert endpoint_id in [e["id"] for e in listed.json()["endpoints"]]
    assert "hdr-s3cret" not in listed.stdout + listed.stderr

    deleted = await run_cli("endpoints", "delete", endpoint_id, env=edit)
    assert deleted.code == 0, deleted.stderr
    assert deleted.stdout == f"{endpoint_id}\n"
    assert deleted.stderr == f"deleted endpoint {endpoint_id}\n"
    assert endpoint_id not in svc.backend.endpoints


async def test_endpoints_add_json(svc: FakeService, run_cli: RunCli) -> None:
    result = await run_cli(
        "endpoints", "add", "p_demo", "--name", "ping", "--description", "Pings the shop.",
        "--url", "https://shop.example.com/ping", "--json", "--quiet",
        env=env_for(svc, svc.edit_key),
    )  # fmt: skip

    assert result.code == 0, result.stderr
    body = result.json()
    assert list(body) == ["id"]
    assert svc.backend.endpoints[body["id"]].method == "POST"
    assert result.stderr == ""


async def test_endpoints_add_and_delete_need_the_edit_capability(
    svc: FakeService, run_cli: RunCli
) -> None:
    added = await run_cli(
        "endpoints", "add", "p_demo", "--name", "ping", "--description", "Pings the shop.",
        "--url", "https://shop.example.com/ping", "--header", f"X-Token: {HEADER_SECRET}",
        env=env_for(svc, svc.run_key),
    )  # fmt: skip
    deleted = await run_cli("endpoints", "delete", "ep_demo_voucher", env=env_for(svc))

    for result in (added, deleted):
        assert result.code == 3
        message = one_error_line(result.stderr)
        assert message.startswith("403 ")
        assert message.endswith(
            "; use a key that can also create and edit tests (--api-key or ASYNCCLIENT_API_KEY)"
        )
        assert "hdr-s3cret" not in result.stdout + result.stderr
    assert "ep_demo_voucher" in svc.backend.endpoints


_ADD_DEFAULTS: dict[str, Any] = {
    "--name": "create_voucher2",
    "--description": "Creates a voucher.",
    "--url": "https://shop.example.com/v",
}


def _add_args(**overrides: Any) -> list[str]:
    options = {**_ADD_DEFAULTS, **overrides}
    argv = ["endpoints", "add", "p_demo"]
    for flag, value in options.items():
        for one in value if isinstance(value, list) else [value]:
            argv += [flag, one]
    return argv


def _library_endpoint_message(overrides: dict[str, str]) -> str:
    """What the library's check_endpoint says about `endpoints add` with these flags."""
    options = {"--method": "POST", **_ADD_DEFAULTS, **overrides}
    return library_message(
        checks.check_endpoint,
        options["--name"],
        options["--description"],
        options["--url"],
        options["--method"],
        None,
        None,
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"--header": [HEADER_SECRET]},
            "--header number 1 has no colon: write it as 'Name: value'",
        ),
        (
            {"--header": ["X-Ok: 1", f"Bad Name: {HEADER_SECRET}"]},
            "--header number 2 has no valid name before its colon",
        ),
        (
            {"--header": [f": {HEADER_SECRET}"]},
            "--header number 1 has no valid name before its colon",
        ),
        (
            {"--header": ["X-Token: a", f"x-token: {HEADER_SECRET}"]},
            "--header x-token is given twice: give each header once",
        ),
        (
            {"--header": [f"X-H{i}: {HEADER_SECRET}" for i in range(21)]},
            "21 --header options: an endpoint may carry at most 20",
        ),
        *[
            (overrides, _library_endpoint_message(overrides))
            for overrides in (
                {"--name": "n" * 41},
                {"--name": ""},
                {"--description": "d" * 601},
                {"--description": ""},
                {"--url": "http://shop.example.com/v?token=abc"},
                {"--url": "https://"},
                {"--method": "TRACE"},
            )
        ],
    ],
)
async def test_endpoints_add_refuses_bad_input_before_sending(
    svc: FakeService, run_cli: RunCli, overrides: dict[str, Any], message: str
) -> None:
    result = await run_cli(*_add_args(**overrides), "--verbose", env=env_for(svc, svc.edit_key))

    assert result.code == 2
    # Field limits: the library's own check_endpoint, word for word; header syntax: the CLI's.
    assert one_error_line(result.stderr).startswith(message)
    assert "hdr-s3cret" not in result.stderr
    assert "token=abc" not in result.stderr
    assert svc.requests == []


async def test_endpoints_add_accepts_twenty_headers(svc: FakeService, run_cli: RunCli) -> None:
    headers = [f"X-H{i}: v{i}" for i in range(20)]

    result = await run_cli(*_add_args(**{"--header": headers}), env=env_for(svc, svc.edit_key))

    assert result.code == 0, result.stderr
    assert len(svc.backend.endpoints[result.stdout.strip()].headers) == 20


async def test_a_mistyped_flag_does_not_echo_what_follows(
    svc: FakeService, run_cli: RunCli
) -> None:
    result = await run_cli(
        *_add_args(), "--hedaer", f"Authorization: {HEADER_SECRET}", env=env_for(svc, svc.edit_key)
    )

    assert result.code == 2
    assert "unrecognized arguments: --hedaer (3 more value(s), not shown)" in result.stderr
    assert "hdr-s3cret" not in result.stderr
    assert svc.requests == []


# --- global options, keys, reachability --------------------------------------------------------


async def test_base_url_and_key_can_be_flags_after_the_command(
    svc: FakeService, run_cli: RunCli
) -> None:
    result = await run_cli(
        "builds", "list", "p_demo", "--base-url", svc.url, "--api-key", svc.run_key, "--json"
    )

    assert result.code == 0, result.stderr
    assert {b["id"] for b in result.json()["builds"]} == {ANDROID_BUILD, PINNED_BUILD}


async def test_missing_base_url_names_the_flag_and_the_variable(
    svc: FakeService, run_cli: RunCli
) -> None:
    result = await run_cli("runs", "list", env={"ASYNCCLIENT_API_KEY": svc.run_key})

    assert result.code == 2
    assert one_error_line(result.stderr).startswith(
        "no service address: pass --base-url or set ASYNCCLIENT_BASE_URL"
    )
    assert svc.requests == []


@pytest.mark.parametrize("where", ["flag", "variable"])
async def test_a_base_url_that_is_not_http_names_where_it_came_from(
    svc: FakeService, run_cli: RunCli, where: str
) -> None:
    env = {"ASYNCCLIENT_API_KEY": svc.run_key}
    argv = ["runs", "list"]
    if where == "flag":
        argv += ["--base-url", "ftp://files.example"]
    else:
        env["ASYNCCLIENT_BASE_URL"] = "ftp://files.example"

    result = await run_cli(*argv, env=env)

    assert result.code == 2
    source = "--base-url" if where == "flag" else "ASYNCCLIENT_BASE_URL"
    assert one_error_line(result.stderr) == (
        f"{source} ftp://files.example is not an http(s) address: give it as https://host[:port]"
    )


async def test_a_base_url_with_a_password_is_refused_and_the_password_never_shown(
    svc: FakeService, run_cli: RunCli
) -> None:
    url = svc.url.replace("://", "://ci:s3cret@")

    result = await run_cli("runs", "list", "--base-url", url, "--api-key", svc.run_key)

    assert result.code == 2
    assert "s3cret" not in result.stderr + result.stdout
    assert one_error_line(result.stderr).startswith("--base-url http://***@127.0.0.1:")
    assert "--api-key" in result.stderr
    assert svc.requests_for("list_runs") == []


async def test_missing_key_names_the_flag_and_the_variable(
    svc: FakeService, run_cli: RunCli
) -> None:
    result = await run_cli("builds", "list", "p_demo", env={"ASYNCCLIENT_BASE_URL": svc.url})

    assert result.code == 2
    assert one_error_line(result.stderr) == "no API key: set ASYNCCLIENT_API_KEY or pass --api-key"
    assert svc.requests == []


@pytest.mark.parametrize("where", ["flag", "variable"])
async def test_a_wrong_key_names_where_it_came_from_without_showing_it(
    svc: FakeService, run_cli: RunCli, where: str
) -> None:
    env = {"ASYNCCLIENT_BASE_URL": svc.url}
    argv = ["runs", "list", "--verbose"]
    if where == "flag":
        argv += ["--api-key", "wrong-k3y-value"]
    else:
        env["ASYNCCLIENT_API_KEY"] = "wrong-k3y-value"

    result = await run_cli(*argv, env=env)

    assert result.code == 3
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1
    assert re.match(r"error: (401|403) \w+", error_lines[0])
    if where == "flag":
        assert error_lines[0].endswith("; check the key given with --api-key")
        assert "ASYNCCLIENT_API_KEY" not in error_lines[0]
    else:
        assert error_lines[0].endswith("; check the key in ASYNCCLIENT_API_KEY")
        assert "--api-key" not in error_lines[0]
    assert "wrong-k3y-value" not in result.stdout + result.stderr
    assert len(svc.requests) == 1  # not retried


async def test_the_flag_wins_over_the_variable_and_is_the_one_named(
    svc: FakeService, run_cli: RunCli
) -> None:
    env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key}

    result = await run_cli("runs", "list", "--api-key", "wrong-k3y-value", env=env)

    assert result.code == 3
    assert one_error_line(result.stderr).endswith("; check the key given with --api-key")


async def test_the_api_key_never_appears_in_verbose_output(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    env = {"ASYNCCLIENT_BASE_URL": svc.url}
    key = ["--api-key", svc.run_key]
    results = [
        await run_cli("--verbose", *key, "runs", "get", run_id, env=env),
        await run_cli("runs", "list", "--json", "--verbose", *key, env=env),
        await run_cli("builds", "list", "p_demo", "--verbose", *key, env=env),
        await run_cli("endpoints", "list", "p_demo", "--verbose", *key, env=env),
        await run_cli("download", run_id, "video.mp4", "-o", str(tmp_path), "-v", *key, env=env),
    ]

    for result in results:
        assert result.code == 0, result.stderr
        assert "GET /api/v1/" in result.stderr  # the request log is on
        assert svc.run_key not in result.stdout + result.stderr


async def test_an_unknown_host_says_its_name_could_not_be_resolved(
    run_cli: RunCli, waits: list[float]
) -> None:
    # .invalid never resolves (RFC 6761): every command, and the watcher, say the same.
    env = {"ASYNCCLIENT_BASE_URL": "http://nosuch.invalid", "ASYNCCLIENT_API_KEY": "k"}
    for argv in (["builds", "list", "p_demo"], ["watch", "j_1", "--interval", "0.001"]):
        result = await run_cli(*argv, env=env)

        assert result.code == 4, result.stderr
        message = one_error_line(result.stderr)
        assert message.startswith(
            "cannot connect to nosuch.invalid:80 (the host name could not be resolved)"
        )
        assert "unknown error" not in message.lower()


async def test_an_unreachable_service_exits_4(run_cli: RunCli, waits: list[float]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    result = await run_cli(
        "builds", "list", "p_demo", env={"ASYNCCLIENT_BASE_URL": url, "ASYNCCLIENT_API_KEY": "k"}
    )

    assert result.code == 4
    said, error = result.stderr.splitlines()  # said once while it waited, then the error
    assert said.startswith("service unreachable since ")
    assert said.endswith(": connection refused (GET /api/v1/projects/p_demo/builds); calls are "
                         "retried for up to 30 s")  # fmt: skip
    assert error.startswith("error: cannot connect to 127.0.0.1:")
    # The waits reach the deadline; the attempts' own time (longer on a busy machine) adds.
    retried = re.search(r"retried for (\d+\.\d) s \(retry deadline\)", error)
    assert retried is not None, error
    assert 30.0 <= float(retried.group(1)) < 90.0
    assert "check --base-url or ASYNCCLIENT_BASE_URL and that the service is up" in error
    assert result.stdout == ""
    # A refused connection is retried until the retry deadline (without sleeping here).
    assert 25.0 <= sum(waits) <= 30.0 + 1e-9  # the deadline less the attempts' own time


HELP_COMMANDS = [
    ["builds"], ["builds", "list"], ["builds", "get"], ["builds", "delete"],
    ["runs"], ["runs", "list"], ["runs", "get"], ["runs", "stop"],
    ["download"],
    ["endpoints"], ["endpoints", "list"], ["endpoints", "add"], ["endpoints", "delete"],
]  # fmt: skip


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=" ".join)
async def test_every_help_has_examples(run_cli: RunCli, command: list[str]) -> None:
    result = await run_cli(*command, "--help")

    assert result.code == 0
    examples = result.stdout.split("examples:\n", 1)[1]
    assert f"asyncclient {' '.join(command)}" in examples


def _console_script() -> list[str]:
    script = Path(sys.executable).with_name("asyncclient")
    return [str(script)] if script.exists() else [sys.executable, "-m", "asyncclient"]


async def test_the_installed_command_runs_in_a_subprocess(svc: FakeService) -> None:
    env = {**os.environ, **env_for(svc)}
    process = await asyncio.create_subprocess_exec(
        *_console_script(), "builds", "list", "p_demo", "--json",
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await process.communicate()

    assert process.returncode == 0, stderr.decode()
    assert {b["id"] for b in json.loads(stdout)["builds"]} == {ANDROID_BUILD, PINNED_BUILD}

    process = await asyncio.create_subprocess_exec(
        *_console_script(), "--help", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, _ = await process.communicate()
    assert process.returncode == 0
    for command in ("builds", "runs", "download", "endpoints"):
        assert re.search(rf"^    {command} ", stdout.decode(), re.M)


def test_help_does_not_import_aiohttp_or_rich() -> None:
    code = (
        "import sys\n"
        "from asyncclient.cli import build_parser\n"
        "build_parser().format_help()\n"
        "print(sorted(m for m in ('aiohttp', 'rich', 'asyncclient._client._session')\n"
        "             if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


# --- global options between a group and its command ---------------------------------------------

# One command of each group, and the key its --json answer carries.
GROUP_COMMANDS = {
    "builds": (["builds", "list", "p_demo"], "builds"),
    "runs": (["runs", "list"], "runs"),
    "endpoints": (["endpoints", "list", "p_demo"], "endpoints"),
    "run": (["run", "project", "p_demo"], "started"),
}


@pytest.mark.parametrize("position", ["before the group", "between", "after the command"])
@pytest.mark.parametrize("group", list(GROUP_COMMANDS))
async def test_global_options_work_before_between_and_after(
    svc: FakeService, run_cli: RunCli, group: str, position: str
) -> None:
    (name, command, *rest), key = GROUP_COMMANDS[group]
    options = ["--json", "-q", "--base-url", svc.url, "--api-key", svc.run_key]
    argv = {
        "before the group": [*options, name, command, *rest],
        "between": [name, *options, command, *rest],
        "after the command": [name, command, *rest, *options],
    }[position]

    result = await run_cli(*argv)  # no environment: only the flags say where and with what key

    assert result.code == 0, result.stderr
    assert key in result.json()
    assert result.stderr == ""  # --quiet took effect too


async def test_global_options_can_be_spread_over_every_position(
    svc: FakeService, run_cli: RunCli
) -> None:
    result = await run_cli(
        "--base-url", svc.url, "builds", "--json", "-v", "list", "p_demo", "--api-key", svc.run_key
    )  # fmt: skip

    assert result.code == 0, result.stderr
    assert {b["id"] for b in result.json()["builds"]} == {ANDROID_BUILD, PINNED_BUILD}
    assert "GET /api/v1/projects/p_demo/builds" in result.stderr  # -v, given between


# --- what --json is said to be ------------------------------------------------------------------

JSON_PROMISE = (
    "the service's field names (camelCase; snake_case for the endpoint list), every field "
    "present, null when the service did not send it"
)


def _every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    from asyncclient.cli import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []
    todo = [("asyncclient", build_parser())]
    while todo:
        name, parser = todo.pop()
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    return found


def test_every_help_says_precisely_what_json_output_is() -> None:
    parsers = _every_parser()
    assert len(parsers) > 20

    from asyncclient.cli._common import BriefHelp

    for name, parser in parsers:
        if issubclass(parser.formatter_class, BriefHelp):  # --help-all shows --json
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
        text = " ".join(parser.format_help().split())
        assert "own JSON" not in text, name
        assert "service's JSON" not in text, name
        if any("--json" in action.option_strings for action in parser._actions):
            assert JSON_PROMISE in text, name


async def test_json_output_has_every_field_null_when_not_sent(
    svc: FakeService, run_cli: RunCli
) -> None:
    result = await run_cli("builds", "list", "p_demo", "--json", env=env_for(svc))

    assert result.code == 0, result.stderr
    build = next(b for b in result.json()["builds"] if b["id"] == ANDROID_BUILD)
    # The list view does not send projectId or sha256 (only `builds get` does): present, null.
    assert build["projectId"] is None
    assert build["sha256"] is None


# --- a reader that goes away --------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="a pipe without a reader is POSIX here")
@pytest.mark.parametrize("command", ["runs list --json", "runs list", "download"])
async def test_a_closed_stdout_exits_141_without_a_word(
    svc: FakeService, command: str, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    argv = command.split() if command != "download" else ["download", run_id, "-o", str(tmp_path)]
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -0`: the reader is gone before the first line
    try:
        process = await asyncio.create_subprocess_exec(
            *_console_script(), *argv,
            env={**os.environ, **env_for(svc)}, stdout=write_end, stderr=subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(write_end)
    _, stderr = await process.communicate()

    assert process.returncode == 141, stderr.decode()
    assert stderr == b""  # no "error: Broken pipe", no "Exception ignored" at exit
    assert svc.requests  # the command did its work; only its output had nowhere to go


def test_other_local_os_errors_exit_5_with_their_message() -> None:
    from asyncclient.cli._common import describe_error, is_broken_pipe

    denied = PermissionError(13, "Permission denied", "/srv/out")
    assert describe_error(denied) == (
        "Permission denied (/srv/out): fix it and run the same command again",
        5,
    )
    assert not is_broken_pipe(denied)
    assert is_broken_pipe(BrokenPipeError(32, "Broken pipe"))
    assert is_broken_pipe(ExceptionGroup("tasks", [ValueError(), BrokenPipeError()]))


# --- durations ----------------------------------------------------------------------------------


async def test_a_duration_reads_the_same_in_every_view(svc: FakeService, run_cli: RunCli) -> None:
    from asyncclient import _reports

    run_id = await finished_run(svc, "t_checkout")
    env = env_for(svc)

    as_json = await run_cli("runs", "get", run_id, "--json", env=env)
    got = await run_cli("runs", "get", run_id, env=env)
    listed = await run_cli("runs", "list", env=env)
    watched = await run_cli("watch", run_id, "--interval", "0.01", env=env)

    duration = _reports.format_duration(as_json.json()["run"]["durationMs"] / 1000)
    assert re.fullmatch(r"\d+\.\d s|\d+ min \d\d s", duration)
    assert re.search(rf"^duration +{re.escape(duration)}$", got.stdout, re.M), got.stdout
    assert f"  {duration}  " in listed.stdout.splitlines()[1]
    assert watched.stdout.splitlines()[0].endswith(f"({duration})")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (0.0, "0.0 s"),
        (12.34, "12.3 s"),
        (59.94, "59.9 s"),
        (59.96, "1 min 00 s"),
        (90.0, "1 min 30 s"),
        (3599.4, "59 min 59 s"),
        (3725.0, "1 h 02 min"),
        (90061.0, "25 h 01 min"),
    ],
)
def test_the_one_duration_format(seconds: float | None, text: str) -> None:
    from asyncclient import _reports
    from asyncclient.cli import _common as cli_common

    assert _reports.format_duration(seconds) == text
    assert not hasattr(cli_common, "format_duration")  # one format, not two
