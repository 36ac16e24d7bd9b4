"""Many builds at once (upload_builds, session.upload_builds): skip_existing, one bad build among
good ones, cancelling, and the journals of a whole call."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from upload_support import (
    SLOW,
    ServerInFlight,
    cancel_after_commits,
    client_tasks,
    interrupted_upload,
    journal_files,
    make_apk,
    ops,
    sha256,
    sha_threads,
)

import asyncclient.upload._transfer as upload_module
from asyncclient import AsyncSession
from asyncclient.errors import (
    BuildRejectedError,
    UnauthenticatedError,
    ValidationError,
)
from asyncclient.testing import FakeService
from asyncclient.upload import (
    UploadItem,
    UploadResult,
    _journal,
)

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks


# --- skip_existing --------------------------------------------------------------------------------


async def test_skip_existing_returns_the_same_build_without_uploading(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=3)
    first = await client.upload_build(svc.project_id, apk, journal_dir=journal)
    svc.reset_requests()
    seen: list[tuple[int, int]] = []
    (result,) = await client.upload_builds(
        project_id=svc.project_id,
        items=[UploadItem(apk, progress=lambda d, t: seen.append((d, t)))],
        skip_existing=True,
        journal_dir=journal,
    )
    assert result.skipped
    assert result.verified
    assert result.build is not None
    assert result.build.id == first.id
    assert ops(svc) == ["list_builds", "get_build"]  # zero parts, no start
    assert seen[-1] == (apk.stat().st_size, apk.stat().st_size)


async def test_skip_existing_uploads_a_same_size_file_with_other_bytes(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=2, seed=1)
    first = await client.upload_build(svc.project_id, apk, journal_dir=journal)
    make_apk(tmp_path / "shop.apk", parts=2, seed=2)  # same name and size, other content
    svc.reset_requests()
    second = await client.upload_build(svc.project_id, apk, skip_existing=True, journal_dir=journal)
    assert second.id != first.id
    assert second.sha256 == sha256(apk)
    assert ops(svc).count("get_build") == 1  # the candidate was checked and did not match
    assert ops(svc).count("upload_part") == 2


# --- many builds at once --------------------------------------------------------------------------


async def test_upload_builds_one_bad_build_does_not_stop_the_others(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = [make_apk(tmp_path / f"app{n}.apk", parts=4, seed=n) for n in range(5)]
    rejected = make_apk(tmp_path / "old.apk", parts=2, abis=("armeabi-v7a",))
    items: list[Any] = [
        good[0],
        (good[1], "with-label"),
        tmp_path / "missing.apk",
        rejected,
        UploadItem(good[2]),
        str(good[3]),
        good[4],
    ]
    svc.conditions = SLOW
    server = ServerInFlight(svc, monkeypatch)
    finished: list[UploadResult] = []
    progress: dict[Path, int] = {}
    results = await client.upload_builds(
        project_id=svc.project_id,
        items=items,
        max_parts_in_flight=3,
        progress=lambda path, done, total: progress.__setitem__(path, done),
        on_result=finished.append,
        journal_dir=journal,
    )
    assert 1 < server.peak <= 3  # one budget shared by every build
    assert [r.ok for r in results] == [True, True, False, False, True, True, True]
    expected = [good[0], good[1], tmp_path / "missing.apk", rejected, *good[2:]]
    assert [r.path for r in results] == expected  # input order
    assert isinstance(results[2].error, ValidationError)
    assert isinstance(results[3].error, BuildRejectedError)
    assert results[1].build is not None
    assert results[1].build.label == "with-label"
    for result, path in zip([results[i] for i in (0, 1, 4, 5, 6)], good, strict=True):
        assert result.build is not None
        assert result.build.sha256 == sha256(path) == result.sha256
        assert progress[path] == path.stat().st_size
    assert len(finished) == 7
    assert ops(svc).count("list_builds") == 1
    assert ops(svc).count("start_upload") == 6  # not for the missing file


async def test_journals_untouched_for_a_week_are_removed(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    journal.mkdir(parents=True, exist_ok=True)
    old, recent = journal / ("0" * 32 + ".json"), journal / ("1" * 32 + ".json")
    for path in (old, recent):
        path.write_text("{}")
    week_ago = time.time() - 8 * 86400
    os.utime(old, (week_ago, week_ago))
    await client.upload_build(svc.project_id, make_apk(tmp_path / "a.apk", parts=1),
                       journal_dir=journal)  # fmt: skip
    assert not old.exists()
    assert recent.exists()


async def test_journals_are_looked_for_in_one_listing_of_the_folder_per_call(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a journal that is there is opened (one failed open per build is gone), and one
    that comes to its name after the listing is replaced, never written through."""
    apks = [make_apk(tmp_path / f"app{n}.apk", parts=2, seed=n) for n in range(5)]
    kept = await interrupted_upload(svc, client, apks[0], journal, monkeypatch, commits=1)
    (kept_path,) = journal_files(journal)
    reads: list[str] = []
    read = _journal._read_no_follow

    def counting(path: Path) -> str:
        reads.append(path.name)
        return read(path)

    monkeypatch.setattr(_journal, "_read_no_follow", counting)
    listings: list[Path] = []
    listed = _journal.journal_names

    def listing(directory: Path) -> frozenset[str]:
        listings.append(directory)
        return listed(directory)

    monkeypatch.setattr("asyncclient.upload._batch.journal_names", listing)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    links: list[Path] = []
    opened = _journal.Journal.open

    def open_then_plant(*args: Any) -> Any:
        found = opened(*args)
        if found is not None and not found._name_taken and not links:
            found.path.symlink_to(victim)  # came to the name after the listing
            links.append(found.path)
        return found

    monkeypatch.setattr(_journal.Journal, "open", open_then_plant)

    results = await client.upload_builds(project_id=svc.project_id, items=apks,
                                         journal_dir=journal)  # fmt: skip

    assert all(r.ok for r in results)
    # The journal was found: its build goes on; its one part was stored as it was cancelled,
    # before the answer reached the journal: none kept, so not "resumed".
    assert [r.parts_kept for r in results] == [(0, 2), None, None, None, None]
    assert not any(r.resumed for r in results)
    assert results[0].build is not None
    assert results[0].build.id == kept["buildId"]
    assert reads == [kept_path.name]  # the one journal there was; no open for the rest
    assert listings == [journal]  # listed once for the call
    assert len(links) == 1
    assert victim.read_text() == "precious"  # the link was replaced, not written through
    assert all(r.build is not None and r.build.sha256 == sha256(p)
               for r, p in zip(results, apks, strict=True))  # fmt: skip
    assert journal_files(journal) == []


