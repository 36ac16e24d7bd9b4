"""What the command sets up for the platform it runs on: console streams that never fail on an
encoding, the open-files limit raised as far as it may go, the signals that stop a command
(SIGBREAK on Windows too), and an event loop woken by them."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any, Final

__all__ = [
    "INTERRUPTS",
    "fit_console_streams",
    "handled_signals",
    "raise_open_files_limit",
    "woken_by_signals",
]

# macOS refuses a soft limit above OPEN_MAX, even under "unlimited".
_MAC_OPEN_MAX: Final = 10240
_ENOUGH: Final = 65536


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
        except ImportError:  # Windows: the C runtime's limit, not raised here
            return None
        resource = resource_module
    platform = sys.platform if platform is None else platform
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = _MAC_OPEN_MAX if platform == "darwin" else _ENOUGH
    wanted = cap if hard == resource.RLIM_INFINITY or hard < 0 else min(hard, cap)
    if soft != resource.RLIM_INFINITY and wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # kept: the uploader fits what it opens to it
    return int(soft)


# Ctrl-C, and Windows' Ctrl-Break (a cancelled GitHub job's).
INTERRUPTS: Final = frozenset(
    sig for sig in (signal.SIGINT, getattr(signal, "SIGBREAK", None)) if sig is not None
)


def handled_signals() -> tuple[int, ...]:
    """The signals that stop a command: Ctrl-C and SIGTERM everywhere, and SIGBREAK where
    it exists (Windows). The first cleans up (stops remote runs), a second exits at once."""
    return (signal.SIGINT, signal.SIGTERM, *sorted(INTERRUPTS - {signal.SIGINT}))


@contextlib.contextmanager
def woken_by_signals(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Wake the event loop whenever a signal arrives, whichever thread the kernel gave it to.

    Python runs a signal handler in the main thread, at its next bytecode. The kernel may hand
    a process's signal to any of its threads (a worker thread of the loop's executor, say), and
    then nothing interrupts the main thread's wait in the selector: an idle command (`serve`)
    ignored a Ctrl-C or a SIGTERM for good. Python writes the signal's number to the wakeup
    fd from whichever thread gets it; the loop watches the other end of that socket, so it
    wakes, and the handler runs.
    """
    with contextlib.ExitStack() as undo:
        reader, writer = socket.socketpair()
        undo.callback(reader.close)
        undo.callback(writer.close)
        reader.setblocking(False)
        writer.setblocking(False)

        def drain() -> None:
            with contextlib.suppress(OSError):
                while reader.recv(4096):
                    pass

        # A proactor's own wake-up fd is left alone.
        try:
            loop.add_reader(reader.fileno(), drain)
        except NotImplementedError:
            yield
            return
        undo.callback(loop.remove_reader, reader.fileno())
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            yield
            return
        undo.callback(signal.set_wakeup_fd, previous)
        yield
