"""The concurrent part uploader: one build or many at once, streamed from disk, verified,
resumable. Call it through AsyncSession.upload_build / upload_builds; this package holds its
values (items, results, defaults) and inspect_build_file.

How one upload goes:
1. Pre-flight, before any request (_preflight): the file exists, is not empty, is an .apk or an
   .app.zip (an .app folder is zipped into a temporary .app.zip) and its app id and version can
   be read. Then one list_builds gives the size limit (maxBytes) and the skip_existing candidates.
2. A journal file (_journal) keeps the build id, the part size and the etag of every part sent,
   so the same upload run again after an interruption sends only the missing parts.
3. The parts go up in parallel within a shared budget (_budget), as many as the throughput
   rewards (_adaptive) unless a number is given, each streamed from disk
   (PartBody) and retried on its own by the session, while a thread hashes the file (_hashing).
   The first part that fails for good cancels the others and its error is raised (_transfer).
4. Complete, then compare the service's sha256 with the local one.
"""

from asyncclient.upload._adaptive import Adaptive
from asyncclient.upload._journal import JOURNAL_MAX_AGE
from asyncclient.upload._preflight import inspect_build_file
from asyncclient.upload._values import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_PARTS_IN_FLIGHT,
    STATE_DIR_ENV,
    ItemLike,
    LocalBuild,
    Progress,
    UploadItem,
    UploadResult,
    default_journal_dir,
)

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_PARTS_IN_FLIGHT",
    "JOURNAL_MAX_AGE",
    "STATE_DIR_ENV",
    "Adaptive",
    "ItemLike",
    "LocalBuild",
    "Progress",
    "UploadItem",
    "UploadResult",
    "default_journal_dir",
    "inspect_build_file",
]
