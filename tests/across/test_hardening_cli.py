"""The command in a CI fleet's hands, where a pull request writes the repository's files and the
service's text reaches the terminal, the log and the step summary: a project file cannot make
the command write outside its repository; service text never steers the terminal or starts a
workflow command; an id is checked before it is printed; a file with bad bytes or absurd
nesting is one line and exit 2; the quarantine writer never breaks a valid file."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]

EVIL_TITLE = (
    "Checkout \x1b[31mred\x1b[0m \x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x07\x00"
    "\n::error title=forged::the build is broken\n##[error]old form [x](https://evil.example)"
    " ![i](https://evil.example/i.png) **bold** \u202eevil\x9b2J"
)
EVIL_HEADLINE = "Total \x1b[2J wrong\r\n::warning::forged too"


def _seed(title: str = EVIL_TITLE) -> dict[str, Any]:
    return {
        "projects": [{"id": "p_h", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "h-key", "capability": "run", "projects": ["p_h"]}],
        "tests": [
            {"id": "t_evil", "title": title, "project": "p_h", "target": "web",
             "url": "https://shop.example",
             "outcome": "failed", "headline": EVIL_HEADLINE, "durationSeconds": 5},
        ],
    }  # fmt: skip


@pytest.fixture
async def svc() -> AsyncIterator[FakeService]:
    async with FakeService(_seed(), speed=600) as service:
        yield service


@pytest.fixture
def env(svc: FakeService) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": "h-key"}


def _safe(text: str) -> None:
    """No control character (but new lines), no line a GitHub runner would run."""
    bad = [ch for ch in text if (ord(ch) < 32 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F]
    assert not bad, (bad, text)
    assert "\u202e" not in text
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), line
        assert "##[" not in line, line


# --- the service's text ------------------------------------------------------------------------


async def test_the_services_text_never_steers_the_terminal_the_log_or_the_summary(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    result = await run_cli(
        "-v", "run", "project", "p_h", "--wait", "--interval", "0.05",
        env={**env, "GITHUB_STEP_SUMMARY": str(summary), "ASYNCCLIENT_LOG": "debug"},
    )  # fmt: skip
    assert result.code == 1, result.stderr  # the test failed: that is all it may say
    _safe(result.stdout)
    _safe(result.stderr)
    assert "\\x1b[31mred" in result.stdout  # shown, as an escape
    text = summary.read_text()
    _safe(text)
    assert "](https://evil.example)" not in text
    assert "\\[x\\](https\\://evil.example)" in text
    assert "\\*\\*bold\\*\\*" in text


async def test_json_keeps_the_services_text_as_sent(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("--json", "run", "project", "p_h", "--wait", "--interval", "0.05",
                           env=env)  # fmt: skip
    assert result.code == 1, result.stderr
    _safe(result.stdout)  # the JSON text escapes what a terminal acts on
    (run,) = result.json()
    assert run["testTitle"] == EVIL_TITLE


def _forging_service(answer: dict[str, Any], seen: list[str]) -> web.Application:
    async def start(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response(answer, status=201)

    async def other(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"runs": []})

    app = web.Application()
    app.router.add_post("/api/v1/tests/{test}/run", start)
    app.router.add_post("/api/v1/projects/{project}/run", start)
    app.router.add_get("/api/v1/runs", other)
    return app


@pytest.mark.parametrize(
    ("argv", "answer"),
    [
        (["run", "test", "t_1"], {"runId": "j_1\n::error::forged", "mode": "auto"}),
        (["run", "project", "p_1"],
         {"started": [{"testId": "t_1", "runId": "j_1\r\n##[error]forged"}], "skipped": []}),
        (["run", "project", "p_1"],
         {"started": [{"testId": "t_1\n::error::x", "runId": "j_1"}], "skipped": []}),
    ],
)  # fmt: skip
async def test_an_id_is_checked_before_it_is_printed_or_followed(
    run_cli: RunCli, argv: list[str], answer: dict[str, Any]
) -> None:
    seen: list[str] = []
    runner = web.AppRunner(_forging_service(answer, seen))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        result = await run_cli(
            *argv, "--wait",
            env={"ASYNCCLIENT_BASE_URL": f"http://127.0.0.1:{port}", "ASYNCCLIENT_API_KEY": "k"},
        )  # fmt: skip
    finally:
        await runner.cleanup()
    assert result.code not in (0, 1), result.stderr  # not a verdict: the answer was bad
    _safe(result.stdout)
    _safe(result.stderr)
    assert "could not be read" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert seen == [seen[0]]  # the start only: nothing was followed


# --- a repository's files ------------------------------------------------------------------------


def _repository(tmp_path: Path, config: str, name: str = "asyncclient.toml") -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / name).write_text(config)
    return repo


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ('[run]\nhtml = "../victim/.bashrc"\n', "run.html = '../victim/.bashrc' leads outside"),
        ('[run]\njunit = "/tmp/abs/junit.xml"\n', "run.junit = '/tmp/abs/junit.xml' is absolute"),
        ('[run]\ndownload_failed = "~/evidence"\n', "run.download_failed = '~/evidence' starts at"),
        ('[profiles.ci.run]\nhtml = "a/../../../x.html"\n', "run.html = 'a/../../../x.html' leads"),
        ('[run]\nevents = ".git/config"\n', "run.events = '.git/config' is inside the repo"),
        ('[run]\njunit = "sub/.hg/hgrc"\n', "run.junit = 'sub/.hg/hgrc' is inside the re"),
        ('[run]\nallure_results = "../victim"\n', "run.allure_results = '../victim' leads out"),
    ],
)  # fmt: skip
async def test_a_project_file_cannot_write_outside_its_repository(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: str,
    said: str,
) -> None:
    repo = _repository(tmp_path, config)
    monkeypatch.chdir(repo)
    svc.reset_requests()
    profile = ["--profile", "ci"] if "profiles" in config else []
    result = await run_cli("run", "project", "p_h", "--wait", *profile, env=env)
    assert result.code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert said in line
    assert str(repo / "asyncclient.toml") in line
    assert "ASYNCCLIENT_ALLOW_OUTSIDE_PATHS=1" in line
    assert svc.requests == []  # refused before any request
    assert not (tmp_path / "victim").exists()


async def test_a_symlink_out_of_the_repository_is_refused_and_pyproject_too(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = _repository(tmp_path, '[run]\njunit = "reports/junit.xml"\n')
    (tmp_path / "outside").mkdir()
    (repo / "reports").symlink_to(tmp_path / "outside")
    monkeypatch.chdir(repo)
    result = await run_cli("run", "project", "p_h", "--wait", env=env)
    assert result.code == 2
    assert "run.junit = 'reports/junit.xml' leads outside the repository" in result.stderr
    (repo / "asyncclient.toml").unlink()
    (repo / "pyproject.toml").write_text('[tool.asyncclient.run]\nhtml = "../x.html"\n')
    result = await run_cli("run", "project", "p_h", "--wait", env=env)
    assert result.code == 2
    assert "pyproject.toml:2: run.html = '../x.html' leads outside" in result.stderr
    assert svc.requests == []


async def test_paths_inside_the_repository_or_allowed_are_written(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = _repository(tmp_path, '[run]\njunit = "reports/junit.xml"\nhtml = "../out.html"\n')
    monkeypatch.chdir(repo)
    # The user allows it for this job (a variable a pull request cannot set).
    allowed = {**env, "ASYNCCLIENT_ALLOW_OUTSIDE_PATHS": "1"}
    result = await run_cli("run", "project", "p_h", "--wait", "--interval", "0.05", env=allowed)
    assert result.code == 1, result.stderr
    assert (repo / "reports" / "junit.xml").is_file()
    assert (tmp_path / "out.html").is_file()
    monkeypatch.delenv("ASYNCCLIENT_ALLOW_OUTSIDE_PATHS")
    # A path given as a flag is the user's own: it goes where it says, and the file's path
    # for the same report, never used, is not refused (the error's first way out works).
    (tmp_path / "out.html").unlink()
    (repo / "asyncclient.toml").write_text(
        '[run]\njunit = "reports/junit.xml"\nhtml = "../out.html"\n'
    )
    result = await run_cli("run", "project", "p_h", "--wait", "--interval", "0.05",
                           "--html", str(tmp_path / "flag.html"), env=env)  # fmt: skip
    assert result.code == 1, result.stderr
    assert (tmp_path / "flag.html").is_file()
    assert not (tmp_path / "out.html").exists()
    # Another report's path out of the repository is still refused.
    absolute = tmp_path / "abs.xml"
    (repo / "asyncclient.toml").write_text(f'[run]\njunit = "{absolute}"\nhtml = "../out.html"\n')
    result = await run_cli("run", "project", "p_h", "--wait",
                           "--html", str(tmp_path / "flag.html"), env=env)  # fmt: skip
    assert result.code == 2
    assert f"run.junit = '{absolute}' is absolute" in result.stderr
    assert not absolute.exists()
    # The user's own file may name any path.
    (repo / "asyncclient.toml").unlink()
    user = tmp_path / "xdg" / "asyncclient" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'[run]\nhtml = "{tmp_path / "user.html"}"\n')
    result = await run_cli("run", "project", "p_h", "--wait", "--interval", "0.05",
                           env={**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg")})  # fmt: skip
    assert result.code == 1, result.stderr
    assert (tmp_path / "user.html").is_file()


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("asyncclient.toml", b"[run]\nhtml = \"r\xe9port.html\"\n", "not UTF-8 text (byte"),
        ("asyncclient.toml", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
        ("q.toml", b"[[quarantine]]\ntest = \"t_\xff\"\n", "is not UTF-8 text (byte"),
        ("q.toml", b"x = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n", "nested too deeply"),
        ("q.toml", b"quarantine = 3\n", "quarantine must be an array of tables"),
    ],
)  # fmt: skip
async def test_a_file_with_bad_bytes_or_deep_nesting_is_one_line_and_exit_2(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    content: bytes,
    said: str,
) -> None:
    repo = _repository(tmp_path, "")
    (repo / name).write_bytes(content)
    monkeypatch.chdir(repo)
    result = await run_cli("run", "project", "p_h", "--wait", "--quarantine", "q.toml", env=env)
    assert result.code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert said in line
    assert svc.requests == []


def test_a_seed_with_bad_bytes_or_deep_nesting_is_one_line(tmp_path: Path) -> None:
    from asyncclient.cli import main

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'[[projects]]\nid = "p_\xe9"\n')
    for seed, said in ((deep, "nested too deeply"), (latin, "not UTF-8")):
        assert main(["serve", "--seed", str(seed), "--port", "0"]) == 2, said


# --- the quarantine writer ---------------------------------------------------------------------


@pytest.fixture
async def history() -> AsyncIterator[FakeService]:
    async with FakeService(clock="manual") as service:  # the demo seed and its history
        yield service


async def _write(run_cli: RunCli, service: FakeService, path: Path) -> Any:
    env = {"ASYNCCLIENT_BASE_URL": service.url, "ASYNCCLIENT_API_KEY": service.run_key}
    return await run_cli("flaky", "p_demo", "--write-quarantine", str(path), env=env)


async def test_an_empty_inline_array_becomes_tables(
    history: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    path = tmp_path / "q.toml"
    path.write_text('# kept\nquarantine = []\n\n[meta]\nnote = """line one\n[[quarantine]]\n"""\n')
    result = await _write(run_cli, history, path)
    assert result.code == 0, result.stderr
    from asyncclient.quarantine import load_quarantine

    assert [e.test for e in load_quarantine(path).entries] == ["t_onboarding"]
    text = path.read_text()
    assert text.startswith("# kept\n")
    # A person's multi-line string keeps exactly what it held.
    assert 'note = """line one\n[[quarantine]]\n"""' in text


async def test_an_inline_array_with_entries_is_left_as_it_is(
    history: FakeService, run_cli: RunCli, tmp_path: Path
) -> None:
    path = tmp_path / "q.toml"
    before = 'quarantine = [{test = "t_login", reason = "x", until = 2099-01-01}]\n'
    path.write_text(before)
    result = await _write(run_cli, history, path)
    assert result.code == 2
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert "quarantine is an inline array; write its entries as [[quarantine]] tables" in line
    assert path.read_text() == before


async def test_a_symlinked_quarantine_is_written_through_with_its_mode(
    history: FakeService, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "shared" / "quarantine.toml"
    target.parent.mkdir()
    target.write_text("# the team's file\n")
    target.chmod(0o640)
    link = tmp_path / "q.toml"
    link.symlink_to(target)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    result = await _write(run_cli, history, link)
    assert result.code == 0, result.stderr
    assert link.is_symlink()
    assert "t_onboarding" in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert synced  # on the disk before the rename


def test_the_writer_takes_only_test_ids(tmp_path: Path) -> None:
    from datetime import date

    from asyncclient.errors import ValidationError
    from asyncclient.quarantine import QuarantineEntry, load_quarantine, write_quarantine

    path = tmp_path / "q.toml"
    bad = QuarantineEntry('t_x"\n[[quarantine]]\ntest = "t_y', "r", date(2099, 1, 1))
    with pytest.raises(ValidationError):
        write_quarantine(path, [bad])
    assert not path.exists()
    write_quarantine(path, [QuarantineEntry("t_ok", "r", date(2099, 1, 1))])
    assert [e.test for e in load_quarantine(path).entries] == ["t_ok"]


async def test_flaky_writes_only_the_tests_it_asked_about(run_cli: RunCli, tmp_path: Path) -> None:
    """A service whose listing of one test holds runs of others (and a test id with a quote
    and a new line): only the tests asked about are counted and written."""
    runs = []
    for i in range(12):
        for test in ("t_asked", 't_other"\n[x]', "t_other"):
            runs.append({"id": f"j_{test[:7].strip(chr(34))}{i}", "testId": test, "final": True,
                         "status": "passed" if i % 2 else "failed", "buildId": f"ab_{i % 3}",
                         "createdAt": "2026-11-26T00:00:00Z", "projectId": "p_demo"})  # fmt: skip

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"runs": runs})

    app = web.Application()
    app.router.add_get("/api/v1/runs", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    path = tmp_path / "q.toml"
    try:
        env = {"ASYNCCLIENT_BASE_URL": f"http://127.0.0.1:{port}", "ASYNCCLIENT_API_KEY": "k"}
        result = await run_cli("--json", "flaky", "p_demo", "--write-quarantine", str(path),
                               env=env)  # fmt: skip
    finally:
        await runner.cleanup()
    assert result.code == 0, result.stderr
    tests = json.loads(result.stdout)["tests"]
    assert [t["testId"] for t in tests] == ["t_asked", "t_other"]
    assert [t["runs"] for t in tests] == [12, 12]
    from asyncclient.quarantine import load_quarantine

    assert sorted(e.test for e in load_quarantine(path).entries) == ["t_asked", "t_other"]
