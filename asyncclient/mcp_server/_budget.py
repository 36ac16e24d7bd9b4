"""Every tool result within a budget of characters (of its JSON text), saying what it left out:
a list keeps the whole items that fit and says how to ask for the rest; anything else is cut
level by level (long texts, then long lists and maps) until it fits, each kind of cut one line
in `leftOut`. Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "LIST_BUDGET",
    "MIN_BUDGET",
    "WAIT_BUDGET",
    "Cuts",
    "bound",
    "clip",
    "dumps",
    "fit_items",
    "size",
]

LIST_BUDGET: Final = 16_000
"""Characters of one result by default (lists, single resources)."""
WAIT_BUDGET: Final = 32_000
"""Characters of a wait_for_runs or run_project result by default."""
MIN_BUDGET: Final = 2_000
"""The smallest budget a server can be given: room for counts and a few items."""
NOTES_MAX: Final = 8
"""At most this many notes of what was left out; the rest are counted in a last one."""
ELLIPSIS: Final = "…"

# Cut levels: (longest text, most list entries).
LEVELS: Final = ((4000, 200), (1000, 50), (400, 20), (200, 10), (100, 5), (60, 2), (30, 1), (16, 0))
MAP_KEYS_MIN: Final = 24
# A list keeps at least this many items.
LIST_ITEMS_MIN: Final = 5
# What an asked-for item holds before it counts.
ITEM_LEVEL: Final = (1000, 20)


def dumps(value: Any) -> str:
    """The JSON text of a result, as the tool sends it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def size(value: Any) -> int:
    return len(dumps(value))


_INDEX = re.compile(r"\[\d+\]")


class Cuts:
    """What was cut, folded by place (`runs[].headline`, not one note per run)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self._notes: list[str] = []

    def copy(self) -> Cuts:
        other = Cuts()
        other._seen = {key: list(value) for key, value in self._seen.items()}
        other._notes = list(self._notes)
        return other

    def cut(self, path: str, kind: str, kept: int, total: int) -> None:
        """kind: "text" (characters), "list" (items) or "map" (entries)."""
        self._seen.setdefault((_INDEX.sub("[]", path), kind), []).append((kept, total))

    def merge(self, other: Cuts) -> None:
        for key, cuts in other._seen.items():
            self._seen.setdefault(key, []).extend(cuts)
        self._notes.extend(other._notes)

    def note(self, text: str) -> None:
        """A note in the tool's own words (a page, the ids left out)."""
        self._notes.append(text)

    def __bool__(self) -> bool:
        return bool(self._seen or self._notes)

    def notes(self) -> list[str]:
        lines = list(self._notes)
        for (path, kind), cuts in self._seen.items():
            unit = {"text": "characters", "list": "shown", "map": "entries shown"}[kind]
            if len(cuts) == 1:
                kept, total = cuts[0]
                lines.append(f"{path}: {kept:,} of {total:,} {unit}")
            else:
                longest = max(kept for kept, _ in cuts)
                what = {"text": "texts", "list": "lists", "map": "maps"}[kind]
                unit = "characters" if kind == "text" else "entries"
                lines.append(f"{path}: {len(cuts):,} {what} cut to {longest:,} {unit}")
        if len(lines) > NOTES_MAX:
            more = len(lines) - NOTES_MAX + 1
            lines = [*lines[: NOTES_MAX - 1], f"and {more} more cuts"]
        return [_short(line, 300) for line in lines]


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def clip(value: Any, level: tuple[int, int], path: str, cuts: Cuts) -> Any:
    """`value` with texts longer than level[0] characters and lists longer than level[1] items
    cut (maps to max(level[1], MAP_KEYS_MIN) keys), each cut recorded in `cuts`."""
    strings, items = level
    if isinstance(value, str):
        if len(value) > strings:
            cuts.cut(path, "text", strings, len(value))
            return value[:strings] + ELLIPSIS
        return value
    if isinstance(value, list | tuple):
        if len(value) > items:
            cuts.cut(path, "list", items, len(value))
        return [clip(item, level, f"{path}[{i}]", cuts) for i, item in enumerate(value[:items])]
    if isinstance(value, Mapping):
        keys = max(items, MAP_KEYS_MIN)
        if len(value) > keys:
            cuts.cut(path, "map", keys, len(value))
        return {
            key: clip(item, level, f"{path}.{key}", cuts)
            for key, item in list(value.items())[:keys]
        }
    return value


