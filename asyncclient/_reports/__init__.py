"""The reports' wording: how a run's status, outcome, duration and requirements read, how runs
are counted, what a test's history and quarantine say. `model` reads a suite once into the
report model; the renderers (`text`, `markdown`, `junit`, `ctrf`, `allure`, `html`) draw it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from asyncclient._values import _lenient
from asyncclient._values._outcomes import RunOutcome
from asyncclient.models import Requirement, Run

if TYPE_CHECKING:
    from asyncclient.flakiness import TestFlakiness
    from asyncclient.reruns import SuiteResult

__all__ = [
    "RunOutcome",
    "arrival_notes",
    "baseline_notes",
    "counts_line",
    "duration_seconds",
    "failed_requirements",
    "flakiness_fields",
    "flakiness_verdict",
    "format_duration",
    "plain_text",
    "run_result",
    "suite_notes",
]


# Count order; later statuses follow, sorted.
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


def status_of(run: Run) -> str:
    return str(run.status) or "unknown"


def run_result(run: Run) -> RunOutcome:
    """How a run counts in a report: passed, failed (failed/blocked/inconclusive or another
    final status), error, cancelled (by whatever word), or not final (the watch ended first).
    The status word is read leniently (`canceled`, `stopped` are cancelled)."""
    if not run.is_final:
        return "not_final"
    kind = run.status_kind
    if kind == "passed":
        return "passed"
    if kind == "error":
        return "error"
    if kind == "cancelled":
        return "cancelled"
    return "failed"


def duration_seconds(run: Run) -> float | None:
    """The run's duration: durationMs when sent, else finishedAt - startedAt."""
    return run.duration_seconds


def format_duration(seconds: float | None) -> str:
    """A duration for people, the one form every report and table uses: `23.9 s`,
    `3 min 07 s`, `1 h 02 min`; empty for None, `unknown` for a negative or endless one."""
    if seconds is None:
        return ""
    if not 0 <= seconds < math.inf:
        return "unknown"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest:02d} s"
    hours, rest = divmod(whole, 3600)
    return f"{hours} h {rest // 60:02d} min"


#: One line of text from a service's JSON value.
plain_text = _lenient.text


def title(run: Run) -> str:
    return plain_text(run.test_title) or run.test_id or run.id


def failed_requirements(run: Run) -> tuple[Requirement, ...]:
    """The requirements to show for a run: each one that failed, with its reason. A run that
    did not pass but has no requirement read as failed shows those whose result could not be
    read (their raw text), so what the service said is never dropped."""
    checks = run.requirement_results
    failed = tuple(req for req in checks if req.outcome == "failed")
    if failed or run_result(run) not in ("failed", "error"):
        return failed
    return tuple(req for req in checks if req.outcome == "unknown")


def requirement_line(req: Requirement) -> str:
    """`name title: reason`; a requirement whose result could not be read says what it was."""
    if req.outcome == "failed":
        return req.line()
    return f"{req.line()} (result: {req.result or 'not given'})"


def labelled(req: Requirement) -> str:
    return ("failed " if req.outcome == "failed" else "unclear ") + requirement_line(req)


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


def flakiness_verdict(flakiness: TestFlakiness | None) -> str:
    """What a test's earlier runs make of its failure now: a new failure (it was
    stable), a known flake, a known breakage, or no earlier runs."""
    if flakiness is None:
        return "no earlier runs"
    return {"stable": "new failure", "flaky": "known flake", "broken": "known breakage"}[
        flakiness.state
    ]


def flakiness_fields(flakiness: TestFlakiness | None) -> dict[str, Any]:
    """The `history` object of a test that did not pass, in --json (its flakiness)."""
    fields: dict[str, Any] = {"verdict": flakiness_verdict(flakiness)}
    if flakiness is not None:
        fields.update(
            state=flakiness.state,
            runs=flakiness.runs,
            notPassed=flakiness.not_passed,
            flakyBuilds=flakiness.flaky_builds,
            builds=flakiness.builds,
            recent=list(flakiness.recent),
        )
    return fields


