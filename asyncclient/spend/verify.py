"""Proving a fix (`asyncclient quarantine verify`, the `verify_fix` tool): run a test N times and
say what the runs support, an upper bound of its failure rate at 95 % confidence; a quarantined
test is lifted on evidence, not on a pull request's word."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from asyncclient._core import _checks as checks
from asyncclient._core import _untrusted
from asyncclient.errors import AsyncClientError, ValidationError, WatchTimeoutError

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import Run

__all__ = ["DEFAULT_RUNS", "MAX_RUNS", "MAX_TESTS", "FixCheck", "failure_rate_bound", "verify_fix"]

DEFAULT_RUNS: Final = 20
MAX_RUNS: Final = 100
"""The most runs of one test a verification starts."""
MAX_TESTS: Final = 20
"""The most tests one verification runs."""
CONFIDENCE: Final = 0.95
_START_CONCURRENCY: Final = 8


def failure_rate_bound(failures: int, runs: int, confidence: float = CONFIDENCE) -> float:
    """The highest failure rate `failures` in `runs` runs leave plausible at `confidence`: the
    exact binomial (Clopper-Pearson) one-sided upper limit; 1.0 when nothing was counted."""
    if runs <= 0 or failures >= runs:
        return 1.0
    alpha = 1.0 - confidence
    if failures == 0:
        return 1.0 - math.pow(alpha, 1.0 / runs)

    def at_most(p: float) -> float:  # P(X <= failures) for X ~ Binomial(runs, p)
        return sum(math.comb(runs, i) * p**i * (1.0 - p) ** (runs - i) for i in range(failures + 1))

    low, high = failures / runs, 1.0
    for _ in range(60):  # at_most falls as p grows: bisect to where it is alpha
        middle = (low + high) / 2
        if at_most(middle) > alpha:
            low = middle
        else:
            high = middle
    return high


def _percent(rate: float) -> str:
    """A bound as a reader says it, rounded up so that it is still a bound: `14 %`, `0.6 %`."""
    value = rate * 100
    if value >= 10:
        return f"{math.ceil(value - 1e-9)} %"
    return f"{math.ceil(value * 10 - 1e-9) / 10:g} %"


@attrs.frozen
class FixCheck:
    """One test run `asked` times to prove a fix.

    Attributes:
        test_id: The test.
        asked: The runs asked for.
        runs: Every run started, as last seen.
        start_errors: Why runs could not be started (the service refused them), one each.
    """

    test_id: str
    asked: int
    runs: tuple[Run, ...]
    start_errors: tuple[str, ...] = ()

    @property
    def passed(self) -> int:
        """The runs that passed."""
        return sum(1 for run in self.runs if run.is_final and run.passed)

    @property
    def failed(self) -> int:
        """The runs that ended and did not pass (a stopped one does not count)."""
        return sum(
            1
            for run in self.runs
            if run.is_final and not run.passed and run.status_kind != "cancelled"
        )

    @property
    def counted(self) -> int:
        """The runs that ended with a verdict: passed or failed."""
        return self.passed + self.failed

    @property
    def not_counted(self) -> int:
        """The runs asked for that gave no verdict: never started, stopped or still going."""
        return self.asked - self.counted

    @property
    def bound(self) -> float:
        """The failure rate's upper bound at 95 % confidence (failure_rate_bound)."""
        return failure_rate_bound(self.failed, self.counted)

    @property
    def fixed(self) -> bool:
        """Every run asked for passed: the evidence lifts its quarantine."""
        return self.counted == self.asked and self.failed == 0 and self.asked > 0

    def sentence(self) -> str:
        """`20 of 20 passed: its failure rate is below 14 % at 95 % confidence`."""
        if not self.counted:
            return f"0 of {self.asked} runs gave a verdict: nothing is proven"
        if not self.passed:
            return f"0 of {self.counted} passed: it still fails every run" + (
                f"; {self.not_counted} of the {self.asked} runs asked gave no verdict"
                if self.not_counted
                else ""
            )
        text = f"{self.passed} of {self.counted} passed"
        if self.failed:
            text += f" ({self.failed} failed)"
        text += (
            f": its failure rate is below {_percent(self.bound)} at "
            f"{CONFIDENCE * 100:g} % confidence"
        )
        if self.not_counted:
            text += f"; {self.not_counted} of the {self.asked} runs asked gave no verdict"
        return text

    def fields(self) -> dict[str, object]:
        """Its shape in `--json` and the tool's result."""
        return {
            "testId": self.test_id,
            "asked": self.asked,
            "passed": self.passed,
            "failed": self.failed,
            "notCounted": self.not_counted,
            "failureRateBound": round(self.bound, 4),
            "confidence": CONFIDENCE,
            "fixed": self.fixed,
            "sentence": self.sentence(),
            "runs": [{"id": run.id, "status": run.status_kind} for run in self.runs],
            "startErrors": list(self.start_errors),
        }


