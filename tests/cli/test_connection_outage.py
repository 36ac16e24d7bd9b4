"""The command line while the service is away, and the request id on its error line."""

from __future__ import annotations

import re
import socket
from typing import Any

from asyncclient.testing import FakeService, recorded_retry_waits


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_the_cli_says_once_that_it_waits_for_the_service(run_cli: Any) -> None:
    port = free_port()
    with recorded_retry_waits():
        result = await run_cli(
            "builds", "list", "p_demo", "--retry-deadline", "12",
            env={"ASYNCCLIENT_BASE_URL": f"http://127.0.0.1:{port}", "ASYNCCLIENT_API_KEY": "k"},
        )  # fmt: skip
    assert result.code == 4
    lines = result.stderr.splitlines()
    # Said once, when the service has been away for the threshold (2 s), with what fails.
    assert re.fullmatch(
        r"service unreachable since \d\d:\d\d:\d\d \(\d+\.\d s so far\): connection refused "
        r"\(GET /api/v1/projects/p_demo/builds\); calls are retried for up to 12 s",
        lines[0],
    ), lines[0]
    assert lines[1].startswith("error: cannot connect to")
    # The waits reach the deadline; the attempts' own time (longer on a busy machine) adds.
    retried = re.search(r"retried for (\d+\.\d) s \(retry deadline\)", lines[1])
    assert retried is not None, lines[1]
    assert 12.0 <= float(retried.group(1)) < 60.0
    assert len(lines) == 2


async def test_the_cli_error_line_carries_the_request_id(run_cli: Any) -> None:
    async with FakeService() as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key}
        result = await run_cli("builds", "get", "ab_nope", env=env)
        (record,) = svc.requests_for("get_build")
    assert result.code == 3
    assert f"(request id {record.request_id})" in result.stderr
