"""The one bounded reader of the service's numbers and nesting: a whole number within
MAX_COUNT (ASCII digits only), a duration within MAX_RUN_SECONDS, a time from 2000 to 2100,
else None; an answer nested deeper than MAX_DEPTH is cut there.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any, Final

__all__ = [
    "CUT",
    "EARLIEST",
    "LATEST",
    "MAX_COUNT",
    "MAX_DEPTH",
    "MAX_RUN_SECONDS",
    "count",
    "cut_depth",
    "digits",
    "moment",
    "seconds",
]

MAX_COUNT: Final = 2**53 - 1
"""The largest count or size read (JSON's largest exact integer); above it: unknown."""
MAX_RUN_SECONDS: Final = 7 * 86400.0
"""The longest queue or run read (a week); longer, or negative: unknown."""
MAX_DEPTH: Final = 32
"""How deep an answer is read; a value nested deeper is replaced by `CUT`."""
CUT: Final = "[nested too deep: cut]"
EARLIEST: Final = datetime(2000, 1, 1, tzinfo=UTC)
LATEST: Final = datetime(2100, 1, 1, tzinfo=UTC)
"""The times read: from 2000 to 2100 (UTC); earlier or later: unknown."""
_DIGITS: Final = re.compile(r"[0-9]{1,16}")


def digits(text: str) -> bool:
    """Whether `text` is ASCII digits only, so that int() reads it (str.isdigit() takes `²` and
    `①`, which int() refuses)."""
    return text.isascii() and text.isdigit()


def count(value: Any) -> int | None:
    """A count, size or millisecond figure: a whole number from 0 to MAX_COUNT sent as a
    number (a fraction cut off) or as ASCII digits; None for anything else (negative, huge,
    NaN, other text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and abs(value) <= MAX_COUNT:
        number = int(value)
    elif isinstance(value, str) and _DIGITS.fullmatch(stripped := value.strip()):
        number = int(stripped)
    else:
        return None
    return number if 0 <= number <= MAX_COUNT else None


def seconds(value: float | None, high: float = MAX_RUN_SECONDS) -> float | None:
    """A duration in seconds from 0 to `high`; None (unknown) for anything else."""
    if value is None or not math.isfinite(value) or not 0 <= value <= high:
        return None
    return value


def moment(value: datetime | None) -> datetime | None:
    """A time from EARLIEST to LATEST; None (unknown) for anything else."""
    if value is None:
        return None
    try:
        return value if EARLIEST <= value < LATEST else None
    except TypeError:  # a naive time: read as UTC
        return moment(value.replace(tzinfo=UTC))


def cut_depth(value: Any) -> tuple[Any, bool]:
    """`value` with every list or object nested deeper than MAX_DEPTH replaced by `CUT`, and
    whether anything was cut. Iterative: no recursion whatever the depth."""
    if not isinstance(value, dict | list):
        return value, False
    cut = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in list(items):
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    node[key] = CUT
                    cut = True
                else:
                    stack.append((child, depth + 1))
    return value, cut
