"""The retry policy, all of it: which failures are tried again (classify), how long to wait
before the next attempt (RetryPolicy), and the loop that does it (retrying), run by the
`backoff` library (the python-backoff distribution). Change the policy here and nowhere else:
the transport and the run watcher's sweeps both ask classify().

classify() sorts a failure into one of three verdicts. "retry": worth another attempt, counted
against the tries (408, 429, a 5xx other than 502/503/504, a dropped or timed-out transfer of
an idempotent request). "outage": the service looks down or restarting (no connection, a
connection it dropped, 502/503/504), retried until the policy's deadline rather than for a
number of tries, so that a call in flight rides out a deploy. "permanent": retrying cannot help
(a 4xx, a TLS or certificate failure, a host name that does not resolve, a request that may
have reached the service and is not safe to send twice).

Each attempt returns its outcome to one loop: its answer, or a `Retry` (the error, the
service's Retry-After, whether it is an outage's); a final error it raises. The loop is
backoff's predicate mode. What is ours in it is what backoff leaves to its user: the wait
generator, which receives each Retry and answers with its Retry-After, exact and capped, or else
with backoff's own exponential step under its full jitter, and ends when the attempts have run
out (the tries counted, an outage's against the deadline); and the `on_backoff` handler, which
hands each retry to its caller (the transport logs, counts and watches for outages with it).
The first attempt is made before backoff's loop is set up (most calls need no other), and its
Retry is that loop's first outcome. No outage retry starts past the deadline, nor waits past
it.

The one thing backoff cannot do is sleep with anything but `asyncio.sleep`. So when a sleep of
one's own is given (`AsyncSession(sleep=...)`, or `asyncclient.testing.recorded_retry_waits()`
for every session of a test, so tests never wait), the handler awaits it with the wait chosen,
and backoff's own sleep is told 0 (it still yields to the event loop once).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any, Final, Literal, Protocol, TypeVar

import aiohttp
import attrs
import backoff

from asyncclient._core import _defaults as defaults
from asyncclient.errors import ApiError, TransportError

__all__ = [
    "DEFAULT_RETRY_DEADLINE",
    "OUTAGE_STATUSES",
    "RETRYABLE_STATUSES",
    "RETRY_DEADLINE_ENV",
    "Retry",
    "RetryPolicy",
    "Sleep",
    "Verdict",
    "classify",
    "recorded_retry_waits",
    "retrying",
]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


# --- which failures are retried -------------------------------------------------------------

Verdict = Literal["retry", "outage", "permanent"]

# 408 and 429 say "try again later"; 5xx are the service's own faults.
RETRYABLE_STATUSES: Final = frozenset({408, 429, *range(500, 600)})
# The service is down or restarting, behind a gateway that says so.
OUTAGE_STATUSES: Final = frozenset({502, 503, 504})
DEFAULT_RETRY_DEADLINE: Final = defaults.RETRY_DEADLINE
RETRY_DEADLINE_ENV: Final = "ASYNCCLIENT_RETRY_DEADLINE"

# aiohttp failures worth another attempt; TLS and fingerprint failures will not heal by retrying.
_RETRYABLE_TRANSPORT: Final = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    aiohttp.UploadAbortedError,
    TimeoutError,
)
_PERMANENT_TRANSPORT: Final = (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch)
# Failures where the request surely never reached the service: it could not even connect.
_NEVER_SENT: Final = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# The service is down or restarting: nothing listens, or it dropped the connection.
_OUTAGE_TRANSPORT: Final = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
)


class Named(Protocol):
    """What the network layer recognised in a failure (a TLS, proxy or certificate problem,
    with its own fix): `permanent` when retrying cannot heal it."""

    @property
    def permanent(self) -> bool: ...


def classify(
    failure: BaseException | int, *, idempotent: bool = True, named: Named | None = None
) -> Verdict:
    """Whether a failure is worth another attempt: "retry", "outage" or "permanent".

    Args:
        failure: An answer's HTTP status; an exception one attempt raised (aiohttp's, or a
            TimeoutError); or an error of the tree a caller got back (the run watcher's
            sweeps): an ApiError by its status, a TransportError as worth another sweep.
        idempotent: The request may be sent twice. A request that is not is retried only
            when it surely never reached the service (it could not connect).
        named: What the network layer recognised in the failure, if anything: then never
            an outage (the failure has a name and a fix of its own), and permanent when it
            says so.
    """
    if isinstance(failure, int):
        if not idempotent or failure not in RETRYABLE_STATUSES:
            return "permanent"
        return "outage" if failure in OUTAGE_STATUSES else "retry"
    if isinstance(failure, ApiError):
        return classify(failure.status, idempotent=idempotent)
    if isinstance(failure, TransportError):
        return "retry"
    if (
        not isinstance(failure, _RETRYABLE_TRANSPORT)
        or isinstance(failure, _PERMANENT_TRANSPORT)
        or _unresolved(failure)
        or (named is not None and named.permanent)
        or not (idempotent or isinstance(failure, _NEVER_SENT))
    ):
        return "permanent"
    return "outage" if isinstance(failure, _OUTAGE_TRANSPORT) and named is None else "retry"


def _unresolved(exc: BaseException) -> bool:
    """A host name that does not resolve: a typo or a wrong address, not an outage; it fails
    at once."""
    return isinstance(exc, aiohttp.ClientConnectorError) and isinstance(
        exc.os_error, socket.gaierror
    )


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


def _is_retry(outcome: object) -> bool:
    return isinstance(outcome, Retry)


# --- how long to wait, and the loop ---------------------------------------------------------


class _DefaultSleep:
    """The sleep of every policy built without one: None (backoff's asyncio.sleep), or a
    recorder in tests, whose clock then moves on by each wait recorded."""

    def __init__(self) -> None:
        self.sleep: Sleep | None = None
        self.clock: Callable[[], float] | None = None


_DEFAULT: Final = _DefaultSleep()


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
        return (self.clock or _DEFAULT.clock or time.monotonic)()

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
        # Made at the first failure, not on every call: most calls never fail.
        steps = backoff.expo(base=2, factor=self.base, max_value=self.cap)
        next(steps)  # backoff.expo's own priming value
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
        return self.sleep or _DEFAULT.sleep


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
    call that succeeds at once, nearly every call, never sets it up: about 10 us a call,
    bench_session); a Retry from it is handed to the loop as the loop's first outcome."""
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
        _is_retry,
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

    previous, _DEFAULT.sleep = _DEFAULT.sleep, record
    previous_clock, _DEFAULT.clock = _DEFAULT.clock, clock
    try:
        yield recorded
    finally:
        _DEFAULT.sleep = previous
        _DEFAULT.clock = previous_clock
