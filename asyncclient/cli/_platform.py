"""What the command sets up for the platform it runs on, before anything else: console streams
that never fail on an encoding, and the open-files limit raised as far as it may go."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Final

__all__ = ["fit_console_streams", "raise_open_files_limit"]

# macOS refuses a soft limit above OPEN_MAX (10240) even when the hard one says "unlimited".
_MAC_OPEN_MAX: Final = 10240


def fit_console_streams(streams: tuple[Any, ...] | None = None) -> None:
    """Make stdout and stderr replace what their encoding cannot write (`\\u65e5` for 日 on a
    Windows runner's cp1252 log) instead of failing with UnicodeEncodeError half-way through
    a report. --json escapes such characters itself, so it stays valid and keeps them."""
    for stream in streams if streams is not None else (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None or getattr(stream, "errors", None) not in ("strict", None):
            continue
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors="backslashreplace")


def raise_open_files_limit(resource: Any | None = None, platform: str | None = None) -> int | None:
    """Raise the soft limit of open files toward the hard one, as far as the platform allows
    (macOS starts at 256, which 150 builds with 128 parts in flight would exceed). Returns the
    soft limit now, or None where there is none to read (Windows)."""
    if resource is None:
        try:
            import resource as resource_module
        except ImportError:  # Windows: the C runtime's limit, not raised from here
            return None
        resource = resource_module
    platform = sys.platform if platform is None else platform
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard
    if wanted == resource.RLIM_INFINITY or wanted < 0:
        wanted = _MAC_OPEN_MAX if platform == "darwin" else max(soft, 1 << 16)
    elif platform == "darwin":
        wanted = min(wanted, _MAC_OPEN_MAX)
    if soft != resource.RLIM_INFINITY and wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # kept as it was: the uploader fits what it opens to it
    return int(soft)
