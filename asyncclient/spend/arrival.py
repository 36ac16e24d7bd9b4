"""Flaky on arrival (`run ... --new-test-runs N`): a test with no finished run in the project's
history is new; it runs N more times on the same build and mode, and if its runs disagree it is
*flaky on arrival*, caught before it fails other people's jobs (Datadog's Early Flake Detection,
as a command's option).

The repeats are bounded by device time, as Datadog bounds them by duration: a new test's
repeats take at most BUDGET_SECONDS (`--new-test-budget`) of device time, reckoned from its
first run's duration, and at least one repeat runs. With the default 300 s and N = 10: a 5 s
test runs 10 more times, a 20 s test 10, a 45 s test 6, a 2 min test 2, a 10 min test 1.

    new = await read_new_tests(session, ["t_login", "t_pay"], exclude=job_run_ids)
    repeats_for(first_run_seconds=45.0, wanted=10)   # 6
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from asyncclient._core import _checks as checks
from asyncclient.errors import AsyncClientError, ValidationError

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession

__all__ = [
    "BUDGET_SECONDS",
    "MAX_NEW_TEST_RUNS",
    "check_new_test_runs",
    "read_new_tests",
    "repeats_for",
]

BUDGET_SECONDS: Final = 300.0
"""The device time a new test's repeats may take, by default (--new-test-budget)."""
MAX_NEW_TEST_RUNS: Final = 20
"""The most repeats a new test may get (--new-test-runs)."""
MAX_TESTS: Final = 200
_HISTORY_RUNS: Final = 50
_CONCURRENCY: Final = 8


def check_new_test_runs(count: int) -> int:
    """`count` if it is a whole number from 0 to MAX_NEW_TEST_RUNS, else ValidationError."""
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_NEW_TEST_RUNS:
        raise ValidationError(
            f"new_test_runs {count!r} is out of range: give 0 to {MAX_NEW_TEST_RUNS} (the "
            "repeats of a test seen for the first time)"
        )
    return count


def repeats_for(
    first_run_seconds: float | None, wanted: int, budget: float = BUDGET_SECONDS
) -> int:
    """How many repeats a new test gets: `wanted`, fewer when they would take more than
    `budget` seconds of device time at its first run's duration; at least 1 (0 when none is
    wanted). A first run of unknown duration gets `wanted`."""
    if wanted <= 0:
        return 0
    if not first_run_seconds or first_run_seconds <= 0:
        return wanted
    return max(1, min(wanted, math.floor(budget / first_run_seconds)))


async def read_new_tests(
    session: AsyncSession, tests: Iterable[str], *, exclude: Iterable[str] = ()
) -> set[str]:
    """The tests with no finished run (a stopped one does not count) in their newest
    listing, `exclude` (this job's runs) left out; one listing of 50 per test, at most
    MAX_TESTS tests, 8 at a time. A test whose history cannot be read is not new: repeats
    cost device time, so they need proof."""
    wanted = [t for t in dict.fromkeys(tests) if checks.is_id("test", t)][:MAX_TESTS]
    left_out = set(exclude)
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def one(test_id: str) -> str | None:
        async with limit:
            try:
                runs = await session.list_runs(test_id=test_id, limit=_HISTORY_RUNS)
            except AsyncClientError:
                return None
        for run in runs[:_HISTORY_RUNS]:
            if run.test_id != test_id or run.id in left_out:
                continue
            if run.is_final and run.status_kind != "cancelled":
                return None
        return test_id

    found = await asyncio.gather(*(one(test_id) for test_id in wanted))
    return {test_id for test_id in found if test_id is not None}
