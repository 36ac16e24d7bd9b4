"""The run reports (text summary, JUnit XML, GitHub Markdown) as pure functions of runs."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from asyncclient import _reports
from asyncclient._local._files import write_atomically
from asyncclient._reports import junit as _junit
from asyncclient._reports import markdown as _markdown
from asyncclient._reports import model as _model
from asyncclient._reports import text as _text
from asyncclient.models import Run, RunStatus


def make_run(run_id: str, status: str, **fields: Any) -> Run:
    known = {s.value: s for s in RunStatus}
    final = status in {"passed", "failed", "blocked", "inconclusive", "error", "cancelled"}
    fields.setdefault("test_id", "t_" + run_id[2:])
    fields.setdefault("test_title", f"Title of {run_id}")
    fields.setdefault("final", final)
    return Run(id=run_id, status=known.get(status, status), **fields)


PASSED = make_run(
    "j_ok",
    "passed",
    duration_ms=12_300,
    headline="Signed in.",
    link="https://svc.example/runs/j_ok",
    captures={"greeting": "Welcome back, Dana", "items": 3},
    requirements=[{"id": "r1", "title": "Login works", "result": "passed", "reason": "ok"}],
    created_at=datetime(2026, 11, 21, 5, 0, 0, tzinfo=UTC),
)
FAILED = make_run(
    "j_bad",
    "failed",
    duration_ms=40_000,
    headline="The cart total was wrong.",
    link="https://svc.example/runs/j_bad",
    requirements=[
        {"id": "r1", "title": "Cart opens", "result": "passed", "reason": "opened"},
        {"id": "r2", "title": "Total matches", "result": "failed", "reason": "expected 10, saw 12"},
        {"id": "r3", "title": "Checkout | pay", "result": "failed", "reason": "button <missing>"},
    ],
)
ERRORED = make_run(
    "j_err",
    "error",
    duration_ms=500,
    headline="The app crashed at start.",
    error={"code": "app_crashed", "message": "The app stopped at launch."},
)
CANCELLED = make_run("j_stop", "cancelled", headline=None)
RUNNING = make_run("j_go", "running", final=False)


def test_outcome_maps_each_status() -> None:
    assert [_reports.run_result(r) for r in (PASSED, FAILED, ERRORED, CANCELLED, RUNNING)] == [
        "passed",
        "failed",
        "error",
        "cancelled",
        "not_final",
    ]
    assert _reports.run_result(make_run("j_b", "blocked")) == "failed"
    assert _reports.run_result(make_run("j_n", "exploded", final=True)) == "failed"
    assert _reports.run_result(make_run("j_n", "exploded")) == "not_final"


def _read(run: Run) -> list[tuple[str, str, str, str]]:
    return [(r.outcome, r.name, r.title, r.reason) for r in _reports.failed_requirements(run)]


def test_failed_requirements_tolerate_odd_shapes() -> None:
    assert _read(FAILED) == [
        ("failed", "r2", "Total matches", "expected 10, saw 12"),
        ("failed", "r3", "Checkout | pay", "button <missing>"),
    ]
    odd = make_run("j_x", "failed", requirements=["text", {"result": "FAILED"}, None])
    assert _read(odd) == [("failed", "#2", "", "")]
    # A failed run whose checks cannot be read as failed shows them as they came.
    assert _read(make_run("j_y", "failed", requirements={"a": {"x": 1}})) == [
        ("unknown", "a", "", '{"x": 1}')
    ]
    assert _read(make_run("j_z", "passed", requirements={"a": 1})) == []


def test_duration_falls_back_to_timestamps() -> None:
    run = make_run(
        "j_t",
        "passed",
        started_at=datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC),
        finished_at=datetime(2026, 1, 1, 0, 1, 30, tzinfo=UTC),
    )
    assert _reports.duration_seconds(run) == 90.0
    assert _reports.format_duration(90.0) == "1 min 30 s"
    assert _reports.format_duration(12.34) == "12.3 s"
    assert _reports.duration_seconds(RUNNING) is None


def test_summary_lines_show_verdict_headline_reasons_and_link() -> None:
    lines = _text.summary_lines(_model.runs_report([PASSED, FAILED, ERRORED, RUNNING]))
    text = "\n".join(lines)
    # First why it failed: two failures of two causes, the larger (then the first seen) first.
    assert lines[0].startswith("why it failed: 1 of 2 failures: ")
    assert lines[1].startswith("why it failed: 1 of 2 failures: ")
    assert "(error, infrastructure; 1 test: t_err)" in text
    assert "(failed, app; 1 test: t_bad)" in text
    assert lines[2].split()[:3] == ["passed", "j_ok", "t_ok"]
    assert "(12.3 s)" in lines[2]
    assert "    failed r2 Total matches: expected 10, saw 12" in text
    assert "https://svc.example/runs/j_bad" in text
    assert "error app_crashed: The app stopped at launch." in text
    assert "not final when the watch ended" in text
    assert lines[-1] == "4 runs: 1 passed, 1 failed, 1 error, 1 running"


def test_counts_line() -> None:
    assert _reports.counts_line([]) == "0 runs"
    assert _reports.counts_line([PASSED]) == "1 run: 1 passed"
    odd = make_run("j_n", "exploded", final=True)
    assert _reports.counts_line([odd, PASSED, PASSED]) == "3 runs: 2 passed, 1 exploded"


def test_junit_xml_parses_back_with_the_right_counts_and_messages() -> None:
    runs = [PASSED, FAILED, ERRORED, CANCELLED, RUNNING]
    suite = ET.fromstring(_junit.junit_xml(_model.runs_report(runs, name="p_demo")))
    assert suite.tag == "testsuite"  # the root, as Surefire's schema has it
    assert suite.attrib["name"] == "p_demo"
    assert (suite.attrib["tests"], suite.attrib["failures"]) == ("5", "1")
    assert (suite.attrib["errors"], suite.attrib["skipped"]) == ("2", "1")
    assert suite.attrib["time"] == "52.800"
    props = {p.attrib["name"]: p.attrib["value"] for p in suite.iter("property")}
    assert props["timestamp"] == "2026-11-21T05:00:00"
    cases = {
        (case.findtext("system-out") or "").splitlines()[0].removeprefix("run "): case
        for case in suite.findall("testcase")
    }
    assert list(cases) == ["j_ok", "j_bad", "j_err", "j_stop", "j_go"]

    ok = cases["j_ok"]
    assert ok.attrib == {"name": "Title of j_ok", "classname": "t_ok", "time": "12.300"}
    assert ok.find("failure") is None
    assert ok.find("error") is None
    assert ok.find("properties") is None  # Surefire's schema allows none in a testcase
    assert {name: value for name, value in props.items() if name.startswith("j_ok.")} == {
        "j_ok.status": "passed",
        "j_ok.link": "https://svc.example/runs/j_ok",
        "j_ok.capture.greeting": "Welcome back, Dana",
        "j_ok.capture.items": "3",
    }

    failure = cases["j_bad"].find("failure")
    assert failure is not None
    assert failure.attrib == {"message": "The cart total was wrong.", "type": "failed"}
    assert failure.text == (
        "r2 Total matches: expected 10, saw 12\nr3 Checkout | pay: button <missing>"
    )
    system_out = cases["j_bad"].findtext("system-out")
    assert system_out is not None
    assert "https://svc.example/runs/j_bad" in system_out

    error = cases["j_err"].find("error")
    assert error is not None
    assert error.attrib == {"message": "The app stopped at launch.", "type": "app_crashed"}
    skipped = cases["j_stop"].find("skipped")
    assert skipped is not None
    assert skipped.attrib["message"] == "cancelled"
    not_final = cases["j_go"].find("error")
    assert not_final is not None
    assert not_final.attrib["type"] == "not_final"
    assert not_final.attrib["message"] == "still running when the watch ended"


def test_junit_xml_survives_characters_xml_cannot_carry() -> None:
    run = make_run("j_c", "failed", headline="bad \x00 byte \x1b[31m", test_title="a\x07b")
    suite = ET.fromstring(_junit.junit_xml(_model.runs_report([run])))
    case = suite.find("testcase")
    assert case is not None
    assert case.attrib["name"] == "a\ufffdb"
    failure = case.find("failure")
    assert failure is not None
    assert failure.attrib["message"] == "bad \ufffd byte \ufffd[31m"


def test_write_junit_replaces_the_file_atomically(tmp_path: Path) -> None:
    target = tmp_path / "report.xml"
    target.write_text("old")
    _junit.write_junit(target, _model.runs_report([PASSED]))
    assert ET.parse(target).getroot().find("testcase") is not None
    assert [p.name for p in tmp_path.iterdir()] == ["report.xml"]


def test_write_junit_leaves_no_temp_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "dir-in-the-way"
    target.mkdir()
    with pytest.raises(OSError, match="directory"):
        _junit.write_junit(target, _model.runs_report([PASSED]))
    assert [p.name for p in tmp_path.iterdir()] == ["dir-in-the-way"]


def test_step_summary_markdown_escapes_cells_and_lists_failures() -> None:
    text = _markdown.step_summary_markdown(_model.runs_report([PASSED, FAILED], name="p_demo"))
    lines = text.splitlines()
    # Markdown from the service (and any text) is escaped: it renders as the text it is.
    assert lines[0] == "### p\\_demo: 2 runs\\: 1 passed, 1 failed"
    assert lines[2] == "| Status | Test | Run | Duration | Headline |"
    assert lines[4].startswith("| \u2705 passed | Title of j\\_ok (`t_ok`) | ")
    assert "[`j_ok`](https://svc.example/runs/j_ok)" in lines[4]
    assert lines[5].startswith("| \u274c failed |")
    assert "  - r3 Checkout \\| pay\\: button \\<missing\\>" in lines
    assert text.endswith("</details>\n\nDevice time 52.3 s, 0.0 s queued, 2 runs\n\n")
    # Every table row has the same number of unescaped cell separators.
    rows = [line for line in lines if line.startswith("|")]
    assert {line.replace("\\|", "").count("|") for line in rows} == {6}


def test_append_step_summary_appends(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    path.write_text("# earlier step\n")
    _markdown.append_step_summary(path, "one\n")
    _markdown.append_step_summary(path, "two\n")
    assert path.read_text() == "# earlier step\none\ntwo\n"


def test_tests_not_started_are_skipped_testcases_and_listed() -> None:
    skipped = [("t_app", "no ready android build of com.example.shop; upload one")]
    suite = ET.fromstring(_junit.junit_xml(_model.runs_report([PASSED], skipped=skipped)))
    assert (suite.attrib["tests"], suite.attrib["skipped"]) == ("2", "1")
    case = suite.findall("testcase")[1]
    assert (case.attrib["name"], case.attrib["classname"]) == ("t_app", "t_app")
    skip = case.find("skipped")
    assert skip is not None
    assert skip.attrib["message"] == skipped[0][1]
    text = _markdown.step_summary_markdown(_model.runs_report([PASSED], skipped=skipped))
    assert (
        "Not started (1):\n- `t_app`: no ready android build of com.example.shop; upload one"
        in text
    )


def test_a_report_makes_its_folders_and_follows_the_umask(tmp_path: Path) -> None:
    """A publisher step running as another user reads the report: 0644 under umask 022, as
    any new file (not mkstemp's 0600); the missing folders are made, as pytest's --junitxml
    does, and no temp file is left beside it."""
    import os

    old = os.umask(0o022)
    try:
        written = write_atomically(tmp_path / "reports" / "deep" / "r.xml", b"<x/>")
    finally:
        os.umask(old)
    assert written.read_bytes() == b"<x/>"
    assert written.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in written.parent.iterdir()] == ["r.xml"]


XSD = Path(__file__).resolve().parent / "data" / "surefire-test-report.xsd"


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"skipped": [("t_app", "no build")]},
        {"earlier": {"j_ok": [FAILED]}},  # flaky: passed on attempt 2
        {"earlier": {"j_bad": [ERRORED, FAILED]}},  # failed after re-runs of both kinds
        {"earlier": {"j_err": [FAILED]}, "quarantined": {"t_err": "crashes on boot"}},
    ],
    ids=["plain", "not-started", "flaky", "reruns", "quarantined"],
)
def test_junit_is_valid_against_surefires_own_schema(options: dict[str, Any]) -> None:
    """Maven Surefire's surefire-test-report.xsd (tests/data), as Jenkins' strict readers hold
    it: the root a <testsuite>, no <properties> inside a testcase, its children in order."""
    import xmlschema

    runs = [PASSED, FAILED, ERRORED, CANCELLED, RUNNING]
    xmlschema.XMLSchema(XSD).validate(
        _junit.junit_xml(_model.runs_report(runs, name="p_demo", **options)).decode()
    )


def test_a_quarantined_test_is_skipped_with_its_attempts_told() -> None:
    suite = ET.fromstring(
        _junit.junit_xml(
            _model.runs_report(
                [PASSED, FAILED], earlier={"j_bad": [ERRORED]}, quarantined={"t_bad": "flaky UI"}
            )
        )
    )
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "1")
    case = suite.findall("testcase")[1]
    assert [child.tag for child in case] == ["skipped", "system-out"]
    assert case[0].get("message") == "quarantined: flaky UI"
    told = case.findtext("system-out") or ""
    assert "quarantined: flaky UI; its attempts:" in told
    assert "1. j_err error" in told
    assert "2. j_bad failed" in told
