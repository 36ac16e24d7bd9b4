"""How many files a process may still open, so that the uploader fits its builds and
connections in flight to the limit it has (macOS starts at 256 open files) instead of failing
half-way with "Too many open files"."""

import os
from typing import Final

from asyncclient.errors import ValidationError

__all__ = ["FILES_PER_BUILD", "fit_uploads", "open_files_left"]

#: A build in flight holds its file, hasher, journal and lock.
FILES_PER_BUILD: Final = 4
#: Kept free for the loop, logs and the interpreter.
_RESERVE: Final = 32


def open_files_left() -> int | None:
    """The soft limit minus the descriptors open now; None where it cannot be known."""
    try:
        import resource
    except ImportError:  # Windows: 8192 C-runtime descriptors, sockets apart: not the bound
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            used = len(os.listdir(folder))
            break
        except OSError:
            continue
    else:
        return None
    return int(soft) - used


def fit_uploads(parts: int, builds: int, connections: int, left: int | None) -> tuple[int, int]:
    """The parts and builds in flight that fit in `left` descriptors, each part needing a
    connection (at most `connections` are open) and each build FILES_PER_BUILD; (parts,
    builds) as asked when they fit or nothing is known.

    Raises ValidationError, before anything is sent, when not even one build with one part
    fits."""
    if left is None:
        return parts, builds
    room = left - _RESERVE
    sockets = min(parts, connections)
    if room >= sockets + builds * FILES_PER_BUILD:
        return parts, builds
    if room < 1 + FILES_PER_BUILD:
        raise ValidationError(
            f"the open-files limit leaves room for {max(room, 0)} more files, fewer than one "
            f"build needs ({1 + FILES_PER_BUILD}): raise it (ulimit -n; on macOS, launchctl "
            "limit maxfiles)"
        )
    fitted_parts = max(1, min(parts, room // 2))
    fitted_builds = max(1, min(builds, (room - min(fitted_parts, connections)) // FILES_PER_BUILD))
    return fitted_parts, fitted_builds
