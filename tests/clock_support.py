"""The watcher's clock and sleep, on the emulator's manual clock (watcher and re-run tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from asyncclient.testing import FakeService


class ManualTime:
    """The watcher's clock and sleep: sleeping moves the emulator's manual clock, at once."""

    def __init__(self, svc: FakeService) -> None:
        self.svc = svc
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[float], None] | None = None

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if self.on_sleep is not None:
            self.on_sleep(seconds)
        self.sleeps.append(seconds)
        self.now += seconds
        self.svc.advance(seconds)
        await asyncio.sleep(0)

    def options(self, **overrides: Any) -> dict[str, Any]:
        """Fixed pace (no jitter, no growth) unless overridden."""
        return {
            "interval": 1.0,
            "jitter": 0.0,
            "growth": 1.0,
            "sleep": self.sleep,
            "clock": self.clock,
            **overrides,
        }
