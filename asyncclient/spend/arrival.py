"""Flaky on arrival (`run ... --new-test-runs N`): a test with no finished run in the project's
history runs N more times on the same build and mode, within a device-time budget, and if its
runs disagree it is *flaky on arrival* (Datadog's Early Flake Detection, as an option)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from asyncclient._core import _checks as checks
from asyncclient.errors import ValidationError

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import Run

__all__ = ["BUDGET_SECONDS", "MAX_NEW_TEST_RUNS", "new_tests", "read_new_tests", "repeats_for"]

BUDGET_SECONDS: Final = 300.0
"""The device time a new test's repeats may take, by default (--new-test-budget)."""
MAX_NEW_TEST_RUNS: Final = 20
"""The most repeats a new test may get (--new-test-runs)."""


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


def new_tests(history: Mapping[str, Sequence[Run]], tests: Iterable[str]) -> set[str]:
    """The tests whose history (each test's newest runs, the job's own left out:
    asyncclient.eta.read_history) holds no finished run; a stopped run does not count. A test
    missing from `history` (its listing could not be read) is not new: repeats cost device
    time, so they need proof."""
    return {
        test_id
        for test_id in tests
        if test_id in history
        and not any(run.is_final and run.status_kind != "cancelled" for run in history[test_id])
    }


async def read_new_tests(
    session: AsyncSession, tests: Iterable[str], *, exclude: Iterable[str] = ()
) -> set[str]:
    """new_tests() of the tests' history, read here: one listing of 50 per test, at most
    asyncclient.eta.MAX_TESTS tests, 8 at a time; `exclude`: this job's runs."""
    from asyncclient.eta import MAX_TESTS, read_history

    wanted = [t for t in dict.fromkeys(tests) if checks.is_id("test", t)][:MAX_TESTS]
    return new_tests(await read_history(session, wanted, exclude=exclude), wanted)
