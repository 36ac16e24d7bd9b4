"""The end-of-watch summary in plain text: the terminal's (stdout), the demo's, the CI log's.
Renders the report model (`model.SuiteReport`)."""

from __future__ import annotations

from asyncclient._reports.model import SuiteReport

__all__ = ["cause_lines", "summary_lines"]

_SHOWN_CAUSES = 5


def cause_lines(report: SuiteReport) -> list[str]:
    """Why the job's failures happened, the largest cause first, when there are two failures
    or more: `9 of 12 failures share: ...`, at most five lines and one that counts the rest."""
    found = report.causes
    if not found or found[0].failures < 2:
        return []
    lines = [f"why it failed: {cause.line()}" for cause in found[:_SHOWN_CAUSES]]
    rest = len(found) - _SHOWN_CAUSES
    if rest > 0:
        lines.append(f"why it failed: {rest} more cause{'' if rest == 1 else 's'}")
    return lines


def summary_lines(report: SuiteReport) -> list[str]:
    """Per test its final run's status, ids, title and duration, then indented the headline,
    each failed requirement with its reason, the link and the earlier attempts; then what the
    quarantine and the history say, the device time, the counts line, and the tests not
    started."""
    lines = cause_lines(report)
    finals = report.finals
    width = max((len(final.status) for final in finals), default=0)
    for test in report.tests:
        run = test.final
        head = [run.status.ljust(width), run.id, run.run.test_id or "", run.title]
        if run.duration:
            head.append(f"({run.duration})")
        lines.append("  ".join(part for part in head if part))
        indent = " " * (width + 2)
        if not run.final:
            lines.append(f"{indent}not final when the watch ended")
        if test.fail_fast:
            lines.append(f"{indent}stopped by fail-fast (--max-failures)")
        if run.headline:
            lines.append(indent + run.headline)
        if run.outcome == "error" and run.error and any(run.error):
            code, message = run.error
            detail = f"{code}: {message}" if code and message else code or message
            lines.append(f"{indent}error {detail}")
        lines += [f"{indent}{check.labelled}" for check in run.checks]
        if run.link:
            lines.append(indent + run.link)
        if test.repeated:
            tries = ", ".join(f"{a.id} {a.status}" for a in test.earlier)
            word = "flaky on arrival" if test.outcome == "flaky_on_arrival" else "new test"
            lines.append(f"{indent}{word}: {len(test.attempts)} runs (the others: {tries})")
        elif test.earlier:
            word = "after"
            if run.passed:
                word = "flaky: passed on" if test.flaky else "passed on"
                if test.recovered:
                    word = "not flaky (the infrastructure failed before): passed on"
            tries = ", ".join(
                f"{a.id} {a.status}" + (" (stopped: another run passed)" if a.stopped else "")
                for a in test.earlier
            )
            together = any(a.kind == "copy" or a.stopped for a in test.attempts)
            label = "others" if together else "earlier"
            lines.append(f"{indent}{word} {test.passed_as} ({label}: {tries})")
        if test.cause is not None:
            cause = test.cause
            lines.append(f"{indent}category: {cause.category_name} ({cause.category})")
        if test.not_rerun:
            lines.append(f"{indent}not re-run: {test.not_rerun} (--rerun-known re-runs it)")
        if test.baseline:
            lines.append(f"{indent}{'pre-existing: ' if test.pre_existing else ''}{test.baseline}")
    lines += report.notes
    if report.trace_id:
        lines.append(f"trace {report.trace_id}")
    cost = report.cost
    if cost.runs:
        lines.append(cost.line())
    lines.append(report.counts)  # last (but the tests not started): what `tail -1` shows
    lines += [
        f"not started {test_id}: {reason or 'no reason given'}"
        for test_id, reason in report.skipped
    ]
    return lines
