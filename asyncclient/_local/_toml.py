"""A repository's reviewed TOML files (the quarantine file, the failure categories): read
bounded, each problem one line that names the file and the fix, never a traceback."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asyncclient.errors import ValidationError

__all__ = ["read_toml", "table_of"]


def read_toml(where: Path, what: str, *, limit: int, missing: str) -> dict[str, Any]:
    """The file's TOML, read whole if it holds at most `limit` bytes.

    Args:
        where: The file.
        what: What it is, for the messages ("quarantine file").
        limit: The most bytes such a file holds.
        missing: The one line to say when there is no such file.

    Raises:
        ValidationError: The file is missing, a folder, unreadable, too large, not UTF-8 or
            not TOML, or nested too deeply.
    """
    try:
        with where.open("rb") as handle:
            raw = handle.read(limit + 1)
        if len(raw) > limit:
            raise ValidationError(f"{where}: larger than {limit >> 20} MiB: is this a {what}?")
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"{where} is not UTF-8 text (byte {exc.start}): save it as UTF-8 TOML"
        ) from None
    except RecursionError:
        raise ValidationError(f"{where}: nested too deeply to be a {what}") from None
    except FileNotFoundError:
        raise ValidationError(missing) from None
    except IsADirectoryError:
        raise ValidationError(f"{where} is a directory: give the {what}") from None
    except OSError as exc:
        raise ValidationError(f"cannot read the {what} {where}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"{where} is not valid TOML: {exc}") from None


def table_of(place: str, table: Any, keys: Sequence[str], shape: str) -> dict[str, Any]:
    """`table`, checked to be a table whose keys are among `keys`.

    Args:
        place: Where it is, for the messages ("FILE: quarantine[2]").
        table: What the file holds there.
        keys: The keys it may have.
        shape: What it must be ("a table with test, reason and until").

    Raises:
        ValidationError: It is not a table, or has a key not among `keys`.
    """
    if not isinstance(table, dict):
        raise ValidationError(f"{place} must be {shape}")
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise ValidationError(f"{place}: unknown key {unknown[0]!r} (known: {', '.join(keys)})")
    return table
