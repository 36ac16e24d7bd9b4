"""How many parts to keep in flight, found while uploading: a throughput-gradient rule with a
fast start (`Rule`, pure: measures in, a number out) and `Adaptive`, which measures what the
link carries (Budget.carried: every part's acknowledged bytes) and sets the budget's limit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from asyncclient._core import _checks as checks
from asyncclient._core import _defaults as defaults
from asyncclient.errors import ValidationError

if TYPE_CHECKING:
    from asyncclient.upload._budget import Budget

__all__ = ["Adaptive", "Rule"]

log = logging.getLogger("asyncclient.upload")

START: Final = defaults.ADAPTIVE_START
"""Parts in flight before anything is measured (2): two can fill a link already, and the first
part is then stored within about twice its time alone (4 took four times as long there)."""
FLOOR: Final = 2
"""The fewest: one part's request and answer hide behind the other's bytes."""
CEILING: Final = 64
"""The most: 64 connections (AsyncSession's connection_limit) and no part held in memory."""

# Seconds: a measure waits `settle` after a change, then lasts `window`.
TICK: Final = 0.05
START_SETTLE: Final = 0.1
START_WINDOW: Final = 0.2
SETTLE: Final = 0.3
WINDOW: Final = 1.5
QUIET: Final = 2.0  # no raise this long after pushback

# A change's efficiency: throughput's relative change over the number's (1: scaled).
LINEAR: Final = 0.8  # the fast start quadruples while this efficient
GAINING: Final = 0.5  # ... doubles while this; a probe up is followed by another
KEEP_RAISE: Final = 0.5  # a raise is kept when at least this efficient
BIG_RISE: Final = 0.2  # ... or when throughput rose by this share
KEEP_LOWER: Final = 0.015  # a cut is kept when it costs at most this share


class Rule:
    """The decisions, fed one measure at a time; no clock, no I/O (tests drive it alone).

    Starts at `start` and doubles (nothing to compare with yet); then, while each raise brings
    throughput in proportion, quadruples (doubles while it brings at least half of that), as
    TCP's slow start doubles its window.
    Then it probes a quarter up or an eighth down: a raise is kept when it brings half its
    share or a fifth more throughput (and the next probe is a raise again when it brought
    half), a cut when it costs under 3 % of the best before it (and the next probe is a cut
    again). A probe that fails goes back and the next goes the other way (the start's failed
    quadruple goes back halfway: the link filled between); a cut that cost waits longer each
    time. Pushback halves the number and holds off raises for a while.
    """

    def __init__(self, start: int = START, floor: int = FLOOR, ceiling: int = CEILING) -> None:
        self.floor = floor
        self.ceiling = ceiling
        self.level = min(max(start, floor), ceiling)
        self.starting = True
        self.quiet_until = 0.0
        # The measure the current one is compared with: (level, bytes/s).
        self._reference: tuple[int, float] | None = None
        self._up = True  # the way the next probe goes
        # Measures before retrying a costly cut; each doubles it.
        self._cuts_wait = 0
        self._cuts_skip = 0

    def measured(self, throughput: float, now: float) -> int:
        """Throughput (bytes/s) at `self.level` over the last window: the level to hold next."""
        level, reference = self.level, self._reference
        if reference is None:  # the first measure at this level: probe from it
            self._reference = (level, throughput)
            # Nothing to compare with yet: double, not quadruple (the link may be full).
            return self._probe(now, GAINING)
        before, was = reference
        gain = _efficiency(before, was, level, throughput)
        if level > before:
            # Kept when it brought half its proportional gain, or a fifth.
            if throughput >= was * (1 + min(KEEP_RAISE * (level - before) / before, BIG_RISE)):
                self._reference = (level, throughput)
                self._up = gain >= GAINING
                self.starting = self.starting or gain >= LINEAR  # room again: ramp as at first
                return self._probe(now, gain)
            # A quadruple overshot: the link filled in between.
            back = before * 2 if self.starting and level >= 4 * before else before
            self.starting, self._up, self._reference = False, False, None
            return self._set(back)
        self.starting = False
        if throughput >= was * (1 - KEEP_LOWER):  # a cut that costs (almost) nothing
            # Against the best before it: cuts never add up.
            self._reference = (level, max(was, throughput))
            self._up = False
            self._cuts_wait = 0
            return self._probe(now, gain)
        self._up, self._reference = True, None
        self._cuts_wait = min(max(1, 2 * self._cuts_wait), 16)
        self._cuts_skip = self._cuts_wait
        return self._set(before)

    def pushback(self, now: float, quiet: float = QUIET) -> int:
        """The service said slow down (429, 503) or a part timed out: halve, and raise nothing
        for `quiet` seconds."""
        self.starting = False
        self.quiet_until = max(self.quiet_until, now + quiet)
        self._reference = None
        self._up = False
        self._cuts_wait = self._cuts_skip = 0
        return self._set(max(self.floor, self.level // 2))

    def _probe(self, now: float, gain: float) -> int:
        level = self.level
        may_raise = level < self.ceiling and now >= self.quiet_until
        if self.starting:
            if may_raise and gain >= GAINING:
                return self._set(min(self.ceiling, level * (4 if gain >= LINEAR else 2)))
            self.starting = False
        if (self._up or level <= self.floor) and may_raise:
            return self._set(min(self.ceiling, level + max(1, level // 4)))
        if level > self.floor and self._cuts_skip <= 0:  # cuts are smaller: they cost
            return self._set(max(self.floor, level - max(1, level // 8)))
        self._cuts_skip -= 1
        self._reference = None  # holding: the next measure is the new reference
        return level

    def _set(self, level: int) -> int:
        self.level = level
        return level


def _efficiency(before: int, was: float, level: int, now: float) -> float:
    if level == before or was <= 0:
        return 1.0 if now > was else 0.0
    return ((now - was) / was) / ((level - before) / before)


class Adaptive:
    """Parts in flight found while uploading: the default of `upload_build` and
    `upload_builds`. Pass one to read the number live (`current`) or to bound it.

    The number starts at `start`, rises while the measured throughput keeps rising with it and
    falls when it does not, when the service answers 429 or 503, or when a part times out;
    never below `floor` nor above `ceiling`. One instance serves one call at a time (a second
    call given it while the first runs raises ValidationError).

    Attributes:
        current: Parts allowed in flight now.
        peak: The most allowed during the call.
        throughput: Bytes a second at the last measure (None before the first).
        changes: How many times the number changed.
        pushbacks: How many 429, 503 or timed-out attempts lowered it.
    """

    def __init__(self, *, start: int = START, floor: int = FLOOR, ceiling: int = CEILING) -> None:
        self.floor = checks.check_count("floor", floor)
        self.ceiling = checks.check_count("ceiling", ceiling)
        if self.ceiling < self.floor:
            raise ValidationError(f"ceiling ({ceiling}) must be at least floor ({floor})")
        self.start = min(max(checks.check_count("start", start), self.floor), self.ceiling)
        self.current = self.start
        self.peak = self.start
        self.throughput: float | None = None
        self.changes = 0
        self.pushbacks = 0
        self._rule = Rule(self.start, self.floor, self.ceiling)
        self._budget: Budget | None = None
        self._restart = False  # pushback: the measure under way no longer counts

    def __repr__(self) -> str:
        return (
            f"Adaptive(current={self.current}, floor={self.floor}, ceiling={self.ceiling}, "
            f"peak={self.peak})"
        )

    @contextlib.asynccontextmanager
    async def running(self, budget: Budget, ceiling: int | None = None) -> AsyncIterator[None]:
        """Steer `budget` while the block runs (the call's uploads), within `ceiling` when the
        call allows fewer (the open-files limit)."""
        if self._budget is not None:
            raise ValidationError(
                "this Adaptive is steering another upload call: give each call its own"
            )
        top = self.ceiling if ceiling is None else max(1, min(self.ceiling, ceiling))
        floor = min(self.floor, top)
        self._rule = Rule(self.start, floor, top)
        self.current = self.peak = self._rule.level
        self.throughput = None
        self.changes = self.pushbacks = 0
        self._budget = budget
        budget.resize(self.current)
        budget.on_pushback = self._pushback
        task = asyncio.create_task(self._steer(budget))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            budget.on_pushback = None
            self._budget = None

    def _apply(self, level: int, why: str) -> None:
        budget = self._budget
        if level == self.current or budget is None:
            return
        log.debug("parts in flight %d -> %d (%s)", self.current, level, why)
        self.current = level
        self.peak = max(self.peak, level)
        self.changes += 1
        budget.resize(level)

    def _pushback(self, wait: float) -> None:
        now = asyncio.get_running_loop().time()
        self.pushbacks += 1
        self._apply(self._rule.pushback(now, max(QUIET, wait + SETTLE)), "pushback")
        self._restart = True

    async def _steer(self, budget: Budget) -> None:
        """Measure, window after window, what the link carries and move the number as the rule
        says. A window counts only while every allowed part is busy (one where the budget ran
        short of parts says nothing of the link)."""
        loop = asyncio.get_running_loop()
        while True:
            rule = self._rule
            settle, window = (START_SETTLE, START_WINDOW) if rule.starting else (SETTLE, WINDOW)
            self._restart = False
            await asyncio.sleep(settle)
            # After a cut, the parts in flight finish first.
            while budget.in_flight > budget.limit and not self._restart:  # noqa: ASYNC110
                await asyncio.sleep(TICK)
            throughput = await self._measure(budget, loop, window)
            if throughput is None:
                continue
            self.throughput = throughput
            self._apply(rule.measured(throughput, loop.time()), f"{throughput / 1e6:.1f} MB/s")

    async def _measure(
        self, budget: Budget, loop: asyncio.AbstractEventLoop, window: float
    ) -> float | None:
        """Bytes a second the link carried over the next `window`, every part's together (a
        new part's share of the buffers is not the link's: what all parts got across is), or
        None: the window did not count (a pushback, or fewer parts than allowed)."""
        began = loop.time()
        budget.carried()
        carried, ticks = 0, 0
        while loop.time() - began < window:
            await asyncio.sleep(TICK)
            if self._restart or budget.in_flight != budget.limit:
                return None
            carried += budget.carried()
            ticks += 1
        took = loop.time() - began
        if not ticks or took <= 0 or not carried:
            return None
        return carried / took
