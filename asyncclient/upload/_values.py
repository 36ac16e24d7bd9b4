"""The uploader's public values and settings: items, results, local builds, defaults, the
progress callback's shape, and where resume journals live."""

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, Protocol, TypeAlias

import attrs

from asyncclient._core import _defaults as defaults
from asyncclient._local._bodies import PartBody
from asyncclient._local._locks import STATE_DIR_ENV, state_dir
from asyncclient.apps import AppInfo
from asyncclient.models import Build, BuildList, UploadedPart, UploadStart

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_PARTS_IN_FLIGHT",
    "STATE_DIR_ENV",
    "ItemLike",
    "LocalBuild",
    "Progress",
    "UploadItem",
    "UploadResult",
    "default_journal_dir",
]

log = logging.getLogger("asyncclient.upload")

DEFAULT_CONCURRENCY: Final = defaults.UPLOAD_CONCURRENCY
"""Parts of one build in flight at once (upload_build)."""
DEFAULT_MAX_PARTS_IN_FLIGHT: Final = defaults.MAX_PARTS_IN_FLIGHT
"""Parts in flight at once across all the builds of one upload_builds call."""

ItemLike: TypeAlias = (
    "str | os.PathLike[str] | tuple[str | os.PathLike[str], str | None] | UploadItem"
)
"""What upload_builds accepts per build: a path, a (path, label) pair, or an UploadItem."""

Progress = Callable[[int, int], object]
"""`progress(done_bytes, total_bytes)`, called at the start and as the service stores each part:
done_bytes counts the bytes of the parts it stored (bytes still in a connection's buffers do not
count, and a retried part never winds it back) and ends at total_bytes; a resumed upload starts
at the bytes its earlier run had stored."""

CHUNK: Final = 1 << 20
# 2: each part's prefix digest, so resumes prove parts.
JOURNAL_VERSION: Final = 2
# The next build starts below this many parts per slot.
LOOKAHEAD: Final = 2


def _to_path(value: "str | os.PathLike[str]") -> Path:
    return Path(value)


@attrs.frozen
class UploadItem:
    """One build for upload_builds: a file (or .app folder), its label, its own progress, and
    its project when one call uploads to several projects.

    Attributes:
        path: The `.apk`, `.app.zip` or `.app` folder.
        label: Its label, such as the commit.
        progress: Called as `progress(done_bytes, total_bytes)` for this build alone.
        project_id: Its project, when one call uploads to several.
        on_wait: Called with the other process's pid when this build waits for another
            upload of the same file.
    """

    path: Path = attrs.field(converter=_to_path)
    label: str | None = None
    progress: Progress | None = attrs.field(default=None, eq=False)
    project_id: str | None = None
    on_wait: "Callable[[int | None], object] | None" = attrs.field(default=None, eq=False)
    """Called once, with the other process's pid (None if unknown), when another process is
    uploading the same file and this upload waits for it (then returns its build)."""


@attrs.frozen(eq=False)
class UploadResult:
    """What became of one item of upload_builds: `build` on success, else `error`.

    sha256: the local file's checksum when it was computed; verified: the service reported the
    same one (False when it reported none: the bytes could not be checked); skipped: an existing
    ready build with the same checksum was returned and nothing uploaded; joined: another process
    was uploading the same file, this one waited for it and returned its build, sending nothing
    (see "Many jobs on one runner" in the README); resumed: an interrupted
    upload was continued from its journal; parts_sent: parts sent by this call; info: what the
    pre-flight read from the app.

    Attributes:
        path: The item's path.
        label: The item's label.
        build: The build, on success.
        error: The error, on failure (the call raised nothing for it).
        sha256: The local file's checksum, when it was computed.
        verified: Whether the service reported the same checksum.
        skipped: Whether an existing ready build was returned instead.
        joined: Whether another process's upload of the same file was returned.
        resumed: Whether an interrupted upload was continued from its journal, with at least
            one part the earlier run had stored.
        parts_kept: (parts kept, parts in all) when an earlier run's journal was found: (0, N)
            when it had stored none and the upload started over; None without a journal.
        parts_sent: Parts sent by this call.
        bytes_sent: Bytes sent by this call.
        elapsed: Seconds the upload took.
        info: What the pre-flight read from the app.
        parts_in_flight: Parts allowed in flight across the call as this build finished: the
            number the adaptive default had settled on, or the fixed limit.
    """

    path: Path
    label: str | None = None
    build: "Build | None" = None
    error: Exception | None = None
    sha256: str | None = None
    verified: bool = False
    skipped: bool = False
    joined: bool = False
    resumed: bool = False
    parts_kept: tuple[int, int] | None = None
    parts_sent: int = 0
    bytes_sent: int = 0
    elapsed: float = 0.0
    info: AppInfo | None = None
    parts_in_flight: int = 0

    @property
    def ok(self) -> bool:
        """Whether the build was uploaded (or found, or joined) without error."""
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
    return state_dir() / "uploads"


class Service(Protocol):
    """What the uploader asks of the service: the operations of AsyncSession it calls, so that
    it depends on them and not on the session's module (which imports the uploader)."""

    @property
    def base_url(self) -> str: ...

    async def list_builds(self, project_id: str) -> BuildList: ...

    async def get_build(self, build_id: str) -> Build: ...

    async def start_upload(
        self, project_id: str, file_name: str, size: int, label: str | None = None
    ) -> UploadStart: ...

    async def upload_part(
        self, build_id: str, part_number: int, data: bytes | bytearray | memoryview | PartBody
    ) -> UploadedPart: ...

    async def complete_upload(self, build_id: str, parts: Sequence[UploadedPart]) -> Build: ...

    async def delete_build(self, build_id: str) -> None: ...
