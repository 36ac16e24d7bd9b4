"""The uploader's entry points: one build, or many at once across projects, sharing one budget;
AsyncSession.upload_build / upload_builds call them."""

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from asyncclient._core import _checks as checks
from asyncclient._local._limits import fit_uploads, open_files_left
from asyncclient.errors import (
    ValidationError,
)
from asyncclient.models import Build
from asyncclient.upload._adaptive import Adaptive
from asyncclient.upload._budget import Budget, Window
from asyncclient.upload._hashing import Stopped
from asyncclient.upload._journal import Journal, journal_names, release, remove_finished
from asyncclient.upload._preflight import Source, TempDirs, preflight
from asyncclient.upload._transfer import Context, Upload, first_error
from asyncclient.upload._values import (
    DEFAULT_MAX_PARTS_IN_FLIGHT,
    LOOKAHEAD,
    ItemLike,
    Progress,
    Service,
    UploadItem,
    UploadResult,
    default_journal_dir,
)

__all__ = ["upload_many", "upload_one"]

log = logging.getLogger("asyncclient.upload")


def _journal_dir(journal_dir: "str | os.PathLike[str] | None") -> Path:
    return default_journal_dir() if journal_dir is None else Path(journal_dir)


async def upload_one(
    session: Service,
    project_id: str,
    path: "str | os.PathLike[str]",
    *,
    label: str | None = None,
    concurrency: "int | Adaptive | None" = None,
    progress: Progress | None = None,
    skip_existing: bool = False,
    journal_dir: "str | os.PathLike[str] | None" = None,
) -> "Build":
    """The work behind AsyncSession.upload_build, whose docstring users read: one build as a
    batch of one, its failure raised rather than returned."""
    item = UploadItem(Path(path), checks.check_label(label), progress)
    if concurrency is None or isinstance(concurrency, Adaptive):
        tuner = Adaptive() if concurrency is None else concurrency
        per_build, _ = fit_uploads(tuner.ceiling, 1, tuner.ceiling, open_files_left())
        budget = Budget(min(tuner.start, per_build))
    else:
        tuner, per_build = None, checks.check_count("concurrency", concurrency)
        budget = Budget(per_build)
    async with _steered(tuner, budget, per_build):
        result = await _upload_items(
            session,
            project_id,
            [item],
            budget=budget,
            concurrency=per_build,
            skip_existing=skip_existing,
            journal_dir=journal_dir,
            windowed=None,
            progress=None,
            on_result=None,
            capture=False,
        )
    build = result[0].build
    assert build is not None
    return build


async def upload_many(
    session: Service,
    items: Iterable["ItemLike"],
    *,
    project_id: str | None = None,
    max_parts_in_flight: "int | Adaptive | None" = None,
    concurrency: int | None = None,
    progress: Callable[[Path, int, int], object] | None = None,
    skip_existing: bool = False,
    journal_dir: "str | os.PathLike[str] | None" = None,
    on_result: Callable[[UploadResult], object] | None = None,
) -> list[UploadResult]:
    """Upload many builds at once (`AsyncSession.upload_builds`); one result per item, in
    input order.

    items: paths, (path, label) pairs or UploadItems; each goes to its UploadItem.project_id,
    else to `project_id`. All uploads, of every project, share one budget of parts in flight:
    found while uploading (an Adaptive, the default) or fixed (`max_parts_in_flight` a number,
    or `concurrency` given: then 16 unless said), so 50 builds never open more connections than
    it allows; each build sends at most `concurrency` parts at once (default: the whole budget).
    Builds start in order and the next one starts while the budget still has room, so they
    finish one after another. A failing build does not stop the others: its result carries the
    error.

    progress(path, done_bytes, total_bytes) follows every build unless the item has its own
    (done, total) callback; on_result(result) is called as each build finishes. Cancelling the
    call cancels every upload and keeps their journals for a later resume.
    """
    listed = [_item(value) for value in items]
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(listed):
        target = item.project_id or project_id
        if target is None:
            raise ValidationError(
                f"no project for {item.path}: pass project_id= or UploadItem(..., project_id=...)"
            )
        groups.setdefault(checks.check_id("project", target), []).append(index)
    tuner: Adaptive | None = None
    if isinstance(max_parts_in_flight, Adaptive):
        tuner = max_parts_in_flight
        asked = tuner.ceiling
    elif max_parts_in_flight is None and concurrency is None:
        tuner = Adaptive()
        asked = tuner.ceiling
    else:
        asked = checks.check_count(
            "max_parts_in_flight",
            DEFAULT_MAX_PARTS_IN_FLIGHT if max_parts_in_flight is None else max_parts_in_flight,
        )
    # Fit parts and builds in flight to the open files left.
    fitted, window = fit_uploads(asked, LOOKAHEAD * asked, asked, open_files_left())
    if (fitted, window) != (asked, LOOKAHEAD * asked):
        log.info(
            "the open-files limit fits %d parts and %d builds in flight (asked: %d parts)",
            fitted,
            window,
            asked,
        )
    budget = Budget(fitted)
    per_build = fitted if concurrency is None else checks.check_count("concurrency", concurrency)
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
            windowed=window,
            progress=progress,
            on_result=on_result,
            capture=True,
        )
        for index, result in zip(indexes, done, strict=True):
            results[index] = result

    async with _steered(tuner, budget, fitted), asyncio.TaskGroup() as group:
        for target, indexes in groups.items():
            group.create_task(one_project(target, indexes))
    return [result for result in results if result is not None]


