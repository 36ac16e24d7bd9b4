"""Hashing a build file: its sha256 in a worker thread, started early so that it overlaps the
upload, stoppable when the upload is cancelled."""

import asyncio
import contextlib
import hashlib
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from asyncclient.errors import (
    ValidationError,
)

if TYPE_CHECKING:
    pass

from asyncclient.upload._values import _CHUNK

log = logging.getLogger("asyncclient.upload")


def _hash_file(path: Path, size: int | None = None, stop: threading.Event | None = None) -> str:
    """sha256 of the first `size` bytes (all with None). Blocking; releases the GIL as it goes."""
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    remaining = size
    with path.open("rb", buffering=0) as handle:
        while remaining is None or remaining > 0:
            if stop is not None and stop.is_set():
                raise _Stopped
            want = _CHUNK if remaining is None else min(_CHUNK, remaining)
            got = handle.readinto(view[:want])
            if not got:
                if remaining is not None:
                    raise ValidationError(
                        f"{path} became shorter during the upload: upload it again once it is "
                        "written"
                    )
                break
            digest.update(view[:got])
            if remaining is not None:
                remaining -= got
    return digest.hexdigest()


class _Stopped(Exception):
    """The hashing thread was told to stop (the upload ended early)."""


class _Hasher:
    """sha256 of a file computed by a thread of its own, reading the file sequentially.

    Not the loop's default executor: aiofiles reads every chunk of every part there, and a
    whole-file hash holding one of its few workers for seconds would stall them.
    """

    def __init__(self, path: Path, size: int) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._future: asyncio.Future[str] = loop.create_future()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(path, size), name="asyncclient-sha256", daemon=True
        )
        self._thread.start()

    def _run(self, path: Path, size: int) -> None:
        result: str | None = None
        error: BaseException | None = None
        try:
            result = _hash_file(path, size, self._stop)
        except BaseException as exc:  # handed to the loop, which re-raises it where awaited
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._settle, result, error)

    def _settle(self, result: str | None, error: BaseException | None) -> None:
        if self._future.done():
            return
        if error is not None:
            self._future.set_exception(error)
        else:
            assert result is not None
            self._future.set_result(result)

    async def result(self) -> str:
        # shield: a cancelled waiter must not cancel the future the thread will settle.
        return await asyncio.shield(self._future)

    async def stop(self) -> None:
        """Stop early and wait for the thread to let go of the file (within one chunk)."""
        self._stop.set()
        with contextlib.suppress(Exception):
            await asyncio.shield(self._future)
        if self._future.done() and not self._future.cancelled():
            self._future.exception()  # retrieved: no "exception was never retrieved" warning
        # Settled means the thread is returning: this join takes microseconds.
        self._thread.join()
