"""The command line's options as typed records (Globals, Connection, Follow), each field typed
with its default written once: `read(Record, args)` takes each field the command's parser
defined (after the configuration files filled in what the line left unset), else its default.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

if TYPE_CHECKING:
    from asyncclient.failures import Categories
    from asyncclient.quarantine import Quarantine
    from asyncclient.suite import SuitePolicy

__all__ = ["Connection", "Follow", "Globals", "read"]

_Record = TypeVar("_Record")


def read(record: type[_Record], args: argparse.Namespace) -> _Record:
    """The record `record` of the parsed line `args`."""
    given = vars(args)
    fields = attrs.fields(record)  # type: ignore[arg-type]
    return record(**{field.name: given[field.name] for field in fields if field.name in given})


@attrs.frozen(kw_only=True)
class Globals:
    """The options every command has, and what the parser and the files add to them."""

    command: str = ""
    handler: str = ""  # "module:coroutine", set by the command's parser
    argv: list[str] = attrs.field(factory=list)
    json: bool = False
    quiet: bool = False
    verbose: bool = False
    profile: str | None = None
    log_setting: Any = None  # the configuration files' `log` setting (apply_config)
    ends_on_signal: bool = False  # set by a parser whose normal end is a signal (serve)


@attrs.frozen(kw_only=True)
class Connection:
    """How to reach the service: its address, the key and the network options (each also read
    from the environment by the session)."""

    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    api_key_origin: str | None = None  # the file that gave the key (apply_config)
    api_key_hint: str | None = None  # what to do when no key is set (apply_config)
    proxy: str | None = None
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    request_timeout: float | None = None
    retries: int | None = None
    retry_deadline: float | None = None
    pool_timeout: float | None = None
    max_response_bytes: int | None = None

    @property
    def key_source(self) -> str:
        """Where the key came from: a file, "--api-key" or "ASYNCCLIENT_API_KEY" (the flag
        wins over the variable, as in open_session)."""
        if self.api_key_origin:
            return self.api_key_origin
        return "--api-key" if self.api_key else "ASYNCCLIENT_API_KEY"


@attrs.frozen(kw_only=True)
class Follow:
    """Following runs to their end (`run ... --wait`, `watch`): the wait, the re-runs, the
    reports. `quarantine` is the file's name; `quarantined` what it holds, read by
    check_follow_options before any request (`categories` and `categorised` likewise)."""

    wait: bool = False
    timeout: float | None = None
    interval: float | None = None
    stop_on_timeout: bool = False
    retry_failed: int = 0
    max_failures: int | None = None
    fail_on_flaky: bool = False
    allow_skipped: bool = False
    quarantine: str | None = None
    fail_on_quarantined: bool = False
    no_history: bool = False
    junit: str | None = None
    ctrf: str | None = None
    allure_results: str | None = None
    events: str | None = None
    html: str | None = None
    download_failed: str | None = None
    reuse_passed: float | None = None  # days (run only)
    new_test_runs: int = 0  # repeats of a new test (run only)
    new_test_budget: float | None = None  # seconds of device time for them (run only)
    new_test_warn: bool = False
    retry_strategy: str = "rounds"
    hedge_target: float | None = None
    retry_budget: float | None = None  # minutes of device time for re-runs and copies
    categories: str | None = None  # the failure categories file named
    rerun_known: bool = False
    baseline: str | None = None  # a build, or "auto"
    baseline_ref: str | None = None  # the branch auto looks for
    pre_existing: str = "fail"
    quarantined: Quarantine | None = None
    categorised: Categories | None = None  # the categories in force, read before any request
    suite_policy: SuitePolicy | None = None  # made and checked once, before any request

    def make_policy(self) -> SuitePolicy:
        """The suite loop's policy these options make (check_follow_options keeps it in
        suite_policy)."""
        from asyncclient.failures._categories import DEFAULT_CATEGORIES
        from asyncclient.reruns._policy import DEFAULT_HEDGE_TARGET
        from asyncclient.suite import SuitePolicy

        return SuitePolicy(
            retry_failed=self.retry_failed,
            retry_strategy=self.retry_strategy,  # type: ignore[arg-type]
            hedge_target=DEFAULT_HEDGE_TARGET if self.hedge_target is None else self.hedge_target,
            retry_budget=self.retry_budget,
            fail_on_flaky=self.fail_on_flaky,
            max_failures=self.max_failures,
            quarantined=self.honoured(),
            fail_on_quarantined=self.fail_on_quarantined,
            reuse_passed=self.reuse_passed,
            new_test_runs=self.new_test_runs,
            new_test_budget=self.new_test_budget,
            new_test_warn=self.new_test_warn,
            timeout=self.timeout,
            stop_on_timeout=self.stop_on_timeout,
            interval=self.interval,
            explain_failures=not self.no_history,
            categories=self.categorised or DEFAULT_CATEGORIES,
            rerun_known=self.rerun_known,
            baseline=self.baseline,
            baseline_ref=self.baseline_ref or "main",
            pre_existing=self.pre_existing,  # type: ignore[arg-type]
        )

    def honoured(self) -> dict[str, str]:
        """The tests the quarantine keeps from failing the command (test id -> reason); an
        entry past its until is not honoured (check_follow_options warned of it)."""
        if self.quarantined is None:
            return {}
        return {test: entry.reason for test, entry in self.quarantined.honoured().items()}
