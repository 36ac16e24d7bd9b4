"""A service whose run views hold numbers and nesting no careful service sends: `runs get`,
`runs list`, `run --wait` with every report, and `flaky` end in one line or a sane figure,
never a traceback, and the job's reports are always written (issue: fail closed)."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from front_support import figures, nested, rewriting_front
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncclient import AsyncSession
from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]
WEB = {"project": "p_h", "target": "web", "url": "https://shop.example"}
HISTORY = [{"daysAgo": d, "status": "passed", "durationSeconds": 8} for d in (1, 2, 3)]


def seed() -> dict[str, Any]:
    return {
        "projects": [{"id": "p_h", "name": "p_h", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "h-run", "capability": "run", "projects": ["p_h"]}],
        "tests": [
            {"id": "t_ok", **WEB, "durationSeconds": 8, "queuedSeconds": 1, "history": HISTORY},
            {"id": "t_bad", **WEB, "durationSeconds": 8, "queuedSeconds": 1,
             "outcome": "failed", "history": HISTORY},
        ],
    }  # fmt: skip


HOSTILE: dict[str, dict[str, Any]] = {
    "duration_310_digits": {"durationMs": "9" * 310},
    "duration_huge_number": {"durationMs": 1.5e300},
    "duration_negative": {"durationMs": -10_000_000_000_000_000},
    "duration_nan_text": {"durationMs": "NaN"},
    "duration_superscript": {"durationMs": "\u00b2\u2460"},
    "times_far_apart": {"startedAt": "0001-01-01T00:00:00Z", "finishedAt": "9999-12-31T00:00:00Z"},
    "times_backwards": {"startedAt": "9999-12-31T00:00:00Z", "finishedAt": "2000-01-01T00:00:00Z"},
    "captures_300_deep": {"captures": {"deep": nested(300)}},
    "captures_900_deep": {"captures": nested(900)},
    "requirements_deep": {
        "requirements": [{"name": "n", "result": "failed", "reason": nested(600)}]
    },
    "error_deep": {"error": {"code": "x", "message": nested(600)}},
}  # fmt: skip


def _hostile(fields: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def rewrite(run: dict[str, Any]) -> None:
        run.update(fields)

    return rewrite


_BIG_NUMBER = re.compile(r"\d{16,}")  # no figure of 16 digits reaches a person or a report


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_odd_numbers_and_deep_nesting_end_in_a_sane_report(
    run_cli: RunCli, tmp_path: Path, case: str
) -> None:
    junit, html, ctrf, events = (tmp_path / n for n in ("r.xml", "r.html", "r.json", "e.jsonl"))
    async with (
        FakeService(seed(), speed=2_000) as svc,
        rewriting_front(svc, _hostile(HOSTILE[case])) as url,
    ):
        env = {"ASYNCCLIENT_BASE_URL": url, "ASYNCCLIENT_API_KEY": "h-run"}
        job = await run_cli(
            "run", "project", "p_h", "--wait", "--json", "--retry-failed", "1",
            "--junit", str(junit), "--html", str(html), "--ctrf", str(ctrf),
            "--events", str(events), "--interval", "0.02", env=env,
        )  # fmt: skip
        run_id = job.json()[0]["id"]
        got = await run_cli("runs", "get", run_id, env=env)
        listed = await run_cli("runs", "list", "--project", "p_h", env=env)
        flaky = await run_cli("flaky", "p_h", env=env)
    assert job.code == 1, job.stderr  # t_bad fails: the verdict, not a crash
    assert "Traceback" not in job.stderr + got.stderr + listed.stderr + flaky.stderr
    assert (got.code, listed.code, flaky.code) == (0, 0, 0), got.stderr + flaky.stderr
    for report in (junit, html, ctrf, events):
        assert report.is_file(), report
    ET.fromstring(junit.read_text())  # well-formed
    for name, text in (("stderr", job.stderr), ("junit", junit.read_text()),
                       ("ctrf", ctrf.read_text()), ("json", job.stdout),
                       ("get", got.stdout), ("flaky", flaky.stdout)):  # fmt: skip
        assert not _BIG_NUMBER.search(text.replace(run_id, "")), (name, _BIG_NUMBER.search(text))
    cost = json.loads(ctrf.read_text())["results"]["summary"]["extra"]
    assert all(v >= 0 for v in figures(cost)), cost
    for suite in ET.fromstring(junit.read_text()).iter("testsuite"):
        assert float(suite.get("time", "0")) >= 0


# The run view's numeric and nested fields, drawn by hypothesis, through the whole job: a few
# dozen jobs (each a real one against the emulator), every report written every time.
_numbers_drawn = (
    st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(min_value=1, max_value=400).map(lambda n: "9" * n)
    | st.sampled_from(["NaN", "-1", "\u00b2", "\uff19", "9999-12-31T00:00:00Z", "0001-01-01"])
)
_views_drawn = st.fixed_dictionaries(
    {},
    optional={
        "durationMs": _numbers_drawn,
        "createdAt": _numbers_drawn,
        "startedAt": _numbers_drawn,
        "finishedAt": _numbers_drawn,
        "captures": st.integers(min_value=0, max_value=900).map(nested),
        "requirements": st.integers(min_value=0, max_value=600).map(
            lambda d: [{"name": "n", "result": "failed", "reason": nested(d)}]
        ),
    },
)


@settings(
    max_examples=40 if os.environ.get("CI") else 10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(fields=_views_drawn)
async def test_any_numbers_and_nesting_give_a_job_with_every_report(
    run_cli: RunCli, tmp_path: Path, fields: dict[str, Any]
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir(exist_ok=True)
    junit, html, ctrf = (reports / n for n in ("r.xml", "r.html", "r.json"))
    for report in (junit, html, ctrf):
        report.unlink(missing_ok=True)
    async with (
        FakeService(seed(), speed=5_000) as svc,
        rewriting_front(svc, _hostile(fields)) as url,
    ):
        env = {"ASYNCCLIENT_BASE_URL": url, "ASYNCCLIENT_API_KEY": "h-run"}
        job = await run_cli(
            "run", "project", "p_h", "--wait", "--json", "--junit", str(junit),
            "--html", str(html), "--ctrf", str(ctrf), "--interval", "0.02", env=env,
        )  # fmt: skip
        got = await run_cli("runs", "get", job.json()[0]["id"], env=env)
        flaky = await run_cli("flaky", "p_h", env=env)
    assert job.code in (0, 1), job.stderr  # a verdict, never a crash
    assert (got.code, flaky.code) == (0, 0), got.stderr + flaky.stderr
    assert "Traceback" not in job.stderr + got.stderr + flaky.stderr
    assert all(report.is_file() for report in (junit, html, ctrf))
    cost = json.loads(ctrf.read_text())["results"]["summary"]["extra"]
    assert all(0 <= v < 2**53 for v in figures(cost)), cost


# --- a re-run or copy answered with another build's run ------------------------------------------

APP = {"project": "p_b", "target": "android", "appId": "com.example.shop"}


def builds_seed(*, flaky_history: bool) -> dict[str, Any]:
    """p_b: t_bad always fails on ab_new; t_ok passes (20 s). Their history: a pass a day ago on
    ab_old (and, with flaky_history, a failure beside it: known flaky, so hedge copies them)."""
    history: list[dict[str, Any]] = [
        {"daysAgo": 1.0, "status": "passed", "build": "ab_old", "durationSeconds": 20}
    ]
    if flaky_history:
        history += [
            {"daysAgo": 1.1, "status": "failed", "build": "ab_old", "durationSeconds": 20},
            {"daysAgo": 1.2, "status": "passed", "build": "ab_old", "durationSeconds": 20},
            {"daysAgo": 1.3, "status": "failed", "build": "ab_old", "durationSeconds": 20},
        ]
    build = {"project": "p_b", "platform": "android", "appId": "com.example.shop"}
    return {
        "projects": [{"id": "p_b", "name": "p_b", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "b-run", "capability": "run", "projects": ["p_b"]}],
        "builds": [{"id": "ab_old", **build}, {"id": "ab_new", **build}],
        "tests": [
            {"id": "t_bad", **APP, "outcome": "failed", "durationSeconds": 20,
             "queuedSeconds": 1, "history": history},
            {"id": "t_ok", **APP, "durationSeconds": 20, "queuedSeconds": 1,
             "history": history},
        ],
    }  # fmt: skip


def history_pass(svc: FakeService, test_id: str) -> str:
    """The id of the test's day-old pass on ab_old."""
    return next(
        run.id
        for run in svc.backend.runs.values()
        if run.test.id == test_id and run.status_at(svc.now()) == "passed"
    )


