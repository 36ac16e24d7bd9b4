"""The many-processes cases again, each process under Windows' rules (tests/foreign_os.py): no
fcntl, none of the POSIX-only `os` functions, a byte-range msvcrt lock, and no rename or removal
of a file any process holds open. Real processes against the emulator in this test's loop.

Marked `processes`, like tests/across/test_processes.py: run once, on the README's Python.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from commands_support import (
    ANDROID_BUILD,
    CHECKOUT_FILES,
    env_for,
    finished_run,
    plain_get,
    seed,
)
from commands_support import run_all as shared_run_all
from tiers import repeat

from asyncclient.testing import FakeService, NetworkConditions, ServiceSettings
from asyncclient.testing.builders import build_apk

pytestmark = [
    pytest.mark.processes,
    pytest.mark.timeout(600),
    pytest.mark.linux(reason="Windows' rules are built on /proc and POSIX record locks"),
]

MiB = 1 << 20
FOREIGN = Path(__file__).resolve().parent.parent / "foreign_os.py"


def windows_command(*argv: str) -> list[str]:
    return [sys.executable, str(FOREIGN), "asyncclient", *argv]


async def run_all(argvs: list[list[str]], env: dict[str, str]) -> list[tuple[int, str, str]]:
    return await shared_run_all(argvs, env, command=windows_command())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_rules_are_in_force_in_the_child(tmp_path: Path) -> None:
    """The harness itself: without it these would all succeed on Linux."""
    probe = (
        "import os, sys\n"
        "try:\n    import fcntl\nexcept ImportError:\n    print('no fcntl')\n"
        "print('pread' in dir(os), hasattr(os, 'O_NOFOLLOW'), hasattr(os, 'sendfile'))\n"
        "import msvcrt; print('msvcrt', msvcrt.LK_NBLCK)\n"
        "open('held', 'w').close(); f = open('held')\n"
        "try:\n    os.replace('held', 'moved')\nexcept PermissionError as e:\n"
        "    print('refused', e.winerror)\n"
        "f.close(); os.replace('held', 'moved'); print('moved once closed')\n"
    )
    ran = subprocess.run(
        [sys.executable, str(FOREIGN), "-"],
        input=probe,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert ran.stdout.splitlines() == [
        "no fcntl",
        "False False False",
        "msvcrt 2",
        "refused 32",
        "moved once closed",
    ], ran.stderr


@pytest.fixture(scope="module")
def big_apk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_apk(tmp_path_factory.mktemp("apk") / "big.apk", filler_bytes=24 * MiB)


def slow_service(part_bandwidth: int = 16_000_000) -> FakeService:
    # 16 MB/s per part: one upload takes about half a second, long enough for a kill to land
    # midway.
    return FakeService(
        settings=ServiceSettings(part_bytes=2 * MiB),
        conditions=NetworkConditions(part_bandwidth=part_bandwidth),
    )


async def _read_waiting(
    proc: asyncio.subprocess.Process,
    index: int,
    error: bytearray,
    waiting: set[int],
    gate: asyncio.Event,
) -> None:
    """Read the process's stderr into `error`; once three processes say they wait for another
    upload of the file, open the gate."""
    assert proc.stderr is not None
    async for line in proc.stderr:
        error += line
        if b"waiting for another upload of big.apk" in line:
            waiting.add(index)
            if len(waiting) == 3:
                gate.set()


async def test_four_processes_upload_one_file(
    big_apk: Path, tmp_path: Path, repetitions: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = sha256(big_apk)
    async with slow_service() as svc:
        # The first upload's Complete is held until the three others wait on its lock, so no
        # process can start after it ended, however far apart a busy machine starts them.
        store = svc.backend.build_store
        complete, gate = store.complete_upload, asyncio.Event()

        async def held_complete(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()
            return await complete(*args, **kwargs)

        monkeypatch.setattr(store, "complete_upload", held_complete)
        env = {**os.environ, **env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        for repetition in repeat(repetitions, 3):
            svc.reset_requests()
            gate.clear()
            procs = [
                await asyncio.create_subprocess_exec(
                    *windows_command("upload", svc.project_id, str(big_apk)),
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                for _ in range(4)
            ]
            waiting: set[int] = set()
            errors: list[bytearray] = [bytearray() for _ in procs]
            async with asyncio.timeout(120):  # a bound on a hang, not a measure of speed
                await asyncio.gather(
                    *(
                        _read_waiting(proc, i, errors[i], waiting, gate)
                        for i, proc in enumerate(procs)
                    )
                )
                outs = [await proc.communicate() for proc in procs]
            for proc, error in zip(procs, errors, strict=True):
                assert proc.returncode == 0, f"repetition {repetition}: {error.decode()}"
            assert len(waiting) == 3, [e.decode() for e in errors]
            ids = {out.decode().strip() for out, _ in outs}
            assert len(ids) == 1, ids  # one build: the others waited and took it
            build = svc.backend.builds[ids.pop()]
            assert build.status == "ready"
            assert build.sha256 == expected
            assert len(svc.requests_for("complete_upload")) == 1
            assert len(svc.requests_for("start_upload")) == 1
    assert list((tmp_path / "state" / "uploads").glob("*.json")) == []


async def test_an_upload_killed_midway_resumes_from_its_journal(
    big_apk: Path, tmp_path: Path
) -> None:
    async with slow_service() as svc:
        env = {**os.environ, **env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        first = await asyncio.create_subprocess_exec(
            *windows_command("upload", svc.project_id, str(big_apk), "--concurrency", "2"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # Killed once the journal holds some parts (the service's count runs ahead of the
        # journal on a busy machine: a part stored, its answer not yet read).
        journals = tmp_path / "state" / "uploads"
        for _ in range(1500):
            await asyncio.sleep(0.02)
            held = sum(
                path.read_text(errors="replace").count('"part"')
                for path in (journals.glob("*.json") if journals.is_dir() else [])
            )
            if held >= 2:
                break
        first.send_signal(signal.SIGKILL)
        await first.communicate()
        sent_before = len([r for r in svc.requests_for("upload_part") if r.status == 200])
        assert 2 <= sent_before < 12  # midway: 12 parts in all

        second = await run_all(
            [["upload", svc.project_id, str(big_apk)]],
            env_for(svc) | {"ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")},
        )
        code, out, err = second[0]
        assert code == 0, err
        build = svc.backend.builds[out.strip()]
        assert build.status == "ready"
        assert build.sha256 == sha256(big_apk)
        sent_after = len([r for r in svc.requests_for("upload_part") if r.status == 200])
        # Only the missing parts went again (the journal was read and replaced under
        # Windows' rules): fewer than a whole upload.
        assert sent_after - sent_before < 12
        assert "resum" in err.lower()


async def test_four_processes_download_one_run_into_one_folder(
    tmp_path: Path, repetitions: int | None
) -> None:
    async with FakeService(seed(), clock="manual") as svc:
        run_id = await finished_run(svc)
        served = {f: await plain_get(svc, f"runs/{run_id}/files/{f}") for f in CHECKOUT_FILES}
        env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        for repetition in repeat(repetitions, 3):
            folder = tmp_path / f"out{repetition}"
            results = await run_all([["download", run_id, "-o", str(folder)]] * 4, env)
            for code, _, err in results:
                assert code == 0, f"repetition {repetition}: {err}"
            left = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
            assert left == sorted(["screenshots", *CHECKOUT_FILES])  # no .part, .etag, lock
            for file, data in served.items():
                assert (folder / file).read_bytes() == data


async def test_two_downloads_through_a_symlinked_folder_take_one_lock(
    tmp_path: Path, repetitions: int | None
) -> None:
    """One folder reached by two paths (a link; on macOS and Windows also another case):
    the two processes take one lock, so neither breaks the other's file."""
    async with FakeService(seed(), clock="manual") as svc:
        run_id = await finished_run(svc)
        served = {f: await plain_get(svc, f"runs/{run_id}/files/{f}") for f in CHECKOUT_FILES}
        real = tmp_path / "evidence"
        real.mkdir()
        (tmp_path / "link").symlink_to(real)
        env = {
            **os.environ,
            **env_for(svc),
            "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
        }
        for repetition in repeat(repetitions, 5):
            folder = real / str(repetition)
            folder.mkdir()
            procs = [
                await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "asyncclient", "download", run_id, "-o", str(path),
                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                )
                for path in (folder, tmp_path / "link" / str(repetition))
            ]  # fmt: skip
            outs = [await proc.communicate() for proc in procs]
            for proc, (_, err) in zip(procs, outs, strict=True):
                assert proc.returncode == 0, err.decode()
            for file, data in served.items():
                assert (folder / file).read_bytes() == data
            assert not list(folder.rglob("*.part"))


