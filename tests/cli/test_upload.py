"""`asyncclient upload` and `asyncclient inspect` against the emulator over loopback.

stdout carries only build ids (or JSON); progress and errors go to stderr. Resume journals go
to a per-test ASYNCCLIENT_STATE_DIR, never the user's own.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from network_support import ServeEmulator

from asyncclient.cli import _common, _output, _upload, _upload_progress
from asyncclient.testing import FakeService, NetworkConditions, ServiceSettings
from asyncclient.testing.builders import build_apk, build_app_dir
from asyncclient.upload import _journal

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks

RunCli = Callable[..., Awaitable[Any]]
PART = 64 * 1024


@pytest.fixture
async def svc(serve_emulator: ServeEmulator) -> AsyncIterator[FakeService]:
    """The emulator in each wire dialect, and over HTTPS and a proxy (tests/conftest.py)."""
    async with serve_emulator(settings=ServiceSettings(part_bytes=PART)) as service:
        yield service


@pytest.fixture
def env(svc: FakeService, tmp_path: Path) -> dict[str, str]:
    return {
        "ASYNCCLIENT_BASE_URL": svc.url,
        "ASYNCCLIENT_API_KEY": svc.run_key,
        "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
    }


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's session retries without waiting, and an outage only --retries times
    (unreachable services fail at once)."""
    opener = _common.open_session

    def fast(args: Any, **options: Any) -> Any:
        return opener(args, backoff_base=0.0, max_retry_after=0.0, retry_deadline=0, **options)

    monkeypatch.setattr(_upload, "open_session", fast)


def apk(tmp_path: Path, name: str = "shop.apk", parts: int = 3, **options: Any) -> Path:
    return build_apk(tmp_path / name, filler_bytes=parts * PART - 4096, **options)


def ops(svc: FakeService) -> list[str | None]:
    return [r.op for r in svc.requests]


# --- upload ---------------------------------------------------------------------------------------


async def test_upload_prints_only_the_build_id(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    path = apk(tmp_path)
    result = await run_cli("upload", svc.project_id, str(path), "--label", "abc123", env=env)
    assert result.code == 0, result.stderr
    (build_id,) = result.stdout.splitlines()
    assert result.stdout == f"{build_id}\n"
    build = svc.backend.builds[build_id]
    assert (build.status, build.label, build.app_id) == ("ready", "abc123", "com.example.shop")
    # Not a terminal: a line when the file starts and one when it is done.
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"uploading {path}")
    assert lines[1].startswith(f"uploaded {path} -> {build_id}")
    assert len(lines) == 2
    assert list((tmp_path / "state" / "uploads").glob("*.json")) == []


