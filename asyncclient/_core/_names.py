"""File names every platform can store, for what the client writes under a name the service
gave (a run's files, the evidence folder, the report's files): Windows' forbidden characters,
trailing dots and spaces, device names (`CON`, `COM1`) and NTFS streams made safe, so a report
written on one runner reads the same on another, inside the folder it was asked to write in.
"""

import unicodedata
from typing import Final

__all__ = ["safe_name", "safe_relative_path"]

_FORBIDDEN: Final = frozenset('<>:"/\\|?*') | frozenset(map(chr, range(32))) | {"\x7f"}
_DEVICES: Final = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{port}{n}" for port in ("COM", "LPT") for n in (*"123456789", "¹", "²", "³")}
)
_MAX_BYTES: Final = 255  # a name's limit on common file systems


def safe_name(name: str) -> str:
    """`name` as one file name any platform can store: each forbidden character becomes `_`,
    a trailing dot or space is dropped, a device name gets a `_` in front, an empty name or a
    `.`/`..` becomes `_`, and a name over 255 bytes is cut (keeping its extension)."""
    cleaned = "".join("_" if ch in _FORBIDDEN else ch for ch in unicodedata.normalize("NFC", name))
    cleaned = cleaned.rstrip(" .")
    if cleaned in ("", ".", ".."):
        return "_"
    if cleaned.split(".", 1)[0].rstrip(" ").upper() in _DEVICES:
        cleaned = "_" + cleaned
    if len(cleaned.encode("utf-8")) > _MAX_BYTES:
        stem, dot, extension = cleaned.rpartition(".")
        keep = f"{dot}{extension}" if dot and len(extension) <= 16 else ""
        body = stem if keep else cleaned
        while len((body + keep).encode("utf-8")) > _MAX_BYTES:
            body = body[:-1]
        cleaned = body.rstrip(" .") + keep
    return cleaned


def safe_relative_path(path: str) -> str:
    """A `/`-separated relative path with each part made safe (`safe_name`); empty parts and
    `.` are dropped, and `..` cannot climb out (it becomes `_`)."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    return "/".join(safe_name(part) for part in parts) or "_"