async def test_processes_read_the_repositorys_categories_file_as_it_is_replaced(
    tmp_path: Path,
) -> None:
    """Under Windows' rules: `failures` and `flaky`, four processes at once, read the categories
    file where they run and hold it open no longer than the read; so it can then be replaced
    (Windows refuses to replace a file a process holds open), and the next process reads the
    new one: a regex RE2 cannot run (a back-reference), refused with exit 2."""
    import json

    categories = tmp_path / "failure-categories.toml"
    categories.write_text(
        '[[category]]\nname = "staging unreachable"\nkind = "infrastructure"\n'
        'match = "connection refused"\n'
    )
    async with FakeService() as svc:
        env = env_for(svc)
        first = await shared_run_all(
            [["--json", "failures", "p_demo"], ["--json", "flaky", "p_demo"]] * 2,
            env,
            cwd=tmp_path,
            command=windows_command(),
        )
        replaced = tmp_path / "replaced.toml"
        replaced.write_text("[[category]]\nname = 'slow'\nkind = 'app'\nregex = '(a)\\1'\n")
        os.replace(replaced, categories)  # nobody holds it open: Windows allows it
        second = await shared_run_all(
            [["failures", "p_demo"]], env, cwd=tmp_path, command=windows_command()
        )
    for code, _, err in first:
        assert code == 0, err
    names = {c["category"]["name"] for c in json.loads(first[0][1])["clusters"]}
    assert "staging unreachable" in names
    ((code, _, err),) = second
    assert code == 2
    assert "regex '(a)\\\\1' refused" in err


