"""Locks between processes, one per upload journal and per downloaded file, in the state folder:
`fcntl.flock`, or on Windows `msvcrt.locking` of one byte past the record; the system drops a
lock with its process. The holder writes its pid and then its outcome, which a waiter reads
instead of doing the work again (why not filelock: ARCHITECTURE.md, "Ours, and why").
"""

import asyncio
import contextlib
import hashlib
import json
import os
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Protocol

import attrs

__all__ = [
    "STATE_DIR_ENV",
    "Claim",
    "ProcessLock",
    "claim",
    "file_identity",
    "lock_path_for",
    "state_dir",
]

STATE_DIR_ENV: Final = "ASYNCCLIENT_STATE_DIR"

# O_CLOEXEC and O_NOFOLLOW are POSIX's; Windows has O_NOINHERIT and O_BINARY instead.
_FLAGS: Final = (
    os.O_RDWR
    | os.O_CREAT
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOINHERIT", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_BINARY", 0)
)
_FIRST_POLL: Final = 0.02
_MAX_POLL: Final = 0.25
_PID_POLLS: Final = 5
_RECORD_BYTES: Final = 4096
# msvcrt's one locked byte, far past any record readers touch.
_LOCK_OFFSET: Final = 1 << 30


def state_dir() -> Path:
    """The client's state folder (upload journals, locks): $ASYNCCLIENT_STATE_DIR, else the
    platform's: $XDG_STATE_HOME/asyncclient or ~/.local/state/asyncclient on Linux,
    ~/Library/Application Support/asyncclient on macOS, %LOCALAPPDATA%\\asyncclient on
    Windows (platformdirs)."""
    state = os.environ.get(STATE_DIR_ENV)
    if state:
        return Path(state).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_path("asyncclient", appauthor=False))


def file_identity(target: Path) -> str:
    """What names one file however it is reached: its folder's real path (links and `..`
    resolved), and its name Unicode-normalized (NFC) and, where the file system usually
    ignores case (macOS, Windows), case-folded."""
    folder = os.path.realpath(os.path.abspath(target.parent))
    name = unicodedata.normalize("NFC", target.name)
    if sys.platform in ("darwin", "win32"):
        folder, name = folder.casefold(), name.casefold()
    return os.path.join(folder, name)


def lock_path_for(directory: Path, target: Path) -> Path:
    """The lock file in `directory` that guards `target` (any path: named by a hash of the
    file's identity, so two paths to one file share a lock and the lock never shows in the
    target's folder)."""
    key = file_identity(target).encode("utf-8", "surrogateescape")
    return directory / (hashlib.sha256(key).hexdigest()[:32] + ".lock")


class _Backend(Protocol):
    removes_open_files: bool

    def try_lock(self, fd: int) -> bool: ...

    def unlock(self, fd: int) -> None: ...


