"""Many `asyncclient` processes on one machine, as CI jobs sharing a runner: same user, same
state folder, same working folder. Real processes (not tasks or threads) against the emulator in
this test's event loop; a small tmpfs for the full-disk cases.

Marked `processes`: the whole suite runs them once, on the README's Python (tox skips them on
the others: what they test is the operating system's locks, not the interpreter).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from commands_support import CHECKOUT_FILES, env_for, finished_run, plain_get, run_all, seed
from tiers import repeat

from asyncclient.testing import FakeService, NetworkConditions, ServiceSettings
from asyncclient.testing.builders import build_apk

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

MiB = 1 << 20


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def big_apk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_apk(tmp_path_factory.mktemp("apk") / "big.apk", filler_bytes=24 * MiB)


@contextlib.asynccontextmanager
async def emulator(**settings: object) -> AsyncIterator[FakeService]:
    # 16 MB/s per part: one 24 MiB upload takes about half a second, long enough for the
    # processes started with it to find it under way.
    svc = FakeService(
        settings=ServiceSettings(part_bytes=2 * MiB, **settings),  # type: ignore[arg-type]
        conditions=NetworkConditions(part_bandwidth=16_000_000),
    )
    async with svc:
        yield svc


# --- uploads --------------------------------------------------------------------------------------


@pytest.mark.parametrize("reading", ["strict", "lenient"])
async def test_four_processes_upload_one_file_ten_times(
    big_apk: Path, tmp_path: Path, reading: str, repetitions: int | None
) -> None:
    """Each time, every process exits 0 with a ready build of the file; the ones that found
    another upload of it under way waited and sent nothing of their own."""
    expected = sha256(big_apk)
    joined = told = 0
    async with emulator(ready_accepts_parts=reading == "lenient") as svc:
        env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        for repetition in repeat(repetitions, 10):
            svc.reset_requests()
            results = await run_all([["upload", svc.project_id, str(big_apk)]] * 4, env)

            for code, _, err in results:
                assert code == 0, f"repetition {repetition}: {err}"
            ids = {out.strip() for _, out, _ in results}
            for build_id in ids:
                build = svc.backend.builds[build_id]
                assert build.status == "ready"
                assert build.sha256 == expected
            # Parts went only to the builds printed, each exactly once: no process joined an
            # upload mid-flight or sent parts for a build another one completed.
            parts = [r.path for r in svc.requests_for("upload_part") if r.status == 200]
            count = -(-big_apk.stat().st_size // (2 * MiB))
            assert len(parts) == len(set(parts)) == count * len(ids)
            assert {p.split("/")[-3] for p in parts} == ids
            assert len(svc.requests_for("complete_upload")) == len(ids)
            joined += sum("uploaded by another process" in err for _, _, err in results)
            told += sum("waiting for another upload of big.apk (pid " in e for _, _, e in results)
    assert joined > 0  # the waiting did happen, not only uploads one after another
    assert told > 0  # and was shown, naming the process waited for
    assert list((tmp_path / "state" / "uploads").glob("*.json")) == []
    assert list((tmp_path / "state" / "uploads").glob("*.lock")) == []


async def test_sixteen_processes_upload_sixteen_builds_with_one_state_folder(
    tmp_path: Path,
) -> None:
    apks = [
        build_apk(tmp_path / f"app{i}.apk", filler_bytes=3 * MiB, seed=i, version_code=i + 1)
        for i in range(16)
    ]
    async with emulator() as svc:
        env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        results = await run_all([["upload", svc.project_id, str(apk)] for apk in apks], env)

        for (code, out, err), apk in zip(results, apks, strict=True):
            assert code == 0, err
            build = svc.backend.builds[out.strip()]
            assert build.status == "ready"
            assert build.sha256 == sha256(apk)
        assert len({out for _, out, _ in results}) == 16


# --- downloads ------------------------------------------------------------------------------------


async def test_four_processes_download_one_run_into_one_folder_ten_times(
    tmp_path: Path, repetitions: int | None
) -> None:
    async with FakeService(seed(), clock="manual") as svc:
        run_id = await finished_run(svc)
        served = {f: await plain_get(svc, f"runs/{run_id}/files/{f}") for f in CHECKOUT_FILES}
        env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        for repetition in repeat(repetitions, 10):
            folder = tmp_path / f"out{repetition}"
            results = await run_all([["download", run_id, "-o", str(folder)]] * 4, env)

            for code, _, err in results:
                assert code == 0, f"repetition {repetition}: {err}"
            left = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
            assert left == sorted(["screenshots", *CHECKOUT_FILES])  # no .part, .etag, lock
            for file, data in served.items():
                assert (folder / file).read_bytes() == data
        assert list((tmp_path / "state" / "locks").iterdir()) == []


# --- a full disk ----------------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (root only); skipped where it cannot be mounted,
    except in CI, where the test must run."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
        pytest.skip("a tmpfs cannot be mounted here (not root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def grow(where: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)


@pytest.mark.linux(reason="a tmpfs mounted by the test")
async def test_a_full_disk_during_a_download_exits_5_and_the_same_command_resumes(
    tmp_path: Path,
) -> None:
    async with FakeService(seed(), clock="manual") as svc:
        run_id = await finished_run(svc)
        video = await plain_get(svc, f"runs/{run_id}/files/video.mp4")
        with small_disk(tmp_path / "disk", f"{len(video) // 2}") as disk:
            env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
            argv = ["download", run_id, "video.mp4", "-o", str(disk / "video.mp4")]
            ((code, out, err),) = await run_all([argv], env)

            assert code == 5, err
            assert err.startswith(f"error: cannot write {disk / 'video.mp4.part'}: ")
            assert "No space left on device; free space on its disk" in err
            assert len(err.splitlines()) == 1
            assert out == ""
            kept = (disk / "video.mp4.part").stat().st_size
            assert kept > 0  # kept for the resume
            assert not (disk / "video.mp4").exists()

            grow(disk, f"{4 * len(video)}")
            svc.reset_requests()
            ((code, out, err),) = await run_all([argv], env)

            assert code == 0, err
            assert (disk / "video.mp4").read_bytes() == video
            assert sorted(p.name for p in disk.iterdir()) == ["video.mp4"]
            (request,) = svc.requests_for("download_run_file")
            assert request.status == 206  # resumed from the partial file


@pytest.mark.linux(reason="a tmpfs mounted by the test")
async def test_a_full_disk_at_the_upload_journal_exits_5_and_the_same_command_finishes(
    tmp_path: Path,
) -> None:
    apk = build_apk(tmp_path / "shop.apk", filler_bytes=6 * MiB)
    async with emulator() as svc:
        with small_disk(tmp_path / "state", "64k") as state:
            # Room for the lock file's one page and nothing else: the journal cannot be written.
            filler = state / "filler"
            filler.write_bytes(b"\0" * (60 * 1024))
            env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(state)}
            argv = ["upload", svc.project_id, str(apk)]
            ((code, out, err),) = await run_all([argv], env)

            assert code == 5, err
            assert f"cannot write the upload journal {state / 'uploads'}/" in err
            assert "No space left on device; free space on its disk" in err
            assert out == ""

            filler.unlink()
            ((code, out, err),) = await run_all([argv], env)

            assert code == 0, err
            assert svc.backend.builds[out.strip()].sha256 == sha256(apk)