async def test_allure_results_with_the_evidence_under_windows_rules(tmp_path: Path) -> None:
    """`run test --wait --download-failed --allure-results` under Windows' rules: the
    failed run's result, its evidence attached (linked, or copied where no link may be
    made), every file whole."""
    import json

    async with FakeService(seed(), speed=1000.0) as svc:
        env = {**env_for(svc), "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state")}
        evidence, folder = tmp_path / "evidence", tmp_path / "allure-results"
        ((code, _, err),) = await run_all(
            [
                [
                    "run", "test", "t_checkout", "--build", ANDROID_BUILD, "--wait",
                    "--interval", "0.02", "--download-failed", str(evidence),
                    "--allure-results", str(folder),
                ]
            ],
            env,
        )  # fmt: skip
    assert code == 1, err  # t_checkout fails
    (result,) = [json.loads(p.read_text()) for p in folder.glob("*-result.json")]
    assert result["status"] == "failed"
    attached = {a["name"]: (folder / a["source"]).read_bytes() for a in result["attachments"]}
    saved = {p.name: p.read_bytes() for p in evidence.rglob("*") if p.is_file()}
    assert attached
    assert attached == {name: saved[name] for name in attached}
    assert not [p for p in folder.iterdir() if p.name.endswith((".tmp", ".part"))]


async def test_a_jobs_trace_is_exported_under_windows_rules(tmp_path: Path) -> None:
    """`run test --wait` with OTEL_EXPORTER_OTLP_ENDPOINT under Windows' rules: the SDK and
    the OTLP exporter set up and ended there too, the job's spans reach the receiver, and its
    trace id is the one --json gives."""
    import json

    from otlp_support import otlp_receiver

    async with otlp_receiver() as found, FakeService(seed(), speed=1000.0) as svc:
        env = {**env_for(svc), "OTEL_EXPORTER_OTLP_ENDPOINT": found.url}
        ((code, out, err),) = await run_all(
            [["run", "test", "t_checkout", "--build", ANDROID_BUILD, "--wait", "--json",
              "--interval", "0.02"]],
            env,
        )  # fmt: skip
        spans = list(found.spans)
    assert code == 1, err  # t_checkout fails
    assert "warning" not in err, err
    (job,) = [span for span in spans if span.name == "asyncclient.job"]
    assert job.attributes["test.suite.name"] == "t_checkout"
    assert [entry["traceId"] for entry in json.loads(out)] == [job.trace_id]
    names = [span.name for span in spans]
    assert (names.count("asyncclient.test"), names.count("asyncclient.run")) == (1, 1)


async def test_an_upload_over_tls_reads_its_parts_without_positional_reads(
    big_apk: Path, tmp_path: Path
) -> None:
    # Parts over TLS go out from threads; with no os.preadv each attempt opens the file (the
    # choice of path does not depend on the platform: tests/client/test_tls_parts.py).
    settings = ServiceSettings(part_bytes=2 * MiB)
    async with FakeService(settings=settings, tls=True) as svc:
        assert svc.ca_file is not None
        env = {
            **os.environ,
            **env_for(svc),
            "ASYNCCLIENT_CA_FILE": str(svc.ca_file),
            "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
        }
        proc = await asyncio.create_subprocess_exec(
            *windows_command("upload", svc.project_id, str(big_apk)),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        async with asyncio.timeout(120):  # a bound on a hang, not a measure of speed
            out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        build = svc.backend.builds[out.decode().strip()]
        assert build.sha256 == sha256(big_apk)
        assert len(svc.requests_for("upload_part")) == 13  # 24 MiB and the apk's own, in 2 MiB
