"""A job's trace and metrics, as a fleet's backend receives them: the command, configured only
by the standard OTEL_* variables, sends them through the real OTLP exporter (HTTP/protobuf) to
a receiver in the test that decodes them with OpenTelemetry's own protobuf package.

The span tree (job, a test each, a run each under its test), every attribute by its
convention's name, the requests under the run they served, the trace id in --json and the
summary, low-cardinality metric points; and a dead collector changing nothing but one line.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from aiohttp import web
from otlp_support import Receiver, otlp_receiver
from spend_support import FAST, SPEED, env_of, seed, upload

from asyncclient.testing import FakeService
from asyncclient.testing.builders import build_apk

RunCli = Callable[..., Awaitable[Any]]

GITHUB = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_WORKFLOW": "e2e",
    "GITHUB_RUN_ID": "9001",
    "GITHUB_RUN_NUMBER": "77",
    "GITHUB_JOB": "devices",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/shop",
    "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
    "GITHUB_REF": "refs/pull/17/merge",
    "GITHUB_HEAD_REF": "feature/\x1b[31mred",
}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with otlp_receiver() as found:
        yield found


def otel_env(endpoint: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=secret-team-key",
        "OTEL_SERVICE_NAME": "shop-e2e",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=ci",
    }


TESTS = {
    "t_flaky": {"title": "Flaky", "durationSeconds": 15, "flakyRuns": 1},
    "t_quarantined": {"title": "Known", "outcome": "failed", "durationSeconds": 10},
}


async def _job(run_cli: RunCli, tmp_path: Path, svc: FakeService, extra_env: dict[str, str]) -> Any:
    """Job 1 passes t_pass on a build; job 2, on the same bytes uploaded again, reuses it, re-runs
    t_flaky (passes) and t_broken (fails again), and quarantines t_quarantined."""
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    quarantine = tmp_path / "quarantine.toml"
    quarantine.write_text(
        '[[quarantine]]\ntest = "t_quarantined"\nreason = "known"\nuntil = 2099-01-01\n'
    )
    env = env_of(svc)
    first = await upload(run_cli, svc, apk)
    earlier = await run_cli("run", "test", "t_pass", "--build", first, "--wait", *FAST, env=env)
    assert earlier.code == 0, earlier.stderr
    again = await upload(run_cli, svc, apk)
    with svc.hold("t_pass"):  # queued until reuse stops it, however slow the machine
        return await run_cli(
            "run", "project", "p_dt", "--build", again, "--wait", "--json",
            "--reuse-passed", "7", "--retry-failed", "1", "--quarantine", str(quarantine),
            "--download-failed", str(tmp_path / "evidence"), *FAST,
            env={**env, **GITHUB, **extra_env},
        )  # fmt: skip


async def test_a_jobs_trace_reaches_an_otlp_receiver_as_one_tree_by_the_conventions(
    run_cli: RunCli, tmp_path: Path, receiver: Receiver
) -> None:
    async with FakeService(seed(**TESTS), speed=SPEED) as svc:
        job = await _job(run_cli, tmp_path, svc, otel_env(receiver.url))
    assert job.code == 1, job.stderr  # t_broken failed
    assert "warning" not in job.stderr, job.stderr
    (root,) = receiver.named("asyncclient.job")
    assert root.parent_id == ""
    # The trace id, in --json and the summary, is the job's.
    entries = {entry["testId"]: entry for entry in job.json()}
    assert {entry["traceId"] for entry in entries.values()} == {root.trace_id}
    assert f"trace {root.trace_id}" in job.stderr.splitlines()
    assert {span.trace_id for span in receiver.spans} == {root.trace_id}
    # The job: the test conventions, the CI's pipeline and the change, sanitised.
    attributes = root.attributes
    assert attributes["test.suite.name"] == "p_dt"
    assert attributes["test.suite.run.status"] == "failure"
    assert attributes["cicd.pipeline.name"] == "e2e"
    assert attributes["cicd.pipeline.run.id"] == "9001"
    assert attributes["cicd.pipeline.run.url.full"] == (
        "https://github.com/acme/shop/actions/runs/9001"
    )
    assert attributes["cicd.pipeline.task.name"] == "devices"
    assert attributes["vcs.repository.url.full"] == "https://github.com/acme/shop"
    assert attributes["vcs.ref.head.name"] == "feature/\\x1b[31mred"
    assert attributes["vcs.ref.head.revision"] == GITHUB["GITHUB_SHA"]
    assert attributes["vcs.change.id"] == "17"
    assert attributes["asyncclient.project.id"] == "p_dt"
    assert (attributes["asyncclient.tests"], attributes["asyncclient.tests.failed"]) == (4, 2)
    assert attributes["asyncclient.tests.flaky"] == 1
    assert root.status == 2  # STATUS_CODE_ERROR
    resource = receiver.resources[0]
    assert resource["service.name"] == "shop-e2e"
    assert resource["deployment.environment.name"] == "ci"
    # A span per test, under the job, by the test conventions.
    tests = {span.attributes["test.case.name"]: span for span in receiver.children(root)
             if span.name == "asyncclient.test"}  # fmt: skip
    assert set(tests) == {"t_pass", "t_broken", "t_flaky", "t_quarantined"}
    statuses = {name: span.attributes["test.case.result.status"] for name, span in tests.items()}
    assert statuses == {"t_pass": "pass", "t_flaky": "pass", "t_broken": "fail",
                        "t_quarantined": "fail"}  # fmt: skip
    assert tests["t_flaky"].attributes["asyncclient.test.flaky"] is True
    assert tests["t_flaky"].attributes["asyncclient.test.attempts"] == 2
    assert tests["t_pass"].attributes["asyncclient.test.reused"] is True
    assert tests["t_quarantined"].attributes["asyncclient.test.quarantined"] is True
    assert tests["t_broken"].attributes["asyncclient.failure.cause"]
    assert tests["t_broken"].attributes["asyncclient.failure.kind"] == "app"
    # A run each under its test: its status, mode, kind, queue and device seconds, link.
    runs = {name: receiver.children(span, "asyncclient.run") for name, span in tests.items()}
    assert {name: len(found) for name, found in runs.items()} == {
        "t_pass": 1, "t_broken": 2, "t_flaky": 2, "t_quarantined": 2
    }  # fmt: skip
    kinds = sorted(run.attributes["asyncclient.run.kind"] for run in runs["t_flaky"])
    assert kinds == ["rerun", "run"]
    passed = next(r for r in runs["t_flaky"] if r.attributes["asyncclient.run.status"] == "passed")
    assert passed.attributes["asyncclient.run.device.seconds"] == pytest.approx(15, abs=1)
    assert passed.attributes["asyncclient.run.mode"] == entries["t_flaky"]["mode"]
    assert passed.attributes["asyncclient.run.outcome"] == "passed"
    assert passed.attributes["asyncclient.run.queue.seconds"] >= 0
    assert passed.attributes["asyncclient.run.link"].startswith("http")
    assert "?" not in passed.attributes["asyncclient.run.link"]
    # The requests under the run they served: reuse's stop of t_pass's run, the evidence of
    # t_broken's runs; a re-run's start under its test; the batched polls under the job.
    (reused,) = runs["t_pass"]
    assert reused.attributes["asyncclient.run.reused"] is True
    assert [s.name for s in receiver.children(reused)] == ["asyncclient.stop_run"]
    for run in runs["t_broken"]:
        downloads = receiver.children(run, "asyncclient.download_run_file")
        assert downloads, run.attributes
        assert all(receiver.children(d, "GET") for d in downloads)
    assert [s.name for s in receiver.children(tests["t_flaky"])].count("asyncclient.run_test") == 1
    for name, span in tests.items():  # each test's history, read once, under the test
        reads = receiver.children(span, "asyncclient.list_runs")
        assert len(reads) == 1, name
        assert reads[0].attributes["asyncclient.test_id"] == name
    polls = [s for s in receiver.named("asyncclient.list_runs") if "," in
             next((c.attributes["url.full"] for c in receiver.children(s)), "")]  # fmt: skip
    assert polls
    assert all(poll.parent_id == root.span_id for poll in polls)
    start = receiver.children(root, "asyncclient.run_project")
    assert len(start) == 1
    # No key, header or signature anywhere in what was sent.
    sent = json.dumps([attrs.asdict(s) for s in receiver.spans])
    for secret in ("dt-run", "secret-team-key", "X-Signature", "signature="):
        assert secret not in sent


async def test_the_metrics_carry_only_low_cardinality_attributes(
    run_cli: RunCli, tmp_path: Path, receiver: Receiver
) -> None:
    async with FakeService(seed(**TESTS), speed=SPEED) as svc:
        job = await _job(run_cli, tmp_path, svc, otel_env(receiver.url))
    assert job.code == 1, job.stderr
    names = {(name, unit) for name, unit, _, _ in receiver.points}
    for expected in (
        ("asyncclient.device.time", "s"),
        ("asyncclient.rerun.device.time", "s"),
        ("asyncclient.run.queue.duration", "s"),
        ("asyncclient.runs", "{run}"),
        ("asyncclient.tests", "{test}"),
        ("asyncclient.job.failed_tests", "{test}"),
        ("asyncclient.job.flaky_tests", "{test}"),
        ("asyncclient.jobs", "{job}"),
        ("asyncclient.job.duration", "s"),
        ("http.client.request.duration", "s"),
    ):
        assert expected in names
    allowed = {
        "asyncclient.project.id", "cicd.pipeline.name", "asyncclient.run.kind",
        "asyncclient.run.mode", "asyncclient.run.outcome", "asyncclient.test.outcome",
        "test.suite.run.status", "asyncclient.test.quarantined",
    }  # fmt: skip
    ours = [p for p in receiver.points if p[0].startswith("asyncclient.") and
            not p[0].startswith("asyncclient.client.")]  # fmt: skip
    for name, _, attributes, _ in ours:
        assert set(attributes) <= allowed, (name, attributes)
        assert attributes["asyncclient.project.id"] == "p_dt"
        assert attributes["cicd.pipeline.name"] == "e2e"

    def total(name: str, **where: str | bool) -> float:
        return sum(
            value
            for found, _, attributes, value in receiver.points
            if found == name
            and all(attributes.get(f"asyncclient.{k.replace('_', '.')}") is v
                    if isinstance(v, bool) else
                    attributes.get(f"asyncclient.{k.replace('_', '.')}") == v
                    for k, v in where.items())
        )  # fmt: skip

    assert total("asyncclient.tests", test_outcome="flaky") == 1
    assert total("asyncclient.tests", test_outcome="failed") == 2
    assert total("asyncclient.tests", test_outcome="failed", test_quarantined=True) == 1
    assert total("asyncclient.job.failed_tests") == 2
    assert total("asyncclient.jobs") == 1
    # t_broken and t_quarantined 10 s twice, t_flaky 15 s twice; the reused run: none.
    assert total("asyncclient.device.time") == pytest.approx(70, abs=3)
    assert total("asyncclient.rerun.device.time") == pytest.approx(35, abs=2)
    assert total("asyncclient.runs") == 6
    # The job's span says the same as its metrics (one definition of re-run device time).
    (root,) = receiver.named("asyncclient.job")
    assert root.attributes["asyncclient.rerun.device.seconds"] == pytest.approx(
        total("asyncclient.rerun.device.time"), abs=0.01
    )
    assert root.attributes["asyncclient.device.seconds"] == pytest.approx(
        total("asyncclient.device.time"), abs=0.01
    )


@pytest.fixture
async def black_hole() -> AsyncIterator[int]:
    """A port that takes connections and never answers (a collector that hangs)."""
    held: list[asyncio.StreamWriter] = []

    async def take(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(take, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("collector", ["refused", "hangs"])
async def test_a_dead_collector_changes_nothing_but_one_warning_line(
    run_cli: RunCli, tmp_path: Path, black_hole: int, collector: str
) -> None:
    """The job with its collector gone (a port nothing listens on) or hanging (it takes the
    connection, never answers): the exit code and the --json verdicts are the job's, one
    warning line, no traceback, no secret. A hanging one is given up after EXPORT_BOUND
    (the exporter alone would wait its 10 s timeout, then retry)."""
    port = _closed_port() if collector == "refused" else black_hole
    # The exporter's own give-up (8 s) comes after EXPORT_BOUND, and bounds the wait below.
    env = {**otel_env(f"http://127.0.0.1:{port}"), "OTEL_EXPORTER_OTLP_TIMEOUT": "8"}
    async with FakeService(seed(**TESTS), speed=SPEED) as svc:
        job = await _job(run_cli, tmp_path, svc, env)
    # The command's exit leaves the exporters retrying in a thread; a test process outlives
    # it, so wait for it: its retries draw on `random`, which a later hypothesis test checks.
    for thread in threading.enumerate():
        if thread.name == "asyncclient-otel-exit":
            await asyncio.to_thread(thread.join, 60)
            assert not thread.is_alive()
    assert job.code == 1, job.stderr
    verdicts = {e["testId"]: (e["status"], e.get("flaky"), e.get("quarantined"))
                for e in job.json()}  # fmt: skip
    assert verdicts == {
        "t_pass": ("cancelled", False, False),  # stopped: reused
        "t_broken": ("failed", False, False),
        "t_flaky": ("passed", True, False),
        "t_quarantined": ("failed", False, True),
    }
    warnings = [line for line in job.stderr.splitlines() if "opentelemetry" in line.lower()]
    assert len(warnings) == 1, job.stderr
    assert [line for line in job.stderr.splitlines() if line.startswith("warning")] == warnings
    assert warnings[0].startswith("warning: the job's OpenTelemetry data could not all be")
    assert f"http://127.0.0.1:{port}/v1/traces" in warnings[0]
    said = (
        "(no answer within 4.5 s)"
        if collector == "hangs"
        else "(the collector could not be reached)"
    )
    assert said in warnings[0]
    assert "Traceback" not in job.stderr
    assert "secret-team-key" not in job.stderr


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_console_exporter_writes_on_stderr_and_leaves_stdout_to_the_answer(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """OTEL_TRACES_EXPORTER=console: the spans on stderr, --json on stdout still one JSON
    document (a CI step that pipes it keeps working)."""
    async with FakeService(seed(), speed=SPEED) as svc:
        env = env_of(svc)
        build = await upload(run_cli, svc, build_apk(tmp_path / "shop.apk", version_code=7))
        job = await run_cli(
            "run", "test", "t_pass", "--build", build, "--wait", "--json", *FAST,
            env={**env, "OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"},
        )  # fmt: skip
    assert job.code == 0, job.stderr
    (entry,) = job.json()
    assert '"name": "asyncclient.job"' in job.stderr
    assert entry["traceId"] in job.stderr.replace("0x", "")


@pytest.fixture
async def flooding_collector() -> AsyncIterator[tuple[int, list[int]]]:
    """A collector that answers each export with 256 MiB (its status first: 200), and counts
    what it got to write of each answer before the client closed the connection."""
    written: list[int] = []
    chunk = b"x" * (1 << 20)

    async def flood(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse(status=200, headers={"Content-Type": "application/x-protobuf"})
        answer.content_length = 256 << 20
        await answer.prepare(request)
        sent = 0
        try:
            while sent < (256 << 20):
                await answer.write(chunk)
                sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass
        finally:
            written.append(sent)
        return answer

    app = web.Application()
    app.router.add_post("/v1/{signal}", flood)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(runner.addresses[0][1]), written
    finally:
        await runner.cleanup()


async def test_a_collector_answering_with_a_flood_is_read_64_kib_deep(
    run_cli: RunCli, tmp_path: Path, flooding_collector: tuple[int, list[int]]
) -> None:
    """1 GiB answers gave a 12 s job 2,116 MiB of peak memory: the exporters read each answer
    whole. Now at most 64 KiB of it is read and the connection closed: the collector gets to
    write what the sockets' buffers hold, far from its 256 MiB."""
    port, written = flooding_collector
    async with FakeService(seed(**TESTS), speed=SPEED) as svc:
        job = await _job(run_cli, tmp_path, svc, otel_env(f"http://127.0.0.1:{port}"))
    for thread in threading.enumerate():
        if thread.name == "asyncclient-otel-exit":
            await asyncio.to_thread(thread.join, 60)
    assert job.code == 1, job.stderr
    assert written  # the exports were answered
    assert all(sent < 64 << 20 for sent in written), written


