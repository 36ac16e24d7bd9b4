"""One build's upload: resume or start, the parts in parallel within the budget, complete, and
the checksum compared with the service's.
"""

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from asyncclient._local._bodies import PartBody
from asyncclient._local._locks import ProcessLock, claim
from asyncclient._local._opening import open_unleaked
from asyncclient.errors import (
    ApiError,
    BadRequestError,
    BuildRejectedError,
    ChecksumMismatchError,
    LocalFileError,
    NotFoundError,
    TransportError,
    ValidationError,
    reason_phrase,
)
from asyncclient.models import Build, BuildList, UploadedPart
from asyncclient.upload._budget import Budget, Flow, ProgressSink, Share, Window
from asyncclient.upload._hashing import Hasher
from asyncclient.upload._journal import Journal, journal_name
from asyncclient.upload._preflight import Source
from asyncclient.upload._values import STATE_DIR_ENV, Progress, Service, UploadResult

log = logging.getLogger("asyncclient.upload")


@attrs.define
class Context:
    """What the uploads of one call share."""

    session: Service
    project_id: str
    budget: Budget
    concurrency: int
    skip_existing: bool
    journal_dir: Path
    listing: "BuildList | None" = None
    # Journals listed at the call's start (None: look on disk).
    journals_listed: frozenset[str] | None = None
    window: Window | None = None
    # Succeeded uploads' journals, removed at the call's end.
    finished: list[Journal] = attrs.Factory(list)


@attrs.frozen
class _Claimed:
    """The journal's lock, held; waited: another process held it first."""

    lock: ProcessLock
    waited: bool


class _Restart(Exception):
    """A resumed upload cannot go on (the service lost its parts): start it over."""


