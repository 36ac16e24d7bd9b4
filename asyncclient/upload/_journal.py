"""The resume journal of one build file: its build id, part size, each part's etag and the
file's sha256 up to each part's end, so an interrupted upload sends only the missing parts of
the same file. Its first line holds the state, each later line one part (an append, not a new
file per part); reading stops at the first line that is not whole JSON. Created with O_EXCL and
O_NOFOLLOW, appended only through the descriptor that created it.
"""

import contextlib
import errno
import hashlib
import itertools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Final

from asyncclient._local import _files
from asyncclient.errors import LocalFileError
from asyncclient.upload._values import JOURNAL_VERSION, STATE_DIR_ENV

log = logging.getLogger("asyncclient.upload")

_JOURNALS_IN_USE: set[Path] = set()
_TEMP_NAMES = itertools.count()
_NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_BINARY: Final = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
_CREATE: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | _NO_FOLLOW | _BINARY
_APPEND: Final = os.O_WRONLY | os.O_APPEND | _NO_FOLLOW | _BINARY


def _create(path: Path) -> int:
    """A descriptor for appending to a new file at `path`, which must not exist yet (a link or
    a file planted at the name fails with FileExistsError: nothing is written through it)."""
    return os.open(path, _CREATE, 0o600)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _new_file(path: Path, head: bytes) -> int:
    """A new file at `path` (see _create) holding `head`, its descriptor open for appending;
    nothing is left at `path` when the write fails."""
    fd = _create(path)
    try:
        _write_all(fd, head)
    except BaseException:
        _discard(fd, path)
        raise
    return fd


def _discard(fd: int, path: Path) -> None:
    """Close `fd` and remove `path`, the file this process created with it."""
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(path)


def _read_no_follow(path: Path) -> str:
    """The text of `path`, refusing a symbolic link (ELOOP) instead of reading its target."""
    fd = os.open(path, os.O_RDONLY | _NO_FOLLOW | _BINARY)
    with os.fdopen(fd, "rb") as handle:
        return handle.read().decode("utf-8")


def _line(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode("utf-8") + b"\n"


JOURNAL_MAX_AGE: Final = 7 * 86400
"""Seconds after which a journal that was not resumed is removed (its file changed, or the
upload was abandoned): a journal is keyed by the file's size and mtime, so it is never reused
for a changed file, and would otherwise stay forever."""
_PRUNED: set[Path] = set()


def journal_names(directory: Path) -> frozenset[str]:
    """Blocking: the names of the journals in `directory` now (none when it does not exist),
    once per upload call, so that each build looks for its journal in this set and only opens
    a file that is there: a failed open per build cost a system call and an exception on the
    event loop. Journals untouched for JOURNAL_MAX_AGE (and leftover temp files) are removed
    first, on the first call of the process for that folder."""
    prune = directory not in _PRUNED
    _PRUNED.add(directory)
    cutoff = time.time() - JOURNAL_MAX_AGE
    names: set[str] = set()
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.endswith((".json", ".tmp")):
                continue
            if prune:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)
                        continue
            names.add(entry.name)
    return frozenset(names)


def merged(text: str) -> Any:
    """A journal's text as one JSON value: its first line, with the part lines after it merged
    into "etags" and "prefixes", up to the first line that is not a whole part line (one cut
    short by a crash). Raises ValueError when the first line is not JSON."""
    lines = text.splitlines()
    try:
        head = json.loads(lines[0] if lines else "")
    except RecursionError:
        raise ValueError("the journal is nested too deeply") from None
    if not isinstance(head, dict):
        return head
    etags, prefixes = head.get("etags"), head.get("prefixes")
    if not (isinstance(etags, dict) and isinstance(prefixes, dict)):
        return head
    for line in lines[1:]:
        try:
            data = json.loads(line)
            part, etag, more = data["part"], data["etag"], data.get("prefixes", {})
        except (ValueError, TypeError, KeyError, AttributeError):
            break
        if not (isinstance(part, int) and isinstance(etag, str) and isinstance(more, dict)):
            break
        etags[str(part)] = etag
        prefixes.update(more)
    return head


def journal_name(identity: dict[str, Any]) -> str:
    """The file name of the journal of `identity` (its lock is the same name with .lock)."""
    key = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"


