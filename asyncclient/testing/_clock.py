"""The emulator's notion of time: a scaled wall clock or a manual clock moved by the test.

Run states are computed from this clock on demand, so moving it is all it takes to move runs along.
"""

import time

__all__ = ["Clock", "ManualClock", "ScaledClock", "make_clock", "to_iso"]


class Clock:
    """Service time in seconds since the Unix epoch; `advance` moves it forward.

    `rate` is service seconds per wall second (1 but for a ScaledClock); `wall` maps a
    service time to the time it is on the wall, which is what the wire shows.
    """

    rate = 1.0

    def __init__(self) -> None:
        # Whole milliseconds, so timestamps read back from the wire compare equal.
        self._base = round(time.time(), 3)
        self._offset = 0.0

    @property
    def started_at(self) -> float:
        """The wall-clock time (Unix seconds) service time started from: the clock's creation."""
        return self._base

    @property
    def started_at_iso(self) -> str:
        """started_at in the wire's timestamp format (ISO 8601 UTC, milliseconds)."""
        return to_iso(self._base)

    def now(self) -> float:
        return self._base + self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._offset += seconds

    def wall(self, ts: float) -> float:
        """The wall-clock time of service time `ts` (the same time but for a ScaledClock)."""
        return ts

    def span(
        self, created: float, started: float | None, finished: float | None
    ) -> tuple[float, float | None, float | None]:
        """A run's times as the wire shows them: its creation on the wall, then its queue and
        its run each lasting their service seconds over `rate` (so a seeded run of earlier
        days took, on the wall, what it would take now; None stays None)."""
        shown = self.wall(created)
        begun = started if started is not None else created
        at_start = None if started is None else shown + (started - created) / self.rate
        at_end = None
        if finished is not None:
            at_end = (at_start if at_start is not None else shown) + (finished - begun) / self.rate
        return shown, at_start, at_end


class ManualClock(Clock):
    """Time stands still until `advance` is called."""


class ScaledClock(Clock):
    """Wall time multiplied by `speed` (service seconds per wall second), plus any `advance`.

    Service time starts at the wall clock's now and then runs `speed` times faster: after a
    wall minute at speed 10 it is 9 minutes ahead. The wire shows its times on the wall
    (`wall`, `span`), durations in service time.
    """

    def __init__(self, speed: float) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed!r}")
        super().__init__()
        self.speed = self.rate = speed
        self._start = time.monotonic()

    def now(self) -> float:
        return self._base + self._offset + (time.monotonic() - self._start) * self.speed

    def wall(self, ts: float) -> float:
        # From the start on, `speed` times the wall.
        return ts if ts <= self._base else self._base + (ts - self._base) / self.speed


def make_clock(kind: str, speed: float) -> Clock:
    if kind == "manual":
        return ManualClock()
    if kind == "scaled":
        return ScaledClock(speed)
    raise ValueError(f"clock must be 'scaled' or 'manual', got {kind!r}")


def to_iso(ts: float) -> str:
    """ISO 8601 UTC with milliseconds, the wire format of every timestamp."""
    millis = round(ts * 1000)
    seconds, millis = divmod(millis, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
