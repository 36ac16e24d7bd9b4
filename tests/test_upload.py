"""The part uploader against the emulator over real loopback HTTP.

Small parts (64 KiB, ServiceSettings.part_bytes) give many parts from small real apps. The
session's retry waits are recorded, not slept (the `waits` fixture); a per-connection bandwidth
cap on the emulator keeps parts in flight long enough to observe parallelism server-side.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import itertools
import json
import logging
import os
import re
import tempfile
import threading
import time
import tracemalloc
import zipfile
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from body_paths import BodyPath
from network_support import Network

import asyncclient.upload._hashing as _hashing
import asyncclient.upload._transfer as upload_module
from asyncclient import AsyncSession, PartBody
from asyncclient._local import _opening
from asyncclient.errors import (
    BuildRejectedError,
    ChecksumMismatchError,
    ServerError,
    TransportError,
    UnauthenticatedError,
    ValidationError,
)
from asyncclient.models import Build
from asyncclient.testing import FakeService, Fault, NetworkConditions, ServiceSettings
from asyncclient.testing._bodies import part_etag
from asyncclient.testing.builders import build_apk, build_app_dir
from asyncclient.upload import (
    UploadItem,
    UploadResult,
    _journal,
    default_journal_dir,
    inspect_build_file,
)

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks

PART = 64 * 1024
SLOW = NetworkConditions(part_bandwidth=4_000_000)  # a 64 KiB part takes ~16 ms to arrive


# --- fixtures and helpers -------------------------------------------------------------------------


@pytest.fixture
async def svc(dialect: str, network: Network) -> AsyncIterator[FakeService]:
    """The emulator in each wire dialect, and over HTTPS and a proxy (tests/conftest.py)."""
    emulator = FakeService(
        settings=ServiceSettings(part_bytes=PART), dialect=dialect, **network.service_options
    )
    async with network.serve(emulator) as service:
        yield service


@pytest.fixture
async def client(svc: FakeService, waits: list[float]) -> AsyncIterator[AsyncSession]:
    """A session whose retry waits are recorded instead of slept."""
    async with AsyncSession(svc.run_key, svc.url) as session:
        yield session


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal"


def make_apk(path: Path, parts: int = 8, **options: Any) -> Path:
    """A real apk of `parts` parts of PART bytes (the last one shorter)."""
    out = build_apk(path, filler_bytes=parts * PART - 4096, **options)
    assert -(-out.stat().st_size // PART) == parts
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def part_requests(svc: FakeService) -> Counter[int]:
    """upload_part requests per part number (retries included)."""
    return Counter(int(r.path.rsplit("/", 1)[1]) for r in svc.requests_for("upload_part"))


def ops(svc: FakeService) -> list[str | None]:
    return [r.op for r in svc.requests]


def journal_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json")) if directory.exists() else []


def client_tasks() -> set[asyncio.Task[Any]]:
    """Tasks other than the test itself and the emulator's (its connection handlers, its
    background hashers, and asyncio's accepting of its connections, which a proxy or a TLS
    handshake may leave pending for a moment after the client has gone)."""
    current = asyncio.current_task()
    emulator = ("aiohttp/web_", "asyncclient/testing/")
    return {
        task
        for task in asyncio.all_tasks()
        if task is not current
        and not any(part in task.get_coro().cr_code.co_filename for part in emulator)  # type: ignore[union-attr]
        and task.get_coro().cr_code.co_name != "_accept_connection2"  # type: ignore[union-attr]
    }


def sha_threads() -> list[str]:
    """The hashes still being computed (the hashing threads themselves stay, idle, for the next
    upload): none may be left running once an upload has ended, however it ended."""
    from asyncclient.upload import _hashing

    return ["sha256"] * _hashing.running()


class ServerInFlight:
    """Counts part requests the emulator is receiving at once (between target and commit)."""

    def __init__(self, svc: FakeService, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0
        self.peak = 0
        backend = svc.backend
        target, commit = backend.build_store.part_target, backend.build_store.commit_part

        def part_target(*args: Any) -> Any:
            answer = target(*args)
            self.now += 1
            self.peak = max(self.peak, self.now)
            return answer

        def commit_part(*args: Any) -> Any:
            self.now -= 1
            return commit(*args)

        monkeypatch.setattr(backend.build_store, "part_target", part_target)
        monkeypatch.setattr(backend.build_store, "commit_part", commit_part)


def stored_bytes(svc: FakeService, build_id: str) -> bytes:
    return svc.backend.builds[build_id].path.read_bytes()


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


async def test_progress_winds_back_for_a_retried_part(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
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
    steps = list(itertools.pairwise(seen))
    assert any(after < before for before, after in steps), seen  # wound back
    assert seen[-1] == size
    assert max(seen) == size


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
        import os

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


# --- pre-flight: zero requests for local problems -------------------------------------------------


def _not_a_zip(tmp: Path) -> Path:
    path = tmp / "fake.apk"
    path.write_bytes(b"not a zip at all")
    return path


def _zip_without_app(tmp: Path) -> Path:
    path = tmp / "Shop.app.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("README.txt", "hello")
    return path


def _empty(tmp: Path) -> Path:
    path = tmp / "empty.apk"
    path.write_bytes(b"")
    return path


def _folder(tmp: Path) -> Path:
    path = tmp / "build-output"
    path.mkdir()
    return path


def _app_folder_without_plist(tmp: Path) -> Path:
    path = tmp / "Broken.app"
    path.mkdir()
    (path / "Broken").write_bytes(b"\0" * 64)
    return path


def _renamed(suffix: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        return build_apk(tmp / f"shop{suffix}")

    return make


@pytest.mark.parametrize(
    ("make", "fix"),
    [
        (lambda tmp: tmp / "missing.apk", "no such file: check the path"),
        (_empty, "empty (0 bytes): rebuild the app"),
        (_folder, "is a folder, not an app"),
        (_renamed(".txt"), "neither an .apk nor an .app.zip"),
        (_renamed(".ipa"), "build the app for the Simulator"),
        (_renamed(".aab"), "bundletool"),
        (_not_a_zip, "not a zip file"),
        (_zip_without_app, "has no Name.app/Info.plist"),
        (_app_folder_without_plist, "has no Name.app/Info.plist"),
    ],
    ids=[
        "missing",
        "empty",
        "folder",
        "txt",
        "ipa",
        "aab",
        "not-a-zip",
        "zip-without-app",
        "app-folder-without-plist",
    ],
)
async def test_local_problems_are_refused_before_any_request(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    make: Callable[[Path], Path],
    fix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A temp folder of this test's own: other tests (or processes) zip .app folders meanwhile.
    temps = tmp_path / "tmp"
    temps.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temps))
    with pytest.raises(ValidationError, match=re.escape(fix)):
        await client.upload_build(svc.project_id, make(tmp_path), journal_dir=journal)
    assert svc.requests == []
    assert list(temps.iterdir()) == []  # nothing zipped on the way is left behind


async def test_a_file_over_max_bytes_costs_only_the_listing(
    tmp_path: Path, journal: Path, waits: list[float]
) -> None:
    apk = make_apk(tmp_path / "big.apk", parts=4)
    settings = ServiceSettings(part_bytes=PART, max_bytes=PART * 2)
    async with (
        FakeService(settings=settings) as svc,
        AsyncSession(svc.run_key, svc.url) as session,
    ):
        with pytest.raises(ValidationError, match=r"over the service's limit of 131072 bytes"):
            await session.upload_build(svc.project_id, apk, journal_dir=journal)
        assert ops(svc) == ["list_builds"]


@pytest.mark.parametrize(
    ("project_id", "options", "fix"),
    [
        ("nope", {}, "project"),
        ("p_demo", {"concurrency": 0}, "concurrency must be a whole number of at least 1"),
        ("p_demo", {"label": 42}, "label must be a string"),
    ],
)
async def test_bad_arguments_are_refused_before_any_request(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    project_id: str,
    options: dict[str, Any],
    fix: str,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=1)
    with pytest.raises(ValidationError, match=fix):
        await client.upload_build(project_id, apk, journal_dir=journal, **options)
    assert svc.requests == []


# --- an .app folder -------------------------------------------------------------------------------


async def test_an_app_folder_is_zipped_on_the_fly(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    app = build_app_dir(tmp_path / "Shop.app", filler_bytes=3 * PART)
    (app / "Frameworks").mkdir()
    (app / "Frameworks" / "Current").symlink_to("..")  # a link is stored, not followed
    temps_before = set(Path(tempfile.gettempdir()).glob("asyncclient-app-*"))
    build = await client.upload_build(svc.project_id, app, journal_dir=journal)
    assert build.file_name == "Shop.app.zip"
    assert build.platform == "ios"
    assert build.app_id == "com.example.shop.ios"
    stored = svc.backend.builds[build.id].path
    with zipfile.ZipFile(stored) as archive:
        names = archive.namelist()
        assert "Shop.app/Info.plist" in names
        assert "Shop.app/Frameworks/Current" in names
        assert archive.read("Shop.app/filler.bin") == (app / "filler.bin").read_bytes()
        mode = archive.getinfo("Shop.app/Shop").external_attr >> 16
        assert mode & 0o111  # the executable stays executable
    assert set(Path(tempfile.gettempdir()).glob("asyncclient-app-*")) == temps_before
    # The zip is the same bytes every time, so skip_existing recognises the folder.
    svc.reset_requests()
    again = await client.upload_build(svc.project_id, app, skip_existing=True, journal_dir=journal)
    assert again.id == build.id
    assert "upload_part" not in ops(svc)


async def test_inspect_build_file_reads_without_requests(tmp_path: Path) -> None:
    apk = build_apk(tmp_path / "shop.apk", version_name="2.1.0", version_code=210)
    local = await inspect_build_file(apk)
    assert local.file_name == "shop.apk"
    assert local.size == apk.stat().st_size
    assert local.sha256 == sha256(apk)
    assert (local.info.app_id, local.info.version, local.info.version_code) == (
        "com.example.shop",
        "2.1.0",
        "210",
    )
    app = build_app_dir(tmp_path / "Shop.app")
    first = await inspect_build_file(app)
    second = await inspect_build_file(app)
    assert first.file_name == "Shop.app.zip"
    assert first.sha256 == second.sha256  # deterministic zip
    with pytest.raises(ValidationError):
        await inspect_build_file(tmp_path / "nothing.apk")


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


def cancel_after_commits(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch, commits: int, task: list[asyncio.Task[Any]]
) -> None:
    """Cancel task[0] as soon as the emulator has stored `commits` parts."""
    commit = svc.backend.build_store.commit_part
    count = 0

    def counting(*args: Any) -> Any:
        nonlocal count
        count += 1
        if count == commits:
            task[0].cancel()
        return commit(*args)

    monkeypatch.setattr(svc.backend.build_store, "commit_part", counting)


async def interrupted_upload(
    svc: FakeService,
    session: AsyncSession,
    apk: Path,
    journal: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    commits: int,
) -> dict[str, Any]:
    """An upload cancelled once the emulator stored `commits` parts; returns its journal."""
    holder: list[asyncio.Task[Any]] = []
    with monkeypatch.context() as patch:
        cancel_after_commits(svc, patch, commits, holder)
        holder.append(
            asyncio.create_task(
                session.upload_build(svc.project_id, apk, concurrency=1, journal_dir=journal)
            )
        )
        with pytest.raises(asyncio.CancelledError):
            await holder[0]
    (kept,) = journal_files(journal)
    data: dict[str, Any] = _journal.merged(kept.read_text())
    return data


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
    # As if the hashing had been behind the network: proofs only up to the end of part 1.
    (path,) = journal_files(journal)
    data = _journal.merged(path.read_text())
    data["prefixes"] = {"1": data["prefixes"]["1"]}
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
    assert [r.resumed for r in results] == [True, False, False, False, False]
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
