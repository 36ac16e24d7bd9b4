"""The retry loop, run by the `backoff` library (the python-backoff distribution): one attempt
after another until one succeeds, one fails for good, or the tries run out.

What is ours is what backoff leaves to its user: the wait generator, which receives each failure
(a RetrySignal) and answers with its Retry-After, exact and capped, or else with backoff's own
exponential step under its full jitter; and the `on_backoff` handler, which logs the retry. The
first attempt is made before backoff's loop is set up (most calls need no other), and a failure
of it is that loop's first try.

The one thing backoff cannot do is sleep with anything but `asyncio.sleep`. So when a sleep of
one's own is given (`AsyncSession(sleep=...)`, or `asyncclient.testing.recorded_retry_waits()`
for every session of a test, so tests never wait), the handler awaits it with the wait chosen,
and backoff's own sleep is told 0 (it still yields to the event loop once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any, Final, TypeVar, cast

import attrs
import backoff

from asyncclient._protocol import RetrySignal

__all__ = ["RetryPolicy", "Sleep", "recorded_retry_waits", "retrying"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
logger: Final = logging.getLogger("asyncclient")


class _DefaultSleep:
    """The sleep of every policy built without one: None (backoff's asyncio.sleep), or a
    recorder in tests."""

    def __init__(self) -> None:
        self.sleep: Sleep | None = None


_DEFAULT: Final = _DefaultSleep()


@attrs.frozen
class RetryPolicy:
    """How long to wait before the next attempt.

    A RetrySignal carrying a Retry-After waits exactly that (at most max_retry_after, and no
    jitter shortens it); otherwise backoff.expo's step, min(cap, base * 2**failures), under
    backoff.full_jitter: uniform in [0, step]. sleep: None for the process default (backoff's
    asyncio.sleep, unless recorded_retry_waits is active).
    """

    base: float = 0.5
    cap: float = 20.0
    max_retry_after: float = 60.0
    sleep: Sleep | None = None
    jitter: Callable[[float], float] = backoff.full_jitter

    def waits(self, *, own_sleep: bool = False) -> Generator[float, Any, None]:
        """backoff's wait generator: primed with None, then sent each failure's RetrySignal,
        it yields the wait before the next attempt and records it on the signal (`.wait`).
        own_sleep: the handler sleeps, so backoff is told 0."""
        signal = yield 0.0
        # Made at the first failure, not on every call: most calls never fail.
        steps = backoff.expo(base=2, factor=self.base, max_value=self.cap)
        next(steps)  # backoff.expo's own priming value
        while True:
            step = next(steps)  # one step per failure, Retry-After or not
            if signal.retry_after is not None:
                wait = min(float(signal.retry_after), self.max_retry_after)
            else:
                wait = self.jitter(step)
            signal.wait = wait
            signal = yield 0.0 if own_sleep else wait

    def own_sleep(self) -> Sleep | None:
        """The sleep to await in place of backoff's asyncio.sleep, if any."""
        return self.sleep or _DEFAULT.sleep


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
    try:
        return await attempt()
    except RetrySignal as signal:
        first_failure: RetrySignal | None = signal
    # From the first failure on, the loop is backoff's; its first try is that failure, given
    # back to it, so it counts it and waits before the second attempt. A call that succeeds at
    # once, nearly every call, never sets the retry loop up (about 10 us a call: bench_session).
    sleep = policy.own_sleep()

    async def on_backoff(details: Any) -> None:
        signal: RetrySignal = details["exception"]
        logger.info(
            "%s: attempt %d failed (%s); retrying in %.2f s",
            describe(),
            details["tries"],
            signal.error,
            signal.wait,
        )
        if sleep is not None:
            await sleep(signal.wait)

    result: T | None = None
    tries = backoff.aretry_context(
        RetrySignal,
        policy.waits,
        max_tries=retries + 1,
        jitter=None,  # the wait generator jitters, and never a Retry-After
        giveup=_never,
        on_backoff=on_backoff,
        logger=None,  # on_backoff logs; the error itself is raised, not logged
        own_sleep=sleep is not None,
    )
    try:
        async for each in tries:
            with each:
                if first_failure is not None:
                    failure, first_failure = first_failure, None
                    raise failure
                result = await attempt()
    except RetrySignal as signal:  # the tries ran out: backoff raised the last one
        raise signal.error from signal.error.__cause__
    except BaseException:
        await tries.aclose()  # an error not to retry, or a cancellation, left it waiting
        raise
    return cast(T, result)


async def _never(error: BaseException) -> bool:
    """backoff's giveup: no RetrySignal is given up early (async, so backoff need not wrap
    it in a coroutine on every call)."""
    return False


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
