"""Every decision the suite loop makes, in one frozen record (`SuitePolicy`), checked when it is
made: the one record the re-runs, the result, the loop and the command read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, Literal

import attrs

from asyncclient._core._checks import check_id
from asyncclient.errors import ValidationError
from asyncclient.failures import Categories
from asyncclient.failures._categories import DEFAULT_CATEGORIES
from asyncclient.failures.exonerate import PRE_EXISTING_MODES, PreExistingMode, is_branch

__all__ = [
    "DEFAULT_HEDGE_TARGET",
    "MAX_RETRY_FAILED",
    "RETRY_STRATEGIES",
    "RetryStrategy",
    "SuitePolicy",
    "runs_for",
]

RetryStrategy = Literal["rounds", "at-once", "hedge"]
RETRY_STRATEGIES: Final = ("rounds", "at-once", "hedge")
DEFAULT_HEDGE_TARGET: Final = 0.95
MAX_RETRY_FAILED: Final = 10
"""The most re-runs a test may get (--retry-failed)."""


def _whole(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name} {value!r} is out of range: give {low} to {high}")
    return value


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{name} must be a number; got {value!r}")
    return float(value)


def _copied(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


@attrs.frozen(kw_only=True)
class SuitePolicy:
    """How a suite is followed: re-runs, fail-fast, quarantine, reuse, new tests, device time.

    Attributes:
        retry_failed: Re-runs a test that did not pass may get (0 to 10); copies count too.
        retry_strategy: `rounds` (a re-run once the round ends), `at-once` (all of a test's
            re-runs start when its run does not pass; the first pass stops the others) or
            `hedge` (`at-once`, plus copies of known-flaky tests in the first round).
        hedge_target: The chance of a pass `hedge` starts enough copies for (0.5 to 0.999).
        retry_budget: Minutes of device time re-runs and copies may take (None: no cap).
        fail_on_flaky: A test that passed only on a later run fails the suite.
        max_failures: Stop the runs still going once this many tests failed for good.
        quarantined: Test id -> reason: such a test that did not pass does not fail the suite.
        fail_on_quarantined: A quarantined test that did not pass fails the suite after all.
        reuse_passed: Days an earlier pass on an identical build stands for a run (None: off).
        new_test_runs: Repeats of a test with no earlier run (0 to 20).
        new_test_budget: Seconds of device time a new test's repeats may take (None: 300).
        new_test_warn: A test flaky on arrival warns instead of failing the suite.
        timeout: Seconds for the whole wait, re-runs included (None: no limit).
        stop_on_timeout: Stop the runs still going when the timeout passes.
        interval: Seconds between polls at first (None: the watcher's default).
        read_history: Read each test's earlier runs once (the ETA, reuse, new tests, hedging,
            the trend, the failing tests' flakiness).
        explain_failures: Tell of each test that did not pass whether it is a new failure, a
            known flake or a known breakage (its flakiness, from its earlier runs).
        categories: The failure categories (`asyncclient.failures.load_categories`): an
            infrastructure failure is re-run and never makes a test flaky; every report
            names each failure's category. Default: the built-in ones.
        rerun_known: Re-run an app failure even when it fails the same way as the test's
            newest runs on the same build did (by default it is not re-run: the history
            already says how it ends).
        baseline: A build (`ab_...`) to run each failed test on at once, beside its re-runs,
            or `auto`: the newest ready build of the same file whose label says
            `baseline_ref` (uploads in CI label their builds `ref=REF commit=SHA`). A test
            that fails there too, the same way, is pre-existing (None: off).
        baseline_ref: The branch `auto` looks for (default `main`).
        pre_existing: What a pre-existing failure does: `fail` (it fails the suite as any
            failure: nothing is hidden unless asked), `pass` or `warn` (it does not).
    """

    retry_failed: int = 0
    retry_strategy: RetryStrategy = "rounds"
    hedge_target: float = DEFAULT_HEDGE_TARGET
    retry_budget: float | None = None
    fail_on_flaky: bool = False
    max_failures: int | None = None
    quarantined: Mapping[str, str] = attrs.field(factory=dict, converter=_copied)
    fail_on_quarantined: bool = False
    reuse_passed: float | None = None
    new_test_runs: int = 0
    new_test_budget: float | None = None
    new_test_warn: bool = False
    timeout: float | None = None
    stop_on_timeout: bool = False
    interval: float | None = None
    read_history: bool = True
    explain_failures: bool = True
    categories: Categories = DEFAULT_CATEGORIES
    rerun_known: bool = False
    baseline: str | None = None
    baseline_ref: str = "main"
    pre_existing: PreExistingMode = "fail"

    def __attrs_post_init__(self) -> None:
        from asyncclient.spend.arrival import MAX_NEW_TEST_RUNS
        from asyncclient.spend.reuse import check_days

        retries = _whole("retry_failed", self.retry_failed, 0, MAX_RETRY_FAILED)
        if self.retry_strategy not in RETRY_STRATEGIES:
            raise ValidationError(
                f"retry_strategy {self.retry_strategy!r} is not one of "
                f"{', '.join(RETRY_STRATEGIES)}"
            )
        if self.retry_strategy != "rounds" and not retries:
            raise ValidationError(
                f"retry_strategy {self.retry_strategy} needs retry_failed N: the re-runs (and "
                "copies) it starts are counted against N"
            )
        target = _number("hedge_target", self.hedge_target)
        if not 0.5 <= target <= 0.999:
            raise ValidationError(
                f"hedge_target {target:g} is out of range: give a chance from 0.5 to 0.999"
            )
        if self.retry_budget is not None:
            if not _number("retry_budget", self.retry_budget) > 0:
                raise ValidationError(
                    f"retry_budget {self.retry_budget:g} is out of range: give the minutes of "
                    "device time re-runs and copies may take, above 0"
                )
            if not retries:
                raise ValidationError(
                    "retry_budget needs retry_failed N: it caps their device time"
                )
        failures = self.max_failures
        if failures is not None and (
            isinstance(failures, bool) or not isinstance(failures, int) or failures < 1
        ):
            raise ValidationError(
                f"max_failures {failures} is out of range: give 1 or more (the tests that may not "
                "pass before the rest are stopped)"
            )
        if self.reuse_passed is not None:
            check_days(self.reuse_passed)
        _whole("new_test_runs", self.new_test_runs, 0, MAX_NEW_TEST_RUNS)
        for name in ("new_test_budget", "timeout", "interval"):
            value = getattr(self, name)
            if value is not None and not _number(name, value) > 0:
                raise ValidationError(f"{name} {value:g} must be a number of seconds above 0")
        if (self.new_test_warn or self.new_test_budget is not None) and not self.new_test_runs:
            raise ValidationError(
                "new_test_warn and new_test_budget need new_test_runs N: without repeats no "
                "test is flaky on arrival"
            )
        if self.fail_on_flaky and not retries:
            raise ValidationError(
                "fail_on_flaky needs retry_failed N: without re-runs no test is flaky"
            )
        if self.rerun_known and not retries:
            raise ValidationError("rerun_known needs retry_failed N: it says which failures re-run")
        if self.stop_on_timeout and self.timeout is None:
            raise ValidationError("stop_on_timeout needs timeout S")
        if self.baseline is not None and self.baseline != "auto":
            check_id("build", self.baseline, "baseline")
        ref = self.baseline_ref
        if not is_branch(ref):
            raise ValidationError(
                f"baseline_ref {ref!r} is not a branch name: give one such as main, without spaces"
            )
        if self.pre_existing not in PRE_EXISTING_MODES:
            raise ValidationError(
                f"pre_existing {self.pre_existing!r} is not one of {', '.join(PRE_EXISTING_MODES)}"
            )
        if not isinstance(self.categories, Categories):
            raise ValidationError(
                "categories must be asyncclient.failures.Categories (load_categories(path))"
            )

    @property
    def at_once(self) -> bool:
        """Whether a test's remaining re-runs start together (`at-once` and `hedge`)."""
        return self.retry_strategy != "rounds" and self.retry_failed > 0

    @property
    def budget_seconds(self) -> float | None:
        """`retry_budget` in seconds (None: no cap)."""
        return None if self.retry_budget is None else self.retry_budget * 60.0


def runs_for(pass_rate: float, target: float, most: int) -> int:
    """The fewest runs k (1 to `most`) with 1 - (1 - p)^k >= target: how many runs of a test
    that passes a share `pass_rate` of its runs give a pass with that chance.

    >>> runs_for(0.6, 0.95, 3), runs_for(0.5, 0.95, 10), runs_for(1.0, 0.95, 3)
    (3, 5, 1)
    """
    if most <= 1 or pass_rate >= 1.0:
        return 1
    if pass_rate <= 0.0:
        return most
    k = math.ceil(math.log(1.0 - target) / math.log(1.0 - pass_rate) - 1e-9)
    return max(1, min(most, k))
