"""The job's time and cost (device seconds, re-runs, queue, overage) and the CTRF report, from
the one report model, valid against the schema the `ctrf` npm package ships
(tests/data/ctrf-schema-0.0.json, ctrf 0.3.0, MIT)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from report_support import T0, run

from asyncclient._reports import ctrf as _ctrf
from asyncclient._reports import junit as _junit
from asyncclient._reports import markdown as _markdown
from asyncclient._reports import model as _model
from asyncclient._reports import text as _text
from asyncclient._reports.html import html_report
from asyncclient.ci import tally
from asyncclient.models import Run, RunStatus
from asyncclient.reruns import Attempts, SuitePolicy, SuiteResult

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "ctrf-schema-0.0.json").read_text())


def job() -> SuiteResult:
    """5 runs of 60 s, 2 of them re-runs: t_flaky failed then passed, t_broken failed twice."""
    return SuiteResult(
        (
            Attempts("t_ok", (run("j_1", "t_ok", "passed"),)),
            Attempts("t_flaky", (run("j_3", "t_flaky", "failed"),
                                 run("j_4", "t_flaky", "passed", at=70))),
            Attempts("t_broken", (run("j_5", "t_broken", "failed"),
                                  run("j_6", "t_broken", "failed", at=70))),
        ),
        overage=frozenset({"j_6"}),
    )  # fmt: skip


def test_device_time_counts_every_run_and_the_re_runs_apart() -> None:
    report = _model.suite_report(job(), name="p_shop")
    cost = report.cost
    assert (cost.device_seconds, cost.rerun_device_seconds) == (300.0, 120.0)
    assert (cost.queue_seconds, cost.runs, cost.overage_runs) == (25.0, 5, 1)
    assert cost.fields() == {
        "deviceSeconds": 300.0,
        "rerunDeviceSeconds": 120.0,
        "queueSeconds": 25.0,
        "runs": 5,
        "overageRuns": 1,
        "repeatDeviceSeconds": 0.0,
        "savedSeconds": 0.0,
        "reusedRuns": 0,
        "copyDeviceSeconds": 0.0,
        "copyRuns": 0,
        "stoppedRuns": 0,
        "baselineDeviceSeconds": 0.0,
        "baselineRuns": 0,
    }
    line = "device time 5 min 00 s (2 min 00 s of it re-runs), 25.0 s queued, 5 runs, 1 beyond"
    assert _text.summary_lines(report)[-2].startswith(line)
    assert "Device time 5 min 00 s (2 min 00 s of it re-runs)" in _markdown.step_summary_markdown(
        report
    )
    assert "Device time 5 min 00 s" in html_report(report)
    suite = ET.fromstring(_junit.junit_xml(report))
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["asyncclient.deviceSeconds"] == "300.0"
    assert props["asyncclient.rerunDeviceSeconds"] == "120.0"


def test_a_run_not_started_costs_nothing_and_a_running_one_its_queue() -> None:
    queued = Run(id="j_q", status=RunStatus.QUEUED, test_id="t_q", created_at=T0)
    going = run("j_r", "t_r", "running", queued=12)
    report = _model.runs_report([queued, going])
    assert report.cost == _model.Cost(0.0, 0.0, 12.0, 1, 0)


def validate(document: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(document)


def test_ctrf_of_plain_flaky_rerun_quarantined_and_not_started_tests_is_valid() -> None:
    result = job()
    result = SuiteResult(
        (*result.tests, Attempts("t_q", (run("j_7", "t_q", "error"),))),
        SuitePolicy(quarantined={"t_q": "crashes on the old emulator"}),
        overage=result.overage,
    )
    report = _model.suite_report(result, name="p_shop", skipped=[("t_app", "no ready build")])
    document = _ctrf.ctrf_report(report)
    validate(document)
    tests = {t["testId"]: t for t in document["results"]["tests"]}
    assert tests["t_ok"]["status"] == "passed"
    assert tests["t_ok"]["retries"] == 0
    assert tests["t_ok"]["duration"] == 60_000
    assert tests["t_flaky"]["flaky"] is True
    assert tests["t_flaky"]["status"] == "passed"
    assert [a["status"] for a in tests["t_flaky"]["retryAttempts"]] == ["failed"]
    assert tests["t_broken"]["status"] == "failed"
    assert tests["t_broken"]["retries"] == 1
    assert tests["t_q"]["status"] == "skipped"
    assert tests["t_q"]["rawStatus"] == "error"
    assert tests["t_q"]["message"].startswith("quarantined: crashes on the old emulator")
    assert tests["t_app"] == {
        "name": "t_app", "testId": "t_app", "status": "skipped", "duration": 0,
        "suite": ["p_shop"], "message": "no ready build", "rawStatus": "not started",
    }  # fmt: skip
    summary = document["results"]["summary"]
    assert (summary["tests"], summary["passed"], summary["failed"], summary["skipped"]) == (
        5,
        2,
        1,
        2,
    )
    assert summary["flaky"] == 1
    assert summary["extra"]["deviceSeconds"] == 360.0
    assert summary["extra"]["rerunDeviceSeconds"] == 120.0


def test_ctrf_attachments_name_the_runs_files_or_the_downloaded_ones(tmp_path: Path) -> None:
    failed = run("j_9", "t_9", "failed", video="https://files.example/j_9/video.mp4",
                 screenshots=["https://files.example/j_9/screenshots/01.png"])  # fmt: skip
    report = _model.runs_report([failed])
    told = _ctrf.ctrf_report(report)["results"]["tests"][0]["attachments"]
    assert [(a["name"], a["contentType"]) for a in told] == [
        ("video.mp4", "video/mp4"),
        ("01.png", "image/png"),
    ]
    saved = _ctrf.ctrf_report(
        report, evidence={"j_9": ["j_9/video.mp4"]}, evidence_dir=tmp_path / "evidence"
    )
    validate(saved)
    assert saved["results"]["tests"][0]["attachments"][0]["path"] == str(
        tmp_path / "evidence" / "j_9" / "video.mp4"
    )


def test_ctrf_schema_catches_a_wrong_document() -> None:
    """The check can fail: the schema refuses what CTRF does not allow."""
    document = _ctrf.ctrf_report(_model.suite_report(job()))
    document["results"]["tests"][0]["status"] = "flaky"
    with pytest.raises(jsonschema.ValidationError):
        validate(document)


def test_write_ctrf_escapes_what_a_terminal_would_act_on(tmp_path: Path) -> None:
    hostile = run("j_h", "t_h", "failed", headline="\x1b]8;;https://evil\x07click\u202e##[error]x")
    path = _ctrf.write_ctrf(tmp_path / "ctrf.json", _model.runs_report([hostile]))
    text = path.read_text()
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "##[" not in text
    assert json.loads(text)["results"]["tests"][0]["message"].startswith("\x1b]8;;https://evil")


def test_the_ci_step_hands_on_the_device_minutes() -> None:
    answer = [
        {"id": "j_1", "summary": {"outcome": "passed"}, "cost": {"deviceSeconds": 180.0}},
        {"id": "j_2", "summary": {"outcome": "failed"}, "cost": {"deviceSeconds": 120.0}},
        {"id": "j_3", "summary": {"outcome": "passed"}, "cost": {"deviceSeconds": "lots"}},
        {"id": "j_4", "summary": {"outcome": "passed"}, "cost": {"deviceSeconds": float("inf")}},
    ]
    assert tally(answer).device_seconds == 300.0


REPO = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO / ".ci" / ".node" / "node_modules"


def node_with_ctrf() -> str:
    import os
    import shutil

    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "ctrf").is_dir():
        if os.environ.get("CI"):
            pytest.fail("node or the ctrf npm package is missing: .ci/run installs both")
        pytest.skip("node and `npm install --prefix .ci/.node ctrf@0.3.0` are needed")
    return node


def test_the_ctrf_packages_own_validator_accepts_every_kind_of_report(tmp_path: Path) -> None:
    """The reference implementation (ctrf's validateStrict, run by Node) accepts a plain, a
    flaky, a re-run, a quarantined and a not-started report, and refuses a wrong one."""
    import os
    import subprocess

    node = node_with_ctrf()
    passed = run("j_1", "t_ok", "passed")
    flaky = Attempts("t_f", (run("j_2", "t_f", "failed"), run("j_3", "t_f", "passed", at=70)))
    reran = Attempts("t_b", (run("j_4", "t_b", "error"), run("j_5", "t_b", "failed", at=70)))
    reports = {
        "plain": _model.runs_report([passed]),
        "flaky": _model.suite_report(SuiteResult((flaky,))),
        "rerun": _model.suite_report(SuiteResult((reran,))),
        "quarantined": _model.suite_report(
            SuiteResult((reran,), SuitePolicy(quarantined={"t_b": "old OS"}))
        ),
        "not-started": _model.runs_report([passed], skipped=[("t_app", "no ready build")]),
    }
    files = [str(_ctrf.write_ctrf(tmp_path / f"{name}.json", r)) for name, r in reports.items()]
    (tmp_path / "wrong.json").write_text('{"reportFormat": "CTRF", "specVersion": "0.0.0"}')
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    script = str(REPO / "tests" / "ctrf_validate.cjs")
    good = subprocess.run([node, script, *files], capture_output=True, text=True, env=env)
    assert good.returncode == 0, good.stderr
    assert good.stdout.count("valid ") == 5
    bad = subprocess.run(
        [node, script, str(tmp_path / "wrong.json")], capture_output=True, text=True, env=env
    )
    assert bad.returncode != 0


def test_the_html_report_draws_each_tests_trend_from_its_history() -> None:
    """An inline SVG (no script, nothing fetched): a bar per run, oldest first, its height the
    duration, its class the outcome, this job's runs outlined, a dashed line where the build
    changes; the service's text in a bar's title is escaped."""
    import re

    earlier = [
        run(f"j_h{i}", "t_ok", "passed" if i % 3 else "failed", seconds=30 + i, at=-1000 * i,
            build={"id": "ab_new" if i < 2 else "ab_old"})
        for i in range(1, 6)
    ]  # fmt: skip
    hostile = run("j_h9", "t_ok", "passed", seconds=20, at=-9000, build={"id": "<b>x</b>"})
    result = SuiteResult((Attempts("t_ok", (run("j_1", "t_ok", "passed"),)),))
    report = _model.suite_report(result, history={"t_ok": [*earlier, hostile]})
    (test,) = report.tests
    assert [p.run_id for p in test.trend] == ["j_h9", "j_h5", "j_h4", "j_h3", "j_h2", "j_h1", "j_1"]
    page = html_report(report)
    svg = page[page.index("<svg") : page.index("</svg>")]
    rects = re.findall(r'<rect [^>]*class="run ([a-z_ -]+)"', svg)
    assert rects == [
        "passed", "passed", "passed", "failed", "passed", "passed", "passed this-job"
    ]  # fmt: skip
    assert svg.count('class="build-mark"') == 3  # <b>x</b> -> ab_old -> ab_new -> none (this job)
    assert "<b>x</b>" not in page
    assert "&lt;b&gt;x&lt;/b&gt;" in svg
    assert "<script" not in page
    # No history read: no chart.
    assert "<svg" not in html_report(_model.suite_report(result))
