"""A suite job's trace in the library (asyncclient.suite._trace), the CI's run read from its
variables (asyncclient._core._ci_run), and the command's export set up from OTEL_* variables
(asyncclient.cli._telemetry): the tree a service embedding run_suite gets, hostile text kept
one line and bounded, and an export that never holds the command past its bound.

The whole job through the real OTLP exporter is tests/cli/test_telemetry.py.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from otel_support import Telemetry, _reset_globals, children

from asyncclient import AsyncSession
from asyncclient._core._ci_run import ci_run, pipeline_attributes
from asyncclient._core._untrusted import _SHOWN
from asyncclient.cli._output import Output
from asyncclient.models import Run
from asyncclient.suite import SuitePolicy, SuiteRun
from asyncclient.suite._events import RunFinished, RunStarted
from asyncclient.suite._trace import VALUE_LIMIT, JobTrace
from asyncclient.testing import FakeService
from asyncclient.testing.dialects import Dialect

APP = {"project": "p_lib", "target": "web", "url": "https://shop.example.com"}
SEED = {
    "projects": [{"id": "p_lib", "plan": "paid", "includedRuns": 100000}],
    "keys": [{"key": "lib-run", "capability": "run", "projects": ["p_lib"]}],
    "tests": [
        {"id": "t_ok", **APP, "durationSeconds": 4},
        {"id": "t_flaky", **APP, "durationSeconds": 6, "flakyRuns": 1},
    ],
}


def _named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_a_service_running_a_suite_gets_the_jobs_trace_without_the_command(
    otel: Telemetry,
) -> None:
    policy = SuitePolicy(retry_failed=1, interval=0.02)
    async with (
        FakeService(SEED, speed=100.0) as svc,
        AsyncSession(base_url=svc.url, api_key="lib-run") as session,
    ):
        report = await SuiteRun.for_project(session, "p_lib", policy=policy).wait()
    spans = otel.finished()
    (job,) = _named(spans, "asyncclient.job")
    assert job.parent is None
    assert report.trace_id == f"{job.context.trace_id:032x}"
    assert job.attributes is not None
    assert job.attributes["test.suite.name"] == "p_lib"
    assert job.attributes["test.suite.run.status"] == "success"
    assert job.attributes["asyncclient.project.id"] == "p_lib"
    tests = {s.attributes["test.case.name"]: s for s in children(spans, job)
             if s.name == "asyncclient.test" and s.attributes}  # fmt: skip
    assert set(tests) == {"t_ok", "t_flaky"}
    flaky_runs = [s for s in children(spans, tests["t_flaky"]) if s.name == "asyncclient.run"]
    assert len(flaky_runs) == 2
    # The suite's start under the job; the re-run's start under its test.
    assert [s.name for s in children(spans, job)].count("asyncclient.run_project") == 1
    assert "asyncclient.run_test" in [s.name for s in children(spans, tests["t_flaky"])]
    assert {s.context.trace_id for s in spans} == {job.context.trace_id}


async def test_without_an_sdk_no_trace_is_made_and_the_report_has_no_trace_id() -> None:
    _reset_globals()
    async with (
        FakeService(SEED, speed=100.0) as svc,
        AsyncSession(base_url=svc.url, api_key="lib-run") as session,
    ):
        report = await SuiteRun.for_project(
            session, "p_lib", policy=SuitePolicy(interval=0.02)
        ).wait()
    assert report.trace_id is None
    assert JobTrace.open("p_lib") is None


_hostile = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=2000)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    run_id=_hostile, test_id=_hostile, status=_hostile, mode=_hostile, link=_hostile,
    headline=_hostile,
)  # fmt: skip
@example(run_id="j_1", test_id="t_1", status="failed", mode="cold", link="http://[", headline="")
def test_whatever_the_service_sends_each_attribute_is_one_bounded_line(
    otel: Telemetry,
    run_id: str,
    test_id: str,
    status: str,
    mode: str,
    link: str,
    headline: str,
) -> None:
    from asyncclient._reports.model import read_attempt

    otel.spans.clear()
    job = JobTrace.open("p_x", environ={})
    assert job is not None
    with job:
        for number, page in enumerate(("https://service.example.com/runs/1?sig=" + link, link)):
            run = Run(
                id=f"{run_id}{number}", status=status, test_id=test_id, mode=mode,
                link=page, source={"failureSummary": headline},
            )  # fmt: skip
            job.observe(RunStarted(run.id, test_id, 1))
            job.observe(RunFinished(read_attempt(run, 1)))
    names = [span.name for span in otel.finished()]
    assert names.count("asyncclient.run") == 2
    for span in otel.finished():
        for key, value in (span.attributes or {}).items():
            for text in value if isinstance(value, tuple) else (value,):
                if isinstance(text, str):
                    assert len(text) <= 2 * VALUE_LIMIT, key
                    assert not _SHOWN.search(text), (key, text)
                    assert "\n" not in text, key
                    assert "sig=" not in text, key


def test_the_ci_run_from_github_gitlab_and_the_plain_environment() -> None:
    github = ci_run(
        {
            "GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW": "e2e", "GITHUB_RUN_ID": "5",
            "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/shop",
            "GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main",
            "GITHUB_REF_TYPE": "branch",
        }
    )  # fmt: skip
    assert (github.pipeline, github.run_id, github.ref, github.change) == ("e2e", "5", "main", "")
    assert github.run_url == "https://github.com/acme/shop/actions/runs/5"
    gitlab = ci_run(
        {
            "GITLAB_CI": "true", "CI_PROJECT_PATH": "acme/shop", "CI_PIPELINE_ID": "88",
            "CI_PIPELINE_URL": "https://gitlab.example.com/acme/shop/-/pipelines/88",
            "CI_PROJECT_URL": "https://gitlab.example.com/acme/shop",
            "CI_REPOSITORY_URL": "https://gitlab-ci-token:glcbt-SECRET@gitlab.example.com/a.git",
            "CI_COMMIT_REF_NAME": "main", "CI_COMMIT_SHA": "abc", "CI_MERGE_REQUEST_IID": "3",
            "CI_JOB_URL": "https://user:pass@gitlab.example.com/acme/shop/-/jobs/1",
        }
    )  # fmt: skip
    attributes = pipeline_attributes(gitlab, {})
    assert attributes["cicd.pipeline.name"] == "acme/shop"
    assert attributes["cicd.pipeline.run.id"] == "88"
    assert attributes["vcs.change.id"] == "3"
    assert "SECRET" not in repr(attributes)
    assert "pass@" not in repr(attributes)
    assert "cicd.pipeline.task.run.url.full" not in attributes  # it held credentials
    plain = pipeline_attributes(
        ci_run({}),
        {"OTEL_RESOURCE_ATTRIBUTES": "cicd.pipeline.name=nightly,cicd.pipeline.run.id=12,"
         "service.name=x,vcs.ref.head.name=feature%2Fa"},
    )  # fmt: skip
    assert pipeline_attributes(
        ci_run({}),
        {"OTEL_RESOURCE_ATTRIBUTES": "cicd.pipeline.run.url.full=javascript:alert(1),"
         "vcs.repository.url.full=https://u:p@git.example.com/a"},
    ) == {}  # fmt: skip
    assert plain == {
        "cicd.pipeline.name": "nightly",
        "cicd.pipeline.run.id": "12",
        "vcs.ref.head.name": "feature/a",
    }


@pytest.fixture
def no_sdk() -> Iterator[None]:
    _reset_globals()
    yield
    _reset_globals()


def _output() -> tuple[Output, io.StringIO]:
    stderr = io.StringIO()
    return Output(stdout=io.StringIO(), stderr=stderr), stderr


@pytest.mark.usefixtures("no_sdk")
@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, None),
        (
            {"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_METRICS_EXPORTER": "none"},
            "warning: OTEL_TRACES_EXPORTER=zipkin is not one asyncclient sets up: otlp, console "
            "or none; the job runs without exporting it",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            },
            "warning: OTEL_EXPORTER_OTLP_PROTOCOL=http/json is not one asyncclient exports with: "
            "http/protobuf or grpc; the job runs without exporting it",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_METRICS_EXPORTER": "none",
            },
            "warning: the OTLP grpc exporter is not installed: pip install "
            "opentelemetry-exporter-otlp-proto-grpc; the job runs without exporting it",
        ),
    ],
)
def test_what_the_environment_asks_is_set_up_or_refused_in_one_line(
    environ: dict[str, str], said: str | None
) -> None:
    from asyncclient.cli._telemetry import start_export

    out, stderr = _output()
    assert start_export(out, environ) is None
    assert stderr.getvalue().splitlines() == ([said] if said else [])


class _Hanging:
    """A provider whose shutdown waits for a collector that never answers."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def shutdown(self) -> None:
        self.release.wait(60)