def check_verify(tests: Sequence[str], runs: int) -> list[str]:
    """The tests (unique, each a test id, at most MAX_TESTS) after checking `runs` (1 to
    MAX_RUNS); ValidationError otherwise, before any request."""
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise ValidationError(f"runs {runs!r} is out of range: give 1 to {MAX_RUNS}")
    ids = checks.check_id_list("test", list(tests), "tests")
    if not ids:
        raise ValidationError("give at least one test to verify (t_...)")
    if len(ids) > MAX_TESTS:
        raise ValidationError(
            f"{len(ids)} tests is too many for one verification: give at most {MAX_TESTS}"
        )
    return ids


async def verify_fix(
    session: AsyncSession,
    tests: Sequence[str],
    *,
    runs: int = DEFAULT_RUNS,
    build_id: str | None = None,
    mode: str | None = None,
    idempotency_key: str | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - a deadline over one whole watch
    on_start: Callable[[str, str, int], object] | None = None,
    on_run: Callable[[Run], object] | None = None,
    on_stopped: Callable[[Sequence[str]], object] | None = None,
    interval: float = 3.0,
) -> list[FixCheck]:
    """Run each test `runs` times together and wait for every run (see the module's docstring).

    Args:
        session: The session to call the service with.
        tests: The tests (`t_...`), at most 20.
        runs: The runs of each (1 to 100; default 20).
        build_id: The build to run (`ab_...`); default: the newest of each test's app.
        mode: `auto`, `cold` or `warm`; default: the service's.
        idempotency_key: The verification's key; each run's is derived from it
            (a digest of it, `verify`, the test and N), so running the same verification
            again starts nothing new.
        timeout: Seconds to wait for the runs; those still going are then stopped and not
            counted. Default: no limit.
        on_start: Called with (test id, run id, number) as each run starts.
        on_run: Called with each change of a run, as the watcher sees it.
        on_stopped: Called with the ids of the runs stopped because the wait ended first
            (`timeout`) or was cancelled, before the result or the cancellation goes on.
        interval: Seconds between the watcher's first sweeps.

    Returns:
        A `FixCheck` per test, in the order given.

    Raises:
        ValidationError: A bad test id, build id or count, before any request.
        ApiError: The service refused every start, or a read (after the retries).
        TransportError: The service could not be reached, after the retries.
    """
    ids = check_verify(tests, runs)
    if build_id is not None:
        build_id = checks.check_id("build", build_id, "build_id")
    key = idempotency_key or f"asyncclient-verify-{uuid.uuid4()}"
    limit = asyncio.Semaphore(_START_CONCURRENCY)
    started: dict[str, list[str]] = {test_id: [] for test_id in ids}
    errors: dict[str, list[str]] = {test_id: [] for test_id in ids}
    first_error: list[AsyncClientError] = []
    answered: set[str] = set()  # every run id a start was answered with

    async def start(test_id: str, number: int) -> None:
        async with limit:
            try:
                answer = await session.run_test(
                    test_id,
                    mode=mode,
                    build_id=build_id,
                    idempotency_key=checks.derived_key(key, "verify", test_id, str(number)),
                )
            except AsyncClientError as exc:
                first_error.append(exc)
                errors[test_id].append(str(exc))
                return
        if answer.run_id in answered:  # two starts, one run: it is counted once
            errors[test_id].append(
                f"the service answered run {answer.run_id} for an earlier start too: "
                "not counted again"
            )
            return
        answered.add(answer.run_id)
        started[test_id].append(answer.run_id)
        if on_start is not None:
            on_start(test_id, answer.run_id, number)

    await asyncio.gather(*(start(t, n) for t in ids for n in range(1, runs + 1)))
    every = [run_id for test_id in ids for run_id in started[test_id]]
    if not every:
        raise first_error[0]
    views: dict[str, Run] = {}
    # Its own runs: a timeout or cancellation stops them.
    watcher = session.watch_runs(
        every, interval=interval, timeout=timeout, stop_on_timeout=True, stop_on_cancel=True
    )
    try:
        async with watcher:
            async for run in watcher:
                if on_run is not None:
                    on_run(run)
    except WatchTimeoutError:
        pass  # the runs still going were stopped; they are not counted
    except asyncio.CancelledError:
        if on_stopped is not None and watcher.stopped:
            on_stopped(watcher.stopped)
        raise
    if on_stopped is not None and watcher.stopped:
        on_stopped(watcher.stopped)
    views = watcher.runs
    checks_of = []
    for test_id in ids:
        own = []
        for run_id in started[test_id]:
            view = views.get(run_id)
            if view is None:
                continue
            if view.test_id is not None and view.test_id != test_id:
                other = _untrusted.clip(_untrusted.line(view.test_id), 80)
                errors[test_id].append(f"run {run_id} is of test {other}: not counted")
                continue
            own.append(view)
        checks_of.append(FixCheck(test_id, runs, tuple(own), tuple(dict.fromkeys(errors[test_id]))))
    return checks_of
