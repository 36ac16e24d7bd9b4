"""Opening a file in a worker thread without leaking it when the caller is cancelled.

The thread opens the file whatever becomes of the caller, so a cancelled caller leaves a callback
that closes the file once it is open."""

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# Closings of cancelled openers, kept from the collector.
_closing: set["asyncio.Future[object]"] = set()


async def open_unleaked(opening: Awaitable[T], close: Callable[[T], object]) -> T:
    """await `opening` (a file being opened in a thread); if cancelled, `close` the file later."""
    future: asyncio.Future[T] = asyncio.ensure_future(opening)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(functools.partial(_close_abandoned, close))
        raise


def _close_abandoned(close: Callable[[T], object], future: "asyncio.Future[T]") -> None:
    if future.cancelled() or future.exception() is not None:
        return
    closed = close(future.result())
    if inspect.isawaitable(closed):
        closing = asyncio.ensure_future(closed)
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)
