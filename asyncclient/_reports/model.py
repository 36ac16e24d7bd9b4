"""The one model every report renders: a suite of tests, each with its attempts, each attempt
a run read once through the reports' wording, with the test's cost, quarantine, history and
cause. Built once (`suite_report`, `runs_report`); the text and step summaries, `--json`,
JUnit, CTRF, Allure, HTML and the tool server's `wait_for_runs` render it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import attrs

from asyncclient._reports import (
    counts_line,
    duration_seconds,
    failed_requirements,
    format_duration,
    labelled,
    requirement_line,
    run_result,
    status_of,
    suite_notes,
    title,
)
from asyncclient._values._outcomes import RunOutcome
from asyncclient.models import Run
from asyncclient.reruns import Attempts, SuitePolicy, SuiteResult, TestOutcome

if TYPE_CHECKING:
    from asyncclient.eta import Expected
    from asyncclient.flakiness import TestFlakiness
    from asyncclient.spend.reuse import Reuse

__all__ = [
    "Attempt",
    "Cause",
    "Check",
    "SuiteReport",
    "TestReport",
    "causes",
    "read_attempt",
    "runs_report",
    "suite_report",
]

SLOWER_SHARE: Final = 0.2
"""A run slower than its test's usual duration by more than this share (and SLOWER_SECONDS)
is told as slower."""
SLOWER_SECONDS: Final = 5.0

# Only these are written as links: javascript: and data: stay text.
_SAFE_SCHEMES = ("http://", "https://")


@attrs.frozen
class Check:
    """A requirement a report shows: one that failed, or (for a run that did not pass with no
    failed one) one whose result could not be read."""

    name: str
    title: str
    result: str
    reason: str
    failed: bool
    line: str  # `name title: reason`, or what was unreadable
    labelled: str  # the line after `failed ` or `unclear `

    def fields(self) -> dict[str, str]:
        """Its shape in `--json`."""
        return {
            "name": self.name,
            "title": self.title,
            "result": self.result,
            "reason": self.reason,
        }


@attrs.frozen
class Attempt:
    """One run of a test, as every report reads it. `number`: its place among the test's
    attempts (1 for the first); `kind`: run (the first), rerun (--retry-failed), repeat (a
    new test's, --new-test-runs) or copy (a known-flaky test's, --retry-strategy hedge);
    `stopped`: stopped because another run of its test passed (not counted); `reused`: the
    earlier pass that stands for this stopped run (--reuse-passed), which then reads as
    passed, its link the earlier run's."""

    run: Run
    number: int
    status: str
    outcome: RunOutcome
    final: bool
    title: str
    headline: str
    verdict: str
    seconds: float | None
    duration: str
    checks: tuple[Check, ...]
    error: tuple[str, str] | None  # (code, message) when the run carries an error
    link: str | None  # as the service sent it
    safe_link: str | None  # the link when it is http(s), else None
    captures: Mapping[str, str]
    queue_seconds: float | None  # from its creation to its start
    kind: str = "run"
    reused: Reuse | None = None
    stopped: bool = False  # stopped by the suite: another run passed

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def message(self) -> str:
        """What the run said, as sent: its error's message, else its headline, else its
        status (the message of a report's failure)."""
        if self.error and self.error[1]:
            return self.error[1]
        return self.headline or self.status

    def fields(self) -> dict[str, Any]:
        """The `summary` object of a run in `--json`: what the reports read from it, in one
        shape whatever the service's dialect."""
        code, message = self.error or ("", "")
        return {
            "outcome": self.outcome,
            "status": self.run.status_kind,
            "verdict": self.verdict,
            "headline": self.headline,
            "error": {"code": code, "message": message} if self.error else None,
            "failedRequirements": [check.fields() for check in self.checks],
            "captures": dict(self.captures),
            "files": list(self.run.file_refs),
            "buildId": self.run.used_build_id,
            "kind": self.kind,
            "reused": None if self.reused is None else self.reused.fields(),
            "stopped": self.stopped,
        }


def _check(requirement: Any) -> Check:
    return Check(
        name=requirement.name,
        title=requirement.title,
        result=requirement.result,
        reason=requirement.reason,
        failed=requirement.outcome == "failed",
        line=requirement_line(requirement),
        labelled=labelled(requirement),
    )


