"""The quarantine file: tests whose failures do not fail a job, each for a while and for a reason.

Kept in the repository and reviewed like code, as TOML, one table per test:

```toml
# Tests that flake; their failures do not fail the job until the date.
[[quarantine]]
test = "t_onboarding"
reason = "flaky on 2 of 3 builds in 14 days"
until = 2026-12-26          # a TOML date: past it the entry is not honoured
issue = "https://tracker.example/MOB-123"   # optional
owner = "mobile"                            # optional
```

A quarantined test still runs and is still re-run; only the verdict of a job changes (and every
report says so). An entry past its `until` is a holding pen left open: it is not honoured, and
the command warns naming it. `write_quarantine` adds entries with tomlkit, so the comments and
layout a person gave the file stay as they were.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import attrs

from asyncclient._checks import check_id
from asyncclient.errors import ValidationError

__all__ = [
    "DEFAULT_QUARANTINE_DAYS",
    "Quarantine",
    "QuarantineEntry",
    "load_quarantine",
    "write_quarantine",
]

DEFAULT_QUARANTINE_DAYS: Final = 30
"""How long an entry `--write-quarantine` adds lasts: until this many days ahead."""
_KEYS: Final = ("test", "reason", "until", "issue", "owner")


@attrs.frozen
class QuarantineEntry:
    """One quarantined test.

    Attributes:
        test: The test id (`t_...`).
        reason: Why it is quarantined.
        until: The last day it is honoured.
        issue: Where its fix is tracked, if given.
        owner: Who looks after it, if given.
    """

    test: str
    reason: str
    until: date
    issue: str | None = None
    owner: str | None = None

    def expired(self, today: date) -> bool:
        """Whether `today` is past its last day.

        Args:
            today: The day to judge on.
        """
        return today > self.until


@attrs.frozen
class Quarantine:
    """A quarantine file as read.

    Attributes:
        path: Where it was read from.
        entries: Its entries, in the file's order.
    """

    path: Path
    entries: tuple[QuarantineEntry, ...] = ()

    def honoured(self, today: date | None = None) -> dict[str, QuarantineEntry]:
        """The entries in force, by test id.

        Args:
            today: The day to judge on (default: the local date).
        """
        day = today or date.today()
        return {e.test: e for e in self.entries if not e.expired(day)}

    def expired(self, today: date | None = None) -> list[QuarantineEntry]:
        """The entries past their `until`, which are not honoured.

        Args:
            today: The day to judge on (default: the local date).
        """
        day = today or date.today()
        return [e for e in self.entries if e.expired(day)]


def load_quarantine(path: str | os.PathLike[str]) -> Quarantine:
    """Read and check a quarantine file.

    Args:
        path: The TOML file.

    Returns:
        The `Quarantine` it holds (no entries when it has no `[[quarantine]]` table).

    Raises:
        ValidationError: The file cannot be read, is not TOML, or an entry is wrong: one line
            naming the file, the entry and the fix.
    """
    where = Path(path)
    try:
        with where.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ValidationError(
            f"no quarantine file {where}: give an existing file, or make one with "
            f"`asyncclient flaky PROJECT --write-quarantine {where}`"
        ) from None
    except OSError as exc:
        raise ValidationError(f"cannot read the quarantine file {where}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"{where} is not valid TOML: {exc}") from None
    tables = data.get("quarantine", [])
    if not isinstance(tables, list):
        raise ValidationError(
            f"{where}: quarantine must be an array of tables ([[quarantine]]), one per test"
        )
    entries = [_entry(where, i, table) for i, table in enumerate(tables)]
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if entry.test in seen:
            raise ValidationError(
                f"{where}: quarantine[{i}]: {entry.test} is listed twice; keep one entry"
            )
        seen.add(entry.test)
    return Quarantine(where, tuple(entries))


def _entry(where: Path, index: int, table: Any) -> QuarantineEntry:
    place = f"{where}: quarantine[{index}]"
    if not isinstance(table, dict):
        raise ValidationError(f"{place} must be a table with test, reason and until")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ValidationError(f"{place}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    for key in ("test", "reason", "until"):
        if key not in table:
            raise ValidationError(f"{place}: {key} is required")
    test, reason, until = table["test"], table["reason"], table["until"]
    try:
        check_id("test", test, "test")
    except ValidationError as exc:
        raise ValidationError(f"{place}: {exc}") from None
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError(f"{place}: reason must be text saying why the test is quarantined")
    if isinstance(until, datetime) or not isinstance(until, date):
        raise ValidationError(
            f"{place}: until must be a TOML date such as 2026-12-31 (no quotes), got {until!r}"
        )
    extra = {}
    for key in ("issue", "owner"):
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"{place}: {key} must be text")
        extra[key] = value
    return QuarantineEntry(test, reason.strip(), until, **extra)


def write_quarantine(
    path: str | os.PathLike[str], entries: Iterable[QuarantineEntry]
) -> list[QuarantineEntry]:
    """Add `entries` to the quarantine file at `path` (made when missing), keeping what is
    there: a test already listed keeps its entry, and every comment and layout stays.

    Args:
        path: The TOML file.
        entries: The entries to add.

    Returns:
        The entries added (those of tests not listed yet).

    Raises:
        ValidationError: The file is there but not a quarantine file (see load_quarantine),
            or cannot be written.
    """
    import tomlkit

    where = Path(path)
    listed: set[str] = set()
    if where.exists():
        listed = {e.test for e in load_quarantine(where).entries}
        document = tomlkit.parse(where.read_text(encoding="utf-8"))
    else:
        document = tomlkit.document()
        document.add(tomlkit.comment("Tests whose failures do not fail the job until `until`."))
        document.add(tomlkit.comment("Reviewed like code; `asyncclient flaky --write-quarantine`"))
        document.add(tomlkit.comment("adds entries and keeps every comment written here."))
        document.add(tomlkit.nl())
    added = [e for e in entries if e.test not in listed]
    if not added:
        return []
    tables = document.get("quarantine")
    if tables is None:
        tables = tomlkit.aot()
        document.append("quarantine", tables)
    for entry in added:
        table = tomlkit.table()
        table.add("test", entry.test)
        table.add("reason", entry.reason)
        table.add("until", entry.until)
        for key in ("issue", "owner"):
            value = getattr(entry, key)
            if value:
                table.add(key, value)
        tables.append(table)
    # One blank line before each table, as a person writes them (tomlkit appends them close).
    text = re.sub(r"(?<=[^\n])\n\[\[quarantine\]\]", "\n\n[[quarantine]]", tomlkit.dumps(document))
    if not text.endswith("\n"):
        text += "\n"
    from asyncclient._reports import write_atomically

    try:
        write_atomically(where, text.encode("utf-8"))
    except OSError as exc:
        raise ValidationError(
            f"cannot write the quarantine file {where}: {exc.strerror or exc}"
        ) from None
    return added


def until_from(today: date, days: int = DEFAULT_QUARANTINE_DAYS) -> date:
    """The `until` of an entry made `today`: `days` ahead."""
    return today + timedelta(days=days)