@pytest.mark.parametrize("verbose", ["-v", "config"])
async def test_otlp_header_values_never_reach_the_log(
    run_cli: RunCli, tmp_path: Path, verbose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header value the exporter refuses (a new line in it) was logged whole with -v, or
    with a repository's `log = "debug"`: raw, URL-decoded and as its repr, each is scrubbed."""
    monkeypatch.chdir(tmp_path)
    headers = "authorization=Bearer%20TOKEN12345%0Ax,x-team=team%2Fsecret-77"
    env = {**otel_env(f"http://127.0.0.1:{_closed_port()}"), "OTEL_EXPORTER_OTLP_HEADERS": headers}
    argv: tuple[str, ...] = ("-v",)
    if verbose == "config":
        (tmp_path / "asyncclient.toml").write_text('log = "debug"\n')
        argv = ()
    async with FakeService(speed=SPEED) as svc:  # the demo seed: t_search is a web test
        env.update({"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": svc.run_key})
        job = await run_cli(*argv, "run", "test", "t_search", "--wait", *FAST, env=env)
    for thread in threading.enumerate():
        if thread.name == "asyncclient-otel-exit":
            await asyncio.to_thread(thread.join, 60)
    said = job.stdout + job.stderr
    assert job.code == 0, job.stderr
    assert "asyncclient.telemetry" in said  # the SDK's records were logged, scrubbed
    for secret in (
        "TOKEN12345",
        "Bearer%20TOKEN",
        "team%2Fsecret",
        "team/secret-77",
        "TOKEN12345\\n",
    ):
        assert secret not in said
