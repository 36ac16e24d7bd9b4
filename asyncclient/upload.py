"""The concurrent part uploader: one build or many at once, streamed from disk, verified, resumable.
`upload_build` / `upload_builds` take an AsyncSession first; the session's methods delegate here."""

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import json
import logging
import math
import os
import shutil
import stat
import tempfile
import threading
import time
import zipfile
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, TypeAlias

import attrs

from asyncclient import _protocol as proto
from asyncclient._bodies import PartBody
from asyncclient._opening import open_unleaked
from asyncclient.apps import AppError, AppInfo, inspect_app
from asyncclient.errors import (
    ApiError,
    BadRequestError,
    BuildRejectedError,
    ChecksumMismatchError,
    NotFoundError,
    ValidationError,
)
from asyncclient.models import Build, BuildList, UploadedPart

if TYPE_CHECKING:
    from asyncclient._session import AsyncSession

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_PARTS_IN_FLIGHT",
    "LocalBuild",
    "Progress",
    "UploadItem",
    "UploadResult",
    "default_journal_dir",
    "inspect_build_file",
    "upload_build",
    "upload_builds",
    "upload_many",
]

log = logging.getLogger("asyncclient.upload")

DEFAULT_CONCURRENCY: Final = 4
"""Parts of one build in flight at once (upload_build)."""
DEFAULT_MAX_PARTS_IN_FLIGHT: Final = 16
"""Parts in flight at once across all the builds of one upload_builds call."""
STATE_DIR_ENV: Final = "ASYNCCLIENT_STATE_DIR"

ItemLike: TypeAlias = (
    "str | os.PathLike[str] | tuple[str | os.PathLike[str], str | None] | UploadItem"
)
"""What upload_builds accepts per build: a path, a (path, label) pair, or an UploadItem."""

Progress = Callable[[int, int], object]
"""`progress(done_bytes, total_bytes)`, called as bytes go out. done_bytes goes down again when a
part is retried (what its failed attempt had sent is wound back) and ends at total_bytes; a
resumed upload starts at the bytes its earlier run already sent."""

# How one upload goes:
# 1. Pre-flight, before any request: the file exists, is not empty, is an .apk or an .app.zip (an
#    .app folder is zipped into a temporary .app.zip) and its app id and version can be read.
#    Then one list_builds gives the size limit (maxBytes) and the skip_existing candidates.
# 2. A journal file (default_journal_dir) keeps the build id, the part size and the etag of every
#    part sent, so the same upload run again after an interruption sends only the missing parts.
# 3. The parts go up in parallel, each streamed from disk in 1 MiB chunks (PartBody) and retried
#    on its own by the session, while a thread hashes the file. The first part that fails for
#    good cancels the others and its error is raised.
# 4. Complete, then compare the service's sha256 with the local one.

_CHUNK: Final = 1 << 20
_JOURNAL_VERSION: Final = 1
# upload_builds starts the next build while fewer than this many parts per budget slot are
# queued or in flight, so its start request and the completion of the previous one overlap.
_LOOKAHEAD: Final = 2


# --- public values ------------------------------------------------------------------------------


def _to_path(value: "str | os.PathLike[str]") -> Path:
    return Path(value)


@attrs.frozen
class UploadItem:
    """One build for upload_builds: a file (or .app folder), its label, its own progress, and
    its project when one call uploads to several projects."""

    path: Path = attrs.field(converter=_to_path)
    label: str | None = None
    progress: Progress | None = attrs.field(default=None, eq=False)
    project_id: str | None = None


@attrs.frozen(eq=False)
class UploadResult:
    """What became of one item of upload_builds: `build` on success, else `error`.

    sha256: the local file's checksum when it was computed; verified: the service reported the
    same one (False when it reported none: the bytes could not be checked); skipped: an existing
    ready build with the same checksum was returned and nothing uploaded; resumed: an interrupted
    upload was continued from its journal; parts_sent: parts sent by this call; info: what the
    pre-flight read from the app.
    """

    path: Path
    label: str | None = None
    build: "Build | None" = None
    error: Exception | None = None
    sha256: str | None = None
    verified: bool = False
    skipped: bool = False
    resumed: bool = False
    parts_sent: int = 0
    bytes_sent: int = 0
    elapsed: float = 0.0
    info: AppInfo | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.build is not None


@attrs.frozen
class LocalBuild:
    """What the pre-flight reads from a build file: its upload name, size, app and checksum."""

    path: Path
    file_name: str
    size: int
    info: AppInfo
    sha256: str | None = None


def default_journal_dir() -> Path:
    """Where resume journals live: $ASYNCCLIENT_STATE_DIR/uploads, else
    $XDG_STATE_HOME/asyncclient/uploads, else ~/.local/state/asyncclient/uploads."""
    state = os.environ.get(STATE_DIR_ENV)
    if state:
        return Path(state).expanduser() / "uploads"
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "asyncclient" / "uploads"


