"""The parts of one upload: in parallel and in order, each retried on its own, checked by sha256,
and memory bounded whatever the part size; against the emulator over real loopback HTTP."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
from body_paths import BodyPath
from upload_support import (
    PART,
    SLOW,
    ServerInFlight,
    client_tasks,
    journal_files,
    make_apk,
    ops,
    part_requests,
    sha256,
    sha_threads,
    stored_bytes,
)

from asyncclient import AsyncSession, PartBody
from asyncclient._local import _opening
from asyncclient.errors import (
    BuildRejectedError,
    ChecksumMismatchError,
    ServerError,
    ValidationError,
)
from asyncclient.models import Build
from asyncclient.testing import FakeService, Fault, NetworkConditions, ServiceSettings
from asyncclient.testing._bodies import part_etag
from asyncclient.testing.builders import build_apk
from asyncclient.upload import (
    _journal,
)

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks


# --- the happy path: parallel, exact, in order ----------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_parts_go_up_in_parallel_up_to_concurrency(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
    concurrency: int,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=8)
    svc.conditions = SLOW
    server = ServerInFlight(svc, monkeypatch)
    build = await client.upload_build(
        svc.project_id, apk, concurrency=concurrency, label="abc123", journal_dir=journal
    )
    if concurrency == 1:
        assert server.peak == 1
    else:
        assert 1 < server.peak <= concurrency
    assert build.is_ready
    assert build.label == "abc123"
    assert build.app_id == "com.example.shop"
    # The bytes arrived exactly, each part once, and nothing else was asked.
    assert build.sha256 == sha256(apk)
    assert stored_bytes(svc, build.id) == apk.read_bytes()
    assert part_requests(svc) == Counter(range(1, 9))
    assert Counter(ops(svc)) == {
        "list_builds": 1,
        "start_upload": 1,
        "upload_part": 8,
        "complete_upload": 1,
    }
    assert journal_files(journal) == []  # removed on success


async def test_etags_go_to_complete_in_part_order(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=6)
    listed: list[list[tuple[int, str]]] = []
    complete = svc.backend.build_store.complete_upload

    async def spy(key: Any, build_id: str, parts: Any) -> Any:
        listed.append(list(parts))
        return await complete(key, build_id, parts)

    monkeypatch.setattr(svc.backend.build_store, "complete_upload", spy)
    await client.upload_build(svc.project_id, apk, concurrency=6, journal_dir=journal)
    data = apk.read_bytes()
    expected = [(n, part_etag(data[(n - 1) * PART : n * PART])) for n in range(1, 7)]
    assert listed == [expected]


async def test_progress_counts_every_byte_once_and_ends_at_total(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=5)
    seen: list[tuple[int, int]] = []
    await client.upload_build(
        svc.project_id, apk, progress=lambda d, t: seen.append((d, t)), journal_dir=journal
    )
    size = apk.stat().st_size
    assert seen[0] == (0, size)
    assert seen[-1] == (size, size)
    assert all(total == size for _, total in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # no retry: never goes back


async def test_the_parts_share_one_open_file(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
    body_path: BodyPath,
) -> None:
    # No part opens the file: they send from the upload's one open file, by sendfile or, where
    # the loop refuses it or TLS must encrypt, by positional reads (os.preadv).
    apk = make_apk(tmp_path / "shop.apk", parts=6)
    opened: list[str] = []
    original = PartBody.open

    async def spy(self: PartBody) -> Any:
        opened.append(self.path)
        return await original(self)

    monkeypatch.setattr(PartBody, "open", spy)
    build = await client.upload_build(svc.project_id, apk, concurrency=3, journal_dir=journal)
    assert stored_bytes(svc, build.id) == apk.read_bytes()
    expected = 0  # sendfile takes offsets, and so does a read (os.preadv)
    assert len(opened) == expected
    body_path.check(attempts=6)


# --- faults: each part retried on its own ---------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        Fault("500"),
        Fault("503"),
        Fault("429", retry_after=30),
        Fault("drop"),
        Fault("drop_after"),
        Fault("500_after"),
    ],
    ids=lambda f: f.kind,
)
async def test_a_failed_part_is_resent_alone(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    waits: list[float],
    fault: Fault,
    body_path: BodyPath,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=6)
    svc.inject("upload_part", fault)
    build = await client.upload_build(svc.project_id, apk, concurrency=3, journal_dir=journal)
    assert build.sha256 == sha256(apk)
    assert stored_bytes(svc, build.id) == apk.read_bytes()
    counts = part_requests(svc)
    assert sorted(counts.values()) == [1, 1, 1, 1, 1, 2]  # one part sent twice, the rest once
    assert set(counts) == set(range(1, 7))
    assert ops(svc).count("start_upload") == 1  # the upload was not restarted
    assert len(waits) == 1
    body_path.check(attempts=7)  # each of the 6 parts once, one of them twice
    if fault.kind == "429":
        assert waits == [30.0]  # the service's Retry-After, obeyed (and recorded, not slept)


async def test_progress_counts_parts_the_service_stored_and_never_goes_back(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    """A part dropped mid-body and sent again: the progress moved only when the service stored
    a part, by that part's size, so it never went back (it counted bytes written, and wound
    them back, before: a bar that said what the service did not have)."""
    apk = make_apk(tmp_path / "shop.apk", parts=4)
    svc.inject("upload_part", Fault("drop"))  # the emulator reads half the body, then cuts
    seen: list[int] = []
    await client.upload_build(
        svc.project_id,
        apk,
        concurrency=1,
        progress=lambda done, total: seen.append(done),
        journal_dir=journal,
    )
    size = apk.stat().st_size
    assert seen == sorted(seen)  # never back
    stored = svc.backend.builds[next(iter(reversed(svc.backend.builds)))].part_bytes
    steps = [after - before for before, after in itertools.pairwise(seen) if after != before]
    assert steps[:-1] == [stored] * (len(steps) - 1)  # a part at a time; the last is shorter
    assert seen[0] == 0
    assert seen[-1] == size


async def test_random_faults_on_a_tenth_of_the_parts(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=40)
    svc.conditions = NetworkConditions(error_rate=0.05, drop_rate=0.05, ops={"upload_part"}, seed=7)
    build = await client.upload_build(svc.project_id, apk, concurrency=8, journal_dir=journal)
    assert build.sha256 == sha256(apk)
    failed = [r for r in svc.requests_for("upload_part") if r.status != 200]
    assert failed  # the faults did happen
    assert sum(part_requests(svc).values()) == 40 + len(failed)


async def test_the_first_fatal_error_cancels_the_other_parts(
    svc: FakeService, tmp_path: Path, journal: Path, waits: list[float]
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=12)
    svc.conditions = SLOW
    svc.inject("upload_part", Fault("500"))
    before = client_tasks()
    async with AsyncSession(svc.run_key, svc.url, max_retries=0) as session:
        with pytest.raises(ServerError) as caught:
            await session.upload_build(svc.project_id, apk, concurrency=4, journal_dir=journal)
        assert caught.value.status == 500
        await asyncio.sleep(0)
        # A part cancelled while its thread opened the file (the read path: TLS) closes that
        # file as soon as the thread is done; those closings end on their own.
        await asyncio.gather(*_opening._closing)
        assert client_tasks() <= before  # no part, worker or hash task left running
        assert sha_threads() == []
    assert sum(part_requests(svc).values()) < 12  # the parts not yet started were never sent
    (kept,) = journal_files(journal)  # the journal stays for a resume
    assert _journal.merged(kept.read_text())["buildId"].startswith("ab_")


async def test_a_progress_callback_that_raises_fails_the_upload(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=3)

    def broken(done: int, total: int) -> None:
        if done:
            raise RuntimeError("the progress bar broke")

    with pytest.raises(RuntimeError, match="progress bar broke"):
        await client.upload_build(
            svc.project_id, apk, concurrency=1, progress=broken, journal_dir=journal
        )
    assert ops(svc).count("upload_part") == 1  # failed after the part it was reporting
    assert ops(svc).count("complete_upload") == 0


# --- sha256 verification --------------------------------------------------------------------------


def report_a_wrong_sha256(svc: FakeService, monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator completes uploads as ever but reports a sha256 of zeros for the build."""
    complete = svc.backend.build_store.complete_upload

    async def damaged(*args: Any) -> Any:
        build = await complete(*args)
        build.sha256 = "0" * 64
        return build

    monkeypatch.setattr(svc.backend.build_store, "complete_upload", damaged)


