"""The pool's slots: how many requests of one session may hold a connection at once.

An asyncio.Semaphore with a free slot taken without a coroutine (`take_now`), since nearly
every request finds one; a slot given back goes straight to the longest waiter, so a request
arriving later never takes it first."""

import asyncio
import contextlib
from collections import deque

__all__ = ["Slots"]


class Slots:
    __slots__ = ("_free", "_waiters")

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def free(self) -> int:
        return self._free

    def take_now(self) -> bool:
        """Take a free slot if there is one. While any is free nobody waits (give hands a slot
        to a waiter rather than freeing it), so this never jumps the queue."""
        if self._free > 0:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting in turn for one to be given back."""
        if self.take_now():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot, then cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):  # cancelled while queued
                    self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Give a slot back: to the longest waiter still waiting, else to the free ones."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