def _steered(
    tuner: Adaptive | None, budget: Budget, ceiling: int
) -> "contextlib.AbstractAsyncContextManager[None]":
    """The tuner steering the budget for the call (within `ceiling`, what the open files
    allow), or nothing: a fixed budget."""
    if tuner is None:
        return contextlib.nullcontext()
    return tuner.running(budget, ceiling)


def _item(value: object) -> UploadItem:
    if isinstance(value, UploadItem):
        checks.check_label(value.label)
        return value
    if isinstance(value, str | os.PathLike):
        return UploadItem(Path(value))
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str | os.PathLike):
        return UploadItem(Path(value[0]), checks.check_label(value[1]))
    raise ValidationError(
        f"each item must be a path, a (path, label) pair or an UploadItem; got {value!r}"
    )


async def _upload_items(
    session: Service,
    project_id: str,
    items: list[UploadItem],
    *,
    budget: Budget,
    concurrency: int,
    skip_existing: bool,
    journal_dir: "str | os.PathLike[str] | None",
    windowed: int | None,
    progress: Callable[[Path, int, int], object] | None,
    on_result: Callable[[UploadResult], object] | None,
    capture: bool,
) -> list[UploadResult]:
    project_id = checks.check_id("project", project_id)
    ctx = Context(
        session=session,
        project_id=project_id,
        budget=budget,
        concurrency=concurrency,
        skip_existing=bool(skip_existing),
        journal_dir=_journal_dir(journal_dir),
        window=Window(windowed, budget, LOOKAHEAD) if windowed else None,
    )
    results: list[UploadResult | None] = [None] * len(items)
    sources: list[Source | None] = [None] * len(items)
    temps = TempDirs()

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
        # 1. Local pre-flight and the journal listing, in a thread.
        checked, ctx.journals_listed = await asyncio.to_thread(
            _preflight_all, [item.path for item in items], temps, ctx.journal_dir
        )
        for index, outcome in enumerate(checked):
            if isinstance(outcome, Source):
                sources[index] = outcome
            elif isinstance(outcome, Exception) and capture:
                failed(index, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
        pending = [i for i, source in enumerate(sources) if source is not None]
        if not pending:
            return [r for r in results if r is not None]

        # 2. One list_builds: size limit, part size, skip_existing candidates.
        try:
            ctx.listing = await session.list_builds(project_id)
        except Exception as exc:
            if not capture:
                raise
            for index in pending:
                failed(index, exc)
            return [r for r in results if r is not None]

        # 3. The uploads, started in order while the window has room.
        uploads: dict[int, Upload] = {}
        for index in pending:
            source = sources[index]
            assert source is not None
            item = items[index]
            callback = item.progress
            if callback is None and progress is not None:
                callback = _bind_path(progress, item.path)
            uploads[index] = Upload(ctx, index, source, item.label, callback, item.on_wait)
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
                upload.share.release()
                if upload.source.temp_dir is not None:
                    await asyncio.to_thread(upload.source.cleanup)

        async def starter() -> None:
            part_bytes = max(1, ctx.listing.part_bytes) if ctx.listing else 1
            for index in pending:
                upload = uploads[index]
                await upload.share.open(max(1, math.ceil(upload.source.size / part_bytes)))
                turns[index].set()

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(starter())
                for index in pending:
                    group.create_task(one(index))
        except BaseExceptionGroup as failure:
            first = first_error(failure)
            raise first from first.__cause__
    finally:
        finished, ctx.finished = ctx.finished, []
        try:
            await asyncio.to_thread(_clean_up, temps, finished)
        finally:  # cancelled meanwhile: the thread still removes them
            release(finished)
    return [r for r in results if r is not None]


def _clean_up(temps: TempDirs, journals: list[Journal]) -> None:
    """Blocking: the call's temporary folders and the journals of the builds it finished."""
    temps.close()
    remove_finished(journals)


def _preflight_all(
    paths: list[Path], temps: TempDirs, journal_dir: Path
) -> tuple[list[Source | BaseException], frozenset[str]]:
    """Blocking: preflight of every path, and the journals in `journal_dir`; each outcome is the
    Source or the exception (a KeyboardInterrupt or the like stops it and is raised).

    Called in one worker thread: reading a manifest holds the GIL, so more threads only take
    turns (docs/performance.md).
    """
    outcomes: list[Source | BaseException] = []
    for path in paths:
        if temps.closed:  # the call was cancelled: the rest are not read
            outcomes.append(Stopped())
            continue
        try:
            outcomes.append(preflight(path, temps))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes, journal_names(journal_dir)


def _bind_path(progress: Callable[[Path, int, int], object], path: Path) -> Progress:
    def report(done: int, total: int) -> object:
        return progress(path, done, total)

    return report