def _flakiness_line(test_id: str, flakiness: TestFlakiness | None) -> str:
    verdict = flakiness_verdict(flakiness)
    if flakiness is None:
        return f"{test_id}: {verdict} (in the last 14 days): nothing to compare with"
    done = f"{flakiness.not_passed} of {flakiness.runs} earlier runs did not pass"
    if flakiness.state == "stable":
        return f"{test_id}: {verdict}: it passed its {flakiness.runs} earlier runs"
    if flakiness.state == "flaky":
        return (
            f"{test_id}: {verdict}: flaky on {flakiness.flaky_builds} of {flakiness.builds} "
            f"builds ({done}) {flakiness.strip}"
        )
    return f"{test_id}: {verdict}: broken on its last builds ({done}) {flakiness.strip}"


def arrival_notes(result: SuiteResult) -> list[str]:
    """A line per new test repeated (--new-test-runs): its runs, and whether they agree."""
    lines = []
    for test in result.tests:
        if not test.repeats:
            continue
        passed, counted = test.arrival_counts
        outcome = test.outcome
        if outcome == "flaky_on_arrival":
            verdict = (
                "it does not fail the job (--new-test-warn)"
                if result.policy.new_test_warn
                else "it fails the job: fix it before it fails other jobs"
            )
            lines.append(
                f"{test.test_id} is flaky on arrival: {passed} of {counted} runs passed on "
                f"its first build; {verdict}"
            )
        elif outcome in ("passed", "failed"):
            lines.append(f"new test {test.test_id}: {passed} of {counted} runs passed")
    return lines


def baseline_notes(result: SuiteResult) -> list[str]:
    """What the baseline said of each test that failed and ran there, a line each; a
    pre-existing one says what it does to the job (--pre-existing)."""
    does = {
        "fail": "it fails the job (--pre-existing fail)",
        "pass": "it does not fail the job (--pre-existing pass)",
        "warn": "it does not fail the job (--pre-existing warn)",
    }[result.policy.pre_existing]
    lines = []
    for test in result.tests:
        verdict = test.baseline
        if verdict is None or test.passed:
            continue
        if test.pre_existing:
            lines.append(f"{test.test_id} is pre-existing: it {verdict.why}; {does}")
        else:
            lines.append(f"{test.test_id}: {verdict.why}")
    return lines


def suite_notes(result: SuiteResult) -> list[str]:
    """What the quarantine and the history say of a suite, a line each: every quarantined
    test (excused, failing the job anyway, or passed: a hint to lift it), and for every test
    that did not pass whether it is a new failure, a known flake or a known breakage."""
    lines: list[str] = []
    for test in result.tests:
        reason = result.policy.quarantined.get(test.test_id)
        if reason is None:
            continue
        if test.flaky:
            lines.append(
                f"quarantined {test.test_id} passed on attempt {test.passed_on} ({reason}): "
                "still flaky"
            )
        elif test.passed:
            lines.append(
                f"quarantined {test.test_id} passed ({reason}): prove the fix before lifting "
                f"its quarantine: asyncclient quarantine verify {test.test_id} --lift FILE"
            )
        elif result.policy.fail_on_quarantined:
            lines.append(
                f"quarantined {test.test_id} did not pass ({reason}): it fails the job "
                "(--fail-on-quarantined)"
            )
        else:
            lines.append(
                f"quarantined {test.test_id} did not pass ({reason}): it does not fail the job"
            )
    lines += arrival_notes(result)
    lines += baseline_notes(result)
    flakiness = result.flakiness
    if flakiness is not None:
        lines += [
            _flakiness_line(test.test_id, flakiness.get(test.test_id))
            for test in result.tests
            if test.test_id in flakiness
        ]
    return lines