def read_attempt(run: Run, number: int = 1) -> Attempt:
    """The run read once for the reports."""
    seconds = duration_seconds(run)
    link = run.link
    return Attempt(
        run=run,
        number=number,
        status=status_of(run),
        outcome=run_result(run),
        final=run.is_final,
        title=title(run),
        headline=run.headline_text,
        verdict=run.verdict_text,
        seconds=seconds,
        duration=format_duration(seconds),
        checks=tuple(_check(req) for req in failed_requirements(run)),
        error=(run.error_code, run.error_message) if run.error else None,
        link=link,
        safe_link=link if link and link.lower().startswith(_SAFE_SCHEMES) else None,
        captures=run.capture_values,
        queue_seconds=run.queue_seconds,
    )


def reused_attempt(attempt: Attempt, reuse: Reuse) -> Attempt:
    """A run stopped for an earlier pass on an identical build, as the reports read it: passed,
    reused from the earlier run (its id in the headline, its link)."""
    when = f" ({reuse.finished_at:%Y-%m-%d %H:%M} UTC)" if reuse.finished_at else ""
    build = f" {reuse.earlier_build_id}," if reuse.earlier_build_id else ""
    link = reuse.earlier_link
    return attrs.evolve(
        attempt,
        status="reused",
        outcome="passed",
        headline=(
            f"reused: passed in {reuse.earlier_run_id}{when} on an identical build"
            f"{build} sha256 {reuse.sha256[:12]}; this run was stopped, not counted"
        ),
        verdict="passed",
        checks=(),
        error=None,
        link=link,
        safe_link=link if link and link.lower().startswith(_SAFE_SCHEMES) else None,
        reused=reuse,
    )


@attrs.frozen
class Cost:
    """What a job's runs took: device seconds (the duration of every run that ran, re-runs
    included), the part of it spent on re-runs (the flake tax), seconds queued before the runs
    started, the runs that ran, and those whose start said they are beyond the plan; the part
    spent repeating new tests (--new-test-runs), and the device time reuse saved (the earlier
    passes' durations, --reuse-passed) with the runs it stopped."""

    device_seconds: float = 0.0
    rerun_device_seconds: float = 0.0
    queue_seconds: float = 0.0
    runs: int = 0
    overage_runs: int = 0
    repeat_device_seconds: float = 0.0
    saved_seconds: float = 0.0
    reused_runs: int = 0
    copy_device_seconds: float = 0.0
    copy_runs: int = 0
    stopped_runs: int = 0
    baseline_device_seconds: float = 0.0
    baseline_runs: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            *(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other), strict=True))
        )

    @property
    def extra_device_seconds(self) -> float:
        """Device seconds beyond each test's first run: re-runs, copies and new tests'
        repeats."""
        return self.rerun_device_seconds + self.copy_device_seconds + self.repeat_device_seconds

    def fields(self) -> dict[str, float | int]:
        """Its shape in `--json`, the events and the CTRF report."""
        return {
            "deviceSeconds": round(self.device_seconds, 3),
            "rerunDeviceSeconds": round(self.rerun_device_seconds, 3),
            "queueSeconds": round(self.queue_seconds, 3),
            "runs": self.runs,
            "overageRuns": self.overage_runs,
            "repeatDeviceSeconds": round(self.repeat_device_seconds, 3),
            "savedSeconds": round(self.saved_seconds, 3),
            "reusedRuns": self.reused_runs,
            "copyDeviceSeconds": round(self.copy_device_seconds, 3),
            "copyRuns": self.copy_runs,
            "stoppedRuns": self.stopped_runs,
            "baselineDeviceSeconds": round(self.baseline_device_seconds, 3),
            "baselineRuns": self.baseline_runs,
        }

    def line(self) -> str:
        """`device time 5 min 00 s (2 min 00 s of it re-runs), 12.0 s queued, 5 runs`."""
        text = f"device time {format_duration(self.device_seconds) or '0.0 s'}"
        spent = [
            f"{format_duration(seconds)} of it {what}"
            for seconds, what in (
                (self.rerun_device_seconds, "re-runs"),
                (self.repeat_device_seconds, "new tests' repeats"),
            )
            if seconds
        ]
        if spent:
            text += f" ({', '.join(spent)})"
        text += f", {format_duration(self.queue_seconds) or '0.0 s'} queued"
        text += f", {self.runs} run{'' if self.runs == 1 else 's'}"
        if self.overage_runs:
            text += f", {self.overage_runs} beyond the plan's included runs"
        if self.copy_runs:
            text += (
                f"; copies: {self.copy_runs} run{'' if self.copy_runs == 1 else 's'}, "
                f"{format_duration(self.copy_device_seconds) or '0.0 s'}"
            )
        if self.stopped_runs:
            text += f", {self.stopped_runs} stopped once another run of its test passed"
        if self.reused_runs:
            saved = format_duration(self.saved_seconds) or "0.0 s"
            text += f"; {saved} saved by reusing {self.reused_runs} pass"
            text += "" if self.reused_runs == 1 else "es"
        if self.baseline_runs:
            text += (
                f"; on the baseline: {self.baseline_runs} run"
                f"{'' if self.baseline_runs == 1 else 's'}, "
                f"{format_duration(self.baseline_device_seconds) or '0.0 s'}"
            )
        return text

    def sentence(self) -> str:
        """line(), starting with a capital."""
        text = self.line()
        return text[:1].upper() + text[1:]


