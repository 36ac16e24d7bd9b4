"""A suite's tests with every run of each (`Attempts`), and the suite's result under its policy
(`SuiteResult`): what passed, what is flaky, what failed for good."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from asyncclient._values._outcomes import TestOutcome
from asyncclient.reruns._policy import SuitePolicy

if TYPE_CHECKING:
    from asyncclient.failures.exonerate import BaselineVerdict
    from asyncclient.flakiness import TestFlakiness
    from asyncclient.models import Run
    from asyncclient.spend.reuse import Reuse

__all__ = ["Attempts", "SuiteResult", "TestOutcome", "needs_rerun"]


def needs_rerun(run: Run) -> bool:
    """Whether a final run calls for another attempt: it did not pass and was not stopped."""
    return run.is_final and not run.passed and run.status_kind != "cancelled"


@attrs.frozen
class Attempts:
    """One test of a suite and every run of it, in order: the last one is its verdict.

    start_error: why a re-run could not be started (the service refused it), if one was not.
    A new test's repeats (--new-test-runs) follow its first run: all of its runs together are
    its verdict. A reused test's one run was stopped: an earlier pass on an identical build
    stands for it (--reuse-passed).

    Attributes:
        test_id: The test.
        runs: Every run of it, in order; the last one is its verdict.
        start_error: Why a re-run could not be started, if one could not.
        repeats: How many of the runs after the first repeat a new test (not re-runs).
        reused: The earlier pass that stands for its stopped run, when it was reused.
        kinds: Each run's kind, in `runs`' order: run, rerun, repeat or copy (empty: the
            first run, then re-runs).
        at_once: Its runs may overlap (re-runs at once, copies): the verdict is that of all
            of them, and `runs` ends with the run that decides it.
        stopped: Its runs the suite stopped because another run of it passed (not counted).
        decided_on: With runs at once, the attempt (in the order they started) whose run
            decides its verdict; 0: the last.
        infrastructure: Its runs that failed for the infrastructure (a failure category of
            that kind): re-run, and never what makes it flaky.
        not_rerun: Why it was not re-run though it had re-runs left: it failed the same way
            as its newest runs on the same build (see SuitePolicy.rerun_known).
        baseline: What its runs on the baseline build said of its failure (SuitePolicy.
            baseline), when it failed and ran there.
    """

    test_id: str
    runs: tuple[Run, ...]
    start_error: str | None = None
    repeats: int = 0
    reused: Reuse | None = None
    kinds: tuple[str, ...] = ()
    at_once: bool = False
    stopped: frozenset[str] = frozenset()
    decided_on: int = 0
    infrastructure: frozenset[str] = frozenset()
    not_rerun: str | None = None
    baseline: BaselineVerdict | None = None

    @property
    def pre_existing(self) -> bool:
        """It failed in the end, and on the baseline build too, the same way."""
        return self.baseline is not None and self.baseline.pre_existing and not self.passed

    @property
    def passed_on(self) -> int:
        """The attempt a test that passed in the end passed on (1 for the first run)."""
        return self.decided_on or len(self.runs)

    @property
    def passed_as(self) -> str:
        """What the run it passed on was: `attempt N`, or `copy N` (a known-flaky test's copy,
        no attempt of its own)."""
        number = self.passed_on
        if self.kinds and self.kinds[-1] == "copy":  # the deciding run goes last
            # The runs before it in the order they started come first, in that order.
            return f"copy {self.kinds[: number - 1].count('copy') + 1}"
        return f"attempt {number}"

    @property
    def final(self) -> Run:
        """The last attempt: the test's verdict."""
        return self.runs[-1]

    @property
    def attempts(self) -> int:
        """How many times the test ran."""
        return len(self.runs)

    @property
    def passed(self) -> bool:
        """Passed in the end (flaky and reused included; a new test only when every run of
        it passed)."""
        return self.outcome in ("passed", "flaky", "reused")

    @property
    def flaky(self) -> bool:
        """Failed at least once, then passed."""
        return self.outcome == "flaky"

    @property
    def outcome(self) -> TestOutcome:
        """passed, flaky (failed, then passed), failed, cancelled (its last run was stopped),
        not_final (the wait ended first), reused (its run stopped for an earlier pass on an
        identical build) or flaky_on_arrival (a new test whose runs disagree)."""
        final = self.final
        if self.repeats:
            return self._arrival()
        if self.at_once and self.reused is None:
            return self._together()
        if self.reused is not None and final.status_kind == "cancelled":
            return "reused"
        if not final.is_final:
            return "not_final"
        if final.passed:
            return "flaky" if self._app_failure(self.runs[:-1]) else "passed"
        if final.status_kind == "cancelled":
            return "cancelled"
        return "failed"

    def _together(self) -> TestOutcome:
        """The verdict of runs that may overlap: passed when a counted run passed (flaky when
        another counted run did not), else not final while one goes on, else failed (or
        cancelled when no run counted)."""
        counted = [run for run in self.runs if run.is_final and run.status_kind != "cancelled"]
        if any(run.passed for run in counted):
            return "flaky" if self._app_failure(counted) else "passed"
        if any(not run.is_final for run in self.runs):
            return "not_final"
        return "failed" if counted else "cancelled"

    def _arrival(self) -> TestOutcome:
        """A new test's verdict from all of its runs (stopped ones do not count)."""
        if any(not run.is_final for run in self.runs):
            return "not_final"
        counted = [
            run
            for run in self.runs
            if run.status_kind != "cancelled" and run.id not in self.infrastructure
        ]
        passed = sum(1 for run in counted if run.passed)
        if not counted:
            return "failed" if self.infrastructure else "cancelled"
        if passed == len(counted):
            return "passed"
        return "flaky_on_arrival" if passed else "failed"

    def _app_failure(self, runs: Iterable[Run]) -> bool:
        """Whether one of `runs` did not pass for a reason other than the infrastructure (a
        failure only the infrastructure caused never makes a test flaky)."""
        return any(
            run.is_final
            and not run.passed
            and run.status_kind != "cancelled"
            and run.id not in self.infrastructure
            for run in runs
        )

    @property
    def recovered(self) -> bool:
        """Passed in the end after failures the infrastructure caused only (not flaky)."""
        return self.outcome == "passed" and any(r.id in self.infrastructure for r in self.runs)

    @property
    def arrival_counts(self) -> tuple[int, int]:
        """(passed, counted) of a new test's runs (stopped ones not counted)."""
        counted = [
            run
            for run in self.runs
            if run.is_final and run.status_kind != "cancelled" and run.id not in self.infrastructure
        ]
        return sum(1 for run in counted if run.passed), len(counted)

    @property
    def failed_attempts(self) -> tuple[Run, ...]:
        """The runs of this test that did not pass (a flaky test's earlier attempts too)."""
        return tuple(run for run in self.runs if run.is_final and not run.passed)