# --- pre-flight (blocking; run in threads) ------------------------------------------------------


class _TempDirs:
    """The temporary folders of one call (zipped .app folders), removed all together at its end.

    Pre-flight threads run on after a cancelled call: one that asks for a folder after close()
    is refused, so nothing is left behind.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirs: list[Path] = []
        self._closed = False

    def new(self) -> Path:
        with self._lock:
            if self._closed:
                raise _Stopped
            made = Path(tempfile.mkdtemp(prefix="asyncclient-app-"))
            self._dirs.append(made)
            return made

    def close(self) -> None:
        """Blocking: remove every folder made so far."""
        with self._lock:
            self._closed = True
            made, self._dirs = self._dirs, []
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


@attrs.define
class _Source:
    """A pre-flighted file: what is sent (the file itself or a temporary zip of an .app)."""

    given: Path
    send_path: Path
    file_name: str
    size: int
    mtime_ns: int
    info: AppInfo
    sha256: str | None = None  # known up front only for a zipped folder
    temp_dir: Path | None = None

    def cleanup(self) -> None:
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None


def _preflight(path: Path, temps: _TempDirs) -> _Source:
    """Every local check, with the fix in each message; raises ValidationError. Blocking."""
    shown = os.fspath(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ValidationError(
            f"{shown}: no such file: check the path (give an .apk, an .app.zip or an .app folder)"
        ) from None
    except OSError as exc:
        raise ValidationError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        if not path.name.lower().endswith(".app"):
            raise ValidationError(
                f"{shown} is a folder, not an app: give an .apk, an .app.zip, or the iOS "
                "Simulator .app folder itself"
            )
        return _zip_source(path, temps)
    if not stat.S_ISREG(st.st_mode):
        raise ValidationError(f"{shown} is not a regular file: give the app file itself")
    if st.st_size == 0:
        raise ValidationError(f"{shown} is empty (0 bytes): rebuild the app")
    info = _inspect(path, path.name)
    return _Source(path, path, path.name, st.st_size, st.st_mtime_ns, info)


def _inspect(path: Path, file_name: str) -> AppInfo:
    try:
        return inspect_app(path, file_name)
    except AppError as exc:
        raise ValidationError(str(exc)) from None
    except PermissionError:
        raise ValidationError(
            f"cannot read {path}: permission denied: check its permissions"
        ) from None


def _zip_source(app_dir: Path, temps: _TempDirs) -> _Source:
    temp_dir = temps.new()
    try:
        dest = temp_dir / f"{app_dir.name}.zip"
        digest = _zip_app_dir(app_dir, dest)
        st = dest.stat()
        info = _inspect(dest, dest.name)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return _Source(app_dir, dest, dest.name, st.st_size, st.st_mtime_ns, info, digest, temp_dir)


_ZIP_EPOCH: Final = (1980, 1, 1, 0, 0, 0)


def _zip_app_dir(app_dir: Path, dest: Path) -> str:
    """Zip `Name.app/` (the folder itself at the top, like `ditto -ck --keepParent`) to dest and
    return the zip's sha256.

    Byte-for-byte the same for the same folder contents (sorted names, fixed timestamps), so a
    resumed or repeated upload of a folder finds its journal and its existing build.
    """
    top = app_dir.name
    try:
        with zipfile.ZipFile(dest, "w") as archive:
            for root, dirs, files in os.walk(app_dir, onerror=_raise):
                dirs.sort()
                base = Path(root)
                rel = top if base == app_dir else f"{top}/{base.relative_to(app_dir).as_posix()}"
                _zip_member(archive, base, f"{rel}/")
                links = [d for d in dirs if (base / d).is_symlink()]
                dirs[:] = [d for d in dirs if d not in links]
                for name in sorted(files + links):
                    _zip_member(archive, base / name, f"{rel}/{name}")
    except OSError as exc:
        where = exc.filename or app_dir
        raise ValidationError(f"cannot zip {app_dir}: {exc.strerror or exc}: {where}") from None
    digest = hashlib.sha256()
    with dest.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _raise(exc: OSError) -> None:
    raise exc


def _zip_member(archive: zipfile.ZipFile, source: Path, name: str) -> None:
    st = source.lstat()
    info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
    info.create_system = 3  # unix: external_attr carries the mode, so executables stay executable
    info.external_attr = (st.st_mode & 0xFFFF) << 16
    if name.endswith("/"):
        info.external_attr |= 0x10  # MS-DOS directory flag
        archive.writestr(info, b"")
    elif stat.S_ISLNK(st.st_mode):
        archive.writestr(info, os.readlink(source).encode())
    else:
        info.compress_type = zipfile.ZIP_DEFLATED
        info.file_size = st.st_size  # lets zipfile choose zip64 for members over 2 GiB
        with source.open("rb") as src, archive.open(info, "w") as out:
            shutil.copyfileobj(src, out, _CHUNK)


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


async def inspect_build_file(path: "str | os.PathLike[str]", *, sha256: bool = True) -> LocalBuild:
    """The upload pre-flight on its own (no request): read the app and, optionally, hash it.

    An .app folder is zipped as an upload would zip it; the temporary zip is removed again.
    Raises ValidationError with the fix for anything the upload would refuse locally.
    """
    temps = _TempDirs()
    try:
        source = await asyncio.to_thread(_preflight, Path(path), temps)
        digest = source.sha256
        if sha256 and digest is None:
            hasher = _Hasher(source.send_path, source.size)
            try:
                digest = await hasher.result()
            finally:
                await hasher.stop()
        return LocalBuild(source.given, source.file_name, source.size, source.info, digest)
    finally:
        await asyncio.to_thread(temps.close)


# --- the hashing thread ---------------------------------------------------------------------------


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


# --- the part budget ------------------------------------------------------------------------------


class _Budget:
    """At most `limit` parts in flight across every upload sharing it.

    Waiters are served by priority (build order, then part number), not arrival, so the builds of
    upload_builds finish one after another instead of all at the very end.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._waiters: list[tuple[tuple[int, int], int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @contextlib.asynccontextmanager
    async def slot(self, priority: tuple[int, int]) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: tuple[int, int]) -> None:
        if self.in_flight < self.limit and not self._waiters:
            self._take()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (priority, next(self._seq), future)
        heapq.heappush(self._waiters, entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # granted just as we were cancelled: hand the slot on
            else:
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            raise

    def _take(self) -> None:
        self.in_flight += 1

    def _release(self) -> None:
        self.in_flight -= 1
        while self._waiters:
            _priority, _seq, future = heapq.heappop(self._waiters)
            if not future.done():
                self._take()
                future.set_result(None)
                return


class _Window:
    """upload_builds: how many parts of started builds are still queued or in flight; the next
    build starts only while that is below `limit`, so few builds are open at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.outstanding = 0
        self._room = asyncio.Event()

    async def enter(self, parts: int) -> None:
        while self.outstanding >= self.limit:
            self._room.clear()
            await self._room.wait()
        self.outstanding += parts

    def leave(self, parts: int) -> None:
        self.outstanding -= parts
        if self.outstanding < self.limit:
            self._room.set()


# --- progress -------------------------------------------------------------------------------------


class _ProgressSink:
    """Counts the bytes of one build and forwards (done, total) to the caller's callback.

    A callback that raises is not called again; its error fails the upload after the part.
    """

    __slots__ = ("callback", "done", "error", "total")

    def __init__(self, total: int, callback: Progress | None) -> None:
        self.total = total
        self.done = 0
        self.callback = callback
        self.error: Exception | None = None

    def add(self, delta: int) -> None:
        self.done += delta
        self.emit()

    def set(self, done: int) -> None:
        self.done = done
        self.emit()

    def emit(self) -> None:
        if self.callback is None or self.error is not None:
            return
        try:
            self.callback(self.done, self.total)
        except Exception as exc:
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error


# --- the journal ----------------------------------------------------------------------------------

# One upload per journal file at a time within this process (a path given twice to
# upload_builds): the second runs without a journal.
_JOURNALS_IN_USE: set[Path] = set()


JOURNAL_MAX_AGE: Final = 7 * 86400
"""Seconds after which a journal that was not resumed is removed (its file changed, or the
upload was abandoned): a journal is keyed by the file's size and mtime, so it is never reused
for a changed file, and would otherwise stay forever."""
_PRUNED: set[Path] = set()


def _prune_journals(directory: Path) -> None:
    """Remove journals (and leftover temp files) untouched for JOURNAL_MAX_AGE; once a process."""
    if directory in _PRUNED:
        return
    _PRUNED.add(directory)
    cutoff = time.time() - JOURNAL_MAX_AGE
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith((".json", ".tmp")) and entry.stat().st_mtime < cutoff:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


class _Journal:
    """The resume record of one upload: a JSON file rewritten (temp file + rename) per part."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        self.identity = identity
        self.build_id: str | None = None
        self.part_bytes = 0
        self.etags: dict[int, str] = {}
        self.broken = False

    @classmethod
    def open(cls, directory: Path, identity: dict[str, Any]) -> "_Journal | None":
        _prune_journals(directory)
        key = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"
        path = directory / name
        if path in _JOURNALS_IN_USE:
            return None
        _JOURNALS_IN_USE.add(path)
        journal = cls(path, identity)
        journal._load()
        return journal

    def close(self) -> None:
        _JOURNALS_IN_USE.discard(self.path)

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring the unreadable upload journal %s: %s", self.path, exc)
            return
        try:
            if data.get("version") != _JOURNAL_VERSION or data.get("identity") != self.identity:
                return
            build_id = data["buildId"]
            part_bytes = data["partBytes"]
            etags = {int(n): e for n, e in data["etags"].items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            return
        if (
            isinstance(build_id, str)
            and isinstance(part_bytes, int)
            and part_bytes > 0
            and all(isinstance(e, str) and e for e in etags.values())
        ):
            self.build_id, self.part_bytes, self.etags = build_id, part_bytes, etags

    def begin(self, build_id: str, part_bytes: int) -> None:
        self.build_id, self.part_bytes, self.etags = build_id, part_bytes, {}
        self.save()

    def record(self, part_number: int, etag: str) -> None:
        self.etags[part_number] = etag
        self.save()

    def forget(self) -> None:
        self.build_id, self.part_bytes, self.etags = None, 0, {}
        self.remove()

    def save(self) -> None:
        if self.broken or self.build_id is None:
            return
        data = {
            "version": _JOURNAL_VERSION,
            "identity": self.identity,
            "buildId": self.build_id,
            "partBytes": self.part_bytes,
            "etags": {str(n): e for n, e in sorted(self.etags.items())},
        }
        # Small and synchronous on purpose: an executor hop per part would cost more than the
        # write, and no await between the record and the rename keeps parts from interleaving.
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
            os.replace(temp, self.path)
        except OSError as exc:
            self.broken = True
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            log.warning(
                "cannot write the upload journal %s (%s): this upload cannot be resumed",
                self.path,
                exc.strerror or exc,
            )

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


# --- one upload -----------------------------------------------------------------------------------


@attrs.define
class _Context:
    """What the uploads of one call share."""

    session: "AsyncSession"
    project_id: str
    budget: _Budget
    concurrency: int
    skip_existing: bool
    journal_dir: Path
    listing: "BuildList | None" = None
    window: _Window | None = None


class _Restart(Exception):
    """A resumed upload cannot go on (the service lost its parts): start it over."""


class _Upload:
    """One build: pre-flighted source in, UploadResult out (or an exception)."""

    def __init__(
        self,
        ctx: _Context,
        index: int,
        source: _Source,
        label: str | None,
        progress: Progress | None,
    ) -> None:
        self.ctx = ctx
        self.index = index
        self.source = source
        self.label = label
        self.sink = _ProgressSink(source.size, progress)
        self.sha256 = source.sha256
        self.parts_sent = 0
        self.bytes_sent = 0
        self.resumed = False
        self.window_parts = 0  # this build's share of ctx.window still counted

    @property
    def shown(self) -> str:
        return os.fspath(self.source.given)

    async def run(self) -> UploadResult:
        started = time.perf_counter()
        ctx = self.ctx
        assert ctx.listing is not None
        if self.source.size > ctx.listing.max_bytes:
            raise ValidationError(
                f"{self.shown} is {self.source.size} bytes, over the service's limit of "
                f"{ctx.listing.max_bytes} bytes (maxBytes): make the app smaller (strip debug "
                "symbols, or build one apk per ABI)"
            )
        if ctx.skip_existing:
            existing = await self._find_existing(ctx.listing)
            if existing is not None:
                self.sink.set(self.source.size)
                return self._result(existing, started, verified=True, skipped=True)
        journal = self._open_journal()
        try:
            try:
                build = await self._upload(journal, resume=True)
            except _Restart:
                log.info("%s: the service lost the earlier parts; starting over", self.shown)
                self.resumed = False
                if journal is not None:
                    journal.forget()
                build = await self._upload(journal, resume=False)
            if build.sha256 is None:
                # Complete's answer lacked it; the single view carries it.
                build = await ctx.session.get_build(build.id)
            verified = self._verify(build)
        except (BuildRejectedError, ChecksumMismatchError, ValidationError):
            # Nothing to resume: the build is checked and refused, or the file is not what was
            # sent (it changed, or the bytes were damaged on the way).
            if journal is not None:
                journal.forget()
            raise
        finally:
            if journal is not None:
                journal.close()
        if journal is not None:
            journal.remove()
        return self._result(build, started, verified=verified)

    def _result(
        self, build: "Build", started: float, *, verified: bool, skipped: bool = False
    ) -> UploadResult:
        return UploadResult(
            path=self.source.given,
            label=self.label,
            build=build,
            sha256=self.sha256,
            verified=verified,
            skipped=skipped,
            resumed=self.resumed,
            parts_sent=self.parts_sent,
            bytes_sent=self.bytes_sent,
            elapsed=time.perf_counter() - started,
            info=self.source.info,
        )

    def _open_journal(self) -> _Journal | None:
        src = self.source
        identity = {
            "baseUrl": self.ctx.session.base_url,
            "projectId": self.ctx.project_id,
            "path": os.path.abspath(src.given),
            "size": src.size,
            # A zipped folder has a new temp file each time: its content identifies it.
            "mtimeNs": src.mtime_ns if src.sha256 is None else None,
            "sha256": src.sha256,
            "fileName": src.file_name,
            "label": self.label,
        }
        return _Journal.open(self.ctx.journal_dir, identity)

    async def _local_sha256(self) -> str:
        if self.sha256 is None:
            hasher = _Hasher(self.source.send_path, self.source.size)
            try:
                self.sha256 = await hasher.result()
            finally:
                await hasher.stop()
        return self.sha256

    async def _find_existing(self, listing: "BuildList") -> "Build | None":
        """A ready build of the project with this file's name, size and sha256."""
        candidates = [
            b
            for b in listing.builds
            if b.is_ready and b.file_name == self.source.file_name and b.size == self.source.size
        ]
        if not candidates:
            return None
        local = await self._local_sha256()
        for candidate in candidates:
            try:
                build = await self.ctx.session.get_build(candidate.id)
            except NotFoundError:
                continue  # deleted since the listing
            if build.is_ready and build.sha256 == local:
                log.info(
                    "%s: build %s has the same sha256; not uploading again", self.shown, build.id
                )
                return build
        return None

    async def _upload(self, journal: _Journal | None, *, resume: bool) -> "Build":
        hashers: list[_Hasher] = []
        try:
            return await self._upload_with(hashers, journal, resume=resume)
        finally:
            for hasher in hashers:
                await hasher.stop()

    async def _upload_with(
        self, hashers: "list[_Hasher]", journal: _Journal | None, *, resume: bool
    ) -> "Build":
        session = self.ctx.session
        src = self.source
        build_id: str | None = None
        part_bytes = 0
        etags: dict[int, str] = {}
        if resume and journal is not None and journal.build_id is not None:
            # May hash the file itself (to check a build the lost answer had completed).
            resumed = await self._resume(journal)
            if isinstance(resumed, tuple):
                build_id, part_bytes, etags = resumed
                self.resumed = True
            elif resumed is not None:
                self.sink.set(src.size)
                return resumed
        # The hash starts now, so that it runs while start_upload is on its way.
        hasher = None if self.sha256 is not None else _Hasher(src.send_path, src.size)
        if hasher is not None:
            hashers.append(hasher)
        if build_id is None:
            start = await session.start_upload(
                self.ctx.project_id, src.file_name, src.size, label=self.label
            )
            build_id, part_bytes = start.id, start.part_bytes
            if part_bytes <= 0 or start.parts != -(-src.size // part_bytes):
                raise ApiError(
                    201,
                    "invalid_response",
                    f"start_upload answered partBytes {part_bytes} and parts {start.parts}, which "
                    f"do not fit a file of {src.size} bytes",
                    method="POST",
                    url=f"{session.base_url}{proto.API_PREFIX}/projects/{self.ctx.project_id}/builds",
                )
            if journal is not None:
                journal.begin(build_id, part_bytes)
        parts = -(-src.size // part_bytes)
        missing = [n for n in range(1, parts + 1) if n not in etags]
        self.sink.set(src.size - sum(self._length(n, part_bytes) for n in missing))
        self._adjust_window(len(missing))
        try:
            if missing:
                await self._send(build_id, part_bytes, missing, etags, journal)
            self.sink.check()
            # The local checksum before completing: a file that changed under the upload is
            # refused here, before the service holds a ready build made of it.
            if hasher is not None:
                self.sha256 = await hasher.result()
            self._check_unchanged()
            uploaded = self._part_list(etags, parts)
            try:
                build = await session.complete_upload(build_id, uploaded)
            except BadRequestError as exc:
                if self.resumed and exc.code == "invalid_parts":
                    raise _Restart from exc
                raise
            return build
        finally:
            self._adjust_window(0)

    async def _resume(self, journal: _Journal) -> "tuple[str, int, dict[int, str]] | Build | None":
        """The journalled upload to continue, a build it already finished, or None (start over)."""
        assert journal.build_id is not None
        try:
            build = await self.ctx.session.get_build(journal.build_id)
        except NotFoundError:
            log.info(
                "%s: the service no longer knows build %s; starting over",
                self.shown,
                journal.build_id,
            )
            journal.forget()
            return None
        if build.status_kind == "uploading" and build.size in (None, self.source.size):
            parts = -(-self.source.size // journal.part_bytes)
            etags = {n: e for n, e in journal.etags.items() if 1 <= n <= parts}
            log.info(
                "%s: resuming build %s, %d of %d parts already sent",
                self.shown,
                build.id,
                len(etags),
                parts,
            )
            return build.id, journal.part_bytes, etags
        if build.is_ready and build.sha256 and build.sha256 == await self._local_sha256():
            self.resumed = True
            return build  # completed by the earlier run; only its answer was lost
        journal.forget()
        return None

    def _length(self, part_number: int, part_bytes: int) -> int:
        offset = (part_number - 1) * part_bytes
        return min(part_bytes, self.source.size - offset)

    async def _send(
        self,
        build_id: str,
        part_bytes: int,
        missing: Sequence[int],
        etags: dict[int, str],
        journal: _Journal | None,
    ) -> None:
        """Send the missing parts, at most ctx.concurrency at once within the shared budget."""
        session = self.ctx.session
        budget = self.ctx.budget
        queue = deque(missing)
        path = self.source.send_path
        # One open file for all the parts: an attempt sends from it (sendfile, explicit
        # offsets) without a trip to a thread to open and close the file for every part.
        try:
            shared = await _open_for_parts(path)
        except OSError as exc:
            raise ValidationError(f"cannot read {self.shown}: {exc.strerror}") from None

        async def worker() -> None:
            while queue:
                number = queue.popleft()
                length = self._length(number, part_bytes)
                body = _part_body(path, (number - 1) * part_bytes, length, self.sink.add, shared)
                async with budget.slot((self.index, number)):
                    uploaded = await session.upload_part(build_id, number, body)
                if uploaded.part_number != number or not uploaded.etag:
                    raise ApiError(
                        200,
                        "invalid_response",
                        f"the answer for part {number} named part {uploaded.part_number} "
                        f"with etag {uploaded.etag!r}",
                        method="PUT",
                        url=f"{session.base_url}{proto.API_PREFIX}/builds/{build_id}/parts/{number}",
                    )
                etags[number] = uploaded.etag
                self.parts_sent += 1
                self.bytes_sent += length
                if journal is not None:
                    journal.record(number, uploaded.etag)
                self._adjust_window(self.window_parts - 1)
                self.sink.check()

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.ctx.concurrency, len(missing))):
                    group.create_task(worker())
        except BaseExceptionGroup as failed:
            first = _first_error(failed)
            raise first from first.__cause__
        finally:
            # Every attempt has let go of it: each waits for its body to stop going out.
            shared.close()

    def _adjust_window(self, parts: int) -> None:
        window = self.ctx.window
        if window is None or parts == self.window_parts:
            return
        window.leave(self.window_parts - parts)
        self.window_parts = parts

    def _part_list(self, etags: dict[int, str], parts: int) -> list[UploadedPart]:
        missing = [n for n in range(1, parts + 1) if n not in etags]
        if missing:  # every worker finished without error, so this is a bug, not the network
            raise RuntimeError(f"parts {missing} have no etag after the upload")
        return [UploadedPart(n, etags[n]) for n in range(1, parts + 1)]

    def _check_unchanged(self) -> None:
        src = self.source
        try:
            st = src.send_path.stat()
        except OSError as exc:
            raise ValidationError(
                f"{self.shown} went away during the upload: {exc.strerror}"
            ) from None
        if st.st_size != src.size or st.st_mtime_ns != src.mtime_ns:
            raise ValidationError(
                f"{self.shown} changed during the upload: upload it again once it is written"
            )

    def _verify(self, build: "Build") -> bool:
        """Compare sha256s; True when they match, False when the service reported none."""
        local = self.sha256
        assert local is not None
        remote = build.sha256
        if remote is None:
            log.warning(
                "%s: the service reported no sha256 for build %s: the upload is not verified",
                self.shown,
                build.id,
            )
            return False
        if remote.lower() != local:
            raise ChecksumMismatchError(
                f"{self.shown}: the service's sha256 of build {build.id} is {remote}, the local "
                f"file's is {local}: the bytes were damaged on the way; upload it again",
                expected=local,
                actual=remote,
            )
        return True


async def _open_for_parts(path: Path) -> BinaryIO:
    """open(path, "rb") in a thread that leaks nothing when cancelled."""
    return await open_unleaked(
        asyncio.to_thread(open, path, "rb", buffering=0), lambda file: file.close()
    )


def _part_body(
    path: Path, offset: int, length: int, progress: Callable[[int], object], file: BinaryIO
) -> Any:
    # Imported here: importing this module stays free of aiohttp.

    return PartBody(path, offset, length, progress=progress, file=file)


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real error in a (possibly nested) group from a TaskGroup."""
    first: BaseException = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


# --- entry points ---------------------------------------------------------------------------------


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{name} must be a whole number of at least 1; got {value!r}")
    return value


def _journal_dir(journal_dir: "str | os.PathLike[str] | None") -> Path:
    return default_journal_dir() if journal_dir is None else Path(journal_dir)


def _check_label(label: object) -> str | None:
    if label is not None and not isinstance(label, str):
        raise ValidationError("label must be a string (for example a commit id) or None")
    return label


async def upload_build(
    session: "AsyncSession",
    project_id: str,
    path: "str | os.PathLike[str]",
    *,
    label: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Progress | None = None,
    skip_existing: bool = False,
    journal_dir: "str | os.PathLike[str] | None" = None,
) -> "Build":
    """Upload one app build and return it checked and verified.

    path: an .apk, an .app.zip, or an iOS Simulator .app folder (zipped on the fly). Parts go
    up `concurrency` at a time; `progress(done_bytes, total_bytes)` follows them (see Progress).
    skip_existing: return a ready build of the project with the same file name, size and sha256
    instead of uploading. journal_dir: where the resume journal lives (default_journal_dir()).

    Raises ValidationError (found before any upload request), BuildRejectedError (the devices
    cannot run it; .problems), ChecksumMismatchError, or the session's ApiError/TransportError.
    A build whose sha256 the service never reports is returned unverified (Build.sha256 None),
    with a warning logged.
    """
    result = await _upload_items(
        session,
        project_id,
        [UploadItem(Path(path), _check_label(label), progress)],
        budget=_Budget(_check_count("concurrency", concurrency)),
        concurrency=concurrency,
        skip_existing=skip_existing,
        journal_dir=journal_dir,
        windowed=False,
        progress=None,
        on_result=None,
        capture=False,
    )
    build = result[0].build
    assert build is not None
    return build


async def upload_builds(
    session: "AsyncSession",
    project_id: str,
    items: Iterable["ItemLike"],
    *,
    max_parts_in_flight: int = DEFAULT_MAX_PARTS_IN_FLIGHT,
    concurrency: int | None = None,
    progress: Callable[[Path, int, int], object] | None = None,
    skip_existing: bool = False,
    journal_dir: "str | os.PathLike[str] | None" = None,
    on_result: Callable[[UploadResult], object] | None = None,
) -> list[UploadResult]:
    """Upload many builds of one project at once; one result per item, in input order.

    items: paths, (path, label) pairs or UploadItems. All uploads share one budget of
    `max_parts_in_flight` parts in flight (so 50 builds never open more connections than that);
    each build sends at most `concurrency` parts at once (default: the whole budget). Builds start
    in order and the next one starts while the budget still has room, so they finish one after
    another. A failing build does not stop the others: its result carries the error.

    progress(path, done_bytes, total_bytes) follows every build unless the item has its own
    (done, total) callback; on_result(result) is called as each build finishes. Cancelling the
    call cancels every upload and keeps their journals for a later resume.
    """
    budget = _Budget(_check_count("max_parts_in_flight", max_parts_in_flight))
    per_build = (
        max_parts_in_flight if concurrency is None else _check_count("concurrency", concurrency)
    )
    return await _upload_items(
        session,
        project_id,
        [_item(value) for value in items],
        budget=budget,
        concurrency=per_build,
        skip_existing=skip_existing,
        journal_dir=journal_dir,
        windowed=True,
        progress=progress,
        on_result=on_result,
        capture=True,
    )


async def upload_many(
    session: "AsyncSession",
    items: Iterable["ItemLike"],
    *,
    project_id: str | None = None,
    max_parts_in_flight: int = DEFAULT_MAX_PARTS_IN_FLIGHT,
    concurrency: int | None = None,
    progress: Callable[[Path, int, int], object] | None = None,
    skip_existing: bool = False,
    journal_dir: "str | os.PathLike[str] | None" = None,
    on_result: Callable[[UploadResult], object] | None = None,
) -> list[UploadResult]:
    """upload_builds for items of one or several projects (`AsyncSession.upload_builds`).

    Each item goes to its UploadItem.project_id, else to `project_id`. All projects share the
    one budget of `max_parts_in_flight` parts; results come back in input order.
    """
    listed = [_item(value) for value in items]
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(listed):
        target = item.project_id or project_id
        if target is None:
            raise ValidationError(
                f"no project for {item.path}: pass project_id= or UploadItem(..., project_id=...)"
            )
        groups.setdefault(proto.check_id("project", target), []).append(index)
    budget = _Budget(_check_count("max_parts_in_flight", max_parts_in_flight))
    per_build = (
        max_parts_in_flight if concurrency is None else _check_count("concurrency", concurrency)
    )
    results: list[UploadResult | None] = [None] * len(listed)

    async def one_project(target: str, indexes: list[int]) -> None:
        done = await _upload_items(
            session,
            target,
            [listed[i] for i in indexes],
            budget=budget,
            concurrency=per_build,
            skip_existing=skip_existing,
            journal_dir=journal_dir,
            windowed=True,
            progress=progress,
            on_result=on_result,
            capture=True,
        )
        for index, result in zip(indexes, done, strict=True):
            results[index] = result

    async with asyncio.TaskGroup() as group:
        for target, indexes in groups.items():
            group.create_task(one_project(target, indexes))
    return [result for result in results if result is not None]


def _item(value: object) -> UploadItem:
    if isinstance(value, UploadItem):
        _check_label(value.label)
        return value
    if isinstance(value, str | os.PathLike):
        return UploadItem(Path(value))
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str | os.PathLike):
        return UploadItem(Path(value[0]), _check_label(value[1]))
    raise ValidationError(
        f"each item must be a path, a (path, label) pair or an UploadItem; got {value!r}"
    )


async def _upload_items(
    session: "AsyncSession",
    project_id: str,
    items: list[UploadItem],
    *,
    budget: _Budget,
    concurrency: int,
    skip_existing: bool,
    journal_dir: "str | os.PathLike[str] | None",
    windowed: bool,
    progress: Callable[[Path, int, int], object] | None,
    on_result: Callable[[UploadResult], object] | None,
    capture: bool,
) -> list[UploadResult]:
    project_id = proto.check_id("project", project_id)
    ctx = _Context(
        session=session,
        project_id=project_id,
        budget=budget,
        concurrency=concurrency,
        skip_existing=bool(skip_existing),
        journal_dir=_journal_dir(journal_dir),
        window=_Window(_LOOKAHEAD * budget.limit) if windowed else None,
    )
    results: list[UploadResult | None] = [None] * len(items)
    sources: list[_Source | None] = [None] * len(items)
    temps = _TempDirs()

    def settle(index: int, result: UploadResult) -> None:
        results[index] = result
        if on_result is not None:
            on_result(result)

    def failed(index: int, error: Exception) -> None:
        item = items[index]
        source = sources[index]
        settle(
            index,
            UploadResult(
                path=item.path,
                label=item.label,
                error=error,
                info=None if source is None else source.info,
            ),
        )

    try:
        # 1. Local pre-flight of every item, in threads: no request for a local problem.
        checked = await asyncio.gather(
            *(asyncio.to_thread(_preflight, item.path, temps) for item in items),
            return_exceptions=True,
        )
        for index, outcome in enumerate(checked):
            if isinstance(outcome, _Source):
                sources[index] = outcome
            elif isinstance(outcome, Exception) and capture:
                failed(index, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
        pending = [i for i, source in enumerate(sources) if source is not None]
        if not pending:
            return [r for r in results if r is not None]

        # 2. One list_builds: the size limit, the part size and the skip_existing candidates.
        try:
            ctx.listing = await session.list_builds(project_id)
        except Exception as exc:
            if not capture:
                raise
            for index in pending:
                failed(index, exc)
            return [r for r in results if r is not None]

        # 3. The uploads, started in order while the window has room.
        uploads: dict[int, _Upload] = {}
        for index in pending:
            source = sources[index]
            assert source is not None
            item = items[index]
            callback = item.progress
            if callback is None and progress is not None:
                callback = _bind_path(progress, item.path)
            uploads[index] = _Upload(ctx, index, source, item.label, callback)
        turns = {index: asyncio.Event() for index in pending}

        async def one(index: int) -> None:
            upload = uploads[index]
            await turns[index].wait()
            try:
                result = await upload.run()
            except Exception as exc:
                if not capture:
                    raise
                failed(index, exc)
            else:
                settle(index, result)
            finally:
                upload._adjust_window(0)
                if upload.source.temp_dir is not None:
                    await asyncio.to_thread(upload.source.cleanup)

        async def starter() -> None:
            part_bytes = max(1, ctx.listing.part_bytes) if ctx.listing else 1
            for index in pending:
                upload = uploads[index]
                if ctx.window is not None:
                    estimate = max(1, math.ceil(upload.source.size / part_bytes))
                    await ctx.window.enter(estimate)
                    upload.window_parts = estimate
                turns[index].set()

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(starter())
                for index in pending:
                    group.create_task(one(index))
        except BaseExceptionGroup as failure:
            first = _first_error(failure)
            raise first from first.__cause__
    finally:
        await asyncio.to_thread(temps.close)
    return [r for r in results if r is not None]


def _bind_path(progress: Callable[[Path, int, int], object], path: Path) -> Progress:
    def report(done: int, total: int) -> object:
        return progress(path, done, total)

    return report