class Journal:
    """The resume record of one upload: one file, its state first, then a line per part sent."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        self.identity = identity
        self.build_id: str | None = None
        self.part_bytes = 0
        self.etags: dict[int, str] = {}
        self.prefixes: dict[int, str] = {}
        self.broken = False
        self._fd: int | None = None  # the file this journal created, open for appending
        self._next_prefix = 1  # the first part record() has not looked for
        self._name_taken = True  # something may be at self.path (False: nothing loaded)

    @classmethod
    def open(
        cls, directory: Path, identity: dict[str, Any], listed: "frozenset[str] | None" = None
    ) -> "Journal | None":
        """The journal of `identity` in `directory`, loaded if it is there; None when another
        upload of this process holds it. listed: journal_names(directory) from the start of
        the call (None: look on disk)."""
        name = journal_name(identity)
        path = directory / name
        if path in _JOURNALS_IN_USE:
            return None
        _JOURNALS_IN_USE.add(path)
        journal = cls(path, identity)
        if listed is None or name in listed:
            journal._load()
        else:
            # Absent at the start: a later arrival is replaced.
            journal._name_taken = False
        return journal

    def close(self) -> None:
        self._close_file()
        _JOURNALS_IN_USE.discard(self.path)

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _load(self) -> None:
        try:
            text = _read_no_follow(self.path)
        except FileNotFoundError:
            self._name_taken = False
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring the unreadable upload journal %s: %s", self.path, exc)
            return
        try:
            data = merged(text)
            if data.get("version") != JOURNAL_VERSION or data.get("identity") != self.identity:
                return
            build_id = data["buildId"]
            part_bytes = data["partBytes"]
            etags = {int(n): e for n, e in data["etags"].items()}
            prefixes = {int(n): d for n, d in data["prefixes"].items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            return
        if (
            isinstance(build_id, str)
            and isinstance(part_bytes, int)
            and part_bytes > 0
            and all(n >= 1 and isinstance(e, str) and e for n, e in etags.items())
            and all(isinstance(d, str) and len(d) == 64 for d in prefixes.values())
        ):
            self.build_id, self.part_bytes = build_id, part_bytes
            self.etags, self.prefixes = etags, prefixes

    def begin(self, build_id: str, part_bytes: int) -> None:
        self._close_file()  # a new upload: a new file
        self.build_id, self.part_bytes, self.etags, self.prefixes = build_id, part_bytes, {}, {}
        self._next_prefix = 1
        self._write_state()

    def record(self, part_number: int, etag: str, prefixes: dict[int, str] | None = None) -> None:
        """A part was sent; `prefixes`: the file's sha256 up to each part's end known so far."""
        self.etags[part_number] = etag
        line: dict[str, Any] = {"part": part_number, "etag": etag}
        if prefixes:
            # Only parts past the last one seen are looked at.
            new: dict[int, str] = {}
            part = self._next_prefix
            while (digest := prefixes.get(part)) is not None:
                if self.prefixes.get(part) != digest:
                    new[part] = digest
                part += 1
            self._next_prefix = part
            if new:
                self.prefixes.update(new)
                line["prefixes"] = {str(n): d for n, d in new.items()}
        if self.broken or self.build_id is None:
            return
        if self._fd is None:  # resumed from another run's file: never appended to
            self._write_state()
            return
        try:
            _write_all(self._fd, _line(line))
        except OSError as exc:
            self._give_up(exc)

    def forget(self) -> None:
        self._close_file()
        self.build_id, self.part_bytes, self.etags, self.prefixes = None, 0, {}, {}
        self._next_prefix = 1
        self.remove()

    def _write_state(self) -> None:
        """A new file holding the whole state, open for the part lines that follow."""
        if self.broken or self.build_id is None:
            return
        head = _line(
            {
                "version": JOURNAL_VERSION,
                "identity": self.identity,
                "buildId": self.build_id,
                "partBytes": self.part_bytes,
                "etags": {str(n): e for n, e in sorted(self.etags.items())},
                "prefixes": {str(n): d for n, d in sorted(self.prefixes.items())},
            }
        )
        try:
            if self._name_taken:
                fd = self._replace(head)
            else:
                try:
                    fd = self._create_here(head)
                except FileExistsError:  # something came to the name since the load
                    fd = self._replace(head)
        except OSError as exc:
            self._give_up(exc)
            return
        self._fd, self._name_taken = fd, True

    def _create_here(self, head: bytes) -> int:
        try:
            return _new_file(self.path, head)
        except FileNotFoundError:  # the folder: made on the first journal
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return _new_file(self.path, head)

    def _replace(self, head: bytes) -> int:
        """A new file written beside the name, closed, renamed over it (Windows renames no
        open file), then opened again for the part lines: only if it is still the file this
        process wrote (no link, nothing swapped in between)."""
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{next(_TEMP_NAMES)}.tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = _new_file(temp, head)
        written = os.fstat(fd)
        os.close(fd)
        try:
            _files.replace(temp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        fd = os.open(self.path, _APPEND)
        if not os.path.samestat(os.fstat(fd), written):
            os.close(fd)
            raise FileExistsError(
                errno.EEXIST, "another file took the journal's name", str(self.path)
            )
        return fd

    def _give_up(self, exc: OSError) -> None:
        """The journal cannot be written. A full disk, a read-only or foreign folder: the upload
        stops here, as a LocalFileError naming the file, rather than go on with nothing to
        resume from (what the file already holds stays for the resume). Names taken by
        something planted there (FileExistsError at every name tried): nothing is written
        through it, and the upload goes on unjournalled, with a warning."""
        self.broken = True
        self._close_file()
        if not isinstance(exc, FileExistsError):
            raise LocalFileError.of(
                exc,
                f"cannot write the upload journal {self.path}",
                f"set {STATE_DIR_ENV} to a writable folder",
            ) from None
        log.warning(
            "cannot write the upload journal %s (%s): this upload cannot be resumed",
            self.path,
            exc.strerror or exc,
        )

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def finish(self) -> None:
        """The upload is done: the file is closed, and removed later with remove_finished().
        Its name stays claimed until then, so that this process does not resume a finished
        upload from it."""
        self._close_file()


def remove_finished(journals: "list[Journal]") -> None:
    """Remove the journals of finished uploads: blocking, so called once per upload call in a
    worker thread, not once per build (an unlink can take milliseconds; docs/performance.md).
    An upload killed before this leaves journals of completed builds: the next run finds each
    build ready with the file's sha256 and returns it without sending anything."""
    for journal in journals:
        journal.remove()


def release(journals: "list[Journal]") -> None:
    """Give up the names of `journals` (on the event loop, after remove_finished)."""
    for journal in journals:
        _JOURNALS_IN_USE.discard(journal.path)