async def test_upload_several_files_prints_ids_in_order(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    first = apk(tmp_path, "one.apk", seed=1)
    app = build_app_dir(tmp_path / "Shop.app")
    result = await run_cli(
        "upload", svc.project_id, str(first), str(app), "--max-parts-in-flight", "2", env=env
    )
    assert result.code == 0, result.stderr
    ids = result.stdout.split()
    assert [svc.backend.builds[i].file_name for i in ids] == ["one.apk", "Shop.app.zip"]


async def test_upload_json_lists_the_builds_and_each_file(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    path = apk(tmp_path)
    result = await run_cli("upload", svc.project_id, str(path), "--json", env=env)
    assert result.code == 0, result.stderr
    answer = result.json()
    (build,) = answer["builds"]
    assert build["id"].startswith("ab_")
    assert build["status"].lower() == "ready"
    assert build["fileName"] == "shop.apk"
    assert build["sha256"] == svc.backend.builds[build["id"]].sha256
    (entry,) = answer["results"]
    assert entry == {
        "file": str(path),
        "ok": True,
        "buildId": build["id"],
        "skipped": False,
        "joined": False,
        "resumed": False,
        "verified": True,
        "sha256": build["sha256"],
        "partsInFlight": 2,  # the adaptive default's start: one part, nothing to raise for
    }


async def test_quiet_writes_nothing_to_stderr(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    result = await run_cli("upload", svc.project_id, str(apk(tmp_path)), "--quiet", env=env)
    assert result.code == 0
    assert result.stderr == ""
    assert result.stdout.startswith("ab_")


async def test_skip_existing_prints_the_existing_build(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    path = apk(tmp_path)
    first = await run_cli("upload", svc.project_id, str(path), env=env)
    svc.reset_requests()
    again = await run_cli("upload", svc.project_id, str(path), "--skip-existing", env=env)
    assert again.code == 0, again.stderr
    assert again.stdout == first.stdout
    assert "already uploaded as" in again.stderr
    assert "upload_part" not in ops(svc)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["p_demo", "{tmp}/missing.apk"], "no such file: check the path"),
        (["p_demo", "{tmp}/notes.txt"], "neither an .apk nor an .app.zip"),
        (["demo", "{tmp}/shop.apk"], "'demo' is not a project id"),
        (["p_demo", "{tmp}/shop.apk", "--concurrency", "0"], "must be at least 1"),
    ],
)
async def test_bad_input_exits_2_without_a_request(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    argv: list[str],
    message: str,
) -> None:
    apk(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    result = await run_cli("upload", *[a.format(tmp=tmp_path) for a in argv], env=env)
    assert result.code == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert svc.requests == []


async def test_a_rejected_build_exits_3_and_says_what_cannot_run(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    old = apk(tmp_path, "old.apk", abis=("armeabi-v7a",))
    result = await run_cli("upload", svc.project_id, str(old), env=env)
    assert result.code == 3
    assert result.stdout == ""
    assert f"error: {old}: 422 build_rejected" in result.stderr
    assert "cannot run: native code only for armeabi-v7a" in result.stderr


async def test_one_failing_file_does_not_stop_the_others(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    good = apk(tmp_path, "good.apk")
    old = apk(tmp_path, "old.apk", abis=("armeabi-v7a",))
    result = await run_cli(
        "upload", svc.project_id, str(tmp_path / "gone.apk"), str(old), str(good), "--json",
        env=env,
    )  # fmt: skip
    assert result.code == 3  # the worst of 2 (bad input) and 3 (refused)
    answer = result.json()
    assert [b["fileName"] for b in answer["builds"]] == ["good.apk"]
    assert [(r["ok"], r.get("exitCode")) for r in answer["results"]] == [
        (False, 2),
        (False, 3),
        (True, None),
    ]
    # What the devices cannot run, whatever shape the dialect sent it in.
    assert "armeabi-v7a" in answer["results"][1]["problems"][0]["message"]


async def test_an_unreachable_service_exits_4(
    run_cli: RunCli, tmp_path: Path, env: dict[str, str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = {**env, "ASYNCCLIENT_BASE_URL": f"http://127.0.0.1:{port}"}
    result = await run_cli("upload", "p_demo", str(apk(tmp_path)), env=unreachable)
    assert result.code == 4
    assert "check --base-url" in result.stderr
    assert result.stdout == ""


async def test_a_wrong_key_exits_3(run_cli: RunCli, tmp_path: Path, env: dict[str, str]) -> None:
    result = await run_cli(
        "upload", "p_demo", str(apk(tmp_path)), env={**env, "ASYNCCLIENT_API_KEY": "nope"}
    )
    assert result.code == 3
    assert "check the key" in result.stderr
    assert "nope" not in result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX here")
async def test_ctrl_c_keeps_the_journal_and_the_same_command_resumes(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = apk(tmp_path, parts=40)
    svc.conditions = NetworkConditions(part_bandwidth=256 * 1024)  # a part every 0.25 s
    two_parts_in = asyncio.Event()
    commit = svc.backend.build_store.commit_part

    def counting(*args: Any) -> Any:
        if len(svc.requests_for("upload_part")) >= 1:  # this is the second part
            two_parts_in.set()
        return commit(*args)

    monkeypatch.setattr(svc.backend.build_store, "commit_part", counting)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "upload", svc.project_id, str(path),
        "--concurrency", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(20):
            line = (await proc.stderr.readline()).decode()
            assert line.startswith("uploading"), line
            await two_parts_in.wait()
            proc.send_signal(signal.SIGINT)
            out, rest = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, rest.decode()
    assert out == b""
    assert "run the same command again to resume" in rest.decode()
    (journal,) = (tmp_path / "state" / "uploads").glob("*.json")
    kept = _journal.merged(journal.read_text())
    assert kept["etags"]

    svc.conditions = NetworkConditions()
    svc.reset_requests()
    result = await run_cli("upload", svc.project_id, str(path), "--json", env=env)
    assert result.code == 0, result.stderr
    (entry,) = result.json()["results"]
    assert entry["resumed"]
    assert entry["buildId"] == kept["buildId"]
    sent = {int(r.path.rsplit("/", 1)[1]) for r in svc.requests_for("upload_part")}
    assert sent.isdisjoint(int(n) for n in kept["etags"])  # journalled parts were not resent
    assert "start_upload" not in ops(svc)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX here")
async def test_a_resume_that_kept_no_part_says_it_starts_over(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C before the service stored any part: the same command sends every part again,
    and says so ("0 of 4 parts kept: starting over"), never "(resumed)"."""
    path = apk(tmp_path, parts=4)
    arrived, never = asyncio.Event(), asyncio.Event()
    commit = svc.backend.build_store.commit_part

    async def held(*args: Any) -> Any:
        arrived.set()
        await never.wait()  # no part is ever stored in this run

    monkeypatch.setattr(svc.backend.build_store, "commit_part", held)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "upload", svc.project_id, str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **env},
    )  # fmt: skip
    try:
        async with asyncio.timeout(20):
            await arrived.wait()
            proc.send_signal(signal.SIGINT)
            _, rest = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, rest.decode()
    monkeypatch.setattr(svc.backend.build_store, "commit_part", commit)
    result = await run_cli("upload", svc.project_id, str(path), env=env)
    assert result.code == 0, result.stderr
    done = next(line for line in result.stderr.splitlines() if line.startswith("uploaded"))
    assert "(0 of 4 parts kept: starting over)" in done
    assert "resumed" not in done


# --- inspect --------------------------------------------------------------------------------------


async def test_inspect_prints_what_the_pre_flight_reads(run_cli: RunCli, tmp_path: Path) -> None:
    path = build_apk(tmp_path / "shop.apk", version_name="2.1.0", version_code=210, min_sdk=26)
    result = await run_cli("inspect", str(path))
    assert result.code == 0, result.stderr
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines() if " " in line)
    text = result.stdout
    assert "com.example.shop" in text
    assert "2.1.0" in text
    assert "210" in text
    assert "arm64-v8a, x86_64" in text
    assert "the default devices can run it" in text
    assert fields["platform"].strip() == "android"


async def test_inspect_json_has_the_compatibility(run_cli: RunCli, tmp_path: Path) -> None:
    path = build_apk(tmp_path / "old.apk", abis=("armeabi-v7a",))
    result = await run_cli("inspect", str(path), "--json")
    assert result.code == 0, result.stderr
    answer = result.json()
    assert answer["appId"] == "com.example.shop"
    assert answer["fileName"] == "old.apk"
    assert answer["size"] == path.stat().st_size
    assert len(answer["sha256"]) == 64
    assert answer["abis"] == ["armeabi-v7a"]
    assert answer["compatibility"]["ok"] is False
    assert answer["compatibility"]["problems"][0]["kind"] == "abi"


async def test_inspect_an_app_folder(run_cli: RunCli, tmp_path: Path) -> None:
    app = build_app_dir(tmp_path / "Shop.app", archs=("arm64",))
    result = await run_cli("inspect", str(app), "--json")
    assert result.code == 0, result.stderr
    answer = result.json()
    assert answer["fileName"] == "Shop.app.zip"
    assert answer["platform"] == "ios"
    assert answer["supportedPlatforms"] == ["iPhoneSimulator"]
    assert answer["compatibility"]["warnings"]  # no x86_64 slice


async def test_inspect_a_file_that_is_not_an_app_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "fake.apk"
    path.write_bytes(b"not a zip")
    result = await run_cli("inspect", str(path))
    assert result.code == 2
    assert "not a zip file" in result.stderr
    assert result.stdout == ""


def test_plain_output_reports_each_quarter_of_a_big_file_once() -> None:
    import io

    from asyncclient.cli._output import Output
    from asyncclient.cli._upload_progress import QUARTERS_FROM, Lines

    err = io.StringIO()
    big, small = Path("big.apk"), Path("small.apk")
    lines = Lines(Output(stdout=io.StringIO(), stderr=err), [big, small])
    total = QUARTERS_FROM * 4
    report = lines.progress_for(0)
    # Start, climb past a quarter, wind back (a retried part), climb again, finish.
    for done in (0, total // 5, total // 4 + 1, total // 8, total // 4 + 2, total // 2, total):
        report(done, total)
    small_report = lines.progress_for(1)
    for done in (0, 1 << 20, 2 << 20):
        small_report(done, 2 << 20)
    assert [line.split(" (")[0] for line in err.getvalue().splitlines()] == [
        "uploading big.apk",
        "  big.apk: 25%",
        "  big.apk: 50%",
        "uploading small.apk",
    ]


def test_progress_says_the_parts_in_flight_while_they_are_found() -> None:
    """The quarter lines say the adaptive number as it is now; a fixed number is not repeated
    there. The line that says a file is done says what it settled on."""
    import io

    from asyncclient.cli._output import Output
    from asyncclient.cli._upload_progress import QUARTERS_FROM, Lines, done_line
    from asyncclient.models import Build
    from asyncclient.upload import Adaptive, UploadResult

    err = io.StringIO()
    tuner = Adaptive()
    lines = Lines(Output(stdout=io.StringIO(), stderr=err), [Path("big.apk")], tuner)
    total = QUARTERS_FROM * 4
    report = lines.progress_for(0)
    report(0, total)
    report(total // 4 + 1, total)
    tuner.current = 24  # as the tuner moves it
    report(total // 2 + 1, total)
    quarter, half = err.getvalue().splitlines()[1:]
    assert quarter.startswith("  big.apk: 25% (64.0 MiB of 256.0 MiB, ")
    assert quarter.endswith(" s, 2 parts in flight)")  # where the adaptive number starts
    assert half.endswith(" s, 24 parts in flight)")
    fixed = io.StringIO()
    plain = Lines(Output(stdout=io.StringIO(), stderr=fixed), [Path("big.apk")])
    plain.progress_for(0)(0, total)
    plain.progress_for(0)(total // 4 + 1, total)
    assert "in flight" not in fixed.getvalue()
    build = Build(id="ab_1", status="ready", app_id="com.example.shop", size=total)
    settled = UploadResult(Path("big.apk"), build=build, parts_sent=32, parts_in_flight=24)
    assert done_line(settled).endswith(", 24 parts in flight")
    single = UploadResult(Path("big.apk"), build=build, parts_sent=1, parts_in_flight=4)
    assert "in flight" not in done_line(single)


# --- rates ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nbytes", "seconds", "shown"),
    [
        (5 << 10, 0.2, ""),  # a tiny file: no "0.0 MB/s"
        (64 << 20, 0.005, ""),  # too quick to time
        (64 << 20, None, ""),
        (64 << 20, 0.5, "134.2 MB/s"),
        (2 << 20, 4.0, "524 kB/s"),
        (4 << 30, 2.0, "2.1 GB/s"),
    ],
)
def test_a_rate_is_shown_only_when_it_means_something(
    nbytes: int, seconds: float | None, shown: str
) -> None:
    assert _output.format_rate(nbytes, seconds) == shown


def test_a_tiny_upload_reports_no_rate(tmp_path: Path) -> None:
    from asyncclient.models import Build
    from asyncclient.upload import UploadResult

    build = Build(id="ab_1", app_id="com.example.tiny", version="1.0", size=5 << 10)
    result = UploadResult(tmp_path / "tiny.apk", build=build, bytes_sent=5 << 10, elapsed=0.2)
    line = _upload_progress.done_line(result)
    assert line.endswith("5.0 KiB in 0.2 s"), line
    assert "/s" not in line


def test_warnings_sent_as_objects_are_shown_as_their_text(tmp_path: Path) -> None:
    from asyncclient.models import Build
    from asyncclient.upload import UploadResult

    warnings = ({"code": "debuggable", "message": "This is a debug build."}, "plain words")
    build = Build(id="ab_1", app_id="com.example.shop", size=1, warnings=warnings)
    out = _output.Output(stdout=io.StringIO(), stderr=io.StringIO())
    display = _upload_progress.Lines(out, [tmp_path / "shop.apk"])

    display.finished(UploadResult(tmp_path / "shop.apk", build=build, bytes_sent=1, elapsed=0.1))

    notes = out.stderr.getvalue().splitlines()[1:3]
    assert notes == ["  warning: debuggable: This is a debug build.", "  warning: plain words"]


class _Terminal:
    """A stderr that says it is a terminal, so upload draws rich bars."""

    def __init__(self) -> None:
        import io

        self.buffer = io.StringIO()

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_a_bar_shows_no_question_mark_for_a_rate_it_does_not_know(tmp_path: Path) -> None:
    from rich.console import Console

    out = _output.Output(stdout=_Terminal(), stderr=_Terminal())  # type: ignore[arg-type]
    display = _upload_progress.display_for(out, [tmp_path / "tiny.apk"])
    assert isinstance(display, _upload_progress.Bars)
    report = display.progress_for(0)
    report(0, 5 << 10)
    report(5 << 10, 5 << 10)
    progress = display._progress
    console = Console(width=160, record=True, file=_Terminal())  # type: ignore[arg-type]
    console.print(progress.make_tasks_table(progress.tasks))
    row = console.export_text().strip()
    assert "tiny.apk" in row
    assert "?" not in row
    assert "/s" not in row


def _drawn_lines(display: _upload_progress.Bars, height: int) -> list[str]:
    """What one refresh of the live display draws, as a terminal of `height` lines shows it."""
    from rich.console import Console

    console = Console(width=120, height=height, record=True, file=_Terminal())  # type: ignore[arg-type]
    console.print(display._progress.get_renderable())
    return console.export_text().rstrip("\n").splitlines()


@pytest.mark.parametrize("height", [12, 24, 60])
def test_two_hundred_files_draw_a_bounded_number_of_lines(tmp_path: Path, height: int) -> None:
    from asyncclient.models import Build
    from asyncclient.upload import UploadResult

    files = []
    for n in range(200):
        path = tmp_path / f"app{n:03}.apk"
        path.write_bytes(b"x" * 1000)
        files.append(path)
    out = _output.Output(stdout=_Terminal(), stderr=_Terminal())  # type: ignore[arg-type]
    display = _upload_progress.Bars(out, files, height=height)
    assert display.rows == min(10, height - 4)
    reports = [display.progress_for(n) for n in range(200)]

    # Every file in flight at once: one overall line and at most `rows` file lines.
    for report in reports:
        report(500, 1000)
    drawn = _drawn_lines(display, height)
    assert len(drawn) == 1 + display.rows
    assert drawn[0].startswith("0 of 200 files")
    assert "97.7/195.3 KiB" in drawn[0]  # the bytes of all 200, halfway

    # As files finish, their rows go to files still in flight; the count never grows.
    for n, path in enumerate(files[:150]):
        reports[n](1000, 1000)
        build = Build(id=f"ab_{n}", app_id="com.example.shop", size=1000)
        display.finished(UploadResult(path, build=build, bytes_sent=1000, elapsed=0.1))
        for report in reports[150:]:
            report(600, 1000)
        assert len(_drawn_lines(display, height)) <= 1 + display.rows
    drawn = _drawn_lines(display, height)
    assert drawn[0].startswith("150 of 200 files")
    assert len(drawn) == 1 + display.rows

    # Past PRINT_EACH_UP_TO files, no line per finished file: one summary when it closes.
    display.close()
    printed = out.stderr.buffer.getvalue()
    assert "uploaded app000.apk" not in printed
    assert "uploaded 150 of 200 files, 146.5 KiB" in printed


def test_a_few_files_each_leave_their_line(tmp_path: Path) -> None:
    from asyncclient.models import Build
    from asyncclient.upload import UploadResult

    files = [tmp_path / f"app{n}.apk" for n in range(3)]
    for path in files:
        path.write_bytes(b"x" * 1000)
    out = _output.Output(stdout=_Terminal(), stderr=_Terminal())  # type: ignore[arg-type]
    display = _upload_progress.Bars(out, files, height=24)
    for n, path in enumerate(files):
        display.progress_for(n)(1000, 1000)
        build = Build(id=f"ab_{n}", app_id="com.example.shop", size=1000)
        display.finished(UploadResult(path, build=build, bytes_sent=1000, elapsed=0.1))
    display.close()
    printed = " ".join(out.stderr.buffer.getvalue().split())  # rich wraps long paths
    assert [printed.count(f"-> ab_{n}:") for n in range(3)] == [1, 1, 1]
    assert "uploaded 3 of 3 files" not in printed
