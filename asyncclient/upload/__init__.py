"""The concurrent part uploader: one build or many at once, streamed from disk, verified,
resumable. Call it through AsyncSession.upload_build / upload_builds; this package holds its
values (items, results, defaults) and inspect_build_file (how an upload goes: the reference)."""

from asyncclient.upload._adaptive import Adaptive
from asyncclient.upload._preflight import inspect_build_file
from asyncclient.upload._values import (
    LocalBuild,
    Progress,
    UploadItem,
    UploadResult,
    default_journal_dir,
)

__all__ = [
    "Adaptive",
    "LocalBuild",
    "Progress",
    "UploadItem",
    "UploadResult",
    "default_journal_dir",
    "inspect_build_file",
]