def _cost(attempts: Sequence[Attempt], overage: frozenset[str]) -> Cost:
    total = Cost()
    for attempt in attempts:
        if attempt.reused is not None:
            total += Cost(saved_seconds=attempt.reused.seconds or 0.0, reused_runs=1)
            continue
        ran = attempt.seconds is not None or attempt.queue_seconds is not None
        if not ran and attempt.id not in overage:
            continue
        seconds = attempt.seconds or 0.0
        total += Cost(
            device_seconds=seconds,
            rerun_device_seconds=seconds if attempt.kind == "rerun" else 0.0,
            repeat_device_seconds=seconds if attempt.kind == "repeat" else 0.0,
            queue_seconds=attempt.queue_seconds or 0.0,
            runs=1,
            overage_runs=1 if attempt.id in overage else 0,
            copy_device_seconds=seconds if attempt.kind == "copy" else 0.0,
            copy_runs=1 if attempt.kind == "copy" else 0,
            stopped_runs=1 if attempt.stopped else 0,
        )
    return total


@attrs.frozen
class Point:
    """One run in a test's trend (its history, then this job's attempts), oldest first."""

    run_id: str
    status: str  # the run's status kind: passed, failed, error, ...
    final: bool
    seconds: float | None
    build: str | None
    this_job: bool


TREND_RUNS: Final = 20
"""The earlier runs a test's trend shows before this job's."""


def _trend(attempts: Sequence[Attempt], earlier: Sequence[Run]) -> tuple[Point, ...]:
    before = [run for run in earlier if run.is_final][:TREND_RUNS]  # newest first
    points = [
        Point(run.id, run.status_kind, True, duration_seconds(run), run.used_build_id, False)
        for run in reversed(before)
    ]
    points += [
        Point(a.id, a.run.status_kind, a.final, a.seconds, a.run.used_build_id, True)
        for a in attempts
    ]
    return tuple(points)


MAX_CAUSES: Final = 10
"""The most causes (clusters of failures) a report shows, the largest first."""


