"""The retry policy: which failures are tried again (classify: "retry", "outage" or
"permanent") and how long to wait before the next attempt (RetryPolicy, whose wait generator
also ends the attempts). The loop that waits is asyncclient._client._retrying; the transport
and the run watcher's sweeps both ask classify()."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Final, Literal

import attrs
import backoff

from asyncclient._core import _defaults as defaults
from asyncclient.errors import ApiError, TransportError

__all__ = [
    "DEFAULT_RETRY_DEADLINE",
    "DEFAULT_SLEEP",
    "OUTAGE_STATUSES",
    "RETRYABLE_STATUSES",
    "RETRY_DEADLINE_ENV",
    "Retry",
    "RetryPolicy",
    "Sleep",
    "Verdict",
    "classify",
    "is_retry",
]

Sleep = Callable[[float], Awaitable[None]]


# --- which failures are retried -------------------------------------------------------------

Verdict = Literal["retry", "outage", "permanent"]

# 408 and 429: try later; 5xx: the service's fault.
RETRYABLE_STATUSES: Final = frozenset({408, 429, *range(500, 600)})
# Down or restarting, behind a gateway that says so.
OUTAGE_STATUSES: Final = frozenset({502, 503, 504})
DEFAULT_RETRY_DEADLINE: Final = defaults.RETRY_DEADLINE
RETRY_DEADLINE_ENV: Final = "ASYNCCLIENT_RETRY_DEADLINE"


def classify(failure: BaseException | int, *, idempotent: bool = True) -> Verdict:
    """Whether a failure is worth another attempt: "retry", "outage" or "permanent".

    Args:
        failure: An answer's HTTP status, or an error of the tree a caller got back (the run
            watcher's sweeps): an ApiError by its status, a TransportError as worth another
            sweep. An attempt's own exception is read by asyncclient._client._failures.
        idempotent: The request may be sent twice (else an error status is permanent).
    """
    if isinstance(failure, int):
        if not idempotent or failure not in RETRYABLE_STATUSES:
            return "permanent"
        return "outage" if failure in OUTAGE_STATUSES else "retry"
    if isinstance(failure, ApiError):
        return classify(failure.status, idempotent=idempotent)
    if isinstance(failure, TransportError):
        return "retry"
    return "permanent"


@attrs.define(eq=False)
class Retry:
    """What an attempt returns when another attempt may help: the error to raise if the
    attempts run out, the service's Retry-After, if any, and whether the service looks down or
    restarting (no connection, 502/503/504: retried until the retry deadline rather than for a
    number of tries). `wait`: the wait the retry policy chose after it. An attempt's other
    outcomes are its answer (returned) and a final error (raised)."""

    error: BaseException
    retry_after: float | None = None
    outage: bool = False
    wait: float = 0.0


def is_retry(outcome: object) -> bool:
    return isinstance(outcome, Retry)


# --- how long to wait, and the loop ---------------------------------------------------------


class _DefaultSleep:
    """The sleep of every policy built without one: None (backoff's asyncio.sleep), or a
    recorder in tests, whose clock then moves on by each wait recorded."""

    def __init__(self) -> None:
        self.sleep: Sleep | None = None
        self.clock: Callable[[], float] | None = None


DEFAULT_SLEEP: Final = _DefaultSleep()


@attrs.frozen
class RetryPolicy:
    """How long to wait before the next attempt.

    A Retry carrying a Retry-After waits exactly that (at most max_retry_after, and no
    jitter shortens it); otherwise backoff.expo's step, min(cap, base * 2**failures), under
    backoff.full_jitter: uniform in [0, step]. sleep: None for the process default (backoff's
    asyncio.sleep, unless recorded_retry_waits is active).
    """

    base: float = 0.5
    cap: float = 20.0
    max_retry_after: float = 60.0
    sleep: Sleep | None = None
    jitter: Callable[[float], float] = backoff.full_jitter
    deadline: float | None = DEFAULT_RETRY_DEADLINE
    """Seconds from a call's first attempt within which an outage is retried (None or 0: an
    outage counts against the tries like any failure)."""
    outage_cap: float = 5.0
    """The longest wait between attempts during an outage: a service that comes back is
    reached within seconds."""
    clock: Callable[[], float] | None = None

    def now(self) -> float:
        return (self.clock or DEFAULT_SLEEP.clock or time.monotonic)()

    def waits(
        self,
        *,
        own_sleep: bool = False,
        started: float | None = None,
        retries: int | None = None,
    ) -> Generator[float, Any, None]:
        """backoff's wait generator: primed with None, then sent each attempt's Retry, it
        yields the wait before the next attempt and records it on the Retry (`.wait`); it ends
        (backoff then gives up) when the attempts have run out.

        own_sleep: the handler sleeps, so backoff is told 0. started: the call's first attempt
        (now()), for the deadline (None: no deadline). retries: the attempts after the first
        (None: no end); an outage's do not count within the deadline, and retries=0 asks for
        one attempt whatever failed (the run watcher handles its own failures)."""
        retry = yield 0.0
        # Made at the first failure: most calls never fail.
        steps = backoff.expo(base=2, factor=self.base, max_value=self.cap)
        next(steps)  # backoff.expo's priming value
        counted = 0  # failures that count against `retries`
        while True:
            if retries is not None:
                if retry.outage and self.deadline and retries > 0 and started is not None:
                    if self.now() - started >= self.deadline:
                        return
                else:
                    counted += 1
                    if counted > retries:
                        return
            step = next(steps)  # one step per failure, Retry-After or not
            if retry.retry_after is not None:
                wait = min(float(retry.retry_after), self.max_retry_after)
            else:
                wait = self.jitter(min(step, self.outage_cap) if retry.outage else step)
            if retry.outage and self.deadline and started is not None:
                wait = max(0.0, min(wait, started + self.deadline - self.now()))
            retry.wait = wait
            retry = yield 0.0 if own_sleep else wait

    def own_sleep(self) -> Sleep | None:
        """The sleep to await in place of backoff's asyncio.sleep, if any."""
        return self.sleep or DEFAULT_SLEEP.sleep
