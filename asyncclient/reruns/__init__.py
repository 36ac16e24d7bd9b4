"""Re-running the tests that did not pass: one policy for the CLI, the MCP server and users' code.

A test whose final run did not pass (failed, error, inconclusive, blocked, or any other final
status but passed) is run again, unless the run was stopped (cancelled: the API says a stopped
run is not counted). A re-run is `run_test(test_id, mode=<the first run's mode>,
build_id=<the build that run used>)` with an idempotency key derived from the suite's, so a
retried request never starts a test twice. The re-runs of one round go out together and are
followed by one batched watcher (ids in batches of 50). A test is re-run until it passes or
its attempts are used up; one that failed and then passed is *flaky*, and counts as passed
unless the caller asks otherwise (Maven Surefire's `rerunFailingTestsCount`, saucectl's
`retries` with `smartRetry.failedOnly`). A failure the infrastructure caused (a failure
category of that kind: built in, `error` and `inconclusive`) is re-run too, but never makes a
test flaky; an app failure that fails the same way as the test's newest runs on the same build
is not re-run (`keep`), unless the caller asks (`rerun_known`).

Every decision is one record, `SuitePolicy`, checked once when it is made: `Reruns` (the
state of one suite), `SuiteResult` (its end) and the suite loop read that record.

    result = await wait_with_retries(session, run_ids, retry_failed=2)
    result.passed, result.flaky, result.failed   # tests, each with every attempt
"""

from asyncclient.reruns._policy import (
    DEFAULT_HEDGE_TARGET,
    MAX_RETRY_FAILED,
    RETRY_STRATEGIES,
    RetryStrategy,
    SuitePolicy,
    runs_for,
)
from asyncclient.reruns._result import Attempts, SuiteResult, TestOutcome, needs_rerun
from asyncclient.reruns._state import Reruns, remaining

__all__ = [
    "DEFAULT_HEDGE_TARGET",
    "MAX_RETRY_FAILED",
    "RETRY_STRATEGIES",
    "Attempts",
    "Reruns",
    "RetryStrategy",
    "SuitePolicy",
    "SuiteResult",
    "TestOutcome",
    "needs_rerun",
    "remaining",
    "runs_for",
]