def fit_items(
    items: Iterable[Any], level: tuple[int, int], path: str, room: int
) -> tuple[list[Any], Cuts]:
    """As many of `items`, in order, each clipped to `level`, as fit in `room` characters as the
    elements of a JSON list, and the cuts made inside the items kept. Items are read (and
    clipped) only until the room is full, so a list of 100,000 costs what a page costs."""
    shown: list[Any] = []
    cuts = Cuts()
    used = 2  # the brackets
    for i, item in enumerate(items):
        own = Cuts()
        clipped = clip(item, level, f"{path}[{i}]", own)
        used += size(clipped) + (1 if shown else 0)
        if used > room:
            break
        shown.append(clipped)
        cuts.merge(own)
    return shown, cuts


def _with_notes(result: Mapping[str, Any], cuts: Cuts) -> dict[str, Any]:
    out = dict(result)
    if cuts:
        out["leftOut"] = [*out.get("leftOut", []), *cuts.notes()]
    return out


def _empty(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return []
    if isinstance(value, Mapping):
        return {}
    if isinstance(value, str):
        return ""
    return value


def bound(
    result: Mapping[str, Any],
    budget: int,
    parts: Iterable[str] | None = None,
    *,
    advice: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`result` cut to `budget` characters of JSON, with a `leftOut` note for each cut.

    parts: the top-level keys that may be cut (default: every key), the first cut first. Level
    by level of LEVELS, until the whole fits: every part that is not a list is clipped to the
    level, then the list parts, the last named first, keep as many whole items (each clipped to
    the level, and at least to ITEM_LEVEL) as fit in the room left.
    advice: a sentence per list part, added to its note when items are left out (how to ask for
    them). What still does not fit at the last level is emptied, part by part.
    """
    if size(result) <= budget:
        return dict(result)
    keys = [key for key in (list(result) if parts is None else parts) if key in result]
    advice = advice or {}
    out = dict(result)
    cuts = Cuts()
    lists = [key for key in keys if isinstance(result[key], list | tuple)]
    first_fit: dict[str, Any] | None = None
    for level in LEVELS:
        out, cuts = dict(result), Cuts()
        for key in keys:
            out[key] = [] if key in lists else clip(result[key], level, key, cuts)
        # The lists fill the room left, the last cut first.
        for key in reversed(lists):
            out[key] = _take_whole(out, key, result[key], level, budget, cuts, advice.get(key))
        fitted = _with_notes(out, cuts)
        if size(fitted) <= budget:
            # Cut the others further while a list has hardly any items.
            if all(len(out[key]) >= min(len(result[key]), LIST_ITEMS_MIN) for key in lists):
                return fitted
            first_fit = first_fit or fitted
    if first_fit is not None:
        return first_fit
    for key in keys:  # a last resort against what cannot be cut enough
        if out[key] != _empty(out[key]):
            out[key] = _empty(out[key])
            cuts.note(f"{key}: left out, too large")
            if size(_with_notes(out, cuts)) <= budget:
                break
    return _with_notes(out, cuts)


def _take_whole(
    out: dict[str, Any],
    key: str,
    value: Sequence[Any],
    level: tuple[int, int],
    budget: int,
    cuts: Cuts,
    advice: str | None,
) -> list[Any]:
    """As many whole items of the list `value` as fit beside the rest of `out`, each clipped to
    `level` (and at least to ITEM_LEVEL); the cuts of the items kept, and a note of those left."""
    item_level = (min(level[0], ITEM_LEVEL[0]), min(level[1], ITEM_LEVEL[1]))
    others = size({**_with_notes(out, cuts), key: []})
    room = budget - others - 120 - len(advice or "")
    shown, inside = fit_items(value, item_level, key, max(room, 0))
    cuts.merge(inside)
    if len(shown) < len(value):
        more = f"; {advice}" if advice else ""
        cuts.note(f"{key}: {len(shown):,} of {len(value):,} shown{more}")
    return shown
