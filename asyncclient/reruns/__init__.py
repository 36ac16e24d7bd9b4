"""Re-running the tests that did not pass: one policy (`SuitePolicy`, checked once) for the CLI,
the MCP server and users' code; `Reruns` is one suite's state, `SuiteResult` its end."""

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
