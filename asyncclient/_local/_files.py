"""Renaming and removing files the way every platform allows: never a file we hold open (as
Windows refuses), retried for about a second when another program holds it (as pip does),
then one line saying it is in use; write_atomically() writes a file whole through a temp file
beside it, so a reader never sees half of it.
"""

import asyncio
import contextlib
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from asyncclient.errors import LocalFileError

__all__ = ["IN_USE_SECONDS", "areplace", "replace", "unlink", "write_atomically"]

IN_USE_SECONDS: Final = 2.0
_PAUSE: Final = 0.1


# What Windows says for a file another process holds open.
_IN_USE: Final = frozenset({5, 32, 33})


def _in_use(exc: OSError) -> bool:
    """A file held open by another process (Windows); a POSIX permission error is final."""
    return getattr(exc, "winerror", None) in _IN_USE


def replace(src: Path, dst: Path, *, seconds: float = IN_USE_SECONDS) -> None:
    """os.replace(src, dst), tried again while another program holds either file open.

    Raises LocalFileError naming the file in use after `seconds`."""
    _retrying(lambda: os.replace(src, dst), dst, seconds, time.sleep)


async def areplace(src: Path, dst: Path, *, seconds: float = IN_USE_SECONDS) -> None:
    """replace() on a worker thread (a rename may wait on the disk)."""
    await asyncio.to_thread(replace, src, dst, seconds=seconds)


def unlink(path: Path, *, seconds: float = IN_USE_SECONDS) -> None:
    """Remove `path` if it is there, tried again while another program holds it open."""

    def remove() -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    _retrying(remove, path, seconds, time.sleep)


def _retrying(
    action: Callable[[], None], path: Path, seconds: float, sleep: Callable[[float], None]
) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            action()
            return
        except OSError as exc:
            if not _in_use(exc) or time.monotonic() >= deadline:
                if _in_use(exc):
                    raise LocalFileError(
                        f"{path} is in use by another program (tried for {seconds:g} s): "
                        "close it and run the same command again",
                        exc.errno,
                        exc.strerror,
                        os.fspath(path),
                    ) from exc
                raise
        sleep(_PAUSE)


def write_atomically(
    path: str | os.PathLike[str], data: bytes, *, keep_mode: bool = False, durable: bool = False
) -> Path:
    """Write `data` to `path` through a temp file beside it renamed over it: a reader never
    sees half a file. Missing folders are made; the file's mode is the user's umask applied
    to 0o666, as any new file's (a report is read by other steps, maybe as another user).
    keep_mode: a file already there keeps its mode (a file a person keeps, not a report);
    durable: the data reaches the disk (fsync) before the rename, so a crash leaves the old
    file or the new one, never an empty one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o666)
        except FileExistsError:
            continue
        break
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if keep_mode:
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(handle.fileno() if os.chmod in os.supports_fd else temp,
                             stat.S_IMODE(os.stat(target).st_mode))  # fmt: skip
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        # Closed first: Windows renames no open file.
        replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target


# Binary mode on Windows; elsewhere the flag is 0.
_BINARY: Final = getattr(os, "O_BINARY", 0)
