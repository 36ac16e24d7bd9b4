"""What every part of the fleet shares: its error, the URL without its password, the ledger's
text as it may be shown, and the run ids it may act on."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, Final

from asyncclient._core._checks import is_id
from asyncclient._core._untrusted import clip, line
from asyncclient.errors import AsyncClientError

__all__ = ["FleetError", "JobEnded", "log", "redact_url", "run_ids", "shown", "text"]

log: Final = logging.getLogger("asyncclient.fleet")


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