class Upload:
    """One build: pre-flighted source in, UploadResult out (or an exception)."""

    def __init__(
        self,
        ctx: Context,
        index: int,
        source: Source,
        label: str | None,
        progress: Progress | None,
        on_wait: "Callable[[int | None], object] | None" = None,
    ) -> None:
        self.ctx = ctx
        self.index = index
        self.source = source
        self.label = label
        self.on_wait = on_wait
        self.sink = ProgressSink(source.size, progress)
        self.sha256 = source.sha256
        self.parts_sent = 0
        self.bytes_sent = 0
        self.resumed = False
        # An earlier run's journal: (parts it had stored that this run kept, parts in all).
        self.kept: tuple[int, int] | None = None
        # This build's share of ctx.window.
        self.share = Share(None) if ctx.window is None else ctx.window.share()

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
        identity = self._identity()
        claimed = await self._claim(identity)
        if isinstance(claimed, tuple):
            build, verified = claimed
            self.sink.set(self.source.size)
            return self._result(build, started, verified=verified, joined=True)
        held = claimed
        journal = self._open_journal(identity, waited=held.waited)
        done = False
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
            verified = await self._verify(build)
            done = True
        except (BuildRejectedError, ChecksumMismatchError, ValidationError):
            # Nothing to resume: refused, or not the bytes sent.
            if journal is not None:
                journal.forget()
            raise
        finally:
            if journal is not None:
                if done:
                    journal.finish()
                    ctx.finished.append(journal)
                else:
                    journal.close()
            # Waiters read the build from the lock.
            held.lock.release({"buildId": build.id, "sha256": self.sha256} if done else None)
        return self._result(build, started, verified=verified)

    def _result(
        self,
        build: "Build",
        started: float,
        *,
        verified: bool,
        skipped: bool = False,
        joined: bool = False,
    ) -> UploadResult:
        return UploadResult(
            path=self.source.given,
            label=self.label,
            build=build,
            sha256=self.sha256,
            verified=verified,
            skipped=skipped,
            joined=joined,
            resumed=self.resumed,
            parts_kept=self.kept,
            parts_sent=self.parts_sent,
            bytes_sent=self.bytes_sent,
            elapsed=time.perf_counter() - started,
            info=self.source.info,
            parts_in_flight=min(self.ctx.concurrency, self.ctx.budget.limit),
        )

    def _identity(self) -> dict[str, Any]:
        src = self.source
        return {
            "baseUrl": self.ctx.session.base_url,
            "projectId": self.ctx.project_id,
            "path": os.path.abspath(src.given),
            "size": src.size,
            # A zipped folder is identified by content.
            "mtimeNs": src.mtime_ns if src.sha256 is None else None,
            "sha256": src.sha256,
            "fileName": src.file_name,
            "label": self.label,
        }

    def _open_journal(self, identity: dict[str, Any], *, waited: bool) -> Journal | None:
        # After a wait the first listing is stale.
        listed = None if waited else self.ctx.journals_listed
        return Journal.open(self.ctx.journal_dir, identity, listed)

    async def _claim(self, identity: dict[str, Any]) -> "_Claimed | tuple[Build, bool]":
        """The lock on this file's journal, held until the upload ends; or, when another
        process uploaded the same file while this one waited for it, its build (and whether
        its sha256 was checked): nothing is sent then."""
        path = self.ctx.journal_dir / (journal_name(identity).removesuffix(".json") + ".lock")
        waited = False
        while True:
            try:
                got = await claim(path, on_wait=self._waiting)
            except OSError as exc:
                raise LocalFileError.of(
                    exc,
                    f"cannot write the upload journal's lock {path}",
                    f"set {STATE_DIR_ENV} to a writable folder",
                ) from None
            waited = waited or got.waited
            if got.lock is not None:
                return _Claimed(got.lock, waited)
            joined = await self._joined(got.outcome or {})
            if joined is not None:
                return joined

    def _waiting(self, pid: int | None) -> None:
        who = f" (pid {pid})" if pid else ""
        log.info("%s: waiting for another upload of this file%s", self.shown, who)
        self.share.release()  # the builds after this one may start meanwhile
        if self.on_wait is not None:
            self.on_wait(pid)

    async def _joined(self, outcome: dict[str, Any]) -> "tuple[Build, bool] | None":
        """The build another process made of this file while this one waited, if the service
        holds it ready with this file's sha256; None: upload it here."""
        build_id, sha256 = outcome.get("buildId"), outcome.get("sha256")
        if not isinstance(build_id, str) or sha256 != await self._local_sha256():
            return None
        try:
            build = await self.ctx.session.get_build(build_id)
        except NotFoundError:
            return None  # deleted since
        if not build.is_ready:
            return None
        if build.sha256 is not None and build.sha256.lower() != sha256:
            return None
        log.info(
            "%s: another process (pid %s) uploaded this file as build %s; not uploading again",
            self.shown,
            outcome.get("pid"),
            build.id,
        )
        return build, build.sha256 is not None

    async def _local_sha256(self) -> str:
        if self.sha256 is None:
            hasher = Hasher(self.source.send_path, self.source.size)
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

    async def _upload(self, journal: Journal | None, *, resume: bool) -> "Build":
        # The hashing thread stops however the upload ends.
        async with contextlib.AsyncExitStack() as cleanup:
            return await self._upload_with(cleanup, journal, resume=resume)

    async def _upload_with(
        self, cleanup: contextlib.AsyncExitStack, journal: Journal | None, *, resume: bool
    ) -> "Build":
        session = self.ctx.session
        src = self.source
        build_id: str | None = None
        part_bytes = 0
        etags: dict[int, str] = {}
        journalled = resume and journal is not None and journal.build_id is not None
        if journalled:
            assert journal is not None
            # May hash the file to check a lost completion.
            resumed = await self._resume(journal)
            if isinstance(resumed, tuple):
                build_id, part_bytes, etags = resumed
                self.resumed = bool(etags)  # nothing stored before: this starts over
            elif resumed is not None:
                self.sink.set(src.size)
                return resumed
        # Hash during start_upload, noting each part's prefix digest.
        listing = self.ctx.listing
        expected_part_bytes = part_bytes or (listing.part_bytes if listing is not None else 0)
        started = None
        if self.sha256 is None:
            started = Hasher(src.send_path, src.size, expected_part_bytes or None)
            cleanup.push_async_callback(started.stop)
        hasher = started  # the source of the journal's digests, while its parts are these
        if build_id is not None and hasher is not None:
            proven = await self._provable(journal, hasher, etags)
            if proven is None:  # the file is not the one the journal's parts came from
                build_id, etags, self.resumed = None, {}, False
            else:
                etags = proven
        if build_id is None:
            start = await session.start_upload(
                self.ctx.project_id, src.file_name, src.size, label=self.label
            )
            build_id, part_bytes = start.id, start.part_bytes
            if journal is not None:
                journal.begin(build_id, part_bytes)
        if hasher is not None and hasher.part_bytes != part_bytes:
            hasher = None  # its prefixes are of other parts: none go to the journal
        parts = -(-src.size // part_bytes)
        missing = [n for n in range(1, parts + 1) if n not in etags]
        if journalled:  # an earlier run's journal: what it kept is said
            self.kept = (parts - len(missing), parts)
        self.sink.set(src.size - sum(self._length(n, part_bytes) for n in missing))
        self.share.resize(len(missing))
        try:
            if missing:
                await self._send(build_id, part_bytes, missing, etags, journal, hasher)
            self.sink.check()
            # A file changed under the upload never becomes a build.
            if started is not None:
                self.sha256 = await started.result()
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
            self.share.release()

    async def _provable(
        self, journal: Journal | None, hasher: Hasher, etags: dict[int, str]
    ) -> dict[int, str] | None:
        """The journal's parts whose bytes are proven to be the file's now, or None when the
        file differs from what they were sent from (a new upload must start).

        The journal holds the sha256 of the file up to the end of each part its hashing had
        passed; the same digests of the file on disk now must match every one. The parts up to
        the last digest are proven; any later ones are sent again.
        """
        assert journal is not None
        recorded = journal.prefixes
        if not recorded:
            log.info("%s: the journal proves no part; sending every part again", self.shown)
            return {}
        for part in sorted(recorded):
            if await hasher.prefix(part) != recorded[part]:
                log.warning(
                    "%s: the file is not the one the journal's parts came from (its bytes differ "
                    "before the end of part %d); starting a new upload",
                    self.shown,
                    part,
                )
                journal.forget()
                return None
        proven = max(recorded)
        kept = {n: e for n, e in etags.items() if n <= proven}
        if len(kept) < len(etags):
            log.info(
                "%s: %d part(s) sent after the last proof are sent again",
                self.shown,
                len(etags) - len(kept),
            )
        return kept

    async def _resume(self, journal: Journal) -> "tuple[str, int, dict[int, str]] | Build | None":
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
        journal: Journal | None,
        hasher: Hasher | None = None,
    ) -> None:
        """Send the missing parts, at most ctx.concurrency at once within the shared budget."""
        session = self.ctx.session
        budget = self.ctx.budget
        queue = deque(missing)
        path = self.source.send_path
        # One open file for every part.
        try:
            shared = await _open_for_parts(path)
        except OSError as exc:
            raise ValidationError(f"cannot read {self.shown}: {exc.strerror}") from None

        async def worker() -> None:
            while queue:
                number = queue.popleft()
                length = self._length(number, part_bytes)
                offset = (number - 1) * part_bytes
                flow = Flow(_unreported)  # the tuner's count; the caller's is of parts stored
                flow.body = PartBody(
                    path,
                    offset,
                    length,
                    progress=flow.add,
                    file=shared,
                    on_retry=budget.retried,
                )
                async with budget.slot((self.index, number), flow):
                    uploaded = await session.upload_part(build_id, number, flow.body)
                etags[number] = uploaded.etag
                self.sink.add(length)  # stored by the service: only now does it count
                self.parts_sent += 1
                self.bytes_sent += length
                if journal is not None:
                    journal.record(number, uploaded.etag, hasher.prefixes if hasher else None)
                self.share.sent_one()
                self.sink.check()

        workers = min(self.ctx.concurrency, len(missing))
        try:
            if workers == 1:  # one part, or concurrency 1: no tasks
                await worker()
            else:
                async with asyncio.TaskGroup() as group:
                    for _ in range(workers):
                        group.create_task(worker())
        except BaseExceptionGroup as failed:
            first = first_error(failed)
            raise first from first.__cause__
        finally:
            # Every attempt has let go of it.
            shared.close()

    def _part_list(self, etags: dict[int, str], parts: int) -> list[UploadedPart]:
        missing = [n for n in range(1, parts + 1) if n not in etags]
        if missing:  # every worker succeeded, so this is a bug, not the network
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

    async def _verify(self, build: "Build") -> bool:
        """Compare sha256s; True when they match, False when the service reported none.

        A build that does not hold the file is deleted when the key may; otherwise the error
        says plainly that it must not be used, and how to delete it.
        """
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
        if remote.lower() == local:
            return True
        head = (
            f"{self.shown}: build {build.id} does not hold this file (the service's sha256 is "
            f"{remote}, the file's {local})"
        )
        try:
            await self.ctx.session.delete_build(build.id)
        except (ApiError, TransportError) as exc:
            why = (
                f"{exc.status} {exc.code or reason_phrase(exc.status)}"
                if isinstance(exc, ApiError)
                else "the service could not be reached"
            )
            raise ChecksumMismatchError(
                f"{head} and must not be used; it could not be deleted ({why}): delete it with "
                f"a key that can also create and edit tests (asyncclient builds delete "
                f"{build.id}), then upload again",
                expected=local,
                actual=remote,
                build_id=build.id,
            ) from None
        raise ChecksumMismatchError(
            f"{head}: the build was deleted; upload the file again",
            expected=local,
            actual=remote,
            build_id=build.id,
            deleted=True,
        )


async def _open_for_parts(path: Path) -> BinaryIO:
    """open(path, "rb") in a thread that leaks nothing when cancelled."""
    return await open_unleaked(
        asyncio.to_thread(open, path, "rb", buffering=0), lambda file: file.close()
    )


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real error in a (possibly nested) group from a TaskGroup."""
    first: BaseException = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _unreported(_delta: int) -> None:
    """Bytes written into a part's connection: the tuner counts them, the progress does not
    (they are not stored until the service answers the part)."""
