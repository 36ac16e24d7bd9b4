"""`wait_with_retries`: the suite loop with re-runs only, for code that wants the result of a
suite's runs and nothing else."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from asyncclient._core import _checks as checks
from asyncclient.reruns import RetryStrategy, SuitePolicy

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import Run
    from asyncclient.reruns import SuiteResult
    from asyncclient.suite._events import SuiteEvent

__all__ = ["wait_with_retries"]


async def wait_with_retries(
    session: AsyncSession,
    run_ids: Iterable[str],
    *,
    retry_failed: int = 0,
    fail_on_flaky: bool = False,
    mode: str | None = None,
    build_id: str | None = None,
    idempotency_key: str | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - a deadline over many sweeps and rounds
    raise_on_timeout: bool = True,
    on_run: Callable[[Run], object] | None = None,
    on_rerun: Callable[[list[tuple[str, str, int]]], object] | None = None,
    retry_strategy: RetryStrategy = "rounds",
    **watch_options: Any,
) -> SuiteResult:
    """Wait for the runs, re-running each test that did not pass up to `retry_failed` times
    (asyncclient.reruns says how); returns every test with every attempt. The suite loop
    (`SuiteRun`) with re-runs only: no history read, no fail-fast.
    With raise_on_timeout=False a timeout or unknown ids return the result so far
    (`complete` False, `unknown` the ids).

    Args:
        session: The session to call the service with.
        run_ids: The first runs of the suite (`j_...`).
        retry_failed: How many more times a test that did not pass may run (0 to 10).
        fail_on_flaky: Count a test that failed and then passed as failed.
        mode: The mode the first runs were started in, if the caller started them.
        build_id: The build the first runs used, if the caller started them.
        idempotency_key: The suite's key; each re-run's is derived from it
            (`KEY/rerun/TEST/N`). Default: a new one.
        timeout: Seconds for the whole wait, re-runs included; default: no limit.
        raise_on_timeout: Raise on a timeout or unknown ids; False returns the result so far.
        on_run: Called with each change of a run, as the watcher sees it.
        on_rerun: Called with each round of re-runs as it starts: (test id, run id, attempt).
        retry_strategy: `rounds` (a round's re-runs once every run of it ended) or `at-once`
            (a test's re-runs start as soon as its run did not pass; the first pass stops
            the others); see SuitePolicy.
        **watch_options: `WatchOptions` for each round's `RunWatcher`.

    Returns:
        A `SuiteResult`: every test with every attempt; `.passed`, `.flaky`, `.failed`,
        `.summary()`.

    Raises:
        ValidationError: A bad run id or option, before any request.
        WatchTimeoutError: `timeout` passed first (unless raise_on_timeout is False).
        UnknownRunsError: The service did not know some ids (likewise).
        ApiError: The service refused a request (after the retries its status allows).
        TransportError: The service could not be reached, after the retries.
    """
    from asyncclient.errors import UnknownRunsError
    from asyncclient.suite._events import RunChanged, RunsStarted
    from asyncclient.suite._loop import SuiteRun

    ids = checks.check_id_list("run", run_ids, "run_ids", unique=False)
    policy = SuitePolicy(
        retry_failed=retry_failed,
        retry_strategy=retry_strategy,
        fail_on_flaky=fail_on_flaky,
        timeout=timeout,
        read_history=False,
    )
    suite = SuiteRun(
        session,
        ids,
        policy=policy,
        mode=mode,
        build_id=build_id,
        idempotency_key=idempotency_key,
        starts=(),
        stop_on_cancel=bool(watch_options.pop("stop_on_cancel", False)),
        watch_options=watch_options,
    )

    def observe(event: SuiteEvent) -> None:
        if isinstance(event, RunChanged) and on_run is not None:
            on_run(event.run)
        elif isinstance(event, RunsStarted) and event.kind == "rerun" and on_rerun is not None:
            on_rerun(list(event.started))

    suite.observe(observe)
    await suite.wait()
    assert suite.result is not None
    if raise_on_timeout and suite.timed_out is not None:
        raise suite.timed_out
    if raise_on_timeout and suite.unknown:
        known = tuple(run for run in suite.result.runs if run.id not in suite.unknown)
        raise UnknownRunsError(suite.unknown, known)
    return suite.result
