"""The blocking file work of a build: parts written in place or copied in, hashing, inspection.

Each function here runs in a worker thread; `_builds` decides when (and under which locks).
"""

import contextlib
import hashlib
import mmap
import os
import threading
from pathlib import Path
from typing import Any

from asyncclient.apps import AppError, DeviceProfile, Problem, check_compatibility, inspect_app

MiB = 1 << 20

__all__ = ["PartWriter", "check_app", "hash_region", "place", "sha256_file"]


class PartWriter:
    """Writes a part sent for the first time straight into its place in the build file (no copy
    of the part is stored, so a body cut off leaves nothing behind that counts).

    A re-send of the part committed meanwhile supersedes it: from then on it writes nothing, and
    it is not recorded. `write` runs in a worker thread, the rest on the event loop.
    """

    def __init__(self, path: Path, offset: int, file_lock: threading.Lock) -> None:
        self._offset = offset
        self._file_lock = file_lock
        self._lock = threading.Lock()
        self._superseded = False
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)  # closed by close()

    @property
    def superseded(self) -> bool:
        return self._superseded

    def supersede(self) -> None:
        """Stop writing (waits for a write under way). Blocking."""
        with self._lock:
            self._superseded = True

    def write(self, chunk: bytes) -> None:
        """Write the next bytes of the part in place. Blocking."""
        view = memoryview(chunk)
        with self._lock, self._file_lock:
            while view and not self._superseded:
                done = os.pwrite(self._fd, view, self._offset)
                self._offset += done
                view = view[done:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def place(
    received: Path,
    dest: Path,
    offset: int,
    length: int,
    file_lock: threading.Lock,
    writer: PartWriter | None = None,
) -> None:
    """Copy the received part file into `dest` at `offset` (a kernel copy where the system has
    one), then remove it; `writer`, receiving the same part in place, stops first. Blocking."""
    if writer is not None:
        writer.supersede()
    src = os.open(received, os.O_RDONLY)
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with file_lock:
                done = 0
                if hasattr(os, "copy_file_range"):
                    with contextlib.suppress(OSError):  # not supported here: copy by hand below
                        while done < length:
                            moved = os.copy_file_range(src, out, length - done, done, offset + done)
                            if moved <= 0:
                                break
                            done += moved
                while done < length:
                    chunk = os.pread(src, min(MiB, length - done), done)
                    if not chunk:
                        raise OSError(f"{received} ended {length - done} bytes early")
                    done += os.pwrite(out, chunk, offset + done)
        finally:
            os.close(out)
    finally:
        os.close(src)
    received.unlink()


def hash_region(path: Path, offset: int, length: int, digest: Any) -> Any:
    """`digest` fed with `length` bytes of `path` from `offset`. Blocking.

    Mapped, not read: the hash reads the page cache itself, without a copy. The emulator's own
    file is never truncated, so no page of the map can vanish under it; where it cannot be
    mapped, it is read."""
    with path.open("rb", buffering=0) as src:
        try:
            return _hash_mapped(src.fileno(), offset, length, digest)
        except (OSError, ValueError):
            pass  # read it instead: a short file fails there, in its words
        buffer = bytearray(min(MiB, length))
        view = memoryview(buffer)
        src.seek(offset)
        while length > 0:
            got = src.readinto(view[: min(len(buffer), length)])
            if not got:
                raise OSError(f"{path} ended {length} bytes early")
            digest.update(view[:got])
            length -= got
    return digest


def _hash_mapped(fd: int, offset: int, length: int, digest: Any) -> Any:
    start = offset - offset % mmap.ALLOCATIONGRANULARITY  # where a map may begin
    with mmap.mmap(fd, offset - start + length, access=mmap.ACCESS_READ, offset=start) as mapped:
        whole = memoryview(mapped)
        try:
            for at in range(offset - start, offset - start + length, MiB):
                digest.update(whole[at : min(at + MiB, offset - start + length)])
        finally:
            whole.release()  # else the map cannot close
    return digest


def check_app(
    path: Path, file_name: str, devices: DeviceProfile
) -> tuple[dict[str, Any], tuple[Problem, ...], tuple[str, ...]]:
    """Inspect and check an app file: (build fields, problems, warnings). Blocking."""
    try:
        info = inspect_app(path, file_name)
    except AppError as exc:
        return {}, (Problem.not_an_app(file_name, exc),), ()
    compatibility = check_compatibility(info, devices)
    fields = {
        "platform": info.platform,
        "app_id": info.app_id,
        "app_name": info.app_name,
        "version": info.version,
        "version_code": info.version_code,
        "min_os": info.min_os,
        "abis": tuple(info.abis),
    }
    return fields, tuple(compatibility.problems), tuple(compatibility.warnings)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()
