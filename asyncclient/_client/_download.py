"""Downloading a run file: streamed to `<dest>.part`, resumed with Range/If-Range, renamed to
its name once whole; one process writes a file, the others wait for it and take it. The
partial file and its validator never follow a link (O_NOFOLLOW, O_EXCL, a regular file with
one name only), and the final rename replaces a link without writing through it.
"""

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote

import aiofiles
import aiofiles.os
import aiohttp

from asyncclient._client._transport import Transport
from asyncclient._core import _checks as checks
from asyncclient._core import _wire as wire
from asyncclient._core._names import safe_name
from asyncclient._core._operations import Operation
from asyncclient._core._retry import Retry
from asyncclient._local import _files
from asyncclient._local._bodies import CHUNK_SIZE
from asyncclient._local._locks import STATE_DIR_ENV, claim, lock_path_for, state_dir
from asyncclient.errors import LocalFileError, TransportError, ValidationError

if TYPE_CHECKING:
    from asyncclient._local._locks import ProcessLock

__all__ = ["download_to"]


async def download_to(
    transport: Transport,
    operation: Operation,
    run_id: str,
    file: str,
    dest: "str | os.PathLike[str]",
) -> Path:
    """See AsyncSession.download_run_file; `operation` is its row of the table."""
    run_id = checks.check_id("run", run_id)
    rel = wire.run_file_path(run_id, file)
    target = Path(dest)
    if await aiofiles.os.path.isdir(target):
        # The service's file name, made safe to store on any platform.
        target = target / safe_name(unquote(rel.rsplit("/", 1)[-1]))
    elif not await aiofiles.os.path.isdir(target.parent):
        raise ValidationError(
            f"cannot save to {target}: the folder {target.parent} does not exist "
            "(create it, or pass an existing folder as dest)"
        )
    path = operation.path_for(run_id=run_id, file=rel)
    download = _Download(target, transport.api + path)
    call = transport.make_call(
        operation,
        path,
        # Stored bytes: no compression on the way.
        headers={"Accept": "*/*", "Accept-Encoding": "identity"},
        prepare=download.prepare,
        consume=download.consume,
    )
    lock = await _claim(target)
    if lock is None:
        return target  # another process wrote it while this one waited
    try:
        await transport.send_handling_retries(call)
        await download.finish()
    except BaseException:
        lock.release(None)
        raise
    lock.release({"size": download.offset})
    return target


