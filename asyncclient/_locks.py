"""Locks between processes: one per upload journal and one per downloaded file, so that jobs
sharing a machine (same user, same state folder, often the same working folder) wait for each
other instead of writing the same files at once.

A lock is `fcntl.flock` on a small file in the state folder, never in an output folder. The OS
drops a flock when its process dies, however it dies, so no lock outlives its holder. The holder
writes its pid into the file (for "waiting for ... (pid N)") and, when it lets go, its outcome
(a build id, a file's size), then removes the name *while still holding the lock* and closes
it. A waiter keeps its descriptor of the old file open, so it reads that last word as soon as
the lock is free; a lock is held only on a file that is still at its name (checked after each
flock), so a removed name never lets two holders in.

Why fcntl.flock and not filelock or portalocker: the waiter must read the holder's pid and
outcome from the lock file, which filelock's native lock neither writes nor keeps (its pid is
only for the soft, marker-file fallback), and it must poll without a thread so that Ctrl-C
cancels a wait at once; the package runs on POSIX only (its classifiers), where flock is the
primitive both libraries wrap. It is about a hundred lines, tested with real processes.
"""

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs

__all__ = ["STATE_DIR_ENV", "Claim", "ProcessLock", "claim", "lock_path_for", "state_dir"]

STATE_DIR_ENV: Final = "ASYNCCLIENT_STATE_DIR"

_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_FIRST_POLL: Final = 0.02
_MAX_POLL: Final = 0.25
_PID_POLLS: Final = 5


def state_dir() -> Path:
    """The client's state folder (upload journals, locks): $ASYNCCLIENT_STATE_DIR, else
    $XDG_STATE_HOME/asyncclient, else ~/.local/state/asyncclient."""
    state = os.environ.get(STATE_DIR_ENV)
    if state:
        return Path(state).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "asyncclient"


def lock_path_for(directory: Path, target: Path) -> Path:
    """The lock file in `directory` that guards `target` (any path: named by a hash of its
    absolute form, so the lock never shows in the target's folder)."""
    key = os.path.abspath(target).encode("utf-8", "surrogateescape")
    return directory / (hashlib.sha256(key).hexdigest()[:32] + ".lock")


class ProcessLock:
    """A held lock: release it (with the outcome waiters should read) when the work is done."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def __repr__(self) -> str:
        return f"<ProcessLock {self.path} {'held' if self._fd is not None else 'released'}>"

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, outcome: "dict[str, Any] | None" = None) -> None:
        """Write `outcome` for the waiters, remove the name, let go. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                _write(fd, {"pid": os.getpid(), "done": outcome is not None, **(outcome or {})})
            # Removed while held: a process that opens the name from now on makes a new file.
            with contextlib.suppress(OSError):
                if _is_at(fd, self.path):
                    os.unlink(self.path)
        finally:
            os.close(fd)  # the flock goes with the last descriptor


@attrs.frozen
class Claim:
    """What claim() found: `lock` held by this process (do the work, then release it), or no
    lock and `outcome`, the last word of a holder that finished the same work while this
    process waited (or just as it came). `waited`: another process held the lock first."""

    lock: ProcessLock | None
    outcome: "dict[str, Any] | None" = None
    waited: bool = False


async def claim(path: Path, *, on_wait: "Callable[[int | None], object] | None" = None) -> Claim:
    """Take the lock at `path`, waiting (polling, so cancellation is immediate) while another
    process holds it; `on_wait(pid)` is called once when this process has to wait.

    Raises OSError when the lock file cannot be made (its folder is not writable)."""
    waited = False
    while True:
        fd = _open(path)
        try:
            if not _try(fd):
                # The holder writes its pid just after taking the lock: a few polls may pass
                # before it is there to show.
                told, waited = waited, True
                delay, polls = _FIRST_POLL, 0
                while not _try(fd):
                    if on_wait is not None and not told:
                        pid = _read(fd).get("pid")
                        if pid or polls >= _PID_POLLS:
                            told = True
                            on_wait(pid if isinstance(pid, int) else None)
                    await asyncio.sleep(delay)
                    delay, polls = min(delay * 1.5, _MAX_POLL), polls + 1
            if _is_at(fd, path):
                _write(fd, {"pid": os.getpid()})
                lock, fd = ProcessLock(path, fd), -1
                return Claim(lock, None, waited)
            # The holder released and removed this file: its last word is here.
            last = _read(fd)
            if last.get("done"):
                return Claim(None, last, True)
            # It gave up without finishing (or was killed): take the lock of the name now.
        finally:
            if fd >= 0:
                os.close(fd)


def _open(path: Path) -> int:
    try:
        return os.open(path, _FLAGS, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, _FLAGS, 0o600)


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the one at `path`."""
    try:
        at = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return os.path.samestat(os.fstat(fd), at)


def _read(fd: int) -> dict[str, Any]:
    """The record in the lock file; {} when there is none yet (or it is being written)."""
    try:
        data = os.pread(fd, 4096, 0)
        value = json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record, separators=(",", ":")).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
