"""Reports on finished runs for people and CI. This module: how a run reads in a report, the
text summary and GitHub Markdown; beside it, `junit` (JUnit XML) and `html` (the --html page,
drawn by report.html.j2). Pure functions of the runs (no I/O) plus small writers; used by
`asyncclient run`/`watch`, the demo and the MCP server. Over 400 lines: every report reads a
run, a suite, its quarantine and its history through this one wording, so that the terminal,
`--json`, the GitHub summary, JUnit and the HTML page never say one thing two ways."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import quote

from asyncclient._core import _lenient, _untrusted
from asyncclient.models import Requirement, Run

if TYPE_CHECKING:
    from asyncclient.flakiness import TestFlakiness
    from asyncclient.reruns import SuiteResult

__all__ = [
    "Outcome",
    "append_step_summary",
    "counts_line",
    "duration_seconds",
    "failed_requirements",
    "format_duration",
    "history_fields",
    "history_verdict",
    "outcome",
    "plain_text",
    "report_fields",
    "step_summary_markdown",
    "suite_notes",
    "summary_lines",
]

Outcome = Literal["passed", "failure", "error", "skipped", "not_final"]

# The order statuses are counted in; others (a status added later) follow, sorted.
_STATUS_ORDER: Final = (
    "passed",
    "failed",
    "blocked",
    "inconclusive",
    "error",
    "cancelled",
    "running",
    "queued",
)
_ICONS: Final = {
    "passed": "\u2705",  # white heavy check mark
    "failed": "\u274c",  # cross mark
    "blocked": "\u26d4",  # no entry
    "inconclusive": "\u2754",  # white question mark
    "error": "\U0001f4a5",  # collision
    "cancelled": "\u23f9\ufe0f",  # stop button
}
_NOT_FINAL_ICON: Final = "\u23f3"  # hourglass


def status_of(run: Run) -> str:
    return str(run.status) or "unknown"


def outcome(run: Run) -> Outcome:
    """How a run counts in a report: passed, a failure (failed/blocked/inconclusive or another
    final status), an error, skipped (cancelled, by whatever word), or not final (the watch
    ended first). The status word is read leniently (`canceled`, `stopped` are cancelled)."""
    if not run.is_final:
        return "not_final"
    kind = run.status_kind
    if kind == "passed":
        return "passed"
    if kind == "error":
        return "error"
    if kind == "cancelled":
        return "skipped"
    return "failure"


def duration_seconds(run: Run) -> float | None:
    """The run's duration: durationMs when sent, else finishedAt - startedAt."""
    if run.duration_ms is not None:
        return run.duration_ms / 1000.0
    if run.started_at is not None and run.finished_at is not None:
        return max(0.0, (run.finished_at - run.started_at).total_seconds())
    return None


def format_duration(seconds: float | None) -> str:
    """A duration for people, the one form every report and table uses: `23.9 s`,
    `3 min 07 s`, `1 h 02 min`; empty for None."""
    if seconds is None:
        return ""
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest:02d} s"
    hours, rest = divmod(whole, 3600)
    return f"{hours} h {rest // 60:02d} min"


#: One line of text from a JSON value the service sent (None is empty).
plain_text = _lenient.text


def headline(run: Run) -> str:
    return run.headline_text


def title(run: Run) -> str:
    return plain_text(run.test_title) or run.test_id or run.id


def error_details(run: Run) -> tuple[str, str]:
    """(code, message) of a run that ended in error; empty strings when it carried none."""
    return run.error_code, run.error_message


def failed_requirements(run: Run) -> tuple[Requirement, ...]:
    """The requirements to show for a run: each one that failed, with its reason. A run that
    did not pass but has no requirement read as failed shows those whose result could not be
    read (their raw text), so what the service said is never dropped."""
    checks = run.requirement_results
    failed = tuple(req for req in checks if req.outcome == "failed")
    if failed or outcome(run) not in ("failure", "error"):
        return failed
    return tuple(req for req in checks if req.outcome == "unknown")


def requirement_line(req: Requirement) -> str:
    """`name title: reason`; a requirement whose result could not be read says what it was."""
    if req.outcome == "failed":
        return req.line()
    return f"{req.line()} (result: {req.result or 'not given'})"


def labelled(req: Requirement) -> str:
    return ("failed " if req.outcome == "failed" else "unclear ") + requirement_line(req)


def captures(run: Run) -> dict[str, str]:
    return run.capture_values


def report_fields(run: Run) -> dict[str, Any]:
    """What the reports read from a run, in one shape whatever the service's dialect: the
    `summary` object of each run in `--json` output."""
    return {
        "outcome": outcome(run),
        "status": run.status_kind,
        "verdict": run.verdict_text,
        "headline": headline(run),
        "error": {"code": run.error_code, "message": run.error_message} if run.error else None,
        "failedRequirements": [
            {"name": r.name, "title": r.title, "result": r.result, "reason": r.reason}
            for r in failed_requirements(run)
        ],
        "captures": captures(run),
        "files": list(run.file_refs),
        "buildId": run.used_build_id,
    }


