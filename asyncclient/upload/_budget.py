"""How many parts go up at once: the budget shared by every build of a call, each build's
window within it, and the progress sink that reports bytes sent."""

import asyncio
import heapq
import itertools
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from asyncclient.upload._values import Progress

log = logging.getLogger("asyncclient.upload")


class Budget:
    """At most `limit` parts in flight across every upload sharing it.

    Waiters are served by priority (build order, then part number), not arrival, so the builds of
    upload_builds finish one after another instead of all at the very end.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._waiters: list[tuple[tuple[int, int], int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def slot(self, priority: tuple[int, int]) -> "_Slot":
        """`async with budget.slot((build, part)):` one part in flight."""
        return _Slot(self, priority)

    async def _acquire(self, priority: tuple[int, int]) -> None:
        if self.in_flight < self.limit and not self._waiters:
            self._take()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (priority, next(self._seq), future)
        heapq.heappush(self._waiters, entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # granted just as we were cancelled: hand the slot on
            else:
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            raise

    def _take(self) -> None:
        self.in_flight += 1

    def _release(self) -> None:
        self.in_flight -= 1
        while self._waiters:
            _priority, _seq, future = heapq.heappop(self._waiters)
            if not future.done():
                self._take()
                future.set_result(None)
                return


class _Slot:
    """One part's place in a Budget, as an async context manager (a class: entering and
    leaving it costs 0.4 us, against 1.7 us with contextlib.asynccontextmanager's generator)."""

    __slots__ = ("_budget", "_priority")

    def __init__(self, budget: Budget, priority: tuple[int, int]) -> None:
        self._budget = budget
        self._priority = priority

    async def __aenter__(self) -> None:
        await self._budget._acquire(self._priority)

    async def __aexit__(self, *exc_info: object) -> None:
        self._budget._release()


class Window:
    """upload_builds: how many parts of started builds are still queued or in flight; the next
    build starts only while that is below `limit`, so few builds are open at once.

    The window is the one owner of that count: each build holds a `Share` of it (share()),
    and only a share changes it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.outstanding = 0
        self._room = asyncio.Event()

    def share(self) -> "Share":
        """A build's share, holding no part yet."""
        return Share(self)

    async def _enter(self, parts: int) -> None:
        while self.outstanding >= self.limit:
            self._room.clear()
            await self._room.wait()
        self.outstanding += parts

    def _leave(self, parts: int) -> None:
        self.outstanding -= parts
        if self.outstanding < self.limit:
            self._room.set()


class Share:
    """One build's share of a Window (or of none: every call then does nothing): the parts of
    it still queued or in flight, counted against the window's limit."""

    __slots__ = ("_window", "parts")

    def __init__(self, window: Window | None = None) -> None:
        self._window = window
        self.parts = 0

    async def open(self, estimate: int) -> None:
        """Wait for room in the window, then count `estimate` parts (before the service says
        how many the build has)."""
        if self._window is not None:
            await self._window._enter(estimate)
            self.parts = estimate

    def resize(self, parts: int) -> None:
        """Count `parts` from now on: the parts still to send, once known."""
        window = self._window
        if window is None or parts == self.parts:
            return
        window._leave(self.parts - parts)
        self.parts = parts

    def sent_one(self) -> None:
        """One part is sent: the next build may start sooner."""
        self.resize(self.parts - 1)

    def release(self) -> None:
        """The build no longer counts (done, failed, or waiting for another process)."""
        self.resize(0)


class ProgressSink:
    """Counts the bytes of one build and forwards (done, total) to the caller's callback.

    A callback that raises is not called again; its error fails the upload after the part.
    """

    __slots__ = ("callback", "done", "error", "total")

    def __init__(self, total: int, callback: Progress | None) -> None:
        self.total = total
        self.done = 0
        self.callback = callback
        self.error: Exception | None = None

    def add(self, delta: int) -> None:
        self.done += delta
        self.emit()

    def set(self, done: int) -> None:
        self.done = done
        self.emit()

    def emit(self) -> None:
        if self.callback is None or self.error is not None:
            return
        try:
            self.callback(self.done, self.total)
        except Exception as exc:
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error
