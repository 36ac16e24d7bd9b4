"""Resume: the journal of an upload's parts, what it proves, and what happens when the service
forgot the build or its parts."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from upload_support import (
    PART,
    client_tasks,
    interrupted_upload,
    journal_files,
    make_apk,
    ops,
    part_requests,
    sha256,
    sha_threads,
    stored_bytes,
)

import asyncclient.upload._hashing as _hashing
from asyncclient import AsyncSession
from asyncclient.errors import (
    TransportError,
)
from asyncclient.testing import FakeService, Fault
from asyncclient.upload import (
    UploadItem,
    _journal,
    default_journal_dir,
)

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks


# --- resume ---------------------------------------------------------------------------------------


class _InlineExecutor:
    """An executor that runs each job at once, in the caller's thread."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:
            done.set_exception(exc)
        return done


async def test_a_cancelled_upload_resumes_with_only_the_missing_parts(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=8)
    before = client_tasks()
    with monkeypatch.context() as patch:
        # The hash runs at once, in the loop: each part is proven before it is sent, however
        # busy the machine (the race of the hashing thread with the sends is
        # test_resume_starts_over_when_the_service_lost_the_parts's, and the replaced-file test's).
        patch.setattr(_hashing, "_pool", lambda: _InlineExecutor())
        kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=3)
    await asyncio.sleep(0)
    assert client_tasks() <= before
    assert sha_threads() == []
    assert sorted(kept["prefixes"], key=int)[:2] == ["1", "2"]
    # Part 3 was stored but its answer never read: only parts 1 and 2 are journalled.
    assert sorted(kept["etags"]) == ["1", "2"]
    assert kept["partBytes"] == PART
    assert kept["identity"]["path"] == str(apk.resolve())
    assert list(journal.glob(".*.tmp")) == []
    first_parts = part_requests(svc)
    svc.reset_requests()

    seen: list[int] = []
    (result,) = await client.upload_builds(
        project_id=svc.project_id,
        items=[UploadItem(apk, progress=lambda d, t: seen.append(d))],
        journal_dir=journal,
    )
    assert result.ok, result.error
    assert result.resumed
    assert result.build is not None
    assert result.build.id == kept["buildId"]
    assert result.build.sha256 == sha256(apk)
    assert part_requests(svc) == Counter(range(3, 9))  # the six parts not journalled
    assert result.parts_sent == 6
    assert "start_upload" not in ops(svc)
    assert ops(svc).count("get_build") == 1
    assert seen[0] == 2 * PART  # progress starts at what was already sent
    assert first_parts + part_requests(svc) == Counter({**dict.fromkeys(range(1, 9), 1), 3: 2})
    assert journal_files(journal) == []


async def test_a_replaced_file_of_the_same_size_and_time_is_never_mixed_in(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a cache restore, `cp -p`, `rsync -a` or a reproducible build leaves it: another build
    # of the same size with the same modification time, after 3 of 6 parts went up.
    apk = make_apk(tmp_path / "shop.apk", parts=6, seed=1)
    old_sha = sha256(apk)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=3)
    # The journal keeps the proofs (the file's sha256 up to a part's end) the hashing thread had
    # reached: usually one per kept part; under load (tox's two suites at once) it may trail
    # the sends. Either way no part of the old file may be taken: a proof fails against the
    # new bytes (a new upload), a part past the last proof is not trusted (sent again).
    assert set(kept["etags"])
    proven = bool(kept["prefixes"])
    stat = apk.stat()
    other = make_apk(tmp_path / "other.apk", parts=6, seed=2)
    assert other.stat().st_size == stat.st_size
    apk.write_bytes(other.read_bytes())
    os.utime(apk, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    new_sha = sha256(apk)
    svc.reset_requests()

    build = await client.upload_build(svc.project_id, apk, journal_dir=journal)

    assert build.sha256 == new_sha
    assert stored_bytes(svc, build.id) == apk.read_bytes()
    assert part_requests(svc) == Counter(range(1, 7))
    if proven:  # a proof failed: a new upload, not one part of the old file in it
        assert build.id != kept["buildId"]
        old_build = svc.backend.builds[kept["buildId"]]
        assert old_build.status != "ready"  # never completed
    else:  # nothing proven: the same upload, every part of it sent again from the new bytes
        assert build.id == kept["buildId"]
    listing = await client.list_builds(svc.project_id)
    for listed in listing.builds:
        if listed.is_ready and listed.file_name == "shop.apk":
            full = await client.get_build(listed.id)
            assert full.sha256 in (old_sha, new_sha)  # no ready build that matches neither
    assert journal_files(journal) == []


async def test_a_resume_keeps_only_the_parts_its_journal_proves(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=6)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=4)
    assert sorted(kept["etags"]) == ["1", "2", "3"]
    # As if the hashing had been behind the network: proofs only up to the end of part 1. The
    # proof is written here, the file's sha256 up to that end: how far the hashing thread got
    # before the interruption is the machine's load (a busy one had not proven part 1 yet).
    (path,) = journal_files(journal)
    data = _journal.merged(path.read_text())
    first = apk.read_bytes()[: int(data["partBytes"])]
    data["prefixes"] = {"1": hashlib.sha256(first).hexdigest()}
    path.write_text(json.dumps(data))
    svc.reset_requests()

    build = await client.upload_build(svc.project_id, apk, journal_dir=journal)

    assert build.id == kept["buildId"]  # the same upload, resumed
    assert build.sha256 == sha256(apk)
    assert part_requests(svc) == Counter(range(2, 7))  # parts 2 and 3 are not proven: again