async def test_a_different_sha256_from_the_service_is_an_error(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=3)
    report_a_wrong_sha256(svc, monkeypatch)
    with pytest.raises(ChecksumMismatchError) as caught:
        await client.upload_build(svc.project_id, apk, journal_dir=journal)
    error = caught.value
    assert error.expected == sha256(apk)
    assert error.actual == "0" * 64
    assert journal_files(journal) == []  # nothing to resume: upload it again
    # The run key may not delete builds: the build stays, and the line says not to use it.
    assert not error.deleted
    assert error.build_id in svc.backend.builds
    assert f"build {error.build_id} does not hold this file" in str(error)
    assert "must not be used" in str(error)
    assert f"asyncclient builds delete {error.build_id}" in str(error)
    assert "\n" not in str(error)


async def test_a_mismatched_build_is_deleted_when_the_key_may(
    svc: FakeService, tmp_path: Path, journal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=2)
    report_a_wrong_sha256(svc, monkeypatch)
    async with AsyncSession(svc.edit_key, svc.url) as editor:
        with pytest.raises(ChecksumMismatchError) as caught:
            await editor.upload_build(svc.project_id, apk, journal_dir=journal)
    assert caught.value.deleted
    assert caught.value.build_id not in svc.backend.builds
    assert "the build was deleted; upload the file again" in str(caught.value)