@attrs.frozen
class Cause:
    """Failures of this job that share a signature (asyncclient.failures): one cause.

    `category`: its kind, `infrastructure` or `app`; `category_name`: the failure category it
    fell in (the categories file's first match, or a built-in one). `example`: one of its
    runs, read for the reports; `failures`: the job's failures in all (the share)."""

    id: str
    signature: str
    status: str
    category: str
    tests: tuple[str, ...]
    run_ids: tuple[str, ...]
    example: Attempt
    failures: int
    category_name: str = ""
    category_built_in: bool = True
    first: datetime | None = None  # when the earliest of its runs was created
    last: datetime | None = None  # when the latest was

    @property
    def label(self) -> str:
        """What the lines call it: the category's name (a built-in one: the status)."""
        return self.status if self.category_built_in else self.category_name

    @property
    def count(self) -> int:
        return len(self.run_ids)

    def line(self) -> str:
        """`9 of 12 failures share: The device lost its connection (error; 9 tests: ...)`."""
        said = self.example.headline or self.example.status
        if self.example.error and not self.example.headline:
            said = " ".join(part for part in self.example.error if part)
        shown = ", ".join(self.tests[:5]) + (", ..." if len(self.tests) > 5 else "")
        tests = f"{len(self.tests)} test{'' if len(self.tests) == 1 else 's'}"
        share = (
            f"{self.count} of {self.failures} failures share"
            if self.count > 1
            else (f"1 of {self.failures} failures")
        )
        return f"{share}: {said} ({self.label}, {self.category}; {tests}: {shown})"

    def fields(self, *, with_tests: bool = True) -> dict[str, Any]:
        """Its shape in --json (`cause`), the events and CTRF."""
        found: dict[str, Any] = {
            "clusterId": self.id,
            "signature": self.signature,
            "category": self.category,
            "categoryName": self.category_name,
            "size": self.count,
            "firstAt": _iso_time(self.first),
            "lastAt": _iso_time(self.last),
        }
        if with_tests:
            found["tests"] = list(self.tests)
        return found