async def test_session_upload_builds_takes_items_of_several_projects(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apks = [make_apk(tmp_path / f"multi{n}.apk", parts=3, seed=40 + n) for n in range(3)]
    svc.conditions = SLOW
    server = ServerInFlight(svc, monkeypatch)
    results = await client.upload_builds(
        [apks[0], UploadItem(apks[1], label="free", project_id="p_free"), (apks[2], "x")],
        project_id=svc.project_id,
        max_parts_in_flight=2,
        journal_dir=journal,
    )
    assert server.peak <= 2  # the budget is shared across the projects too
    assert [r.ok for r in results] == [True, True, True]
    projects = [(await client.get_build(r.build.id)).project_id for r in results if r.build]
    assert projects == [svc.project_id, "p_free", svc.project_id]
    assert [r.label for r in results] == [None, "free", "x"]
    assert ops(svc).count("list_builds") == 2  # one per project


async def test_session_upload_builds_needs_a_project_for_every_item(
    svc: FakeService, client: AsyncSession, tmp_path: Path
) -> None:
    apk = make_apk(tmp_path / "orphan.apk", parts=1)
    with pytest.raises(ValidationError, match=r"no project for .*orphan\.apk: pass project_id="):
        await client.upload_builds([apk])
    assert svc.requests == []


async def test_upload_builds_reports_a_refused_listing_for_every_item(
    svc: FakeService, tmp_path: Path, journal: Path
) -> None:
    apks = [make_apk(tmp_path / f"app{n}.apk", parts=1, seed=n) for n in range(2)]
    async with AsyncSession("wrong-key", svc.url) as session:
        results = await session.upload_builds(
            project_id=svc.project_id, items=[*apks, tmp_path / "gone.apk"], journal_dir=journal
        )
    assert [type(r.error) for r in results] == [
        UnauthenticatedError,
        UnauthenticatedError,
        ValidationError,
    ]
    assert ops(svc) == ["list_builds"]


async def test_cancelling_upload_builds_leaves_nothing_running(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apks = [make_apk(tmp_path / f"app{n}.apk", parts=4, seed=n) for n in range(4)]
    before = client_tasks()
    holder: list[asyncio.Task[Any]] = []
    cancel_after_commits(svc, monkeypatch, 5, holder)
    holder.append(
        asyncio.create_task(
            client.upload_builds(
                project_id=svc.project_id, items=apks, max_parts_in_flight=4, journal_dir=journal
            )
        )
    )
    with pytest.raises(asyncio.CancelledError):
        await holder[0]
    await asyncio.sleep(0)
    assert client_tasks() <= before
    assert sha_threads() == []
    assert journal_files(journal)  # kept for a resume


async def test_finished_journals_are_removed_once_at_the_end_of_the_call(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apks = [make_apk(tmp_path / f"app{n}.apk", parts=2, seed=n) for n in range(6)]
    removals: list[int] = []
    remove = _journal.remove_finished

    def counting(journals: list[Any]) -> None:
        removals.append(len(journals))
        remove(journals)

    monkeypatch.setattr("asyncclient.upload._batch.remove_finished", counting)
    seen: list[int] = []
    results = await client.upload_builds(
        project_id=svc.project_id,
        items=apks,
        journal_dir=journal,
        on_result=lambda _: seen.append(len(journal_files(journal))),
    )
    assert all(r.ok for r in results)
    assert seen[-1] >= 1  # still there as the last build finished ...
    assert removals == [6]  # ... then all six removed in one go
    assert journal_files(journal) == []


async def test_journals_left_by_a_killed_call_return_its_finished_builds(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call killed after some builds completed, before it removed their journals: the next
    run returns those builds without sending a byte, and uploads the rest."""
    apks = [make_apk(tmp_path / f"app{n}.apk", parts=2, seed=n) for n in range(3)]
    with monkeypatch.context() as patch:
        patch.setattr("asyncclient.upload._batch.remove_finished", lambda journals: None)
        first = await client.upload_builds(project_id=svc.project_id, items=apks[:2],
                                           journal_dir=journal)  # fmt: skip
    assert len(journal_files(journal)) == 2
    svc.reset_requests()

    again = await client.upload_builds(project_id=svc.project_id, items=apks, journal_dir=journal)

    assert [r.resumed for r in again] == [True, True, False]
    assert [r.build.id for r in again[:2] if r.build] == [r.build.id for r in first if r.build]
    assert [r.parts_sent for r in again] == [0, 0, 2]
    assert ops(svc).count("start_upload") == 1  # only the third file's
    assert all(
        r.build is not None and r.build.sha256 == sha256(p)
        for r, p in zip(again, apks, strict=True)
    )
    assert journal_files(journal) == []


async def test_cancelled_while_the_file_opens_leaves_it_closed(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The thread opening the file for the parts finishes after the upload was cancelled: the
    # file it opened is closed, not left to the garbage collector.
    apk = make_apk(tmp_path / "shop.apk", parts=2)
    entered, gate = threading.Event(), threading.Event()
    opened: list[Any] = []

    def slow_open(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        gate.wait(10)
        file = open(*args, **kwargs)  # noqa: SIM115 - handed to the code under test
        opened.append(file)
        return file

    monkeypatch.setattr(upload_module, "open", slow_open, raising=False)
    task = asyncio.create_task(client.upload_build(svc.project_id, apk, journal_dir=journal))
    assert await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()
    for _ in range(500):
        if opened and opened[0].closed:
            break
        await asyncio.sleep(0.01)
    assert [f.closed for f in opened] == [True]


async def test_upload_builds_refuses_an_unknown_item_shape(
    svc: FakeService, client: AsyncSession
) -> None:
    with pytest.raises(ValidationError, match="each item must be a path"):
        await client.upload_builds(project_id=svc.project_id, items=[42])  # type: ignore[list-item]
    assert svc.requests == []
