"""A service that runs for days (tests/long_lived_client.py, in a Python of its own, against
`asyncclient serve` answering a few per cent 500 or 503 and dropping a few per cent of the
connections): quiet without logging set up, one retry record per retry at DEBUG and no
warning for blips, memory, descriptors and tasks flat over 20,000 calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from network_support import read_serve_info

# Real processes (a client and `asyncclient serve`): run on the README's Python only, as the
# other many-process tests (the behaviour is the library's own Python on every interpreter).
# The slow tier (pytest -m slow): thousands of calls through real processes.
pytestmark = [pytest.mark.processes, pytest.mark.slow]

CLIENT = Path(__file__).parents[1] / "long_lived_client.py"
ROOT = CLIENT.parent.parent


@pytest.fixture
async def faulty() -> AsyncIterator[dict[str, Any]]:
    """`asyncclient serve` with 3% 500/503 (Retry-After 0) and 2% dropped connections."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "serve", "--port", "0", "--json",
        "--error-rate", "0.03", "--drop-rate", "0.02", "--retry-after", "0",
        "--fault-seed", "7",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        info = await read_serve_info(proc)
        yield {"url": info["baseUrl"], "key": "demo-run"}
    finally:
        proc.terminate()
        await proc.wait()


def run_client(service: dict[str, Any], calls: int, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CLIENT), service["url"], service["key"], str(calls), mode],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )


def served(service: dict[str, Any]) -> int:
    with urllib.request.urlopen(service["url"] + "/_emulator/stats") as answer:
        stats = json.load(answer)
    return int(stats["requests"]["list_builds"])


async def test_without_logging_set_up_2000_calls_with_faults_say_nothing(
    faulty: dict[str, Any],
) -> None:
    result = await asyncio.to_thread(run_client, faulty, 2000, "quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "2000"]
    assert result.stderr == ""  # no logging.lastResort line: the library's NullHandler
    assert served(faulty) > 2050  # the faults were met (and retried)


async def test_at_debug_each_retry_is_one_record_and_a_blip_no_warning(
    faulty: dict[str, Any],
) -> None:
    result = await asyncio.to_thread(run_client, faulty, 2000, "debug")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["levels"] == ["DEBUG"]  # no WARNING (nor INFO) for isolated faults
    failed = [r for r in summary["requests"] if r["error"] is not None]
    retries = summary["retries"]
    assert len(retries) == len(failed) > 40  # one retry record per failed attempt
    assert len(summary["requests"]) == 2000 + len(retries)
    for record in retries:
        assert record["logger"] == "asyncclient.retries"
        assert record["operation"] == "list_builds"
        assert record["attempt"] >= 1
        assert isinstance(record["wait"], float)
        assert (record["http_status"] is None) != (record["error"] is None)
        if record["http_status"] is not None:
            assert record["http_status"] in (500, 503)
            assert str(record["request_id"]).startswith("req_")
        else:
            assert record["error"].startswith("aiohttp.")
    assert {"asyncclient.requests", "asyncclient.retries"} <= set(summary["loggers"])
    assert served(faulty) == len(summary["requests"])


@pytest.mark.slow
async def test_20000_calls_with_faults_keep_memory_descriptors_and_tasks_flat(
    faulty: dict[str, Any],
) -> None:
    result = await asyncio.to_thread(run_client, faulty, 20_000, "soak")
    assert result.returncode == 0, result.stderr
    soak = json.loads(result.stdout)
    samples = soak["samples"]
    assert [s["calls"] for s in samples][-1] == 20_000
    warm = samples[1]  # after 4,000 calls: pools, caches and the allocator's arenas are made
    last = samples[-1]
    grown = last["rssKib"] - warm["rssKib"]
    assert grown < 3 * 1024, samples  # flat: not a few bytes per call (20,000 x 150 B = 3 MB)
    assert {s["tasks"] for s in samples} == {1}  # only the main task between batches
    assert max(s["fds"] for s in samples) <= soak["idleFds"] + 16  # the pool's connections
    assert soak["closedFds"] == soak["idleFds"]
