"""Windows' rules on Linux, for a Python process started with `python tests/foreign_os.py
MODULE ARGS...` (it runs `python -m MODULE ARGS...` once they are in force).

What a Windows runner does to asyncclient that Linux does not, reproduced before asyncclient is
imported:

- `import fcntl` fails, and the POSIX-only functions and flags of `os` are gone (`pread`,
  `pwrite`, `preadv`, `pwritev`, `sendfile`, `copy_file_range`, `O_CLOEXEC`, `O_NOFOLLOW`),
  so every fall-back runs; asyncio then sends files without `os.sendfile`, as it must there.
- `msvcrt` exists, with the one call a lock needs, `locking()`: a byte-range lock that the
  operating system drops when the file is closed or the process dies, as Windows' is (built
  here on POSIX record locks, taken through a private reference to the real fcntl).
- `os.replace`, `os.rename`, `os.unlink` and `os.remove` refuse a file that any process holds
  open (`PermissionError`, WinError 32's meaning), and `os.rename` refuses an existing
  destination, as Windows does. Who holds what is read from `/proc/*/fd`; a lock across the
  processes keeps that look and the removal one step, and `os.open` another, as Windows'
  kernel does (an open between them would get a file removed under it).

The rules are installed only in the process that runs this file (and what it starts with the
same command); the test process itself is untouched.
"""

from __future__ import annotations

import errno
import os
import runpy
import sys
import types

_POSIX_ONLY = (
    "pread",
    "pwrite",
    "preadv",
    "pwritev",
    "sendfile",
    "copy_file_range",
    "O_CLOEXEC",
    "O_NOFOLLOW",
)


def _holders(path: str) -> list[int]:
    """The pids of the processes that hold `path` (the file, not a link to it) open."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return []
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for name in names:
            try:
                held = os.stat(f"{fds}/{name}")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino):
                found.append(int(pid))
                break
    return found


def _refuse_if_open(what: str, *paths: str | os.PathLike[str]) -> None:
    for path in paths:
        text = os.fsdecode(path)
        holders = _holders(text)
        if holders:
            error = PermissionError(
                errno.EACCES,
                "The process cannot access the file because it is being used by another "
                f"process ({what}; held by pid {', '.join(map(str, holders))})",
                text,
            )
            error.winerror = 32  # type: ignore[attr-defined]  # ERROR_SHARING_VIOLATION
            raise error


def install() -> None:
    # The standard library decides "am I on Windows?" at import in a few places by trying
    # `import msvcrt` (subprocess, for one): imported first, they stay the POSIX modules they
    # are, as asyncio needs them to be here.
    import asyncio  # noqa: F401
    import fcntl as real_fcntl
    import getpass  # noqa: F401
    import subprocess  # noqa: F401
    import tempfile

    sys.modules["fcntl"] = None  # type: ignore[assignment]  # import fcntl -> ImportError
    for name in _POSIX_ONLY:
        if hasattr(os, name):
            delattr(os, name)

    msvcrt = types.ModuleType("msvcrt")
    msvcrt.LK_UNLCK, msvcrt.LK_LOCK, msvcrt.LK_NBLCK = 0, 1, 2  # type: ignore[attr-defined]
    msvcrt.LK_RLCK, msvcrt.LK_NBRLCK = 3, 4  # type: ignore[attr-defined]

    def locking(fd: int, mode: int, nbytes: int) -> None:
        start = os.lseek(fd, 0, os.SEEK_CUR)
        if mode == msvcrt.LK_UNLCK:  # type: ignore[attr-defined]
            real_fcntl.lockf(fd, real_fcntl.LOCK_UN, nbytes, start, os.SEEK_SET)
            return
        try:
            real_fcntl.lockf(fd, real_fcntl.LOCK_EX | real_fcntl.LOCK_NB, nbytes, start)
        except OSError:
            # Windows says EACCES (or EDEADLOCK after LK_LOCK's ten tries).
            raise PermissionError(errno.EACCES, "Permission denied") from None

    msvcrt.locking = locking  # type: ignore[attr-defined]
    sys.modules["msvcrt"] = msvcrt

    real_replace, real_rename = os.replace, os.rename
    real_unlink, real_remove = os.unlink, os.remove

    def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # type: ignore[no-untyped-def]
        _refuse_if_open("replace", src, dst)
        return real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # type: ignore[no-untyped-def]
        _refuse_if_open("rename", src, dst)
        if os.path.lexists(dst):
            raise FileExistsError(
                errno.EEXIST, "Cannot create a file when that file already exists", os.fsdecode(dst)
            )
        return real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def unlink(path, *, dir_fd=None):  # type: ignore[no-untyped-def]
        _refuse_if_open("unlink", path)
        return real_unlink(path, dir_fd=dir_fd)

    def remove(path, *, dir_fd=None):  # type: ignore[no-untyped-def]
        _refuse_if_open("remove", path)
        return real_remove(path, dir_fd=dir_fd)

    # Windows decides "is it open?" and removes (or opens) in one step of its kernel. Here the
    # look at /proc and the removal are two steps: an open between them would get a file that
    # is then removed under it, which Windows never allows. One lock across the processes under
    # these rules keeps each open, and each check-and-remove, whole.
    real_open = os.open
    guard = os.path.join(tempfile.gettempdir(), "asyncclient-foreign-os.guard")

    def whole(fn):  # type: ignore[no-untyped-def]
        def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            fd = real_open(guard, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                real_fcntl.flock(fd, real_fcntl.LOCK_EX)
                return fn(*args, **kwargs)
            finally:
                os.close(fd)  # the lock goes with it

        return call

    os.open = whole(real_open)
    os.replace, os.rename = whole(replace), whole(rename)
    os.unlink, os.remove = whole(unlink), whole(remove)


if __name__ == "__main__":
    install()
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    if module == "-":  # a program on standard input
        exec(compile(sys.stdin.read(), "<stdin>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
