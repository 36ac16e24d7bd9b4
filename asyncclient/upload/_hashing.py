"""Hashing a build file: its sha256 in a worker thread, started early so that it overlaps the
upload, stoppable when the upload is cancelled."""

import asyncio
import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

from asyncclient.errors import ValidationError

log = logging.getLogger("asyncclient.upload")

# Cache-sized reads: 1 MiB ones cost more CPU over TLS.
HASH_CHUNK: Final = 256 << 10


def _hash_file(
    path: Path,
    size: int | None = None,
    stop: threading.Event | None = None,
    part_bytes: int | None = None,
    on_prefix: "Callable[[int, str], object] | None" = None,
) -> str:
    """sha256 of the first `size` bytes (all with None). Blocking; releases the GIL as it goes.

    With `part_bytes`, `on_prefix(k, hex)` is called as the reading passes the end of part k:
    the sha256 of every byte up to there (the last part ends at the end of the file). A resumed
    upload compares these with the journal's to prove the parts it kept came from these bytes.
    """
    digest = hashlib.sha256()
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    remaining = size
    done = 0
    step = part_bytes if part_bytes and on_prefix is not None else 0
    boundary = step  # the next part's end (0: no prefixes wanted)
    with path.open("rb", buffering=0) as handle:
        while remaining is None or remaining > 0:
            if stop is not None and stop.is_set():
                raise Stopped
            want = HASH_CHUNK if remaining is None else min(HASH_CHUNK, remaining)
            got = handle.readinto(view[:want])
            if not got:
                if remaining is not None:
                    raise ValidationError(
                        f"{path} became shorter during the upload: upload it again once it is "
                        "written"
                    )
                break
            start = 0
            while step and done + got >= boundary:
                cut = boundary - done
                digest.update(view[start:cut])
                start = cut
                assert on_prefix is not None
                on_prefix(boundary // step, digest.copy().hexdigest())
                boundary += step
            digest.update(view[start:got])
            done += got
            if remaining is not None:
                remaining -= got
    if step and done % step:
        assert on_prefix is not None
        on_prefix(done // step + 1, digest.copy().hexdigest())  # the last, shorter part
    return digest.hexdigest()


class Stopped(Exception):
    """The hashing thread was told to stop (the upload ended early)."""


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_running = 0  # hashes running now, in any thread


def _pool() -> ThreadPoolExecutor:
    """The hashing threads, shared by every upload of the process and started once (each
    Thread.start waits for the thread). As many as there are cores: more only take turns."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(
                max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="asyncclient-sha256"
            )
        return _POOL


def running() -> int:
    """How many hashes are being computed now."""
    return _running


class Hasher:
    """sha256 of a file computed in one of the hashing threads, reading the file sequentially.

    Not the loop's default executor: aiofiles reads every chunk of every part there, and a
    whole-file hash holding one of its few workers for seconds would stall them.
    """

    def __init__(self, path: Path, size: int, part_bytes: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._future: asyncio.Future[str] = loop.create_future()
        self._stop = threading.Event()
        self.part_bytes = part_bytes
        # Part number -> sha256 of the file up to its end.
        self.prefixes: dict[int, str] = {}
        self._prefix_waiters: dict[int, asyncio.Future[str]] = {}
        self._job = _pool().submit(self._run, path, size)

    def _run(self, path: Path, size: int) -> None:
        global _running
        result: str | None = None
        error: BaseException | None = None
        with _POOL_LOCK:
            _running += 1
        try:
            result = _hash_file(path, size, self._stop, self.part_bytes, self._passed)
        except BaseException as exc:  # re-raised by the loop where awaited
            error = exc
        finally:
            with _POOL_LOCK:
                _running -= 1
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._settle, result, error)

    def _passed(self, part: int, digest: str) -> None:
        """In the thread: the reading passed the end of `part`."""
        self.prefixes[part] = digest  # one dict store: atomic
        if self._prefix_waiters:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake, part, digest)

    def _wake(self, part: int, digest: str) -> None:
        waiter = self._prefix_waiters.pop(part, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(digest)

    async def prefix(self, part: int) -> str:
        """The sha256 of the file up to the end of `part`, once the reading has passed it."""
        known = self.prefixes.get(part)
        if known is not None:
            return known
        waiter = self._prefix_waiters.get(part)
        if waiter is None:
            waiter = self._prefix_waiters[part] = self._loop.create_future()
            known = self.prefixes.get(part)  # passed while the waiter was being made
            if known is not None:
                del self._prefix_waiters[part]
                return known
        done, _ = await asyncio.wait({waiter, self._future}, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            return waiter.result()
        await self._future  # the hash ended or failed before the part's end
        return self.prefixes.get(part, "")

    def _settle(self, result: str | None, error: BaseException | None) -> None:
        if self._future.done():
            return
        if error is not None:
            self._future.set_exception(error)
        else:
            assert result is not None
            self._future.set_result(result)

    async def result(self) -> str:
        # A cancelled waiter must not cancel the thread's future.
        return await asyncio.shield(self._future)

    async def stop(self) -> None:
        """Stop early and wait for the thread to let go of the file (within one chunk).

        The thread settles the future only after it has closed the file, so a settled future
        is all there is to wait for: not the thread's job, whose own future would cost one more
        wake-up of the loop from the thread for every build.
        """
        self._stop.set()
        if self._job.cancel():  # still queued: it never opens the file
            self._settle(None, Stopped())
        if not self._future.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._future)
        if self._future.done() and not self._future.cancelled():
            self._future.exception()  # retrieved: no "exception was never retrieved" warning
