"""The quarantine file: tests whose failures do not fail a job, each for a while and for a
reason, kept in the repository as TOML and reviewed like code (the format:
docs/reference/uploads-and-runs.md)."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import attrs

from asyncclient._core._checks import check_id
from asyncclient._local._toml import read_toml, table_of
from asyncclient.errors import ValidationError

__all__ = [
    "DEFAULT_QUARANTINE_DAYS",
    "Quarantine",
    "QuarantineEntry",
    "lift_quarantine",
    "load_quarantine",
    "write_quarantine",
]

DEFAULT_QUARANTINE_DAYS: Final = 30
"""How long an entry `--write-quarantine` adds lasts: until this many days ahead."""
_KEYS: Final = ("test", "reason", "until", "issue", "owner")
_MAX_FILE_BYTES: Final = 4 << 20  # a quarantine file of thousands of entries is far smaller
_MAX_ENTRIES: Final = 10_000


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
    data = read_toml(
        where,
        "quarantine file",
        limit=_MAX_FILE_BYTES,
        missing=f"no quarantine file {where}: give an existing file, or make one with "
        f"`asyncclient flaky PROJECT --write-quarantine {where}`",
    )
    tables = data.get("quarantine", [])
    if isinstance(tables, list) and len(tables) > _MAX_ENTRIES:
        raise ValidationError(
            f"{where}: {len(tables)} entries, more than {_MAX_ENTRIES}: is this a quarantine file?"
        )
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
    table = table_of(place, table, _KEYS, "a table with test, reason and until")
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
        MissingExtraError: tomlkit (the cli extra) is not installed.
    """
    _require_writer("writing the quarantine file (--write-quarantine)")
    import tomlkit

    # A symlinked file is written where it points: the link stays.
    where = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    entries = list(entries)
    for entry in entries:
        check_id("test", entry.test, "test")
    listed: set[str] = set()
    if where.exists():
        listed = {e.test for e in load_quarantine(where).entries}
        document = tomlkit.parse(where.read_bytes().decode("utf-8"))  # CRLF stays CRLF
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
    if isinstance(tables, list) and not isinstance(tables, tomlkit.items.AoT):
        # An empty inline array becomes tables; others wait.
        if len(tables):
            raise ValidationError(
                f"{Path(path)}: quarantine is an inline array; write its entries as "
                "[[quarantine]] tables to let --write-quarantine add to it"
            )
        del document["quarantine"]
        tables = None
    if tables is None:
        tables = tomlkit.aot()
        document.append("quarantine", tables)
    elif len(tables) and not tables[-1].as_string().endswith("\n\n"):
        tables[-1].add(tomlkit.nl())  # a blank line between the tables, as a person writes
    for entry in added:
        table = tomlkit.table()
        table.add("test", entry.test)
        table.add("reason", entry.reason)
        table.add("until", entry.until)
        for key in ("issue", "owner"):
            value = getattr(entry, key)
            if value:
                table.add(key, value)
        table.add(tomlkit.nl())  # a blank line after each, as a person writes them
        tables.append(table)
    _save(path, where, document)
    return added


def lift_quarantine(path: str | os.PathLike[str], tests: Iterable[str]) -> list[str]:
    """Remove the entries of `tests` from the quarantine file at `path`, keeping every other
    entry, comment and layout (a comment inside a removed table goes with it).

    Args:
        path: The TOML file.
        tests: The tests whose entries to remove.

    Returns:
        The tests whose entries were removed (those listed), in the file's order.

    Raises:
        ValidationError: The file is missing or not a quarantine file (see load_quarantine),
            or cannot be written.
        MissingExtraError: tomlkit (the cli extra) is not installed.
    """
    _require_writer("lifting a quarantine (--lift)")
    where = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    wanted = {check_id("test", test, "test") for test in tests}
    listed = [e.test for e in load_quarantine(where).entries]
    lifted = [test for test in listed if test in wanted]
    if not lifted:
        return []
    # The file's own bytes, line endings included (CRLF stays CRLF).
    text = where.read_bytes().decode("utf-8")
    check_liftable(path, text)
    kept = _without_tables(text, wanted)
    try:  # must read back as the others, or no write
        left = [t.get("test") for t in tomllib.loads(kept).get("quarantine", [])]
    except (tomllib.TOMLDecodeError, AttributeError):
        left = None
    if left != [test for test in listed if test not in wanted]:
        raise ValidationError(f"{Path(path)}: the file could not be updated safely")
    _write(where, kept)
    return lifted