async def test_a_journal_without_proofs_resends_every_part(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=4)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=3)
    (path,) = journal_files(journal)
    data = _journal.merged(path.read_text())
    data["prefixes"] = {}
    path.write_text(json.dumps(data))
    svc.reset_requests()
    build = await client.upload_build(svc.project_id, apk, journal_dir=journal)
    assert build.id == kept["buildId"]
    assert build.sha256 == sha256(apk)
    assert part_requests(svc) == Counter(range(1, 5))


async def test_a_link_at_the_journal_name_is_never_written_through(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=4)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=2)
    (path,) = journal_files(journal)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path.unlink()
    path.symlink_to(victim)  # planted where the journal will be read and written again
    # ... and at the temporary names it is written to first (the process id is no secret).
    counter = next(_journal._TEMP_NAMES)
    temps = [path.with_name(f".{path.name}.{os.getpid()}.tmp")]
    temps += [
        path.with_name(f".{path.name}.{os.getpid()}.{n}.tmp") for n in range(counter, counter + 50)
    ]
    for temp in temps:
        temp.symlink_to(victim)
    svc.reset_requests()

    build = await client.upload_build(svc.project_id, apk, journal_dir=journal)

    assert victim.read_text() == "precious"
    assert build.sha256 == sha256(apk)
    assert build.id != kept["buildId"]  # the link is not a journal: a new upload
    assert all(temp.is_symlink() for temp in temps)  # refused, not followed nor replaced


async def test_a_journal_is_created_once_and_a_line_appended_per_part(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created: list[Path] = []
    create = _journal._create

    def counting(path: Path) -> int:
        fd = create(path)
        created.append(path)
        return fd

    monkeypatch.setattr(_journal, "_create", counting)
    apk = make_apk(tmp_path / "shop.apk", parts=6)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=4)
    (path,) = journal_files(journal)
    assert created == [path]  # one file for the upload, not one per part
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 3  # the state, then parts 1 to 3 (part 4's answer never read)
    assert [json.loads(line)["part"] for line in lines[1:]] == [1, 2, 3]
    # Each part's digest is written once, in the line of the part sent after it was known.
    digests = [int(n) for line in lines for n in json.loads(line).get("prefixes", {})]
    assert digests == list(range(1, len(digests) + 1))
    assert sorted(kept["etags"]) == ["1", "2", "3"]


async def test_a_journal_line_cut_short_by_a_crash_keeps_the_lines_before_it(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=6)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=4)
    (path,) = journal_files(journal)
    text = path.read_bytes()
    cut = text[: text.rindex(b'{"part":3') + 12]  # part 3's line half written
    path.write_bytes(cut)
    left = _journal.merged(cut.decode())
    assert sorted(left["etags"]) == ["1", "2"]  # the lines before it stand
    # Parts are kept as far as the digests in those lines prove them (the hashing thread may
    # have passed part 1 only by the third answer, on a busy machine: then none are).
    proven = min(2, max(map(int, left["prefixes"]), default=0))
    svc.reset_requests()

    build = await client.upload_build(svc.project_id, apk, journal_dir=journal)

    assert build.id == kept["buildId"]  # the same upload, resumed
    assert build.sha256 == sha256(apk)
    assert part_requests(svc) == Counter(range(proven + 1, 7))
    assert journal_files(journal) == []


