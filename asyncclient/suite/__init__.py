"""Following a suite to each test's verdict, in the library: a `SuiteRun` takes the session
(`SuiteRun.for_project` starts the suite, `SuiteRun(session, run_ids)` follows runs already
started) and gives its typed events, then its report, as a `SuitePolicy` says."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncclient.reruns import RetryStrategy, SuitePolicy
    from asyncclient.suite._events import (
        BudgetReached,
        CopiesStopped,
        Eta,
        FailFast,
        HistoryRead,
        JobFinished,
        NewTests,
        Notice,
        RerunSkipped,
        Reused,
        RunChanged,
        RunFinished,
        RunsStarted,
        RunStarted,
        StartRefused,
        SuiteEvent,
    )
    from asyncclient.suite._loop import SuiteRun
    from asyncclient.suite._wait import wait_with_retries

__all__ = [
    "BudgetReached",
    "CopiesStopped",
    "Eta",
    "FailFast",
    "HistoryRead",
    "JobFinished",
    "NewTests",
    "Notice",
    "RerunSkipped",
    "RetryStrategy",
    "Reused",
    "RunChanged",
    "RunFinished",
    "RunStarted",
    "RunsStarted",
    "StartRefused",
    "SuiteEvent",
    "SuitePolicy",
    "SuiteRun",
    "wait_with_retries",
]

_HOMES = {
    "SuiteRun": "asyncclient.suite._loop",
    "SuitePolicy": "asyncclient.reruns",
    "RetryStrategy": "asyncclient.reruns",
    "wait_with_retries": "asyncclient.suite._wait",
}


def __getattr__(name: str) -> Any:  # PEP 562: the loop and its imports load on first use
    import importlib

    if name in __all__:
        module = importlib.import_module(_HOMES.get(name, "asyncclient.suite._events"))
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'asyncclient.suite' has no attribute {name!r}")
