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
# Seconds a part goes unmeasured after it starts (see Flow).
MATURE = 0.2

log = logging.getLogger("asyncclient.upload")


class Budget:
    """At most `limit` parts in flight across every upload sharing it.

    Waiters are served by priority (build order, then part number), not arrival, so the builds of
    upload_builds finish one after another instead of all at the very end. An Adaptive reads
    what the parts carried (sample), moves `limit` (resize) and hears of pushback (on_pushback).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        # Parts going out, and what finished ones carried (sample()).
        self.flows: set[Flow] = set()
        self._ended: list[tuple[int, float]] = []
        self.on_pushback: Callable[[float], object] | None = None
        self._waiters: list[tuple[tuple[int, int], int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def resize(self, limit: int) -> None:
        """Allow `limit` parts from now on: waiters start at once on a raise; on a cut, parts
        in flight finish and no new one starts until fewer than `limit` are."""
        self.limit = limit
        while self.in_flight < self.limit and self._grant():
            pass

    def sample(self, now: float) -> tuple[int, float]:
        """(bytes, seconds of parts in flight) the link carried since the last sample, over
        the mature parts: their ratio is what one part carries a second."""
        carried, seconds = 0, 0.0
        for flow in self.flows:
            grown, took = flow.sample(now)
            carried += grown
            seconds += took
        for grown, took in self._ended:
            carried += grown
            seconds += took
        self._ended.clear()
        return carried, seconds

    def _ended_flow(self, flow: "Flow", done: bool) -> None:
        now = asyncio.get_running_loop().time()
        self.flows.discard(flow)
        if done and len(self._ended) < 4096:
            self._ended.append(flow.sample(now, whole=True))

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
    those, the bytes the link has carried (the peer acknowledged them), as last tallied.

    A part's first MATURE seconds are not measured: its connection takes a buffer's worth at
    once then (the kernel's and the peer's), faster than the link carries it."""

    __slots__ = ("_add", "body", "born", "last", "tallied", "written")

    def __init__(self, add: Callable[[int], object]) -> None:
        self._add = add
        self.body: PartBody | None = None
        self.written = 0
        self.tallied = 0
        self.born = self.last = 0.0

    def add(self, delta: int) -> None:
        """The part's progress: forwarded, and counted (a retried attempt starts again)."""
        self.written = max(0, self.written + delta)
        if delta < 0:
            self.tallied = 0
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

    def sample(self, now: float, whole: bool = False) -> tuple[int, float]:
        """(bytes carried, seconds) since the last sample, counted once the part is mature;
        `whole`: the part is done (all of it is carried). A part done before it matured
        counts whole, over its life: it was a small one."""
        body = self.body
        carried = body.length if whole and body is not None else self.carried()
        grown, self.tallied = max(0, carried - self.tallied), max(self.tallied, carried)
        since, self.last = self.last, now
        mature = self.born + MATURE
        if now < mature:
            return (carried, now - self.born) if whole else (0, 0.0)
        return grown if since >= mature else 0, now - max(since, mature)


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
        flow = self._flow
        if flow is not None:
            flow.born = flow.last = asyncio.get_running_loop().time()
            budget.flows.add(flow)

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
