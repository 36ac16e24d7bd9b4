"""The batched read, written once: `fetch(batch)` for each batch, a few at a time, the results in
the batches' order. AsyncSession.list_runs (ids in batches of 50) and the run watcher's sweeps
both read this way; `stop_runs` stops many runs so. Tasks on this machine's loop; no I/O of
its own (the caller's `fetch`, the session's `stop_run`, does it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NamedTuple, TypeVar

from asyncclient.errors import AsyncClientError, ConflictError, NotFoundError

__all__ = ["Stops", "each_batch", "stop_runs"]

#: Stops in flight at once.
STOPS_AT_ONCE: Final = 8

B = TypeVar("B")
R = TypeVar("R")


async def each_batch(
    batches: Sequence[B], fetch: Callable[[B], Awaitable[R]], concurrency: int
) -> list[R]:
    """`fetch(batch)` for every batch, at most `concurrency` at once, by that many workers taking
    the batches in turn from one iterator (a sweep over 2,000 batches keeps a few tasks alive,
    not 2,000, each a frame for the GC to walk). Returns the results in the batches' order.

    The first exception a fetch raises cancels the others (and waits for them to end) and is
    raised; a caller that wants every batch's outcome returns its errors as values instead.
    """
    results: list[Any] = [None] * len(batches)
    todo = iter(enumerate(batches))

    async def worker() -> None:
        for index, batch in todo:
            results[index] = await fetch(batch)

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(concurrency, len(batches)))]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results


class Stops(NamedTuple):
    """What the stops of many runs came to, each in the order asked."""

    stopped: tuple[str, ...]
    ended: tuple[str, ...]  # ended (or gone) before the stop: nothing was stopped
    errors: dict[str, AsyncClientError]


async def stop_runs(session: Any, run_ids: Sequence[str]) -> Stops:
    """`session.stop_run` for each of `run_ids`, STOPS_AT_ONCE at a time (the fleet, the
    suite loop and its copies stop this way)."""

    async def stop(run_id: str) -> AsyncClientError | bool:
        try:
            await session.stop_run(run_id)
        except (ConflictError, NotFoundError):
            return False
        except AsyncClientError as exc:
            return exc
        return True

    done = dict(zip(run_ids, await each_batch(run_ids, stop, STOPS_AT_ONCE), strict=True))
    return Stops(
        tuple(r for r, d in done.items() if d is True),
        tuple(r for r, d in done.items() if d is False),
        {r: d for r, d in done.items() if isinstance(d, AsyncClientError)},
    )