def check_liftable(path: str | os.PathLike[str], text: str | None = None) -> None:
    """ValidationError unless --lift can remove entries from the file: its entries are
    [[quarantine]] tables, not an inline array (checked before any run starts)."""
    text = Path(path).read_bytes().decode("utf-8") if text is None else text
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return  # load_quarantine names the problem
    entries = parsed.get("quarantine")
    if isinstance(entries, list) and entries and not _HEADER.search(text):
        raise ValidationError(
            f"{Path(path)}: quarantine is an inline array; write its entries as "
            "[[quarantine]] tables to let --lift remove one"
        )


_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*quarantine[ \t]*\]\][ \t]*(#[^\r\n]*)?\r?$", re.MULTILINE)
_ANY_HEADER = re.compile(r"^[ \t]*\[")


def _without_tables(text: str, tests: set[str]) -> str:
    """`text` without the [[quarantine]] tables of `tests`: each from the comments just above
    its header (those at the top of the file are the file's own and stay) to its last key (a
    comment inside goes with it); the comments and blank lines after it, which belong to what
    follows, stay, as do the line endings."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _ANY_HEADER.match(line)]
    drop: set[int] = set()
    for n, start in enumerate(starts):
        if not _HEADER.match(lines[start].rstrip("\r\n")):
            continue
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        body = [i for i in range(start + 1, end) if _is_content(lines[i])]
        last = body[-1] + 1 if body else start + 1
        if _table_test("".join(lines[start:last])) not in tests:
            continue
        first = start
        while first > 0 and lines[first - 1].strip().startswith("#"):
            first -= 1
        if first == 0:
            first = start  # the file's own comments, at its top
        drop.update(range(first, last))
        # Its blank line goes too, unless it parts tables.
        joins_content = first > 0 and _is_content(lines[first - 1])
        if last < len(lines) and not lines[last].strip() and not joins_content:
            drop.add(last)
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _table_test(table: str) -> str | None:
    try:
        parsed = tomllib.loads(table)
    except tomllib.TOMLDecodeError:
        return None
    entries = parsed.get("quarantine")
    if isinstance(entries, list) and entries and isinstance(entries[0], dict):
        test = entries[0].get("test")
        return test if isinstance(test, str) else None
    return None


def _require_writer(feature: str) -> None:
    from asyncclient._core._extras import require

    require(feature, "cli", "tomlkit")


def _save(path: str | os.PathLike[str], where: Path, document: Any) -> None:
    """Write the edited document where it lives, atomically and durably, once it reads back
    as TOML (nothing is written otherwise)."""
    import tomlkit

    text = tomlkit.dumps(document)
    if not text.endswith("\n"):
        text += "\n"
    try:
        # Must read back as its entries, or no write.
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - tomlkit writes valid TOML
        raise ValidationError(
            f"{Path(path)}: the file could not be updated safely ({exc})"
        ) from None
    _write(where, text)


def _write(where: Path, text: str) -> None:
    """Atomically and durably, keeping the file's mode."""
    from asyncclient._local._files import write_atomically

    try:
        write_atomically(where, text.encode("utf-8"), keep_mode=True, durable=True)
    except OSError as exc:
        raise ValidationError(
            f"cannot write the quarantine file {where}: {exc.strerror or exc}"
        ) from None


def until_from(today: date, days: int = DEFAULT_QUARANTINE_DAYS) -> date:
    """The `until` of an entry made `today`: `days` ahead."""
    return today + timedelta(days=days)
