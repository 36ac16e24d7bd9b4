"""Getting started and every guide, run as a reader runs them: in a clone of the repository, in
the virtual environment the page's own set-up command makes (a fresh one, with
`pip install '.[cli]'` from PyPI and the clone), every shell block in order, every complete
program saved and run, servers started in another terminal, the output each page shows
checked. Nothing is rewritten before it runs (tests/docs_support.py says the page
conventions).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from docs_support import (
    DOCS,
    PageRun,
    blocks,
    check_fragments,
    clone_of_the_repository,
    run_page,
    runnable_pages,
)

# The slow tier (pytest -m slow): each page builds a fresh virtual environment.
pytestmark = [pytest.mark.docs, pytest.mark.slow, pytest.mark.timeout(900)]

GETTING_STARTED = DOCS / "index.md"


def _the_suites_own_command(page: Path) -> frozenset[int]:
    """The set-up command that runs the test suite (this test among them) is run by .ci/run
    itself, word for word, not from here."""
    return frozenset(
        block.line
        for block in blocks(page)
        if block.kind == "shell" and ".venv/bin/pytest" in block.body
    )


def _reader_environment(home: Path) -> dict[str, str]:
    """The machine's environment as a new shell has it: no ASYNCCLIENT_* variable, no virtual
    environment active (not even this test's), a home of its own; pip's cache kept, so the
    fresh install is as quick as a reader's second one."""
    ours = str(Path(sys.executable).parent)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ASYNCCLIENT_", "PYTEST_", "XDG_"))
        and name not in ("VIRTUAL_ENV", "PYTHONPATH", "GITHUB_STEP_SUMMARY")
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    env.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    env["HOME"] = str(home)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A clone, its environment, and getting started already run in it (its set-up makes
    the .venv every guide uses)."""
    base = tmp_path_factory.mktemp("reader")
    clone = clone_of_the_repository(base / "asyncclient")
    (base / "home").mkdir()
    env = _reader_environment(base / "home")
    return clone, env


@pytest.fixture(scope="module")
def getting_started(
    reader: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> PageRun:
    clone, env = reader
    work = tmp_path_factory.mktemp("getting-started")
    return run_page(
        GETTING_STARTED, clone, env, work, skip=_the_suites_own_command(GETTING_STARTED)
    )


@pytest.mark.pages
def test_getting_started_runs_as_written(
    getting_started: PageRun, reader: tuple[Path, dict[str, str]]
) -> None:
    assert getting_started.problems() == [], getting_started.transcript
    clone, _ = reader
    # What the page says it makes: the virtual environment, the report, the program.
    assert (clone / ".venv" / "bin" / "asyncclient").exists()
    assert (clone / "report.html").read_text().count('class="test ') == 4
    assert (clone / "first_run.py").exists()


def test_the_harness_catches_a_failed_command_and_a_missing_line(tmp_path: Path) -> None:
    """Tests of the pages must be able to fail: a command that fails outside `||`, and an
    Output block the commands did not print, are each reported."""
    page = tmp_path / "page.md"
    page.write_text(
        "## One\n\n```sh\necho hello\nfalse\ntrue || echo never\n```\n\n"
        '```text title="Output"\nhello\n... world\n```\n\n'
        "## Two\n\n```sh\nexit_code_shown() { return 3; }\n"
        'exit_code_shown || echo "exit code: $?"\n```\n\n'
        '```text title="Output"\nexit code: 3\n```\n'
    )
    ran = run_page(page, tmp_path, dict(os.environ), tmp_path)
    problems = ran.problems()
    assert len(problems) == 2, problems
    assert "a command failed: false (exit 1)" in problems[0]
    assert "not printed: '... world'" in problems[1]


@pytest.mark.pages
@pytest.mark.parametrize(
    "page",
    [p for p in runnable_pages() if p != GETTING_STARTED],
    ids=lambda p: p.stem,
)
def test_each_guide_runs_as_written(
    page: Path,
    getting_started: PageRun,
    reader: tuple[Path, dict[str, str]],
    tmp_path: Path,
) -> None:
    if getting_started.problems():
        pytest.fail("getting started failed, so its .venv cannot be trusted")
    clone, env = reader
    ran = run_page(page, clone, env, tmp_path)
    assert ran.problems() == [], ran.transcript


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: p.stem)
def test_fragments_stand_in_the_program_above(page: Path) -> None:
    assert check_fragments(page) == []


def test_the_guides_hold_at_least_six_complete_programs() -> None:
    programs = [
        (page.name, block.title)
        for page in runnable_pages()
        for block in blocks(page)
        if block.kind == "program"
    ]
    assert len(programs) >= 6, programs


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: p.stem)
def test_each_page_has_sections(page: Path) -> None:
    text = page.read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(sections) >= 2, page.name


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: p.stem)
def test_commands_and_programs_fit_the_column(page: Path) -> None:
    """88 characters fit the code column at 1280 px (the Chromium test measures it); output
    blocks wrap, as a terminal does."""
    long = [
        f"{page.name}:{block.line}: {line}"
        for block in blocks(page)
        if block.lang != "text"
        for line in block.body.splitlines()
        if len(line) > 88
    ]
    assert long == []
