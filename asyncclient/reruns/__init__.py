"""Re-running the tests that did not pass: one policy (`SuitePolicy`, checked once) for the CLI,
the MCP server and users' code; `Reruns` is one suite's state, `SuiteResult` its end."""

from asyncclient.reruns._policy import RetryStrategy, SuitePolicy
from asyncclient.reruns._result import Attempts, SuiteResult, TestOutcome
from asyncclient.reruns._state import Reruns

__all__ = ["Attempts", "Reruns", "RetryStrategy", "SuitePolicy", "SuiteResult", "TestOutcome"]
