"""The retry loop: one attempt after another until one succeeds, one fails for good, or the
retries run out; a service's Retry-After obeyed exactly (capped), full-jitter backoff otherwise.

The sleep between attempts is injectable: `AsyncSession(sleep=...)` for one session, or
`asyncclient.testing.recorded_retry_waits()` for every session of a test, so tests never wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import Final, TypeVar

import attrs

from asyncclient._protocol import RetrySignal

__all__ = ["RetryPolicy", "Sleep", "recorded_retry_waits", "retrying"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
logger: Final = logging.getLogger("asyncclient")


class _DefaultSleep:
    """The sleep of every policy built without one: asyncio.sleep, or a recorder in tests."""

    def __init__(self) -> None:
        self.sleep: Sleep = asyncio.sleep


_DEFAULT: Final = _DefaultSleep()


@attrs.frozen
class RetryPolicy:
    """How long to wait before the next attempt.

    A RetrySignal carrying a Retry-After waits exactly that (at most max_retry_after, and no
    jitter shortens it); otherwise the wait is uniform in [0, min(cap, base * 2**failures)].
    sleep: None for the process default (asyncio.sleep unless recorded_retry_waits is active).
    """

    base: float = 0.5
    cap: float = 20.0
    max_retry_after: float = 60.0
    sleep: Sleep | None = None
    rand: Callable[[float, float], float] = random.uniform

    def wait(self, failures: int, signal: RetrySignal) -> float:
        """The wait after the `failures`-th failure (0 for the first), which `signal` ended."""
        if signal.retry_after is not None:
            return min(float(signal.retry_after), self.max_retry_after)
        return self.rand(0.0, min(self.cap, self.base * (2.0**failures)))

    async def pause(self, seconds: float) -> None:
        await (self.sleep or _DEFAULT.sleep)(seconds)


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    retries: int,
    *,
    describe: Callable[[], str] = lambda: "request",
) -> T:
    """Await attempt() until it returns; a RetrySignal it raises asks for another attempt,
    up to `retries` more, after the policy's wait. When they run out, the signal's error is
    raised (its cause kept). Anything else, CancelledError included, goes through untouched."""
    failures = 0
    while True:
        try:
            return await attempt()
        except RetrySignal as signal:
            if failures >= retries:
                raise signal.error from signal.error.__cause__
            wait = policy.wait(failures, signal)
            failures += 1
            logger.info(
                "%s: attempt %d failed (%s); retrying in %.2f s",
                describe(),
                failures,
                signal.error,
                wait,
            )
            await policy.pause(wait)


@contextlib.contextmanager
def recorded_retry_waits() -> Iterator[list[float]]:
    """Within the block, every session without a sleep of its own records its retry waits in
    the list yielded instead of sleeping (it still yields to the event loop once)."""
    recorded: list[float] = []

    async def record(seconds: float) -> None:
        recorded.append(seconds)
        await asyncio.sleep(0)

    previous, _DEFAULT.sleep = _DEFAULT.sleep, record
    try:
        yield recorded
    finally:
        _DEFAULT.sleep = previous
