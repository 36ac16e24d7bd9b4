"""How many parts go up at once: the budget shared by every build of a call, each build's
window within it, and the progress sink that reports bytes sent."""

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable

from asyncclient._local._bodies import PartBody
from asyncclient.upload._values import Progress

# An unreadable send buffer: Linux's largest default.
DEFAULT_SEND_BUFFER = 4 << 20

log = logging.getLogger("asyncclient.upload")


class Budget:
    """At most `limit` parts in flight across every upload sharing it.

    Waiters are served by priority (build order, then part number), not arrival, so the builds of
    upload_builds finish one after another instead of all at the very end. An Adaptive reads
    what the parts carried (carried), moves `limit` (resize) and hears of pushback (on_pushback).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        # Parts going out, and what finished ones carried (carried()).
        self.flows: set[Flow] = set()
        self._ended = 0  # bytes the parts that ended carried since the last carried()
        self.on_pushback: Callable[[float], object] | None = None
        self._waiters: list[tuple[tuple[int, int], int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def resize(self, limit: int) -> None:
        """Allow `limit` parts from now on: waiters start at once on a raise; on a cut, parts
        in flight finish and no new one starts until fewer than `limit` are."""
        self.limit = limit
        while self.in_flight < self.limit and self._grant():
            pass

    def carried(self) -> int:
        """Bytes every part got across the link since the last call, new parts and ended ones
        too: what the link carried, never more. (Extrapolating from the parts under way for a
        while counted what new ones were still pouring into buffers: 27 MB/s on a 20 MB/s
        link, and the number climbed to 20.)"""
        found, self._ended = self._ended, 0
        return found + sum(flow.take() for flow in self.flows)

    def _ended_flow(self, flow: "Flow", done: bool) -> None:
        self.flows.discard(flow)
        self._ended += flow.take(whole=done)

    def retried(self, status: int | None, wait: float) -> None:
        """An attempt of a part failed and will be tried again: 429 and 503 (the service asks
        for less) and transport failures (status None: a timeout, a reset) are pushback."""
        if (status is None or status in (429, 503)) and self.on_pushback is not None:
            self.on_pushback(wait)

    def slot(self, priority: tuple[int, int], flow: "Flow | None" = None) -> "_Slot":
        """`async with budget.slot((build, part)):` one part in flight; its `flow`, if given,
        is measured while it is."""
        return _Slot(self, priority, flow)

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
        if self.in_flight < self.limit:
            self._grant()

    def _grant(self) -> bool:
        """Start the first waiter still waiting; False when there is none."""
        while self._waiters:
            _priority, _seq, future = heapq.heappop(self._waiters)
            if not future.done():
                self._take()
                future.set_result(None)
                return True
        return False


class Flow:
    """One part going out, as the tuner sees it: the bytes handed to its connection and, of
    those, the bytes the link has carried (the peer acknowledged them), as last taken."""

    __slots__ = ("_add", "body", "taken", "written")

    def __init__(self, add: Callable[[int], object]) -> None:
        self._add = add
        self.body: PartBody | None = None
        self.written = 0
        self.taken = 0

    def add(self, delta: int) -> None:
        """The part's progress: forwarded, and counted (a retried attempt starts again)."""
        self.written = max(0, self.written + delta)
        if delta < 0:
            self.taken = 0
        self._add(delta)

    def carried(self) -> int:
        """Bytes the link has carried: those written less those still in the connection's
        send queue (where the platform cannot tell, a full send buffer is assumed)."""
        body = self.body
        if body is None:
            return 0
        queued = body.in_transit()
        if queued is None:
            queued = body.send_buffer or DEFAULT_SEND_BUFFER
        return max(0, self.written - queued)

    def take(self, whole: bool = False) -> int:
        """Bytes carried since the last take; `whole`: the part is done (all of it is)."""
        body = self.body
        carried = body.length if whole and body is not None else self.carried()
        grown, self.taken = max(0, carried - self.taken), max(self.taken, carried)
        return grown


class _Slot:
    """One part's place in a Budget, as an async context manager (a class: cheaper to enter
    and leave than contextlib.asynccontextmanager's generator)."""

    __slots__ = ("_budget", "_flow", "_priority")

    def __init__(self, budget: Budget, priority: tuple[int, int], flow: Flow | None) -> None:
        self._budget = budget
        self._priority = priority
        self._flow = flow

    async def __aenter__(self) -> None:
        budget = self._budget
        await budget._acquire(self._priority)
        if self._flow is not None:
            budget.flows.add(self._flow)

    async def __aexit__(self, exc_type: object, *exc_info: object) -> None:
        budget = self._budget
        if self._flow is not None:
            budget._ended_flow(self._flow, done=exc_type is None)
        budget._release()


class Window:
    """upload_builds: how many parts of started builds are still queued or in flight; the next
    build starts only while that is below `limit`, so few builds are open at once.

    The window is the one owner of that count: each build holds a `Share` of it (share()),
    and only a share changes it. With `follows`, the limit is also at most `lookahead` times
    that budget's limit as it is now (an adaptive one: a few builds open while few parts go)."""

    def __init__(self, limit: int, follows: Budget | None = None, lookahead: int = 2) -> None:
        self._cap = limit
        self._follows = follows
        self._lookahead = lookahead
        self.outstanding = 0
        self._room = asyncio.Event()

    @property
    def limit(self) -> int:
        follows = self._follows
        if follows is None:
            return self._cap
        return max(1, min(self._cap, self._lookahead * follows.limit))

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