def _ordered_counts(runs: Iterable[Run]) -> list[tuple[str, int]]:
    return _ordered(Counter(status_of(run) for run in runs))


def _ordered(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    left = {status: count for status, count in counts.items() if count}
    known = [(status, left.pop(status)) for status in _STATUS_ORDER if status in left]
    return known + sorted(left.items())


def counts_line(runs: Sequence[Run]) -> str:
    """ "3 runs: 2 passed, 1 failed" """
    return counts_text(Counter(status_of(run) for run in runs))


def counts_text(counts: Mapping[str, int]) -> str:
    """counts_line from counts by status (status_of) kept as runs change, for a live display
    that must not go over every run at each frame."""
    total = sum(counts.values())
    parts = ", ".join(f"{count} {status}" for status, count in _ordered(counts))
    noun = "run" if total == 1 else "runs"
    return f"{total} {noun}: {parts}" if total else "0 runs"


# --- text summary --------------------------------------------------------------------------------


def summary_lines(
    runs: Sequence[Run],
    *,
    earlier: Mapping[str, Sequence[Run]] | None = None,
    counts: str | None = None,
) -> list[str]:
    """The end-of-watch summary: per run its status, ids, title and duration, then indented the
    headline, each failed requirement with its reason, and the link; a counts line last.
    `earlier`: the earlier attempts of re-run tests, by final run id (each gets a line);
    `counts`: the last line instead of the runs' counts (a suite's tests with attempts)."""
    lines: list[str] = []
    width = max((len(status_of(run)) for run in runs), default=0)
    for run in runs:
        head = [status_of(run).ljust(width), run.id, run.test_id or "", title(run)]
        took = format_duration(duration_seconds(run))
        if took:
            head.append(f"({took})")
        lines.append("  ".join(part for part in head if part))
        indent = " " * (width + 2)
        if not run.is_final:
            lines.append(f"{indent}not final when the watch ended")
        if headline(run):
            lines.append(indent + headline(run))
        code, message = error_details(run)
        if outcome(run) == "error" and (code or message):
            detail = f"{code}: {message}" if code and message else code or message
            lines.append(f"{indent}error {detail}")
        for req in failed_requirements(run):
            lines.append(f"{indent}{labelled(req)}")
        if run.link:
            lines.append(indent + run.link)
        before = (earlier or {}).get(run.id)
        if before:
            word = "flaky: passed on" if run.passed else "after"
            tries = ", ".join(f"{a.id} {status_of(a)}" for a in before)
            lines.append(f"{indent}{word} attempt {len(before) + 1} (earlier: {tries})")
    lines.append(counts or counts_line(runs))
    return lines


# --- GitHub step summary (Markdown) -------------------------------------------------------------


def _cell(text: str) -> str:
    """Text in the summary, the service's included: shown as the text it is (no link, image,
    emphasis or HTML of its own), one line, `|` escaped for the table."""
    return _untrusted.markdown(text)


def _code(text: str) -> str:
    """An id as a code span (one line, `|` escaped for the table); text holding a backtick
    as escaped text instead."""
    shown = _untrusted.line(text)
    if "`" in shown or not shown:
        return _cell(shown)
    return "`" + shown.replace("|", "\\|") + "`"


def _link(text: str, url: str | None) -> str:
    """An id linked to its page: only an http(s) URL is a link, percent-encoded so that no
    character of it can end the link or start Markdown of its own."""
    shown = _code(text)
    if not url or not url.lower().startswith(("https://", "http://")):
        return shown
    safe = quote(_untrusted.line(url), safe=_URL_SAFE)
    return f"[{shown}]({safe})"


# Characters a URL keeps as they are; every other one (spaces, parentheses, `<>`, `|`, `\\`,
# quotes, controls) is percent-encoded.
_URL_SAFE: Final = "/:?#@!$&*+,;=-._~%"


def step_summary_markdown(
    runs: Sequence[Run],
    *,
    heading: str = "Test runs",
    skipped: Sequence[tuple[str, str]] = (),
    earlier: Mapping[str, Sequence[Run]] | None = None,
    counts: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """A Markdown table of the runs (status, test, run with link, duration, headline); for
    each run that did not pass its failed requirements with reasons; the tests not started.
    With `earlier` (re-run tests: the earlier attempts of each final run), the tests that
    passed only on a re-run get a section of their own; `counts` replaces the counts line;
    `notes` (suite_notes: the quarantine and the history) a section of their own."""
    lines = [f"### {_cell(heading)}: {_cell(counts or counts_line(runs))}", ""]
    if runs:
        lines += [
            "| Status | Test | Run | Duration | Headline |",
            "|---|---|---|---:|---|",
        ]
        for run in runs:
            status = status_of(run)
            icon = _ICONS.get(run.status_kind, "") if run.is_final else _NOT_FINAL_ICON
            test = _cell(title(run)) + (f" ({_code(run.test_id)})" if run.test_id else "")
            lines.append(
                f"| {icon} {_cell(status)} | {test} | {_link(run.id, run.link)} "
                f"| {format_duration(duration_seconds(run))} | {_cell(headline(run))} |"
            )
        details = [run for run in runs if outcome(run) not in ("passed", "skipped")]
        if details:
            lines += ["", "<details><summary>Runs that did not pass</summary>", ""]
            for run in details:
                summary = headline(run) or status_of(run)
                lines.append(
                    f"- **{_cell(title(run))}** ({_link(run.id, run.link)}): {_cell(summary)}"
                )
                for req in failed_requirements(run):
                    lines.append(f"  - {_cell(requirement_line(req))}")
            lines += ["", "</details>"]
    flaky = [run for run in runs if run.passed and (earlier or {}).get(run.id)]
    if flaky:
        lines += ["", f"#### Flaky tests ({len(flaky)}): passed on a re-run", ""]
        for run in flaky:
            failed = (earlier or {})[run.id]
            tries = ", ".join(
                f"{_link(a.id, a.link)} {_cell(status_of(a))}: {_cell(headline(a))}" for a in failed
            )
            lines.append(
                f"- **{_cell(title(run))}** passed on attempt {len(failed) + 1} "
                f"({_link(run.id, run.link)}); before: {tries}"
            )
    if notes:
        lines += ["", "#### Quarantine and history", ""]
        lines += [f"- {_cell(note)}" for note in notes]
    if skipped:
        lines += ["", f"Not started ({len(skipped)}):"]
        lines += [f"- {_code(test_id)}: {_cell(reason)}" for test_id, reason in skipped]
    return "\n".join(lines) + "\n\n"


def history_verdict(history: TestFlakiness | None) -> str:
    """What a test's history before this job makes of its failure now: a new failure (it was
    stable), a known flake, a known breakage, or no earlier runs."""
    if history is None:
        return "no earlier runs"
    return {"stable": "new failure", "flaky": "known flake", "broken": "known breakage"}[
        history.state
    ]


def history_fields(history: TestFlakiness | None) -> dict[str, Any]:
    """The `history` object of a test that did not pass, in --json."""
    fields: dict[str, Any] = {"verdict": history_verdict(history)}
    if history is not None:
        fields.update(
            state=history.state,
            runs=history.runs,
            notPassed=history.not_passed,
            flakyBuilds=history.flaky_builds,
            builds=history.builds,
            recent=list(history.recent),
        )
    return fields


def _history_line(test_id: str, history: TestFlakiness | None) -> str:
    verdict = history_verdict(history)
    if history is None:
        return f"{test_id}: {verdict} (in the last 14 days): nothing to compare with"
    done = f"{history.not_passed} of {history.runs} earlier runs did not pass"
    if history.state == "stable":
        return f"{test_id}: {verdict}: it passed its {history.runs} earlier runs"
    if history.state == "flaky":
        return (
            f"{test_id}: {verdict}: flaky on {history.flaky_builds} of {history.builds} "
            f"builds ({done}) {history.strip}"
        )
    return f"{test_id}: {verdict}: broken on its last builds ({done}) {history.strip}"


def suite_notes(result: SuiteResult) -> list[str]:
    """What the quarantine and the history say of a suite, a line each: every quarantined
    test (excused, failing the job anyway, or passed: a hint to lift it), and for every test
    that did not pass whether it is a new failure, a known flake or a known breakage."""
    lines: list[str] = []
    for test in result.tests:
        reason = result.quarantined.get(test.test_id)
        if reason is None:
            continue
        if test.flaky:
            lines.append(
                f"quarantined {test.test_id} passed on attempt {test.attempts} ({reason}): "
                "still flaky"
            )
        elif test.passed:
            lines.append(
                f"quarantined {test.test_id} passed ({reason}): if it keeps passing, lift its "
                "quarantine (asyncclient flaky --write-quarantine names it once it has passed "
                "its last 20 runs)"
            )
        elif result.fail_on_quarantined:
            lines.append(
                f"quarantined {test.test_id} did not pass ({reason}): it fails the job "
                "(--fail-on-quarantined)"
            )
        else:
            lines.append(
                f"quarantined {test.test_id} did not pass ({reason}): it does not fail the job"
            )
    history = result.history
    if history is not None:
        lines += [
            _history_line(test.test_id, history.get(test.test_id))
            for test in result.tests
            if test.test_id in history
        ]
    return lines


def append_step_summary(path: str | os.PathLike[str], markdown: str) -> None:
    """Append to the file GITHUB_STEP_SUMMARY names (other steps of the job write there too)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(markdown)
