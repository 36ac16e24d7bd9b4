"""The one sanitiser of the service's text (asyncclient._core._untrusted), and every surface that
shows that text to a person or a CI system: the terminal (plain lines, rich tables), the
command's logs, the GitHub step summary, JSON output. Property tests throw arbitrary text at
each surface (1,000 examples a surface in CI, fewer on a contributor's machine) and check that
no control character passes, no line starts a GitHub workflow command (`::` after spaces, or
`##[` anywhere), and no Markdown of the service's own is rendered.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import unicodedata
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from asyncclient._core import _untrusted
from asyncclient._reports import markdown as _markdown
from asyncclient._reports import model as _model
from asyncclient._reports import text as _text
from asyncclient.cli._logging import _SafeFormatter
from asyncclient.cli._output import Output
from asyncclient.models import Run, RunStatus

EXAMPLES = 1000 if os.environ.get("CI") else 150
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# What a hostile service would send: every character, with the dangerous ones often.
DANGER = [
    "\x1b[31m", "\x1b]8;;https://evil.example\x07link\x1b]8;;\x07", "\x07", "\x00", "\x9b2J",
    "\x85", "\u2028", "\u202e", "\r", "\n", "\n::error::forged", "::add-mask::x", "##[error]x",
    "  ::warning ::x", "[x](https://evil.example)", "![img](https://evil.example/i.png)",
    "**bold**", "<b>x</b>", "https://evil.example", "www.evil.example", "a@b.example", ":+1:",
    "$x^2$", "`code`", "| cell |", "&lt;", "\\", "\t", "\x7f",
]  # fmt: skip
hostile = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(DANGER)), max_size=8).map(
    "".join
)


def _controls(text: str, *, newlines: bool = False) -> list[str]:
    """Characters a terminal or log acts on: C0 (new lines allowed where asked), DEL, C1 and
    the bidirectional controls."""
    allowed = {"\n"} if newlines else set()
    return [
        ch
        for ch in text
        if ch not in allowed
        and (
            unicodedata.category(ch) == "Cc"
            or ch in "\u061c\u200e\u200f\u2028\u2029\ufeff"
            or "\u202a" <= ch <= "\u202e"
            or "\u2066" <= ch <= "\u2069"
        )
    ]


def _no_workflow_command(text: str) -> None:
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), line
        assert "##[" not in line, line


# --- the sanitiser itself -----------------------------------------------------------------------


def test_line_shows_controls_and_folds_new_lines() -> None:
    assert _untrusted.line("a\x1b[31mred\x1b[0m\nb\r\nc\x07\u202e") == (
        "a\\x1b[31mred\\x1b[0m b c\\x07\\u202e"
    )
    assert _untrusted.line("  plain  title ") == "plain title"
    assert _untrusted.line(None) == ""
    assert (
        _untrusted.line("Caf\u00e9 \u65e5\u672c \U0001f600") == "Caf\u00e9 \u65e5\u672c \U0001f600"
    )


def test_guard_defuses_workflow_commands_only() -> None:
    assert _untrusted.guard("::error::x") == "\\::error::x"
    assert _untrusted.guard("   ::set-output name=a::b") == "   \\::set-output name=a::b"
    assert _untrusted.guard("ok ##[error]x") == "ok ##\\[error]x"
    assert _untrusted.guard("time 12:30::00 is fine") == "time 12:30::00 is fine"


def test_markdown_is_shown_as_text() -> None:
    shown = _untrusted.markdown("[x](https://evil.example) **b** www.evil.example")
    assert shown == "\\[x\\](https\\://evil.example) \\*\\*b\\*\\* www\\.evil.example"


def test_json_text_keeps_the_value_and_escapes_what_a_terminal_acts_on() -> None:
    value = {"title": "a\x9b2J b\u202e ##[error] \x7f"}
    dumped = _untrusted.json_text(json.dumps(value, ensure_ascii=False))
    assert json.loads(dumped) == value
    assert not _controls(dumped, newlines=True)
    assert "##[" not in dumped


def test_workflow_escapes() -> None:
    assert _untrusted.workflow_data("50%\r\nx") == "50%25%0D%0Ax"
    assert _untrusted.workflow_property("a:b,c") == "a%3Ab%2Cc"


@fuzz
@given(hostile)
def test_line_never_passes_a_control_or_a_new_line(text: str) -> None:
    shown = _untrusted.line(text)
    assert not _controls(shown)
    assert "\n" not in shown


@fuzz
@given(st.lists(hostile, max_size=5).map("\n".join))
def test_block_never_passes_a_control_or_a_workflow_command(text: str) -> None:
    shown = _untrusted.block(text)
    assert not _controls(shown, newlines=True)
    _no_workflow_command(shown)


@fuzz
@given(st.recursive(st.none() | hostile | st.integers(), lambda inner: st.lists(inner, max_size=3)))
def test_json_text_round_trips_and_is_safe_to_print(value: Any) -> None:
    dumped = _untrusted.json_text(json.dumps({"v": value}, indent=2, ensure_ascii=False))
    assert json.loads(dumped) == {"v": value}
    assert not _controls(dumped, newlines=True)
    _no_workflow_command(dumped)


# --- the surfaces ------------------------------------------------------------------------------


def _run(title: str, headline: str, reason: str, status: str = "failed") -> Run:
    return Run(
        id="j_1",
        test_id="t_1",
        test_title=title,
        status=status,  # type: ignore[arg-type]  # an unknown status is kept as its text
        final=True,
        headline=headline,
        link="https://svc.example/runs/j_1",
        requirements=[{"id": "r1", "title": title, "result": "failed", "reason": reason}],
        error={"code": headline, "message": reason},
    )


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@fuzz
@given(hostile, hostile, hostile)
def test_the_terminal_never_shows_the_services_controls(
    title: str, headline: str, reason: str
) -> None:
    """The end-of-watch summary through Output, piped and on a terminal (rich)."""
    run = _run(title, headline, reason)
    for stream in (io.StringIO(), _Tty()):
        out = Output(stdout=stream, stderr=stream)
        for line in _text.summary_lines(_model.runs_report([run])):
            out.info(line)
        out.table(["run", "title"], [[run.id, title], [headline, reason]])
        out.fields([("title", title), ("reason", reason)])
        out.error(f"the service said: {reason}")
        written = stream.getvalue()
        # rich colours the table itself (its own ESC sequences): strip exactly those.
        if isinstance(stream, _Tty):
            written = re.sub(r"\x1b\[[0-9;]*m", "", written)
        assert not _controls(written, newlines=True), written
        _no_workflow_command(written)


@fuzz
@given(hostile, hostile)
def test_log_lines_never_show_the_services_controls(message: str, request_id: str) -> None:
    record = logging.LogRecord(
        "asyncclient.requests", logging.WARNING, __file__, 1, "%s (request %s)",
        (message, request_id), None,
    )  # fmt: skip
    line = _SafeFormatter("%(levelname)s %(name)s %(message)s").format(record)
    assert not _controls(line, newlines=True)
    _no_workflow_command(line)


_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_OWN_TAGS = {"h3", "h4", "table", "thead", "tbody", "tr", "th", "td", "p", "ul", "li", "code",
             "a", "strong", "html_block", "details"}  # fmt: skip


@fuzz
@given(hostile, hostile, hostile)
def test_the_step_summary_shows_the_services_markdown_as_text(
    title: str, headline: str, reason: str
) -> None:
    run = _run(title, headline, reason)
    text = _markdown.step_summary_markdown(_model.runs_report([run], skipped=[("t_2", reason)]))
    assert not _controls(text, newlines=True)
    _no_workflow_command(text)
    # No link, image, emphasis or HTML but the summary's own: the run's page on its id (in
    # the table and in the details), the bold title of a run that did not pass.
    tokens = [t for block in _MARKDOWN.parse(text) for t in (block.children or [block])]
    links = [t for t in tokens if t.type == "link_open"]
    assert [t.attrGet("href") for t in links] == ["https://svc.example/runs/j_1"] * 2
    assert not [t for t in tokens if t.type in ("image", "em_open", "s_open", "html_inline")]
    assert sum(t.type == "strong_open" for t in tokens) == 1
    # GitHub's extended autolinks (bare https: and www.) and mentions never form.
    assert not re.search(r"(?<!\\)://", text.replace("https://svc.example/runs/j_1", ""))
    assert not re.search(r"(?i)www\.", text)
    assert not re.search(r"(?<!\\)@", text)


def test_a_forged_summary_line_stays_in_its_cell() -> None:
    run = _run("x\n\n# Heading\n- [ ] task", "h", "r\n::error::forged")
    text = _markdown.step_summary_markdown(_model.runs_report([run]))
    assert "\n# Heading" not in text
    assert "\n::error" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert {line.replace("\\|", "").count("|") for line in rows} == {6}


@fuzz
@given(hostile, hostile, hostile)
def test_the_ctrf_report_keeps_the_services_text_and_shows_no_control(
    title: str, headline: str, reason: str
) -> None:
    """The CTRF file: the same values as sent (JSON round trip), with nothing a terminal or a
    CI log acts on when a reporter prints it."""
    import json
    import tempfile
    from pathlib import Path

    from asyncclient._reports import ctrf as _ctrf

    run = _run(title, headline, reason)
    with tempfile.TemporaryDirectory() as folder:
        path = _ctrf.write_ctrf(
            Path(folder) / "ctrf.json", _model.runs_report([run], skipped=[("t_2", reason)])
        )
        text = path.read_text(encoding="utf-8")
    assert not _controls(text, newlines=True)
    _no_workflow_command(text)
    tests = json.loads(text)["results"]["tests"]
    assert tests[1]["message"] == (reason or "not started")  # the value as sent
    assert tests[0]["testId"] == "t_1"


@fuzz
@given(hostile, hostile, hostile)
def test_allure_results_show_the_services_text_as_bounded_lines_with_no_control(
    title: str, headline: str, reason: str
) -> None:
    """Allure results: every file valid (JSON, Java properties in ASCII), each text of the
    service one line with nothing a terminal or a CI log acts on, within FIELD_LIMIT."""
    import json
    import tempfile
    from pathlib import Path

    from asyncclient._reports import allure as _allure

    run = _run(title, headline, reason)
    report = _model.runs_report([run], skipped=[("t_2", reason)])
    with tempfile.TemporaryDirectory() as folder:
        files = _allure.allure_results(report, Path(folder), environ={})
    for name, data in files.items():
        text = data.decode("utf-8")
        assert not _controls(text, newlines=True)
        _no_workflow_command(text)
        if name.endswith(".json"):
            json.loads(text)
        else:
            assert text.isascii()
    for name, data in files.items():
        if name.endswith("-result.json"):
            result = json.loads(data)
            details = result["statusDetails"]
            for text in (result["name"], details.get("message", "")):
                assert "\n" not in text  # one line each
                assert len(text) <= _allure.FIELD_LIMIT
            assert len(details.get("trace", "")) <= _allure.FIELD_LIMIT


@fuzz
@given(hostile, hostile, hostile, st.one_of(hostile, st.integers(0, 10**40).map(str)), hostile)
def test_allures_executor_takes_the_cis_variables_as_data(
    server: str, repository: str, workflow: str, number: str, link: str
) -> None:
    """executor.json from a CI's variables (a fork's workflow name, a forged server URL): one
    line each, links only http(s) with no space or control, the build order a Java long."""
    import json
    import re

    from asyncclient._reports import allure as _allure

    for environ in (
        {"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": server, "GITHUB_REPOSITORY": repository,
         "GITHUB_RUN_ID": "7", "GITHUB_RUN_NUMBER": number, "GITHUB_WORKFLOW": workflow},
        {"GITLAB_CI": "true", "CI_SERVER_URL": server, "CI_JOB_URL": link,
         "CI_PIPELINE_URL": link, "CI_PIPELINE_IID": number, "CI_JOB_NAME": workflow},
    ):  # fmt: skip
        found = _allure.executor(environ)
        text = json.dumps(found, ensure_ascii=False)
        assert not _controls(text)
        for key in ("url", "buildUrl"):
            if key in found:
                assert re.fullmatch(r"https?://\S+", found[key]), found[key]
                assert not _controls(found[key])
        assert 0 <= found.get("buildOrder", 0) < 2**63
        assert "\n" not in found["buildName"]


@fuzz
@given(hostile, hostile)
def test_the_event_stream_keeps_the_services_text_and_shows_no_control(
    test_id: str, status: str
) -> None:
    """--events: each line one JSON object with the values as sent, nothing a terminal or a
    CI log acts on (the stream is often tailed, or is standard output)."""
    import json

    from asyncclient._reports.model import read_attempt
    from asyncclient.cli._events import Events
    from asyncclient.suite import RunChanged, RunFinished, RunStarted

    stream = io.StringIO()
    events = Events(stream)
    run = Run(id="j_1", test_id=test_id, status=status, final=True)  # type: ignore[arg-type]
    events.write(RunStarted("j_1", test_id, 1))
    events.write(RunChanged(run, 1))
    events.write(RunFinished(read_attempt(run, 1)))
    text = stream.getvalue()
    assert not _controls(text, newlines=True)
    _no_workflow_command(text)
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["event"] for line in lines] == ["run_started", "run_status", "run_finished"]
    assert all(line["testId"] == test_id for line in lines)
    assert lines[1]["status"] == str(run.status)


@fuzz
@given(hostile, hostile, hostile)
def test_reused_and_new_tests_show_the_services_text_as_text(
    title: str, link: str, build: str
) -> None:
    """A reused test (the earlier run's link and build as the service sent them) and a new
    test's repeats, through the terminal summary and the step summary: no control, no
    workflow command, no link but the run pages'."""
    from asyncclient.reruns import Attempts, SuiteResult
    from asyncclient.spend.reuse import Reuse

    stopped = Run(id="j_2", test_id="t_2", test_title=title, status=RunStatus.CANCELLED,
                  final=True, link="https://svc.example/runs/j_2")  # fmt: skip
    reuse = Reuse("t_2", "j_2", "j_1", link, build, "a" * 64, None, 12.0)
    repeats = tuple(
        Run(id=f"j_{n}", test_id="t_3", test_title=title, status=status, final=True)
        for n, status in ((3, RunStatus.FAILED), (4, RunStatus.PASSED))
    )
    result = SuiteResult((Attempts("t_2", (stopped,), reused=reuse),
                          Attempts("t_3", repeats, repeats=1)))  # fmt: skip
    report = _model.suite_report(result, name="p_1")
    stream = io.StringIO()
    out = Output(stdout=stream, stderr=stream)
    for line in _text.summary_lines(report):
        out.info(line)
    for written in (stream.getvalue(), _markdown.step_summary_markdown(report)):
        assert not _controls(written, newlines=True), written
        _no_workflow_command(written)
    tokens = [
        t
        for block in _MARKDOWN.parse(_markdown.step_summary_markdown(report))
        for t in (block.children or [block])
    ]
    hrefs = [str(t.attrGet("href")) for t in tokens if t.type == "link_open"]
    assert all(href.lower().startswith(("https://", "http://")) for href in hrefs), hrefs


@fuzz
@given(hostile, hostile)
def test_a_verification_shows_the_services_words_as_text(status: str, test_title: str) -> None:
    """`quarantine verify`: the runs' statuses as the service wrote them, through the progress
    lines, the verdict and --json: no control, no workflow command; the JSON keeps them."""
    import json

    from asyncclient.spend.verify import FixCheck

    runs = tuple(
        Run(id=f"j_{n}", test_id="t_1", test_title=test_title, status=status, final=True)  # type: ignore[arg-type]
        for n in range(3)
    )
    check = FixCheck("t_1", 3, runs, (f"refused: {test_title}",))
    for stream in (io.StringIO(), _Tty()):
        out = Output(stdout=stream, stderr=stream)
        for run in runs:
            out.info(f"{run.id}  {run.test_id}  {run.status}  (1/3)")
        out.data(f"{check.test_id}: {check.sentence()}")
        out.always(f"  could not start a run of t_1: {check.start_errors[0]}")
        out.json([check.fields()])
        written = stream.getvalue()
        assert not _controls(written, newlines=True), written
        _no_workflow_command(written)
    as_json = io.StringIO()
    Output(stdout=as_json, stderr=io.StringIO()).json([check.fields()])
    (told,) = json.loads(as_json.getvalue())
    assert [r["status"] for r in told["runs"]] == [runs[0].status_kind] * 3


@fuzz
@given(hostile, hostile, hostile, hostile)
def test_the_causes_of_failures_show_the_services_text_as_text(
    headline: str, code: str, message: str, reason: str
) -> None:
    """Failures grouped by cause (asyncclient.failures) from hostile headlines, errors and check
    reasons: a signature is bounded whatever comes; the cause lines through the terminal, the
    step summary, the event stream and the MCP verdict show no control and no workflow command."""
    import json

    from asyncclient.cli._events import Events
    from asyncclient.failures import SIGNATURE_LIMIT, signature
    from asyncclient.mcp_server._wait import wait_result

    runs = [
        Run(id=f"j_{n}", test_id=f"t_{n}", status=status, final=True, headline=headline,
            error={"code": code, "message": message},
            requirements=[{"id": "r1", "result": "failed", "reason": reason}])
        for n, status in ((1, RunStatus.FAILED), (2, RunStatus.FAILED), (3, RunStatus.ERROR))
    ]  # fmt: skip
    assert all(len(signature(run)) <= SIGNATURE_LIMIT for run in runs)
    report = _model.runs_report(runs, name="p_1")
    assert report.causes
    stream = io.StringIO()
    out = Output(stdout=stream, stderr=stream)
    for line in _text.summary_lines(report):
        out.info(line)
    events = io.StringIO()
    Events(events).finished(report, 1)
    verdict = json.dumps(wait_result(runs, [], done=True, seconds=1.0, budget=20_000))
    for written in (stream.getvalue(), _markdown.step_summary_markdown(report), events.getvalue()):
        assert not _controls(written, newlines=True), written
        _no_workflow_command(written)
    assert not _controls(verdict, newlines=True)


@fuzz
@given(hostile, hostile, hostile, st.integers(min_value=1, max_value=50_000))
def test_failures_across_jobs_show_the_services_text_as_text_and_keep_it_small(
    headline: str, message: str, build: str, repeat: int
) -> None:
    """`asyncclient failures`' table and the known-failure reason from hostile headlines,
    errors, links and build ids, however long: what a failed run leaves in memory is bounded,
    the table shows no control and no workflow command, a build id that is not one is not
    quoted."""
    from datetime import UTC, datetime

    from asyncclient.cli._failures import _table
    from asyncclient.failures import FailureReport, cluster
    from asyncclient.failures._signature import failure_record

    long = (headline * repeat)[:200_000]
    runs = [
        Run(id=f"j_{n:08d}", test_id=f"t_{n % 3}", status=RunStatus.ERROR, final=True,
            headline=long, error={"code": message, "message": long}, link=long,
            build_id=build, requirements=[{"id": message, "result": "failed", "reason": long}])
        for n in range(6)
    ]  # fmt: skip
    records = [failure_record(run) for run in runs]

    def characters(value: object) -> int:
        if isinstance(value, str):
            return len(value)
        if isinstance(value, dict):
            return sum(characters(k) + characters(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return sum(characters(v) for v in value)
        return 0

    for record in records:  # a few KB a failed run, whatever came
        assert characters(attrs.asdict(record, recurse=False)) < 10_000
    now = datetime(2026, 11, 27, tzinfo=UTC)
    found = cluster(records)
    report = FailureReport("p_1", 14.0, now, now, tuple(found), failures=len(records))
    stream = io.StringIO()
    _table(Output(stdout=stream, stderr=stream), report)
    written = stream.getvalue()
    assert not _controls(written, newlines=True), written
    _no_workflow_command(written)
    assert all(len(line) < 2_000 for line in written.splitlines())