async def _claim(target: Path) -> "ProcessLock | None":
    """The lock on `target`, held while this process writes it; None when another process
    wrote the whole file while this one waited for it."""
    locks = state_dir() / "locks"
    while True:
        try:
            got = await claim(lock_path_for(locks, target))
        except OSError as exc:
            raise LocalFileError.of(
                exc, f"cannot write a download lock in {locks}", f"set {STATE_DIR_ENV} elsewhere"
            ) from None
        if got.lock is not None:
            return got.lock
        size = (got.outcome or {}).get("size")
        try:
            st = await aiofiles.os.stat(target, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            return None


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A local failure (not a network one, which aiohttp raises as an OSError too) while
    writing `path` becomes a LocalFileError naming the file."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, aiohttp.ClientError | LocalFileError):
            raise
        where = exc.filename if isinstance(exc.filename, str) else os.fspath(path)
        raise LocalFileError.of(
            exc, f"cannot write {where}", "download into another folder (-o, or dest)"
        ) from exc


class _Download:
    """State of one download: the .part file on disk and the ETag it came from."""

    def __init__(self, target: Path, url: str) -> None:
        self.target = target
        self.url = url
        self.part = target.with_name(target.name + ".part")
        self.etag_file = target.with_name(target.name + ".part.etag")
        self.offset = 0
        self.total: int | None = None
        self.complete = False
        self.validator: str | None = None  # the If-Range of this attempt

    async def prepare(self, headers: Mapping[str, str]) -> Mapping[str, str]:
        """Per attempt: ask for what is not yet on disk."""
        with _writing(self.part):
            return await self._prepare(headers)

    async def consume(self, resp: aiohttp.ClientResponse) -> Retry | None:
        """Per attempt: the answer written to disk; a Retry when it cannot be used."""
        with _writing(self.part):
            return await self._consume(resp)

    async def finish(self) -> None:
        with _writing(self.target):
            await self._finish()

    async def _prepare(self, headers: Mapping[str, str]) -> Mapping[str, str]:
        self.validator = None
        size = await _resumable_size(self.part)
        if size is None:  # a link, a folder, a second name: not ours to extend
            await self._discard()
            size = 0
        self.offset = size
        if self.offset == 0:
            return headers
        extra = {"Range": f"bytes={self.offset}-"}
        etag = await self._read_etag()
        if etag:
            # A changed file is answered 200 with all of it.
            extra["If-Range"] = self.validator = etag
        return {**headers, **extra}

    async def _consume(self, resp: aiohttp.ClientResponse) -> Retry | None:
        """The answer written to the partial file; a Retry when it cannot be used as it is."""
        status = resp.status
        if status == 416:
            total = wire.parse_unsatisfied_range(resp.headers.get("Content-Range"))
            if total is not None and total == self.offset:
                self.total = total
                self.complete = True
                return None
            await self._discard()
            return self._retry(f"the service refused the range bytes={self.offset}- (416)")
        if status == 206:
            content_range = wire.parse_content_range(resp.headers.get("Content-Range"))
            if content_range is None or content_range[0] != self.offset:
                await self._discard()
                return self._retry(
                    f"asked for bytes from {self.offset}, the service sent "
                    f"{resp.headers.get('Content-Range')!r}"
                )
            if self.validator is not None and resp.headers.get("ETag") != self.validator:
                # If-Range ignored on a changed file: start over.
                await self._discard()
                return self._retry(
                    "the file changed since the partial download (another ETag) and the "
                    "service sent a range of the new one",
                    at_once=True,
                )
            self.total = content_range[2]
            mode: Literal["ab", "wb"] = "ab"
        else:
            # 200: the whole file (first attempt, or changed): start over.
            self.offset = 0
            self.total = resp.content_length
            mode = "wb"
        etag = resp.headers.get("ETag")
        await _remove(self.etag_file)
        if etag:
            async with aiofiles.open(self.etag_file, "w", opener=_create_new) as handle:
                await handle.write(etag)
        written = self.offset
        if mode == "wb":
            await _remove(self.part)
        opener = _create_new if mode == "wb" else _append_existing
        async with aiofiles.open(self.part, mode, opener=opener) as handle:
            if mode == "ab" and not _still_resumable(handle.fileno(), self.offset):
                return self._retry("the partial file changed under the download", at_once=True)
            async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                await handle.write(chunk)
                written += len(chunk)
        if self.total is not None and written != self.total:
            return self._retry(f"got {written} of {self.total} bytes")
        self.offset = written
        self.complete = True
        return None

    async def _finish(self) -> None:
        if not self.complete:
            raise TransportError(
                f"the download of {self.target.name} did not complete", method="GET", url=self.url
            )
        # Closed first: Windows renames no open file.
        await _files.areplace(self.part, self.target)
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self.etag_file)

    async def _read_etag(self) -> str | None:
        try:
            async with aiofiles.open(self.etag_file, opener=_open_no_follow) as handle:
                text: str = await handle.read()
        except OSError:  # missing, or a link (ELOOP): no validator to trust
            return None
        text = text.strip()
        return text or None

    async def _discard(self) -> None:
        for path in (self.part, self.etag_file):
            await _remove(path)
        self.offset = 0

    def _retry(self, reason: str, *, at_once: bool = False) -> Retry:
        error = TransportError(
            f"download of {self.target.name}: {reason}", method="GET", url=self.url
        )
        return Retry(error, 0.0 if at_once else None)


_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation


def _create_new(path: str, flags: int) -> int:
    """aiofiles' opener for a file that must be new: nothing at the name is written through."""
    flags = (flags & ~os.O_TRUNC) | os.O_CREAT | os.O_EXCL | _NO_FOLLOW | _BINARY
    return os.open(path, flags, 0o666)


def _append_existing(path: str, flags: int) -> int:
    """aiofiles' opener for the partial file being resumed: a link is refused (ELOOP)."""
    return os.open(path, (flags & ~os.O_CREAT) | _NO_FOLLOW | _BINARY)


def _open_no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | _NO_FOLLOW | _BINARY)


async def _resumable_size(path: Path) -> int | None:
    """The size of the partial file at `path`: 0 when there is none, None when what stands
    there is not a partial file of ours (a link, a folder, a file with another name too)."""
    try:
        st = await aiofiles.os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return None
    return int(st.st_size)


def _still_resumable(fd: int, offset: int) -> bool:
    """The opened partial file is the regular, single-named file of `offset` bytes it was."""
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size == offset


async def _remove(path: Path) -> None:
    """Remove the name (a link's target is left alone); nothing there is fine."""
    with contextlib.suppress(FileNotFoundError):
        await aiofiles.os.remove(path)