async def test_sha256_missing_from_complete_is_read_with_get_build(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=2)
    complete = client.complete_upload

    async def without_sha(*args: Any) -> Build:
        return attrs.evolve(await complete(*args), sha256=None)

    monkeypatch.setattr(client, "complete_upload", without_sha)
    (result,) = await client.upload_builds(
        project_id=svc.project_id, items=[apk], journal_dir=journal
    )
    assert result.ok
    assert result.verified
    assert result.build is not None
    assert result.build.sha256 == sha256(apk)
    assert ops(svc).count("get_build") == 1


async def test_a_service_that_never_reports_sha256_is_unverified_not_failed(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=2)
    complete = svc.backend.build_store.complete_upload

    async def no_sha(*args: Any) -> Any:
        build = await complete(*args)
        build.sha256 = None
        return build

    monkeypatch.setattr(svc.backend.build_store, "complete_upload", no_sha)
    with caplog.at_level(logging.WARNING, logger="asyncclient.upload"):
        (result,) = await client.upload_builds(
            project_id=svc.project_id, items=[apk], journal_dir=journal
        )
        build = await client.upload_build(svc.project_id, apk, journal_dir=journal)
    assert result.ok
    assert not result.verified
    assert result.sha256 == sha256(apk)
    assert build.sha256 is None
    assert "not verified" in caplog.text


async def test_a_file_changed_during_the_upload_is_refused(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=3)
    mtime = apk.stat().st_mtime_ns

    def touch(done: int, total: int) -> None:

        os.utime(apk, ns=(mtime + 10**9, mtime + 10**9))

    with pytest.raises(ValidationError, match="changed during the upload"):
        await client.upload_build(svc.project_id, apk, progress=touch, journal_dir=journal)
    assert ops(svc).count("complete_upload") == 0
    assert journal_files(journal) == []


# --- the service refuses --------------------------------------------------------------------------


async def test_a_rejected_build_lists_the_problems(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path, dialect: str
) -> None:
    apk = make_apk(tmp_path / "old.apk", parts=2, abis=("armeabi-v7a",))
    with pytest.raises(BuildRejectedError) as caught:
        await client.upload_build(svc.project_id, apk, journal_dir=journal)
    (problem,) = caught.value.problems
    assert "armeabi-v7a" in problem.message
    if dialect != "flat":  # flat says it in words only, and sends no build
        assert problem.kind == "abi"
        assert problem.found == ("armeabi-v7a",)
        assert "arm64-v8a" in problem.supported
        assert caught.value.build is not None
        assert caught.value.build.status_kind == "rejected"
    assert journal_files(journal) == []


# --- memory ---------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_memory_stays_bounded_whatever_the_part_size(
    tmp_path: Path, journal: Path, waits: list[float]
) -> None:
    part_bytes = 16 << 20
    apk = build_apk(tmp_path / "big.apk", filler_bytes=48 << 20)
    async with (
        FakeService(settings=ServiceSettings(part_bytes=part_bytes)) as svc,
        AsyncSession(svc.run_key, svc.url) as session,
    ):
        tracemalloc.start()
        try:
            build = await session.upload_build(
                svc.project_id, apk, concurrency=4, journal_dir=journal
            )
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert build.sha256 == sha256(apk)
    # Client and emulator together, four 16 MiB parts in flight: a few 1 MiB chunks each (the
    # client's chunk and slice in the socket buffer; the emulator's batch being hashed and
    # written by a worker thread while the next is read), about 10 MiB; more when a busy
    # machine slows the emulator's writer. Holding the parts would be 64 MiB.
    assert peak < 28 << 20, f"peak {peak / 2**20:.1f} MiB"