def _iso_time(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def causes(result: SuiteResult) -> tuple[Cause, ...]:
    """The job's failures (every final run that did not pass and was not stopped, flaky tests'
    failed attempts too) grouped by cause, the largest first, at most MAX_CAUSES."""
    from asyncclient.failures import cluster

    found = cluster(result.runs, result.policy.categories)
    failures = sum(item.count for item in found)
    return tuple(
        Cause(
            id=item.id,
            signature=item.signature,
            status=item.status,
            category=item.category.kind,
            tests=item.tests,
            run_ids=item.run_ids,
            example=read_attempt(item.example),
            failures=failures,
            category_name=item.category.name,
            category_built_in=item.category.built_in,
            first=item.first,
            last=item.last,
        )
        for item in found[:MAX_CAUSES]
    )


@attrs.frozen
class TestReport:
    """One test of the suite: its attempts in order (the last is its verdict), its quarantine
    and its history."""

    test_id: str
    outcome: TestOutcome
    attempts: tuple[Attempt, ...]
    quarantine: str | None = None  # the quarantine's reason when the test is quarantined
    excused: bool = False  # quarantined, not passed, not failing the suite
    flakiness_read: bool = False  # whether its flakiness was read
    flakiness: TestFlakiness | None = None  # None when read: no earlier run
    start_error: str | None = None
    cost: Cost = Cost()
    fail_fast: bool = False  # its last run was stopped by --max-failures
    usual_seconds: float | None = None  # its usual duration (history's p50), when read
    trend: tuple[Point, ...] = ()  # recent runs, then this job's, when read
    left: tuple[float, float] | None = None  # (p50, p90) seconds its last run has left
    cause: Cause | None = None  # why its verdict run failed, else its last failed attempt
    not_rerun: str | None = None  # why it got no re-run though it had some left
    recovered: bool = False  # passed on a re-run after infrastructure failures only
    baseline: str | None = None  # what the baseline said of its failure
    pre_existing: bool = False  # it fails on the baseline too, the same way

    @property
    def passed_as(self) -> str:
        """Its verdict run: `attempt N`, or `copy N` (a known-flaky test's copy, in the order
        the copies started: no attempt of its own)."""
        final = self.final
        if final.kind == "copy":
            copies = sorted((a for a in self.attempts if a.kind == "copy"), key=lambda a: a.number)
            return f"copy {copies.index(final) + 1}"
        return f"attempt {final.number}"

    @property
    def slower(self) -> tuple[float, float] | None:
        """(took, usual) seconds when its last run took more than its usual time by over a
        fifth and over 5 s (SLOWER_SHARE, SLOWER_SECONDS); else None."""
        took, usual = self.final.seconds, self.usual_seconds
        if took is None or usual is None or self.final.outcome == "cancelled":
            return None
        if took > usual * (1 + SLOWER_SHARE) and took - usual > SLOWER_SECONDS:
            return took, usual
        return None

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def repeated(self) -> bool:
        """A new test run more than once (--new-test-runs)."""
        return any(attempt.kind == "repeat" for attempt in self.attempts)

    def new_test_fields(self) -> dict[str, Any] | None:
        """A repeated new test's `newTest` in --json and CTRF: its runs, how many passed and
        whether it is flaky on arrival; None for another test."""
        if not self.repeated:
            return None
        return {
            "runs": len(self.attempts),
            "passed": sum(1 for attempt in self.attempts if attempt.passed),
            "flakyOnArrival": self.outcome == "flaky_on_arrival",
        }

    @property
    def earlier(self) -> tuple[Attempt, ...]:
        return self.attempts[:-1]

    @property
    def flaky(self) -> bool:
        return self.outcome == "flaky"

    @property
    def title(self) -> str:
        return self.final.title


@attrs.frozen
class SuiteReport:
    """A followed suite: its tests, the tests the service did not start, the line that counts
    them, and what the quarantine and the history say (`notes`, a line each)."""

    name: str
    tests: tuple[TestReport, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    counts: str = ""  # the text summary's last line and step summary's heading
    summary: str = ""  # the tests counted with their attempts (SuiteResult.summary)
    notes: tuple[str, ...] = ()
    passed: bool = True
    quarantine_given: bool = False  # whether a quarantine was given
    fail_on_quarantined: bool = False
    causes: tuple[Cause, ...] = ()  # the job's failures by cause, largest first
    trace_id: str | None = None  # the job's trace id (32 hex digits), when traced

    @property
    def cost(self) -> Cost:
        """What the job's runs took, every test's attempts together."""
        return sum((test.cost for test in self.tests), Cost())

    @property
    def reran(self) -> bool:
        """Whether some test ran more than once (the reports then show attempts)."""
        return any(len(test.attempts) > 1 for test in self.tests)

    @property
    def finals(self) -> tuple[Attempt, ...]:
        return tuple(test.final for test in self.tests)


def _left(run: Run, usual: Expected | None) -> tuple[float, float] | None:
    if usual is None or run.is_final:
        return None
    from asyncclient.eta import remaining

    p50, p90 = remaining(run, usual)
    return round(p50, 1), round(p90, 1)


def _test(
    test: Attempts,
    result: SuiteResult,
    expected: Mapping[str, Expected] | None,
    earlier: Mapping[str, Sequence[Run]] | None,
) -> TestReport:
    flakiness = result.flakiness or {}
    usual = (expected or {}).get(test.test_id)
    kind = "repeat" if test.repeats else "rerun"
    kinds = test.kinds or tuple(kind if n > 1 else "run" for n in range(1, len(test.runs) + 1))
    numbers = list(range(1, len(test.runs) + 1))
    if test.decided_on:  # runs at once: the deciding run last, numbered as started
        numbers = [n for n in numbers if n != test.decided_on] + [test.decided_on]
    attempts = tuple(
        attrs.evolve(read_attempt(run, number), kind=kinds[n], stopped=run.id in test.stopped)
        for n, (number, run) in enumerate(zip(numbers, test.runs, strict=True))
    )
    if test.outcome == "reused" and test.reused is not None:
        attempts = (reused_attempt(attempts[-1], test.reused),)
    elif test.repeats:
        attempts = _verdict_last(attempts, test.outcome, result.policy.new_test_warn)
    return TestReport(
        test_id=test.test_id,
        outcome=test.outcome,
        attempts=attempts,
        cost=_cost(attempts, result.overage) + _baseline_cost(test),
        quarantine=result.policy.quarantined.get(test.test_id),
        excused=result.excused(test),
        flakiness_read=test.test_id in flakiness,
        flakiness=flakiness.get(test.test_id),
        start_error=test.start_error,
        not_rerun=test.not_rerun,
        recovered=test.recovered,
        baseline=None if test.baseline is None or test.passed else test.baseline.why,
        pre_existing=test.pre_existing,
        fail_fast=attempts[-1].id in result.fail_fast,
        usual_seconds=usual.run_p50 if usual is not None and usual.samples else None,
        left=_left(attempts[-1].run, usual),
        trend=_trend(attempts, earlier[test.test_id])
        if earlier and test.test_id in earlier
        else (),
    )


def _baseline_cost(test: Attempts) -> Cost:
    """What the test's runs on the baseline build took (in the job's device time too)."""
    verdict = test.baseline
    if verdict is None or not verdict.runs:
        return Cost()
    seconds = verdict.device_seconds
    return Cost(
        device_seconds=seconds,
        runs=len(verdict.runs),
        baseline_device_seconds=seconds,
        baseline_runs=len(verdict.runs),
    )


def _verdict_last(attempts: tuple[Attempt, ...], outcome: str, warn: bool) -> tuple[Attempt, ...]:
    """A new test's runs with the one that decides it last, where every report reads the
    verdict: flaky on arrival, a run that did not pass (with --new-test-warn one that passed,
    which reads as flaky: passed, its failed runs before it); else as they ran."""
    if outcome != "flaky_on_arrival":
        return attempts
    failing = [
        attempt for attempt in attempts if attempt.final and attempt.outcome in ("failed", "error")
    ]
    passing = [attempt for attempt in attempts if attempt.passed]
    rest = [attempt for attempt in attempts if attempt not in failing and attempt not in passing]
    order = [*rest, *failing, *passing] if warn else [*rest, *passing, *failing]
    return tuple(order)


def suite_report(
    result: SuiteResult,
    *,
    name: str = "asyncclient",
    skipped: Sequence[tuple[str, str]] = (),
    by_tests: bool = True,
    expected: Mapping[str, Expected] | None = None,
    history: Mapping[str, Sequence[Run]] | None = None,
) -> SuiteReport:
    """The report of a suite. by_tests: the counts line counts the tests with their attempts
    (with re-runs), else the final runs by status. expected: what each test's runs usually
    take (asyncclient.eta), to tell the tests that ran slower than usual; history: each
    test's earlier runs, newest first (asyncclient.eta.read_history), for its trend."""
    grouped = causes(result)
    of_run = {run_id: cause for cause in grouped for run_id in cause.run_ids}
    tests = tuple(
        _with_cause(_test(test, result, expected, history), of_run) for test in result.tests
    )
    slower = []
    for test in tests:
        found = test.slower
        if found is not None:
            took, usual = found
            slower.append(
                f"{test.test_id} took {format_duration(took)}, usually {format_duration(usual)}"
            )
    summary = result.summary()
    return SuiteReport(
        name=name,
        tests=tests,
        skipped=tuple(skipped),
        counts=summary
        if by_tests
        or result.pre_existing_failures
        or any(t.repeats or t.outcome == "reused" for t in result.tests)
        else counts_line(result.final_runs),
        summary=summary,
        notes=(*suite_notes(result), *slower),
        passed=result.passed,
        quarantine_given=bool(result.policy.quarantined),
        fail_on_quarantined=result.policy.fail_on_quarantined,
        causes=grouped,
    )


def _with_cause(test: TestReport, of_run: Mapping[str, Cause]) -> TestReport:
    """The test with the cause of its verdict run when that did not pass, else of its last
    failed attempt (a test that passed on a re-run failed for that cause first)."""
    if test.outcome == "reused":
        return test
    for attempt in reversed(test.attempts):
        cause = of_run.get(attempt.id)
        if cause is not None:
            return attrs.evolve(test, cause=cause)
    return test


def runs_report(
    runs: Iterable[Run],
    *,
    name: str = "asyncclient",
    skipped: Sequence[tuple[str, str]] = (),
    earlier: Mapping[str, Sequence[Run]] | None = None,
    quarantined: Mapping[str, str] | None = None,
) -> SuiteReport:
    """The report of plain runs, a test each (`earlier`: the earlier attempts of a run's test,
    by the run's id; `quarantined`: test id -> reason, each excused when it did not pass)."""
    finals = list(runs)
    tests = tuple(
        Attempts(run.test_id or run.id, (*(earlier or {}).get(run.id, ()), run)) for run in finals
    )
    result = SuiteResult(tests, SuitePolicy(quarantined=dict(quarantined or {})))
    report = suite_report(result, name=name, skipped=skipped, by_tests=False)
    return attrs.evolve(report, notes=())
