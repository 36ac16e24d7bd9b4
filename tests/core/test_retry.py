"""The retry loop and its waits, with an injected sleep: no test here waits for real."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from asyncclient._client._retrying import recorded_retry_waits, retrying
from asyncclient._core._retry import Retry, RetryPolicy
from asyncclient.errors import ServerError, TransportError


def _signal(retry_after: float | None = None) -> Retry:
    return Retry(ServerError(503, None, "busy"), retry_after)


def _scripted(*answers: Retry | str) -> Callable[[], Awaitable[str | Retry]]:
    """An attempt that returns the next of `answers` each time it is made."""
    script = iter(answers)

    async def attempt() -> str | Retry:
        return next(script)

    return attempt


def _waits(policy: RetryPolicy, signals: list[Retry]) -> list[float]:
    """The waits backoff would be told after each of these failures, in turn."""
    waits = policy.waits()
    assert next(waits) == 0.0  # backoff primes the generator first
    return [waits.send(signal) for signal in signals]


def test_retry_after_is_obeyed_exactly_and_capped() -> None:
    policy = RetryPolicy(max_retry_after=30.0, jitter=lambda step: step)
    signals = [_signal(7.0), _signal(), _signal(), _signal(0.0), _signal(3600.0)]
    assert _waits(policy, signals) == [7.0, 1.0, 2.0, 0.0, 30.0]
    assert [signal.wait for signal in signals] == [7.0, 1.0, 2.0, 0.0, 30.0]


def test_backoff_is_exponential_up_to_the_cap_with_full_jitter() -> None:
    steps: list[float] = []

    def jitter(step: float) -> float:
        steps.append(step)
        return step

    policy = RetryPolicy(base=0.5, cap=3.0, jitter=jitter)
    assert _waits(policy, [_signal() for _ in range(5)]) == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert steps == [0.5, 1.0, 2.0, 3.0, 3.0]  # each step went through the jitter
    # backoff.full_jitter, the default: uniform in [0, step].
    jittered = _waits(RetryPolicy(base=0.5, cap=3.0), [_signal() for _ in range(200)])
    assert all(0.0 <= wait <= 3.0 for wait in jittered)
    assert len(set(jittered)) > 150  # drawn, not fixed
    assert max(jittered[:1]) <= 0.5


def test_own_sleep_tells_backoff_zero_and_records_the_wait_on_the_signal() -> None:
    waits = RetryPolicy(jitter=lambda step: step).waits(own_sleep=True)
    next(waits)
    signal = _signal(4.0)
    assert waits.send(signal) == 0.0
    assert signal.wait == 4.0


async def test_the_loop_retries_then_raises_the_last_error_with_its_cause() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    attempts = 0

    async def attempt() -> Retry:
        nonlocal attempts
        attempts += 1
        error = TransportError(f"attempt {attempts} failed")
        error.__cause__ = ConnectionResetError("reset")
        return Retry(error, 0.25)

    policy = RetryPolicy(sleep=sleep)
    with pytest.raises(TransportError, match="attempt 3 failed") as info:
        await retrying(attempt, policy, 2)
    assert attempts == 3
    assert slept == [0.25, 0.25]
    assert isinstance(info.value.__cause__, ConnectionResetError)


async def test_the_loop_returns_the_first_success_and_never_retries_cancellation() -> None:
    attempt = _scripted(_signal(1.0), "done")

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

    async def attempt() -> Retry:
        return _signal(2.0)

    with recorded_retry_waits() as recorded, pytest.raises(ServerError):
        await retrying(attempt, RetryPolicy(sleep=sleep), 1)
    assert (own, recorded) == ([2.0], [])


async def test_without_a_sleep_of_its_own_backoff_sleeps_with_asyncio() -> None:
    """The production path: backoff's own asyncio.sleep waits (here a Retry-After of 10 ms,
    seen as loop time passing, not measured against a bound)."""
    loop = asyncio.get_running_loop()
    attempt = _scripted(_signal(0.01), "done")

    started = loop.time()
    assert await retrying(attempt, RetryPolicy(), 1) == "done"
    assert loop.time() - started >= 0.01


async def test_the_retry_loop_is_backoffs(monkeypatch: pytest.MonkeyPatch) -> None:
    """retrying() hands the loop to backoff's predicate mode (backoff.on_predicate), with the
    tries it was given."""
    import backoff

    seen: dict[str, object] = {}
    real = backoff.on_predicate

    def spy(*args: object, **kwargs: object) -> object:
        seen.update(kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backoff, "on_predicate", spy)  # the module _retry calls it through

    async def attempt() -> Retry:
        return _signal(0.0)

    with recorded_retry_waits() as waits, pytest.raises(ServerError):
        await retrying(attempt, RetryPolicy(), 3)
    # The wait generator counts the tries (an outage's do not count) and ends them.
    assert (seen["max_tries"], seen["retries"]) == (None, 3)
    assert waits == [0.0, 0.0, 0.0]

    # A first attempt that succeeds never sets the loop up; one that fails hands it over.
    seen.clear()

    async def fine() -> str | Retry:
        return "ok"

    assert await retrying(fine, RetryPolicy(), 3) == "ok"
    assert seen == {}
    once = _scripted(_signal(0.0), "ok")

    with recorded_retry_waits() as waits:
        assert await retrying(once, RetryPolicy(), 3) == "ok"
    assert seen["max_tries"] is None
    assert waits == [0.0]


def test_the_wait_generator_ends_when_the_attempts_run_out() -> None:
    """It decides the end: `retries` failures are waited after, the next ends the loop; an
    outage's failures do not count within the deadline, and past it end the loop."""
    now = [0.0]
    policy = RetryPolicy(jitter=lambda step: step, deadline=10.0, clock=lambda: now[0])
    waits = policy.waits(retries=2, started=0.0)
    next(waits)
    assert [waits.send(_signal()), waits.send(_signal())] == [0.5, 1.0]
    with pytest.raises(StopIteration):
        waits.send(_signal())

    outage = policy.waits(retries=1, started=0.0)
    next(outage)
    down = [Retry(ServerError(503, None, "down"), outage=True) for _ in range(4)]
    assert [outage.send(retry) for retry in down] == [0.5, 1.0, 2.0, 4.0]  # none counted
    now[0] = 10.0  # the deadline
    with pytest.raises(StopIteration):
        outage.send(Retry(ServerError(503, None, "down"), outage=True))


async def test_an_attempt_returns_its_retry_and_raises_nothing_to_ask_for_another() -> None:
    """The outcome, not an exception, asks for another attempt: a Retry is a plain value."""
    assert not isinstance(_signal(), BaseException)
    attempt = _scripted(_signal(0.5), _signal(0.5), "done")
    with recorded_retry_waits() as waits:
        assert await retrying(attempt, RetryPolicy(), 4) == "done"
    assert waits == [0.5, 0.5]