async def test_a_rerun_answered_with_another_builds_old_pass_is_not_counted(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """t_bad's re-run start answered with its day-old pass on ab_old: before, the job exited 0
    and called the test flaky. The run is not counted; the job fails, saying why once."""
    from front_support import answering_front

    async with FakeService(builds_seed(flaky_history=False), speed=1000) as svc:
        old = history_pass(svc, "t_bad")
        async with answering_front(svc, "t_bad", old) as url:
            env = {"ASYNCCLIENT_BASE_URL": url, "ASYNCCLIENT_API_KEY": "b-run",
                   "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
            job = await run_cli(
                "run", "project", "p_b", "--build", "ab_new", "--wait", "--retry-failed", "1",
                "--interval", "0.01", "--json", env=env,
            )  # fmt: skip
    assert job.code == 1, job.stderr
    tests = {test["testId"]: test for test in job.json()}
    bad = tests["t_bad"]
    assert (bad["status"], bad.get("flaky")) == ("failed", None)  # one attempt: its run
    assert bad["id"] != old
    assert "attempts" not in bad
    said = f"not counted: the service answered run {old} of build ab_old"
    assert job.stderr.count(said) == 1, job.stderr


@pytest.mark.parametrize("answered", ["old pass", "another job's run"])
async def test_a_hedged_copy_answered_with_another_builds_run_is_not_acted_on(
    run_cli: RunCli, tmp_path: Path, answered: str
) -> None:
    """Hedged copies of known-flaky tests, each copy's start answered with a run of ab_old:
    an old pass no longer stops t_bad's own run (which fails: the job fails), and another job's
    run, still going, is not stopped when t_ok's own run passes."""
    from front_support import answering_front

    async with FakeService(builds_seed(flaky_history=True), speed=1000) as svc:
        if answered == "old pass":
            test_id, other = "t_bad", history_pass(svc, "t_bad")
        else:
            async with AsyncSession("b-run", svc.url) as session:
                other = (await session.run_test("t_ok", build_id="ab_old")).run_id
            test_id = "t_ok"
        async with answering_front(svc, test_id, other) as url:
            env = {"ASYNCCLIENT_BASE_URL": url, "ASYNCCLIENT_API_KEY": "b-run",
                   "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
            if answered != "old pass":  # another job's run: going the whole job
                svc.backend.runs[other].held = "running"
            job = await run_cli(
                "run", "project", "p_b", "--build", "ab_new", "--wait", "--retry-failed", "1",
                "--retry-strategy", "hedge", "--interval", "0.01", "--json", env=env,
            )  # fmt: skip
        other_run = svc.backend.runs[other]
    tests = {test["testId"]: test for test in job.json()}
    assert job.code == 1, job.stderr  # t_bad fails on ab_new, whatever was answered
    ids = [a["runId"] for t in tests.values() for a in t.get("attempts", [{"runId": t["id"]}])]
    assert other not in ids
    assert other_run.stopped_at is None  # never stopped: not this job's
    assert f"not counted: the service answered run {other} of build ab_old" in job.stderr
