"""The one word set of outcomes: every attribute named `outcome` (a run's in a report, a test's
in a suite, a requirement's in a run) takes its word from `AnyOutcome`, as pytest's TestReport
does; JUnit's (`failure`), CTRF's and Allure's words are said only by their writers."""

from typing import Literal

__all__ = ["AnyOutcome", "CheckOutcome", "RunOutcome", "TestOutcome"]

AnyOutcome = Literal[
    "passed",
    "failed",
    "error",
    "cancelled",
    "skipped",
    "unknown",
    "not_final",
    "flaky",
    "flaky_on_arrival",
    "reused",
]

#: How one run counts: a report's attempt.
RunOutcome = Literal["passed", "failed", "error", "cancelled", "not_final"]
#: How one test of a suite ends, over all its runs.
TestOutcome = Literal[
    "passed", "flaky", "failed", "cancelled", "not_final", "reused", "flaky_on_arrival"
]
#: How one requirement of a run went (`skipped`: the service did not check it).
CheckOutcome = Literal["passed", "failed", "skipped", "unknown"]
