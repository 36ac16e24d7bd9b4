"""`asyncclient download` against the emulator: whole runs, single files, resume, failures.

Bytes are compared with what a plain GET of the emulator serves; retries run without waiting.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from commands_support import (
    CHECKOUT_FILES,
    env_for,
    finished_run,
    library_message,
    plain_get,
    seed,
    start_run,
)
from network_support import ServeEmulator

from asyncclient._core import _wire as wire
from asyncclient.testing import FakeService, Fault

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks

RunCli = Callable[..., Awaitable[Any]]


@pytest.fixture
async def svc(serve_emulator: ServeEmulator) -> AsyncIterator[FakeService]:
    """The emulator in each wire dialect, and over HTTPS and a proxy (tests/conftest.py)."""
    async with serve_emulator(seed(), clock="manual") as service:
        yield service


async def served(svc: FakeService, run_id: str, file: str) -> bytes:
    return await plain_get(svc, f"runs/{run_id}/files/{file}")


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


async def test_a_whole_run_lands_in_a_folder(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    out = tmp_path / "artifacts"

    result = await run_cli(
        "download", run_id, "-o", str(out), "--concurrency", "3", env=env_for(svc)
    )

    assert result.code == 0, result.stderr
    downloads = svc.requests_for("download_run_file")
    assert sorted(r.path.rsplit("/files/", 1)[1] for r in downloads) == sorted(CHECKOUT_FILES)
    assert {r.status for r in downloads} == {200}
    assert len(svc.requests_for("get_run")) == 1
    assert sorted(result.stdout.splitlines()) == sorted(str(out / f) for f in CHECKOUT_FILES)
    assert result.stderr == f"saved 5 files of run {run_id} in {out}\n"
    assert files_under(out) == sorted(CHECKOUT_FILES)  # no .part left behind
    for file in CHECKOUT_FILES:
        assert (out / file).read_bytes() == await served(svc, run_id, file)
    assert (out / "video.mp4").read_bytes()[4:8] == b"ftyp"
    assert (out / "screenshots/01.png").read_bytes().startswith(b"\x89PNG")


async def test_the_default_folder_is_the_run_id(
    svc: FakeService, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await finished_run(svc, "t_search")
    monkeypatch.chdir(tmp_path)

    result = await run_cli("download", run_id, "--json", env=env_for(svc))

    assert result.code == 0, result.stderr
    expected = ["video.mp4", "screenshots/01.png", "screenshots/02.png"]
    assert files_under(tmp_path / run_id) == sorted(expected)
    body = result.json()
    assert body["runId"] == run_id
    assert [f["file"] for f in body["files"]] == expected
    for entry in body["files"]:
        assert entry["path"] == str(Path(run_id, entry["file"]))
        assert entry["size"] == (tmp_path / entry["path"]).stat().st_size > 0


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (None, "02.png"),
        ("shot.png", "shot.png"),
        ("into/", "into/02.png"),
        ("deep/er/shot.png", "deep/er/shot.png"),
    ],
)
async def test_one_file_by_path(
    svc: FakeService,
    run_cli: RunCli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    output: str | None,
    expected: str,
) -> None:
    run_id = await finished_run(svc)
    monkeypatch.chdir(tmp_path)
    extra = [] if output is None else ["-o", output]

    result = await run_cli("download", run_id, "screenshots/02.png", *extra, env=env_for(svc))

    assert result.code == 0, result.stderr
    assert [r.status for r in svc.requests_for("download_run_file")] == [200]
    assert result.stdout == f"{Path(expected)}\n"
    assert files_under(tmp_path) == [expected]
    assert (tmp_path / expected).read_bytes() == await served(svc, run_id, "screenshots/02.png")


async def test_one_file_by_its_link_into_an_existing_folder(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    link = f"{svc.url}/api/v1/runs/{run_id}/files/video.mp4"

    result = await run_cli(
        "download", run_id, link, "-o", str(tmp_path), "--json", env=env_for(svc)
    )

    assert result.code == 0, result.stderr
    video = await served(svc, run_id, "video.mp4")
    assert result.json() == {
        "runId": run_id,
        "files": [{"file": "video.mp4", "path": str(tmp_path / "video.mp4"), "size": len(video)}],
    }
    assert (tmp_path / "video.mp4").read_bytes() == video


async def test_a_partial_file_is_resumed_with_a_range(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    whole = await served(svc, run_id, "video.mp4")
    svc.reset_requests()
    dest = tmp_path / "video.mp4"
    (tmp_path / "video.mp4.part").write_bytes(whole[:1000])

    result = await run_cli("download", run_id, "video.mp4", "-o", str(dest), env=env_for(svc))

    assert result.code == 0, result.stderr
    assert [r.status for r in svc.requests_for("download_run_file")] == [206]
    assert dest.read_bytes() == whole
    assert files_under(tmp_path) == ["video.mp4"]


@pytest.mark.parametrize("planted", ["part", "etag", "both", "destination"])
async def test_links_planted_at_the_names_it_writes_leave_their_targets_alone(
    svc: FakeService, run_cli: RunCli, tmp_path: Path, planted: str
) -> None:
    run_id = await finished_run(svc)
    whole = await served(svc, run_id, "video.mp4")
    out = tmp_path / "out"
    out.mkdir()
    victims = {name: tmp_path / f"victim-{name}.txt" for name in ("part", "etag", "destination")}
    for victim in victims.values():
        victim.write_text("precious")
    names = {
        "part": out / "video.mp4.part",
        "etag": out / "video.mp4.part.etag",
        "destination": out / "video.mp4",
    }
    chosen = ["part", "etag"] if planted == "both" else [planted]
    for name in chosen:
        names[name].symlink_to(victims[name])

    result = await run_cli("download", run_id, "video.mp4", "-o", str(out), env=env_for(svc))

    assert result.code == 0, result.stderr
    assert all(victim.read_text() == "precious" for victim in victims.values())
    dest = out / "video.mp4"
    assert not dest.is_symlink()
    assert dest.read_bytes() == whole
    assert files_under(out) == ["video.mp4"]


async def test_a_partial_file_with_a_second_name_is_not_extended(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    whole = await served(svc, run_id, "video.mp4")
    other = tmp_path / "someone-elses.bin"
    other.write_bytes(whole[:1000])
    os.link(other, tmp_path / "video.mp4.part")  # a hard link: appending would change `other`

    result = await run_cli("download", run_id, "video.mp4", "-o", str(tmp_path), env=env_for(svc))

    assert result.code == 0, result.stderr
    assert other.read_bytes() == whole[:1000]
    assert (tmp_path / "video.mp4").read_bytes() == whole


async def test_a_whole_run_resumes_its_partial_files(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    first = await served(svc, run_id, "screenshots/01.png")
    svc.reset_requests()
    (tmp_path / "screenshots").mkdir()
    (tmp_path / "screenshots/01.png.part").write_bytes(first[: len(first) // 2])

    result = await run_cli("download", run_id, "-o", str(tmp_path), env=env_for(svc))

    assert result.code == 0, result.stderr
    statuses = {
        r.path.rsplit("/files/", 1)[1]: r.status for r in svc.requests_for("download_run_file")
    }
    assert statuses == {f: 206 if f == "screenshots/01.png" else 200 for f in CHECKOUT_FILES}
    assert (tmp_path / "screenshots/01.png").read_bytes() == first
    assert files_under(tmp_path) == sorted(CHECKOUT_FILES)


async def test_a_failed_download_leaves_nothing_under_the_final_name(
    svc: FakeService, run_cli: RunCli, tmp_path: Path, waits: list[float]
) -> None:
    run_id = await finished_run(svc)
    svc.inject("download_run_file", Fault("drop", times=100))
    dest = tmp_path / "video.mp4"

    # --retry-deadline 0: every dropped connection counts against --retries (4).
    result = await run_cli(
        "download", run_id, "video.mp4", "-o", str(dest), "--retry-deadline", "0",
        env=env_for(svc),
    )  # fmt: skip

    assert result.code == 4
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert not dest.exists()
    assert len(waits) == 4  # the first try and 4 retries, without sleeping
    attempts = svc.requests_for("download_run_file")
    assert len(attempts) >= 5  # aiohttp may resend a dropped keep-alive request once itself
    assert {r.status for r in attempts} == {0}  # every one dropped


@pytest.mark.usefixtures("waits")
async def test_one_failing_file_does_not_stop_the_others(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await finished_run(svc)
    # One download at a time: the video goes first and its every attempt is dropped (each
    # attempt may be two requests: aiohttp retries a dropped keep-alive request once itself).
    svc.inject("download_run_file", Fault("drop", times=10))

    result = await run_cli(
        "download", run_id, "-o", str(tmp_path), "--concurrency", "1", "--retry-deadline", "0",
        env=env_for(svc),
    )  # fmt: skip

    assert result.code == 4
    saved = result.stdout.splitlines()
    assert saved  # the drops ran out: later files came through
    failed = [f for f in CHECKOUT_FILES if str(tmp_path / f) not in saved]
    assert failed[0] == "video.mp4"
    errors = result.stderr.splitlines()
    assert errors[0].startswith("error: could not download video.mp4: ")
    assert len(errors) == len(failed) + 1
    assert errors[-1] == (
        f"error: {len(failed)} of 5 files of run {run_id} were not downloaded; run the same "
        "command again to fetch them (partial files resume)"
    )
    assert files_under(tmp_path) == sorted(set(CHECKOUT_FILES) - set(failed))

    again = await run_cli("download", run_id, "-o", str(tmp_path), env=env_for(svc))
    assert again.code == 0, again.stderr
    assert files_under(tmp_path) == sorted(CHECKOUT_FILES)
    for file in CHECKOUT_FILES:
        assert (tmp_path / file).read_bytes() == await served(svc, run_id, file)


async def test_a_run_that_is_not_final_is_refused(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    run_id = await start_run(svc, "t_checkout")
    svc.reset_requests()

    result = await run_cli("download", run_id, "-o", str(tmp_path / "out"), env=env_for(svc))

    assert result.code == 3
    assert result.stderr == (
        f"error: run {run_id} is queued, not final yet: its files exist once it ends; "
        f"wait for it (asyncclient watch {run_id}) and download again\n"
    )
    assert svc.requests_for("download_run_file") == []
    assert not (tmp_path / "out").exists()


async def test_a_file_the_run_does_not_have(svc: FakeService, run_cli: RunCli) -> None:
    run_id = await finished_run(svc, "t_search")

    result = await run_cli("download", run_id, "screenshots/09.png", env=env_for(svc))

    assert result.code == 3
    assert result.stderr == (
        f"error: run {run_id} has no file screenshots/09.png: its files are video.mp4, "
        "screenshots/01.png, screenshots/02.png\n"
    )
    assert svc.requests_for("download_run_file") == []


def _file_message(file: str) -> str:
    """What the library's run_file_path says about FILE of run j_1."""
    return library_message(wire.run_file_path, "j_1", file)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # FILE: the library's own parsing (run_file_path), word for word.
        *[
            (["j_1", file], _file_message(file))
            for file in (
                "../secrets",
                "screenshots//01.png",
                "https://svc.example/api/v1/runs/j_2/files/video.mp4",
                "https://svc.example/elsewhere/video.mp4",
            )
        ],
        (["j_1", "--concurrency", "0"], "--concurrency 0 is out of range: give 1 to 32"),
        (["j_1", "--concurrency", "33"], "--concurrency 33 is out of range: give 1 to 32"),
        (["t_1"], "t_1 is not a run id: run ids start with j_"),
    ],
)
async def test_bad_input_is_refused_before_sending(
    svc: FakeService, run_cli: RunCli, argv: list[str], message: str
) -> None:
    result = await run_cli("download", *argv, env=env_for(svc))

    assert result.code == 2
    assert result.stderr.startswith(f"error: {message}")
    assert len(result.stderr.splitlines()) == 1
    assert svc.requests == []


