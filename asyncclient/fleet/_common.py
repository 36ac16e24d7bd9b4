"""What every part of the fleet shares: its error, the URL without its password, the ledger's
text as it may be shown, the run ids it may act on, and the marks of runs stopped."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

from asyncclient._core._checks import is_id
from asyncclient._core._untrusted import clip, line
from asyncclient.errors import AsyncClientError

__all__ = [
    "FleetError",
    "JobEnded",
    "log",
    "mark_stopped",
    "redact_url",
    "run_ids",
    "shown",
    "text",
]

log: Final = logging.getLogger("asyncclient.fleet")
#: How long a stop mark stays in the ledger (as long as a published view is kept).
STOPPED_MS: Final = 30_000


class FleetError(Exception):
    """The ledger could not be used: a bad URL, an unreachable or refusing Redis."""


class JobEnded(AsyncClientError):
    """The fleet ended this job while a start of it waited for a device slot (a newer commit
    of its ref superseded it): the start was not sent. `superseded_by` names the commit."""

    def __init__(self, superseded_by: str | None) -> None:
        super().__init__(f"superseded by {superseded_by or 'a newer commit'}: nothing started")
        self.superseded_by = superseded_by


def redact_url(url: str) -> str:
    """The URL without its password (for every message that names it)."""
    return re.sub(r"(?<=://)([^/@]*)@", lambda m: "***@" if m.group(1) else "@", url)


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def shown(value: Any) -> str:
    """Text the ledger holds (any job of the fleet may have written it), as it may be shown:
    through the one sanitiser, one line, at most 120 characters."""
    return clip(line(text(value)), 120)


def run_ids(values: Iterable[Any]) -> tuple[str, ...]:
    """The run ids among what the ledger gave: anything else is never acted on."""
    return tuple(sorted({t for t in map(text, values) if is_id("run", t)}))


async def mark_stopped(fleet: Any, run_ids: Sequence[str]) -> None:
    """Tell the fleet's jobs that `run_ids` were stopped: a published view of one still going
    may predate the stop (a poll answered before it), so they take only its verdict. The
    ledger unreachable: nothing (a job then reads the stale view until the next poll).

    Args:
        fleet: A connected Fleet.
        run_ids: The runs stopped, or found ended by a stop.
    """
    if not run_ids or fleet._redis is None:
        return
    with contextlib.suppress(Exception):
        async with fleet._redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.set(f"{fleet.prefix}stopped:{run_id}", b"1", px=STOPPED_MS)
            await pipe.execute()
