"""What happens while a suite is followed, as typed records. Each has the name and the fields of
its line in the `--events` stream (docs/reference/events.md); `fields()` gives them."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

if TYPE_CHECKING:
    from asyncclient._reports.model import Attempt, SuiteReport
    from asyncclient.eta import Expected, JobEta
    from asyncclient.failures.exonerate import BaselineVerdict
    from asyncclient.models import Run
    from asyncclient.spend.reuse import Reuse

__all__ = [
    "BaselineJudged",
    "BaselineRunChanged",
    "BaselineStarted",
    "BudgetReached",
    "CopiesStopped",
    "Eta",
    "FailFast",
    "HistoryRead",
    "JobFinished",
    "NewTests",
    "Notice",
    "Reused",
    "RunChanged",
    "RunFinished",
    "RunStarted",
    "RunsStarted",
    "StartRefused",
    "SuiteEvent",
]


class SuiteEvent(abc.ABC):
    """The base of every event: `name` is its `event` in the stream; `streamed` False for the
    events only a program sees (they carry objects, not JSON)."""

    name: ClassVar[str]
    streamed: ClassVar[bool] = True

    @property
    def event(self) -> str:
        """Its `event` in the stream."""
        return self.name

    @abc.abstractmethod
    def fields(self) -> dict[str, Any]:
        """Its fields in the stream (JSON values), `event` and `time` aside."""


@attrs.frozen
class RunStarted(SuiteEvent):
    """A run the suite follows began: `kind` run (a first run), rerun, repeat (a new test's)
    or copy (a known-flaky test's, with `hedge`). Its event: run_started, rerun_started, ..."""

    run_id: str
    test_id: str | None
    attempt: int
    kind: str = "run"
    name: ClassVar[str] = "run_started"

    @property
    def event(self) -> str:
        return f"{self.kind}_started"

    def fields(self) -> dict[str, Any]:
        return {"runId": self.run_id, "testId": self.test_id, "attempt": self.attempt}


@attrs.frozen
class RunsStarted(SuiteEvent):
    """A batch of re-runs, repeats or copies just started together (after their RunStarted
    events): (test id, run id, attempt) each."""

    started: tuple[tuple[str, str, int], ...]
    kind: str
    name: ClassVar[str] = "runs_started"
    streamed: ClassVar[bool] = False

    def fields(self) -> dict[str, Any]:
        return {"kind": self.kind, "runIds": [run_id for _, run_id, _ in self.started]}


@attrs.frozen
class RunChanged(SuiteEvent):
    """A run's status changed (each change the watcher sees; its first view too)."""

    run: Run
    attempt: int
    name: ClassVar[str] = "run_status"

    def fields(self) -> dict[str, Any]:
        return {
            "runId": self.run.id,
            "testId": self.run.test_id,
            "attempt": self.attempt,
            "status": str(self.run.status),
        }


@attrs.frozen
class RunFinished(SuiteEvent):
    """A run became final: `read` is it read once for the reports."""

    read: Attempt
    kind: str = "run"
    stopped_as: str | None = None  # "copy" when the suite stopped it: another run passed
    name: ClassVar[str] = "run_finished"

    @property
    def run(self) -> Run:
        return self.read.run

    def fields(self) -> dict[str, Any]:
        found = {
            "runId": self.run.id,
            "testId": self.run.test_id,
            "attempt": self.read.number,
            "status": str(self.run.status),
            "outcome": self.read.outcome,
            "durationSeconds": self.read.seconds,
            "queueSeconds": self.read.queue_seconds,
        }
        if self.kind != "run":
            found["kind"] = self.kind
        if self.stopped_as is not None:
            found["stoppedBy"] = "a passing run of its test"
        return found


@attrs.frozen
class HistoryRead(SuiteEvent):
    """Each test's earlier runs were read (once a job): what their runs usually take, and the
    tests whose history could not be read, with why."""

    expected: Mapping[str, Expected]
    unread: Mapping[str, str]
    name: ClassVar[str] = "history_read"
    streamed: ClassVar[bool] = False

    def fields(self) -> dict[str, Any]:
        return {"tests": len(self.expected), "unread": sorted(self.unread)}


@attrs.frozen
class Reused(SuiteEvent):
    """A run stopped: an earlier pass on an identical build stands for it (`reuse_passed`)."""

    reuse: Reuse
    name: ClassVar[str] = "reused"

    def fields(self) -> dict[str, Any]:
        return {"runId": self.reuse.run_id, "testId": self.reuse.test_id, **self.reuse.fields()}


@attrs.frozen
class NewTests(SuiteEvent):
    """The tests with no earlier run, each repeated up to `repeats` times (`new_test_runs`)."""

    tests: tuple[str, ...]
    repeats: int
    name: ClassVar[str] = "new_tests"

    def fields(self) -> dict[str, Any]:
        return {"tests": list(self.tests), "repeats": self.repeats}


@attrs.frozen
class Eta(SuiteEvent):
    """The job's ETA moved by more than a tenth."""

    eta: JobEta
    name: ClassVar[str] = "eta"

    def fields(self) -> dict[str, Any]:
        return {
            "seconds": round(self.eta.p50, 1),
            "p90Seconds": round(self.eta.p90, 1),
            "slowest": list(self.eta.slowest[:3]),
        }


@attrs.frozen
class FailFast(SuiteEvent):
    """`max_failures` tests failed for good: the runs still going were stopped."""

    tests: tuple[str, ...]
    stopped: tuple[str, ...]
    errors: Mapping[str, str] = attrs.field(factory=dict)
    limit: int = 0
    name: ClassVar[str] = "fail_fast"

    def fields(self) -> dict[str, Any]:
        return {"tests": list(self.tests), "stopped": list(self.stopped)}


@attrs.frozen
class CopiesStopped(SuiteEvent):
    """A run of a test passed: its other runs still going (re-runs at once, copies) were
    stopped; they are not counted."""

    test_id: str
    passed_run_id: str
    stopped: tuple[str, ...]
    errors: Mapping[str, str] = attrs.field(factory=dict)
    name: ClassVar[str] = "copies_stopped"

    def fields(self) -> dict[str, Any]:
        return {
            "testId": self.test_id,
            "passedRunId": self.passed_run_id,
            "stopped": list(self.stopped),
            "notStopped": sorted(self.errors),
        }


@attrs.frozen
class StartRefused(SuiteEvent):
    """A re-run, repeat or copy could not be started: the test keeps its verdict so far."""

    test_id: str
    reason: str
    name: ClassVar[str] = "start_refused"

    def fields(self) -> dict[str, Any]:
        return {"testId": self.test_id, "reason": self.reason}


@attrs.frozen
class RerunSkipped(SuiteEvent):
    """A test that did not pass is not re-run: it failed the app's way, the same way as its
    newest runs on the same build (`runs` of them), so a re-run would tell nothing new
    (SuitePolicy.rerun_known re-runs it)."""

    test_id: str
    run_id: str
    reason: str
    runs: int
    name: ClassVar[str] = "rerun_skipped"

    def fields(self) -> dict[str, Any]:
        return {
            "testId": self.test_id,
            "runId": self.run_id,
            "reason": self.reason,
            "runs": self.runs,
        }


@attrs.frozen
class BaselineStarted(SuiteEvent):
    """A test failed on the job's build: it now runs on the baseline build too (`run_ids`),
    beside its re-runs; `needed` of them must fail the same way to call it pre-existing."""

    test_id: str
    failed_run: str
    baseline: str
    run_ids: tuple[str, ...]
    needed: int
    name: ClassVar[str] = "baseline_started"

    def fields(self) -> dict[str, Any]:
        return {
            "testId": self.test_id,
            "runId": self.failed_run,
            "baseline": self.baseline,
            "baselineRuns": list(self.run_ids),
            "needed": self.needed,
        }


@attrs.frozen
class BaselineRunChanged(SuiteEvent):
    """A run on the baseline build changed status (it is not an attempt of its test)."""

    run: Run
    test_id: str
    name: ClassVar[str] = "baseline_run_status"

    def fields(self) -> dict[str, Any]:
        return {"runId": self.run.id, "testId": self.test_id, "status": str(self.run.status)}


@attrs.frozen
class BaselineJudged(SuiteEvent):
    """What the baseline said of a test's failure: pre-existing, new or undecided."""

    verdict: BaselineVerdict
    name: ClassVar[str] = "baseline_judged"

    def fields(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "testId": v.test_id,
            "baseline": v.baseline,
            "state": v.state,
            "baselineRuns": list(v.runs),
            "sameCause": v.same_cause,
            "needed": v.needed,
            "why": v.why,
        }


@attrs.frozen
class BudgetReached(SuiteEvent):
    """A re-run or copy was not started: it would take the device time past `retry_budget`."""

    test_id: str
    budget_seconds: float
    spent_seconds: float
    name: ClassVar[str] = "budget_reached"

    def fields(self) -> dict[str, Any]:
        return {
            "testId": self.test_id,
            "budgetSeconds": round(self.budget_seconds, 1),
            "spentSeconds": round(self.spent_seconds, 1),
        }


@attrs.frozen
class Notice(SuiteEvent):
    """Something a person should read that changes no verdict (`level`: info, warning or
    error), such as a run that could not be stopped to reuse a pass."""

    level: str
    text: str
    name: ClassVar[str] = "notice"
    streamed: ClassVar[bool] = False

    def fields(self) -> dict[str, Any]:
        return {"level": self.level, "text": self.text}


@attrs.frozen
class JobFinished(SuiteEvent):
    """The suite ended: its report (built once). The stream's `job_finished` line also has the
    command's exit code, which the command writes."""

    report: SuiteReport
    name: ClassVar[str] = "job_finished"
    streamed: ClassVar[bool] = False

    def fields(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for test in self.report.tests:
            counts[test.outcome] = counts.get(test.outcome, 0) + 1
        if self.report.skipped:
            counts["not_started"] = len(self.report.skipped)
        pre_existing = sum(1 for test in self.report.tests if test.pre_existing)
        if pre_existing:
            counts["pre_existing"] = pre_existing
        return {
            "passed": self.report.passed,
            "counts": counts,
            "tests": len(self.report.tests) + len(self.report.skipped),
            **self.report.cost.fields(),
        }
