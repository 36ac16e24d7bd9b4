"""The GitHub step summary (Markdown) of a suite: renders the report model
(`model.SuiteReport`). Everything the service sent passes through the one sanitiser
(`asyncclient._core._untrusted`): shown as the text it is, never as Markdown of its own."""

from __future__ import annotations

import os
from typing import Final
from urllib.parse import quote

from asyncclient._core import _untrusted
from asyncclient._reports.model import Attempt, SuiteReport

__all__ = ["append_step_summary", "step_summary_markdown"]

_ICONS: Final = {
    "passed": "\u2705",  # check mark, cross mark
    "failed": "\u274c",  # cross mark
    "blocked": "\u26d4",  # no entry
    "inconclusive": "\u2754",  # white question mark
    "error": "\U0001f4a5",  # collision
    "cancelled": "\u23f9\ufe0f",  # stop button
}
_NOT_FINAL_ICON: Final = "\u23f3"  # hourglass

# Kept as is in a URL; the rest is percent-encoded.
_URL_SAFE: Final = "/:?#@!$&*+,;=-._~%"


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


def _run_link(attempt: Attempt) -> str:
    """The run's id linked to its page; a reused run's is the earlier run it stands for."""
    shown = attempt.reused.earlier_run_id if attempt.reused is not None else attempt.id
    return _link(shown, attempt.link)


def step_summary_markdown(report: SuiteReport) -> str:
    """A Markdown table of the tests' final runs (status, test, run with link, duration,
    headline); for each run that did not pass its failed requirements with reasons; the tests
    that passed only on a re-run; the quarantine's and the history's notes; the tests not
    started; the device time."""
    from asyncclient._reports.text import cause_lines

    finals = report.finals
    lines = [f"### {_cell(report.name)}: {_cell(report.counts)}", ""]
    why = cause_lines(report)
    if why:
        lines += [f"- {_cell(line.removeprefix('why it failed: '))}" for line in why] + [""]
    if finals:
        lines += [
            "| Status | Test | Run | Duration | Headline |",
            "|---|---|---|---:|---|",
        ]
        for test in report.tests:
            run = test.final
            kind = "passed" if run.reused is not None else run.run.status_kind
            icon = _ICONS.get(kind, "") if run.final else _NOT_FINAL_ICON
            test_id = run.run.test_id
            named = _cell(run.title) + (f" ({_code(test_id)})" if test_id else "")
            status = run.status + (" (fail-fast)" if test.fail_fast else "")
            if test.outcome == "flaky_on_arrival":
                status += " (flaky on arrival)"
            lines.append(
                f"| {icon} {_cell(status)} | {named} | {_run_link(run)} "
                f"| {run.duration} | {_cell(run.headline)} |"
            )
        details = [t for t in report.tests if t.final.outcome not in ("passed", "cancelled")]
        if details:
            lines += ["", "<details><summary>Runs that did not pass</summary>", ""]
            for test in details:
                run = test.final
                lines.append(
                    f"- **{_cell(run.title)}** ({_run_link(run)}): "
                    f"{_cell(run.headline or run.status)}"
                )
                lines += [f"  - {_cell(check.line)}" for check in run.checks]
                if test.cause is not None:
                    named = f"{test.cause.category_name} ({test.cause.category})"
                    lines.append(f"  - category: {_cell(named)}")
                if test.not_rerun:
                    lines.append(f"  - not re-run: {_cell(test.not_rerun)}")
                if test.baseline:
                    said = "**pre-existing**: " if test.pre_existing else "baseline: "
                    lines.append(f"  - {said}{_cell(test.baseline)}")
            lines += ["", "</details>"]
    flaky = [test for test in report.tests if test.flaky]
    if flaky:
        lines += ["", f"#### Flaky tests ({len(flaky)}): passed on a re-run", ""]
        for test in flaky:
            tries = ", ".join(
                f"{_run_link(a)} {_cell(a.status)}: {_cell(a.headline)}" for a in test.earlier
            )
            lines.append(
                f"- **{_cell(test.title)}** passed on {test.passed_as} "
                f"({_run_link(test.final)}); before: {tries}"
            )
    if report.notes:
        lines += ["", "#### Quarantine, history, baseline and new tests", ""]
        lines += [f"- {_cell(note)}" for note in report.notes]
    if report.skipped:
        lines += ["", f"Not started ({len(report.skipped)}):"]
        lines += [f"- {_code(test_id)}: {_cell(reason)}" for test_id, reason in report.skipped]
    cost = report.cost
    if cost.runs:
        lines += ["", _cell(cost.sentence())]
    return "\n".join(lines) + "\n\n"


def append_step_summary(path: str | os.PathLike[str], markdown: str) -> None:
    """Append to the file GITHUB_STEP_SUMMARY names (other steps of the job write there too)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(markdown)
