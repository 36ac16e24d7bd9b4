"""The retry loop: attempts until an answer, waiting as the policy says
(asyncclient._core._retry decides what is retried and how long to wait), run by `backoff`;
and recorded_retry_waits(), which makes every session record its waits instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import backoff

from asyncclient._core._retry import DEFAULT_SLEEP, Retry, RetryPolicy, is_retry

__all__ = ["recorded_retry_waits", "retrying"]

T = TypeVar("T")


async def retrying(
    attempt: Callable[[], Awaitable[T | Retry]],
    policy: RetryPolicy,
    retries: int,
    *,
    on_retry: Callable[[Retry], object] | None = None,
    first: Retry | None = None,
    started: float | None = None,
) -> T:
    """Await attempt() until it returns an answer; a Retry it returns asks for another
    attempt, up to `retries` more (an outage: until the policy's deadline), after the policy's
    wait. When they run out, the Retry's error is raised (its cause kept; after an outage it
    says how long it was retried). on_retry(retry): each failure that will be retried, its wait
    chosen (`retry.wait`), before the wait (the caller logs and counts it). A final error
    attempt() raises, CancelledError included, goes through untouched. A caller that made
    the first attempt itself passes its Retry as `first`, with the time it began (`started`).

    The loop is backoff's predicate mode (`backoff.on_predicate`): it calls the attempt, and
    while the outcome is a Retry asks the policy's wait generator for the wait, which ends
    when the attempts have run out. The first attempt is made before that loop is set up (a
    call that succeeds at once never sets it up); a Retry from it is handed to the loop as
    the loop's first outcome."""
    if first is None:
        started = policy.now()
        outcome = await attempt()
        if not isinstance(outcome, Retry):
            return outcome
    else:
        outcome = first
        if started is None:
            started = policy.now()
    sleep = policy.own_sleep()
    pending: list[T | Retry] = [outcome]

    async def attempts() -> T | Retry:
        return pending.pop() if pending else await attempt()

    async def on_backoff(details: Any) -> None:
        retry: Retry = details["value"]
        if on_retry is not None:
            on_retry(retry)
        if sleep is not None:
            await sleep(retry.wait)

    tried = backoff.on_predicate(
        policy.waits,
        is_retry,
        max_tries=None,  # the wait generator ends when the attempts have run out
        jitter=None,  # the wait generator jitters, and never a Retry-After
        on_backoff=on_backoff,
        logger=None,  # on_retry logs; the error itself is raised, not logged
        own_sleep=sleep is not None,
        started=started,
        retries=retries,
    )(attempts)
    outcome = await tried()
    if isinstance(outcome, Retry):  # the attempts ran out
        error = outcome.error
        if outcome.outage and policy.deadline and retries > 0:
            _say_how_long(error, policy.now() - started)
        raise error from error.__cause__
    return outcome


def _say_how_long(error: BaseException, seconds: float) -> None:
    """End the error's message with how long the outage was retried."""
    note = f"; retried for {seconds:.1f} s (retry deadline)"
    message = str(error) + note
    if hasattr(error, "message") and isinstance(error.message, str) and hasattr(error, "detail"):
        error.message = message  # TransportError keeps its message as an attribute too
    error.args = (message, *error.args[1:])
    error.retried_for = seconds  # type: ignore[attr-defined]


@contextlib.contextmanager
def recorded_retry_waits(
    on_wait: Callable[[float], Awaitable[None]] | None = None,
) -> Iterator[list[float]]:
    """Within the block, every session without a sleep of its own records its retry waits in
    the list yielded instead of sleeping (it still yields to the event loop once). Time goes
    on by each wait for the task that waited, as if it had slept, so a retry deadline is
    reached after the waits that would reach it. on_wait(elapsed): awaited after each wait,
    with the waiting task's total so far (to bring a service back at a given time, say).

    Args:
        on_wait: Awaited after each wait with the waiting task's total so far.

    Yields:
        The list the waits are recorded in, in seconds.
    """
    recorded: list[float] = []
    per_task: dict[object, float] = {}
    base = time.monotonic()

    def key() -> object:
        try:
            return asyncio.current_task()
        except RuntimeError:
            return None

    async def record(seconds: float) -> None:
        recorded.append(seconds)
        task = key()
        per_task[task] = per_task.get(task, 0.0) + seconds
        await asyncio.sleep(0)
        if on_wait is not None:
            await on_wait(per_task[task])

    def clock() -> float:
        return base + per_task.get(key(), 0.0) + (time.monotonic() - base)

    previous, DEFAULT_SLEEP.sleep = DEFAULT_SLEEP.sleep, record
    previous_clock, DEFAULT_SLEEP.clock = DEFAULT_SLEEP.clock, clock
    try:
        yield recorded
    finally:
        DEFAULT_SLEEP.sleep = previous
        DEFAULT_SLEEP.clock = previous_clock