class _Flock:
    """POSIX: flock on the whole file; a file may be removed while it is open."""

    removes_open_files = True

    def __init__(self, fcntl: ModuleType) -> None:
        self._fcntl = fcntl

    def try_lock(self, fd: int) -> bool:
        try:
            self._fcntl.flock(fd, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock(self, fd: int) -> None:
        self._fcntl.flock(fd, self._fcntl.LOCK_UN)


class _Msvcrt:
    """Windows: one byte locked at _LOCK_OFFSET (a lock there is mandatory, so it must not
    cover the record); an open file cannot be removed."""

    removes_open_files = False

    def __init__(self, msvcrt: ModuleType) -> None:
        self._msvcrt = msvcrt

    def try_lock(self, fd: int) -> bool:
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        try:
            self._msvcrt.locking(fd, self._msvcrt.LK_NBLCK, 1)
        except OSError:  # EACCES: another process holds it
            return False
        return True

    def unlock(self, fd: int) -> None:
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        self._msvcrt.locking(fd, self._msvcrt.LK_UNLCK, 1)


def backend_for(fcntl: ModuleType | None, msvcrt: ModuleType | None) -> _Backend:
    """The lock of this platform: fcntl's where it exists, else msvcrt's."""
    if fcntl is not None:
        return _Flock(fcntl)
    if msvcrt is not None:
        return _Msvcrt(msvcrt)
    raise ImportError("neither fcntl nor msvcrt can be imported: no lock between processes")


def _import(name: str) -> ModuleType | None:
    try:
        return __import__(name)
    except ImportError:
        return None


_BACKEND: _Backend = backend_for(_import("fcntl"), _import("msvcrt"))


class ProcessLock:
    """A held lock: release it (with the outcome waiters should read) when the work is done."""

    def __init__(self, path: Path, fd: int, backend: _Backend | None = None) -> None:
        self.path = path
        self._fd: int | None = fd
        self._backend = backend or _BACKEND

    def __repr__(self) -> str:
        return f"<ProcessLock {self.path} {'held' if self._fd is not None else 'released'}>"

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, outcome: "dict[str, Any] | None" = None) -> None:
        """Write `outcome` for the waiters, let go, and remove the lock file where that is
        safe. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        backend = self._backend
        try:
            with contextlib.suppress(OSError):
                _write(fd, {"pid": os.getpid(), "done": outcome is not None, **(outcome or {})})
            if backend.removes_open_files:
                # Removed while held: waiters still read the last word.
                with contextlib.suppress(OSError):
                    if _is_at(fd, self.path):
                        os.unlink(self.path)
            else:
                with contextlib.suppress(OSError):
                    backend.unlock(fd)
        finally:
            os.close(fd)  # the lock goes with the last descriptor
        if not backend.removes_open_files:
            # Closed first: where open files cannot be removed.
            with contextlib.suppress(OSError):
                os.unlink(self.path)


@attrs.frozen
class Claim:
    """What claim() found: `lock` held by this process (do the work, then release it), or no
    lock and `outcome`, the last word of a holder that finished the same work while this
    process waited (or just as it came). `waited`: another process held the lock first."""

    lock: ProcessLock | None
    outcome: "dict[str, Any] | None" = None
    waited: bool = False


async def claim(
    path: Path,
    *,
    on_wait: "Callable[[int | None], object] | None" = None,
    backend: _Backend | None = None,
) -> Claim:
    """Take the lock at `path`, waiting (polling, so cancellation is immediate) while another
    process holds it; `on_wait(pid)` is called once when this process has to wait.

    Raises OSError when the lock file cannot be made (its folder is not writable)."""
    backend = backend or _BACKEND
    waited = False
    while True:
        leftover = False
        fd = _open(path)
        try:
            if not backend.try_lock(fd):
                # The pid lands just after the lock.
                announced, waited = waited, True
                delay, polls = _FIRST_POLL, 0
                while not backend.try_lock(fd):
                    if on_wait is not None and not announced:
                        pid = _read(fd).get("pid")
                        if pid or polls >= _PID_POLLS:
                            announced = True
                            on_wait(pid if isinstance(pid, int) else None)
                    await asyncio.sleep(delay)
                    delay, polls = min(delay * 1.5, _MAX_POLL), polls + 1
            last = _read(fd) if waited else {}
            if _is_at(fd, path):
                if last.get("done"):
                    # The holder could not remove it: its word stands.
                    with contextlib.suppress(OSError):
                        backend.unlock(fd)
                    # Removed after closing only where open files cannot be removed.
                    leftover = not backend.removes_open_files
                    return Claim(None, last, True)
                _write(fd, {"pid": os.getpid()})
                lock, fd = ProcessLock(path, fd, backend), -1
                return Claim(lock, None, waited)
            # The holder removed this file: its last word is here.
            last = _read(fd)
            if last.get("done"):
                return Claim(None, last, True)
            # It gave up or was killed: take the lock now.
        finally:
            if fd >= 0:
                os.close(fd)
            if leftover:  # closed: removed unless another process still holds it open
                with contextlib.suppress(OSError):
                    os.unlink(path)


def _open(path: Path) -> int:
    try:
        return os.open(path, _FLAGS, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, _FLAGS, 0o600)


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
        data = _read_at(fd, _RECORD_BYTES, 0)
        value = json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record, separators=(",", ":")).encode()
    os.ftruncate(fd, 0)
    _write_at(fd, data, 0)


def _read_at(fd: int, size: int, offset: int) -> bytes:
    """os.pread where it exists; elsewhere (Windows) a seek and a read: one descriptor per
    lock, used by one task at a time, so nothing moves the position in between."""
    if _PREAD is not None:
        data: bytes = _PREAD(fd, size, offset)
        return data
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, size)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    if _PWRITE is not None:
        _PWRITE(fd, data, offset)
        return
    os.lseek(fd, offset, os.SEEK_SET)
    os.write(fd, data)


_PREAD: Final = getattr(os, "pread", None)
_PWRITE: Final = getattr(os, "pwrite", None)
