"""Outages, told once on the `asyncclient.outage` logger: failures that look like the service
being away (classify's "outage") start a streak that any answer ends; one past the session's
`outage_threshold` is one WARNING, and its end one INFO line with how long it lasted. Time is
the retry policy's clock, so recorded waits (tests) make outages of the length they simulate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_OUTAGE_THRESHOLD", "Outages"]

log: Final = logging.getLogger("asyncclient.outage")

DEFAULT_OUTAGE_THRESHOLD: Final = 2.0


class Outages:
    """The session's view of its service's outages (see the module doc). `since` is None
    while nothing fails: the one check a call pays when all is well."""

    __slots__ = (
        "_announced",
        "_deadline",
        "_failures",
        "_now",
        "_reason",
        "_threshold",
        "_timer",
        "_waiting",
        "_wall",
        "_what",
        "since",
    )

    def __init__(self, threshold: float, deadline: float | None, now: Callable[[], float]) -> None:
        self._threshold = threshold
        self._deadline = deadline
        self._now = now
        self.since: float | None = None  # the first outage failure since the service answered
        self._wall = 0.0
        self._what = ""
        self._reason = ""
        self._failures = 0
        self._announced = False
        self._waiting: set[int] = set()  # the calls (ids) that met this streak and go on
        # Fires at the threshold, even between sparse attempts.
        self._timer: asyncio.TimerHandle | None = None

    def failed(self, call: int, reason: str, request: str) -> None:
        """Call number `call` met an outage failure (`reason`, on `request`) and will retry."""
        now = self._now()
        if self.since is None:
            self.since = now
            self._wall = time.time()
            self._what = f"{reason} ({request})"
            self._reason = reason
            with contextlib.suppress(RuntimeError):  # no running loop: the failures alone tell
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(self._threshold, self._due)
        self._failures += 1
        self._waiting.add(call)
        if not self._announced and now - self.since >= self._threshold:
            self._tell(now - self.since)

    def _due(self) -> None:
        """The threshold has passed since the streak began: calls still wait, nothing answered."""
        self._timer = None
        if self.since is not None and not self._announced and self._waiting:
            self._tell(max(self._threshold, self._now() - self.since))

    def _tell(self, seconds: float) -> None:
        self._announced = True
        deadline = f"; calls are retried for up to {self._deadline:g} s" if self._deadline else ""
        log.warning(
            "service unreachable since %s (%.1f s so far): %s%s",
            time.strftime("%H:%M:%S", time.localtime(self._wall)),
            seconds,
            self._what,
            deadline,
            extra={
                "outage_since": self._wall,
                "outage_seconds": seconds,
                "failure": self._reason,
            },
        )

    def left(self, call: int, *, answered: bool, request: str) -> None:
        """Call number `call` ended: `answered` when the service answered it (a success or an
        answer that is not an outage's), else it gave up or was cancelled."""
        lived = call in self._waiting
        self._waiting.discard(call)
        if self.since is None:
            return
        if not answered:
            if not self._waiting and not self._announced:
                self._reset()  # the calls that saw the blip are gone
            return
        if self._announced and not lived and self._waiting:
            return  # a surviving call is about to say so
        if self._announced:
            seconds = max(self._now() - self.since, self._threshold)
            log.info(
                "service reachable again after %.1f s (%d failed attempts; %s came through)",
                seconds,
                self._failures,
                request,
                extra={"outage_since": self._wall, "outage_seconds": seconds},
            )
        self._reset()

    def _reset(self) -> None:
        # Retrying calls join the next streak; succeeded ones are forgotten.
        self.since = None
        self._announced = False
        self._failures = 0
        self._what = ""
        self._waiting.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