@pytest.mark.usefixtures("no_sdk")
async def test_a_collector_that_never_answers_holds_the_end_only_for_the_bound(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The end of the export is given EXPORT_BOUND and then left to a daemon thread: close()
    returns (without the bound it would wait for the provider), in one warning line; what the
    exporter still logs while it retries stays off stderr until the thread ends."""
    import logging

    from asyncclient.cli._telemetry import Export, _Failures, _ToDebug

    hanging = _Hanging()
    failures = _Failures()
    handler = _ToDebug(failures)
    logging.getLogger("opentelemetry").addHandler(handler)
    export = Export(hanging, None, failures, handler, "http://127.0.0.1:9/v1/traces")
    out, stderr = _output()
    try:
        await asyncio.wait_for(export.close(out), 60)
        capfd.readouterr()
        logging.getLogger("opentelemetry.exporter.otlp").warning("Transient error, retrying")
        assert capfd.readouterr().err == ""
        assert handler in logging.getLogger("opentelemetry").handlers
    finally:
        hanging.release.set()
    for thread in threading.enumerate():
        if thread.name == "asyncclient-otel-exit":
            thread.join(30)
    assert stderr.getvalue().splitlines() == [
        "warning: the job's OpenTelemetry data could not all be exported to "
        "http://127.0.0.1:9/v1/traces (no answer within 4.5 s); the job's result and reports are "
        "unchanged"
    ]
    assert handler not in logging.getLogger("opentelemetry").handlers


def test_attributes_of_a_job_never_hold_a_link_with_credentials() -> None:
    found: dict[str, Any] = pipeline_attributes(
        ci_run({"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://u:p@github.com",
                "GITHUB_REPOSITORY": "a/b", "GITHUB_RUN_ID": "1"}),
        {},
    )  # fmt: skip
    assert all("u:p" not in str(value) for value in found.values())
    assert "cicd.pipeline.run.url.full" not in found


@pytest.mark.parametrize("broken", ["open", "observe", "end"])
async def test_a_trace_that_fails_never_fails_the_suite(
    otel: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
    broken: str,
) -> None:
    """The SDK (or our trace) raising while the job is made, followed or ended: the suite's
    report is the same as untraced."""

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the SDK broke")

    target = {"open": "open", "observe": "_observe", "end": "end"}[broken]
    monkeypatch.setattr(JobTrace, target, fail)
    async with (
        FakeService(SEED, speed=100.0) as svc,
        AsyncSession(base_url=svc.url, api_key="lib-run") as session,
    ):
        policy = SuitePolicy(retry_failed=1, interval=0.02)
        report = await SuiteRun.for_project(session, "p_lib", policy=policy).wait()
    assert report.passed
    assert {test.test_id: test.outcome for test in report.tests} == {
        "t_ok": "passed",
        "t_flaky": "flaky",
    }


def test_the_guides_metric_table_is_the_instrument_table() -> None:
    """docs/guides/see-the-fleet.md lists each instrument the job makes, by name and unit."""
    import re
    from pathlib import Path

    from asyncclient.suite._job_metrics import INSTRUMENTS

    page = (Path(__file__).parents[2] / "docs" / "guides" / "see-the-fleet.md").read_text()
    table = page.split("### The metrics", 1)[1].split("\n\n", 2)[1]
    shown = {
        name
        for row in table.splitlines()[2:]
        for name in re.findall(r"`(asyncclient\.[a-z_.]+)`", row.split("|")[1])
    }
    assert shown == {name for _, _, name, _, _ in INSTRUMENTS}
    for _, kind, name, unit, _ in INSTRUMENTS:
        (row,) = [row for row in table.splitlines() if f"`{name}`" in row.split("|")[1]]
        assert f"{kind}, `{unit}`" in row, name


@settings(max_examples=200, deadline=None)
@given(given=_hostile, github=_hostile)
def test_whatever_the_environment_says_the_pipeline_attributes_are_bounded_lines(
    given: str, github: str
) -> None:
    """OTEL_RESOURCE_ATTRIBUTES and a CI's variables are input: whatever they hold, the job's
    cicd.* and vcs.* attributes are bounded single lines, links http(s) without credentials."""
    for environ in (
        {"OTEL_RESOURCE_ATTRIBUTES": given},
        {"OTEL_RESOURCE_ATTRIBUTES": f"cicd.pipeline.name={given},vcs.ref.head.name={given}"},
        {"OTEL_RESOURCE_ATTRIBUTES": f"cicd.pipeline.run.url.full={given}"},
        {"GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW": github, "GITHUB_HEAD_REF": github,
         "GITHUB_SERVER_URL": github, "GITHUB_REPOSITORY": github, "GITHUB_RUN_ID": github,
         "GITHUB_REF": github},
        {"GITLAB_CI": "true", "CI_PIPELINE_URL": github, "CI_JOB_URL": github,
         "CI_PROJECT_URL": github, "CI_COMMIT_REF_NAME": github, "CI_MERGE_REQUEST_IID": github},
    ):  # fmt: skip
        found = pipeline_attributes(ci_run(environ), environ)
        for key, value in found.items():
            assert key.startswith(("cicd.pipeline.", "vcs."))
            assert len(value) <= 2 * VALUE_LIMIT
            assert not _SHOWN.search(value)
            assert "\n" not in value
            if key.endswith("url.full"):
                assert value.startswith(("https://", "http://"))
                assert "@" not in value.split("/")[2]


class _NoStart(Dialect):
    """A service that says when a run was created and ended, and how long it ran: not when it
    began."""

    name = "no-start"

    def timing(self, run: Any, now: float) -> dict[str, Any]:
        found = super().timing(run, now)
        del found["startedAt"]
        return found


class _NoTimes(Dialect):
    """A service that dates nothing of a run."""

    name = "no-times"

    def timing(self, run: Any, now: float) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(("wire", "queued"), [(Dialect, 3.0), (_NoStart, 3.0), (_NoTimes, None)])
async def test_each_run_span_has_its_queue_seconds_from_the_runs_own_times(
    otel: Telemetry, wire: type[Dialect], queued: float | None
) -> None:
    """3 s queued, then running before the first sweep looks (the emulator's clock is manual
    and moved past the queue first): the span reckons it from the run's times (startedAt, else
    finishedAt less its duration); a service that dates nothing leaves it out, never 0."""
    seed = {**SEED, "tests": [{"id": "t_ok", **APP, "durationSeconds": 4, "queuedSeconds": 3}]}
    async with (
        FakeService(seed, clock="manual", dialect=wire) as svc,
        AsyncSession(base_url=svc.url, api_key="lib-run") as session,
    ):
        started = await session.run_project("p_lib")
        svc.advance(3.5)  # running now, never seen queued
        policy = SuitePolicy(interval=0.01)
        suite = SuiteRun(session, [run.run_id for run in started.started], policy=policy)
        running = asyncio.ensure_future(suite.wait())
        await asyncio.sleep(0.1)
        svc.advance(60)
        await running
    (run,) = _named(otel.finished(), "asyncclient.run")
    assert run.attributes is not None
    assert run.attributes.get("asyncclient.run.queue.seconds") == queued


async def test_a_pre_existing_failure_is_on_its_tests_span(otel: Telemetry) -> None:
    """--baseline in the trace: the test span of a failure main's build has too says so."""
    from asyncclient.testing import baseline_seed

    policy = SuitePolicy(baseline="ab_shop_main", interval=0.02)
    async with (
        FakeService(baseline_seed(), speed=6000.0) as svc,
        AsyncSession(base_url=svc.url, api_key="shop-run-key") as session,
    ):
        await SuiteRun.for_project(
            session, "p_shop", build_ids=["ab_shop_change"], policy=policy
        ).wait()
    tests = {
        span.attributes["test.case.name"]: span.attributes
        for span in _named(otel.finished(), "asyncclient.test")
        if span.attributes
    }
    marked = {name for name, said in tests.items() if said.get("asyncclient.test.pre_existing")}
    assert marked == {"t_checkout", "t_profile", "t_orders"}
    assert tests["t_coupon"]["asyncclient.test.pre_existing"] is False
    assert "passes on the baseline" in str(tests["t_coupon"]["asyncclient.test.baseline"])
