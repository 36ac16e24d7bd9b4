"""The resume journal: per build file, the build id, the part size, the etag of every part
sent and the sha256 of the file up to each part's end, so that an interrupted upload sends only
the parts still missing, and only when the file is still the one those parts came from.

Written so that a link planted at its name is never followed: a private temporary file, created
anew (O_EXCL, O_NOFOLLOW), renamed over the journal's name (a rename replaces a link, never
writes through it); read with O_NOFOLLOW."""

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Final

from asyncclient.upload._values import _JOURNAL_VERSION

log = logging.getLogger("asyncclient.upload")

_JOURNALS_IN_USE: set[Path] = set()
_TEMP_NAMES = itertools.count()
_NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


def _write_new(path: Path, data: bytes) -> None:
    """Write `data` to a file that must not exist yet (a link or a file planted at the name
    fails with FileExistsError: nothing is written through it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)  # ours: created above
        raise


def _read_no_follow(path: Path) -> str:
    """The text of `path`, refusing a symbolic link (ELOOP) instead of reading its target."""
    fd = os.open(path, os.O_RDONLY | _NO_FOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read().decode("utf-8")


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
        self.prefixes: dict[int, str] = {}
        self.broken = False
        self._dir_made = False

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
            data = json.loads(_read_no_follow(self.path))
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
            prefixes = {int(n): d for n, d in data["prefixes"].items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            return
        if (
            isinstance(build_id, str)
            and isinstance(part_bytes, int)
            and part_bytes > 0
            and all(isinstance(e, str) and e for e in etags.values())
            and all(isinstance(d, str) and len(d) == 64 for d in prefixes.values())
        ):
            self.build_id, self.part_bytes = build_id, part_bytes
            self.etags, self.prefixes = etags, prefixes

    def begin(self, build_id: str, part_bytes: int) -> None:
        self.build_id, self.part_bytes, self.etags, self.prefixes = build_id, part_bytes, {}, {}
        self.save()

    def record(self, part_number: int, etag: str, prefixes: dict[int, str] | None = None) -> None:
        """A part was sent; `prefixes`: the file's sha256 up to each part's end known so far."""
        self.etags[part_number] = etag
        if prefixes:
            self.prefixes.update(prefixes)
        self.save()

    def forget(self) -> None:
        self.build_id, self.part_bytes, self.etags, self.prefixes = None, 0, {}, {}
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
            "prefixes": {str(n): d for n, d in sorted(self.prefixes.items())},
        }
        # Small and synchronous on purpose: an executor hop per part would cost more than the
        # write, and no await between the record and the rename keeps parts from interleaving.
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{next(_TEMP_NAMES)}.tmp")
        written = False
        try:
            if not self._dir_made:  # once per journal, not per part
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._dir_made = True
            _write_new(temp, json.dumps(data, separators=(",", ":")).encode("utf-8"))
            written = True
            os.replace(temp, self.path)
        except OSError as exc:
            self.broken = True
            if written:  # never remove what someone else put at the temporary name
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

    async def remove_soon(self) -> None:
        """remove(), in a worker thread: unlinking a file just written can take milliseconds
        (7 ms seen on this machine's disk), which 200 builds would spend on the event loop."""
        await asyncio.to_thread(self.remove)