async def test_a_resumed_journal_is_never_appended_to(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A journal another run wrote may have a second name (a hard link O_NOFOLLOW does not
    see): the resume writes its state to a new file instead of appending to that one."""
    apk = make_apk(tmp_path / "shop.apk", parts=6)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=3)
    (path,) = journal_files(journal)
    other_name = tmp_path / "other-name.json"
    os.link(path, other_name)
    before = other_name.read_bytes()

    again = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=2)

    assert again["buildId"] == kept["buildId"]  # resumed, and interrupted once more
    assert again["etags"]  # the resume's parts went to the new file
    assert other_name.read_bytes() == before  # not written through the other name
    assert path.stat().st_ino != other_name.stat().st_ino  # a new file took the journal's name


async def test_resume_starts_over_when_the_service_forgot_the_build(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=5)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=2)
    async with AsyncSession(svc.edit_key, svc.url) as editor:
        await editor.delete_build(kept["buildId"])
    svc.reset_requests()
    build = await client.upload_build(svc.project_id, apk, journal_dir=journal)
    assert build.id != kept["buildId"]
    assert build.sha256 == sha256(apk)
    assert ops(svc)[:3] == ["list_builds", "get_build", "start_upload"]
    assert part_requests(svc) == Counter(range(1, 6))
    assert journal_files(journal) == []


async def test_resume_starts_over_when_the_service_lost_the_parts(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Parts to spare after the cancellation: one that lands late (a loaded machine) must still
    # find the upload unfinished, not completed with its journal not yet removed.
    apk = make_apk(tmp_path / "shop.apk", parts=8)
    kept = await interrupted_upload(svc, client, apk, journal, monkeypatch, commits=3)
    (path,) = journal_files(journal)
    kept["etags"]["1"] = "f" * 64  # an etag the service never gave: complete refuses the list
    path.write_text(json.dumps(kept))
    # Part 1 is trusted only when the hashing thread had proved it before the cancellation:
    # usually; on a busy machine it may trail the sends, and then part 1 is sent again.
    proven = "1" in kept["prefixes"]
    svc.reset_requests()
    build = await client.upload_build(svc.project_id, apk, journal_dir=journal)
    assert build.sha256 == sha256(apk)
    if proven:  # the journal's etag was used and refused (invalid_parts): a new upload
        assert build.id != kept["buildId"]
        assert ops(svc).count("start_upload") == 1
        assert ops(svc).count("complete_upload") == 2
    else:  # the bogus etag was never trusted: the same upload, part 1 sent again
        assert build.id == kept["buildId"]
        assert ops(svc).count("start_upload") == 0
        assert 1 in part_requests(svc)


async def test_resume_returns_a_build_the_lost_answer_had_completed(
    svc: FakeService, tmp_path: Path, journal: Path, waits: list[float]
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=3)
    svc.inject("complete_upload", Fault("drop_after"))  # completed, then the answer is lost
    async with AsyncSession(svc.run_key, svc.url, max_retries=0) as session:
        with pytest.raises(TransportError):
            await session.upload_build(svc.project_id, apk, journal_dir=journal)
        (kept,) = journal_files(journal)
        build_id = _journal.merged(kept.read_text())["buildId"]
        svc.reset_requests()
        build = await session.upload_build(svc.project_id, apk, journal_dir=journal)
    assert build.id == build_id
    assert build.is_ready
    assert ops(svc) == ["list_builds", "get_build"]
    assert journal_files(journal) == []


def test_the_journal_lives_in_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCCLIENT_STATE_DIR", str(tmp_path / "state"))
    assert default_journal_dir() == tmp_path / "state" / "uploads"
    monkeypatch.delenv("ASYNCCLIENT_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_journal_dir() == tmp_path / "xdg" / "asyncclient" / "uploads"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_journal_dir() == Path.home() / ".local" / "state" / "asyncclient" / "uploads"
