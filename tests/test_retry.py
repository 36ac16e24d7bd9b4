"""The retry loop and its waits, with an injected sleep: no test here waits for real."""

from __future__ import annotations

import asyncio

import pytest

from asyncclient._protocol import RetrySignal
from asyncclient._retry import RetryPolicy, recorded_retry_waits, retrying
from asyncclient.errors import ServerError, TransportError


def _signal(retry_after: float | None = None) -> RetrySignal:
    return RetrySignal(ServerError(503, None, "busy"), retry_after)


def test_retry_after_is_obeyed_exactly_and_capped() -> None:
    policy = RetryPolicy(max_retry_after=30.0, rand=lambda lo, hi: hi)
    assert policy.wait(0, _signal(7.0)) == 7.0
    assert policy.wait(3, _signal(0.0)) == 0.0
    assert policy.wait(0, _signal(3600.0)) == 30.0


def test_backoff_is_exponential_up_to_the_cap_with_full_jitter() -> None:
    bounds: list[tuple[float, float]] = []

    def rand(lo: float, hi: float) -> float:
        bounds.append((lo, hi))
        return hi

    policy = RetryPolicy(base=0.5, cap=3.0, rand=rand)
    assert [policy.wait(n, _signal()) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert all(lo == 0.0 for lo, _hi in bounds)


async def test_the_loop_retries_then_raises_the_last_error_with_its_cause() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    attempts = 0

    async def attempt() -> str:
        nonlocal attempts
        attempts += 1
        error = TransportError(f"attempt {attempts} failed")
        error.__cause__ = ConnectionResetError("reset")
        raise RetrySignal(error, 0.25)

    policy = RetryPolicy(sleep=sleep)
    with pytest.raises(TransportError, match="attempt 3 failed") as info:
        await retrying(attempt, policy, 2)
    assert attempts == 3
    assert slept == [0.25, 0.25]
    assert isinstance(info.value.__cause__, ConnectionResetError)


async def test_the_loop_returns_the_first_success_and_never_retries_cancellation() -> None:
    answers = iter([_signal(1.0), "done"])

    async def attempt() -> str:
        answer = next(answers)
        if isinstance(answer, RetrySignal):
            raise answer
        return answer

    with recorded_retry_waits() as waits:
        assert await retrying(attempt, RetryPolicy(), 4) == "done"
    assert waits == [1.0]

    async def cancelled() -> str:
        raise asyncio.CancelledError

    with recorded_retry_waits() as waits, pytest.raises(asyncio.CancelledError):
        await retrying(cancelled, RetryPolicy(), 4)
    assert waits == []


async def test_a_sessions_own_sleep_wins_over_the_recorder() -> None:
    own: list[float] = []

    async def sleep(seconds: float) -> None:
        own.append(seconds)

    async def attempt() -> None:
        raise _signal(2.0)

    with recorded_retry_waits() as recorded, pytest.raises(ServerError):
        await retrying(attempt, RetryPolicy(sleep=sleep), 1)
    assert (own, recorded) == ([2.0], [])