async def test_an_output_that_is_a_file_is_refused_for_a_whole_run(
    svc: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("x")

    result = await run_cli("download", "j_1", "-o", str(taken), env=env_for(svc))

    assert result.code == 2
    assert result.stderr == f"error: -o {taken} is a file: give a folder for the run's files\n"
    assert svc.requests == []


ODD_NAMES = ["CON.png", "a:b.png", "shot2.png.", "..%5C..%5Cevil.png", "aux.mp4", "ok.png"]


@pytest.fixture
async def odd_service() -> AsyncIterator[str]:
    """A service whose run lists files named as Windows cannot store them (and one that would
    climb out of the folder once decoded), and serves each: real HTTP on loopback."""
    from aiohttp import web

    async def get_run(request: web.Request) -> web.Response:
        base = f"http://{request.host}/api/v1/runs/j_odd/files"
        run = {
            "id": "j_odd",
            "status": "passed",
            "final": True,
            "testId": "t_1",
            "video": f"{base}/video.mp4",
            "screenshots": [f"{base}/screenshots/{name}" for name in ODD_NAMES],
        }
        return web.json_response({"run": run})

    async def get_file(request: web.Request) -> web.Response:
        return web.Response(body=request.match_info["path"].encode() * 100)

    app = web.Application()
    app.router.add_get("/api/v1/runs/j_odd", get_run)
    app.router.add_get("/api/v1/runs/j_odd/files/{path:.+}", get_file)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_run_files_get_names_every_platform_can_store(
    odd_service: str, run_cli: RunCli, tmp_path: Path
) -> None:
    import ntpath

    env = {"ASYNCCLIENT_BASE_URL": odd_service, "ASYNCCLIENT_API_KEY": "k-odd-1234"}
    out = tmp_path / "out"
    result = await run_cli("download", "j_odd", "-o", str(out), env=env)

    assert result.code == 0, result.stderr
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == sorted(
        [
            "video.mp4",
            "screenshots/_CON.png",
            "screenshots/a_b.png",
            "screenshots/shot2.png",
            "screenshots/.._.._evil.png",
            "screenshots/_aux.mp4",
            "screenshots/ok.png",
        ]
    )
    assert not any(tmp_path.glob("evil.png"))  # nothing outside the folder
    forbidden = set('<>:"/\\|?*')
    for name in written:
        for part in name.split("/"):
            assert not (set(part) & forbidden), part
            assert not part.endswith((".", " ")), part
            assert part.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL"}, part
        assert ntpath.normpath(ntpath.join("C:\\out", *name.split("/"))).startswith("C:\\out\\")
    # The bytes are the service's, and each rename is said once.
    assert (out / "screenshots" / "_CON.png").read_bytes() == b"screenshots/CON.png" * 100
    assert "screenshots/CON.png is saved as screenshots/_CON.png" in result.stderr
    assert "screenshots/ok.png is saved" not in result.stderr