@attrs.frozen
class SuiteResult:
    """Every test of a suite with its attempts, in the order the tests were first seen.

    Attributes:
        tests: Every test of the suite with its attempts, in the order first seen.
        policy: The suite's policy (quarantined tests, whether a flaky one or a pre-existing
            failure fails it, the failure categories), read through `result.policy`.
        complete: Whether every run ended (False after a timeout).
        unknown: Run ids the service did not know.
        flakiness: Per test that did not pass, its flakiness before this suite (what
            `AsyncSession.flakiness` reads; None for a test with no earlier run), or None
            when it was not read.
        overage: The runs whose start said they are beyond the plan's included runs.
        fail_fast: The runs stopped because enough tests had not passed (--max-failures).
    """

    tests: tuple[Attempts, ...]
    policy: SuitePolicy = attrs.field(factory=SuitePolicy)
    complete: bool = True
    """False when the wait ended (its timeout) before every run was final."""
    unknown: tuple[str, ...] = ()
    """Run ids the service did not know (their tests are left out)."""
    flakiness: Mapping[str, TestFlakiness | None] | None = None
    overage: frozenset[str] = frozenset()
    fail_fast: frozenset[str] = frozenset()

    def excused(self, test: Attempts) -> bool:
        """Whether the test did not pass but is quarantined (and that does not fail it).

        Args:
            test: One test of this suite.
        """
        return (
            not test.passed
            and test.test_id in self.policy.quarantined
            and not self.policy.fail_on_quarantined
        )

    @property
    def passed(self) -> bool:
        """Every test passed in the end (a flaky one counts unless fail_on_flaky; a quarantined
        one that did not pass is excused unless fail_on_quarantined)."""
        return all(
            (t.passed and not (self.policy.fail_on_flaky and t.flaky))
            or self.excused(t)
            or (self.policy.new_test_warn and t.outcome == "flaky_on_arrival")
            or (t.pre_existing and self.policy.pre_existing != "fail")
            for t in self.tests
        )

    @property
    def pre_existing_failures(self) -> tuple[Attempts, ...]:
        """The tests that failed on the baseline build too, the same way."""
        return tuple(t for t in self.tests if t.pre_existing)

    @property
    def quarantined_failures(self) -> tuple[Attempts, ...]:
        """The quarantined tests that did not pass in the end."""
        return tuple(t for t in self.tests if not t.passed and t.test_id in self.policy.quarantined)

    @property
    def flaky(self) -> tuple[Attempts, ...]:
        """The tests that failed, then passed on a re-run."""
        return tuple(t for t in self.tests if t.flaky)

    @property
    def failed(self) -> tuple[Attempts, ...]:
        """The tests that did not pass in the end."""
        return tuple(t for t in self.tests if not t.passed)

    @property
    def runs(self) -> tuple[Run, ...]:
        """Every attempt of every test."""
        return tuple(run for test in self.tests for run in test.runs)

    @property
    def final_runs(self) -> tuple[Run, ...]:
        """The last attempt of each test."""
        return tuple(test.final for test in self.tests)

    def summary(self) -> str:
        """`4 tests: 2 passed, 1 flaky (passed on attempt 2), 1 failed after 3 attempts`."""
        counts: dict[str, list[Attempts]] = {}
        for test in self.tests:
            counts.setdefault(test.outcome, []).append(test)
        parts = []
        for outcome in (
            "passed", "reused", "flaky", "flaky_on_arrival", "failed", "cancelled", "not_final"
        ):  # fmt: skip
            tests = counts.get(outcome)
            if not tests:
                continue
            attempts = sorted({t.attempts for t in tests})
            shown = "/".join(str(a) for a in attempts)
            if outcome == "flaky":
                on = "/".join(sorted({t.passed_as for t in tests}, key=lambda w: (len(w), w)))
                parts.append(f"{len(tests)} flaky (passed on {on})")
            elif outcome == "flaky_on_arrival":
                parts.append(f"{len(tests)} flaky on arrival")
            elif outcome == "passed" and any(t.recovered for t in tests):
                recovered = sum(1 for t in tests if t.recovered)
                parts.append(
                    f"{len(tests)} passed ({recovered} on a re-run after an infrastructure "
                    "failure: not flaky)"
                )
            elif outcome == "reused":
                parts.append(f"{len(tests)} reused (passed before on an identical build)")
            elif outcome == "failed":
                after = "" if attempts == [1] else f" after {shown} attempts"
                before = sum(1 for t in tests if t.pre_existing)
                they = "it fails" if before == 1 else "they fail"
                said = f" ({before} pre-existing: {they} on the baseline too)" if before else ""
                parts.append(f"{len(tests)} failed{after}{said}")
            elif outcome == "not_final":
                parts.append(f"{len(tests)} not final")
            else:
                parts.append(f"{len(tests)} {outcome}")
        total = len(self.tests)
        noun = "test" if total == 1 else "tests"
        return f"{total} {noun}: {', '.join(parts)}" if parts else f"{total} {noun}"
