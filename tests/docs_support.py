"""Running a documentation page as a reader would: its shell blocks in order in one shell, its
complete programs saved under the name their title gives, its servers started "in another
terminal", its shown output checked. Nothing on the page is rewritten before it runs.

The conventions a page follows (ARCHITECTURE.md repeats them for writers):

- A ```` ```sh ```` block runs in the page's shell, in order, from the clone's root; the shell
  keeps its variables and folder from block to block, as a terminal does. Any command that
  fails outside `||`, `&&` or `if` fails the page: a command that is meant to fail is shown
  as `command || echo "exit code: $?"`.
- A ```` ```sh title="Another terminal" ```` block is a server: it runs in a fresh shell of its
  own, in the background, until the page ends; the page goes on once it has printed an
  address (`http://...` or `https://...`).
- A ```` ```python title="NAME.py" ```` block is a complete program, saved as NAME.py where
  the page's shell is when the block comes; a later block runs it. Any other block titled
  with a file name (```` ```toml title="asyncclient.toml" ````) is saved the same way. An
  untitled ```` ```python ```` block is a fragment: each of its lines stands in a complete
  program above it.
- A ```` ```text title="Output" ```` block right after a shell block is what that block
  prints: each of its lines, in order, matches a line of the output, where `...` stands for
  any text (ids, times, ports).
- `--8<-- "path"` includes a file, as pymdownx.snippets does for the site.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>\w*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
TITLE = re.compile(r'title="([^"]*)"')
SNIPPET = re.compile(r'^( *)--8<-- "([^"]+)"\s*$', re.M)
SERVER_TITLE = "Another terminal"


@dataclass
class Block:
    lang: str
    title: str
    body: str
    line: int

    @property
    def kind(self) -> str:
        if self.lang in ("sh", "bash", "shell"):
            return "server" if self.title.startswith(SERVER_TITLE) else "shell"
        if self.lang == "python":
            return "program" if self.title.endswith(".py") else "fragment"
        if self.lang == "text" and self.title == "Output":
            return "output"
        if re.fullmatch(r"[\w./-]+\.\w+", self.title):
            return "file"  # a configuration or seed file the page tells to save
        return "other"


def expand_snippets(text: str) -> str:
    def include(match: re.Match[str]) -> str:
        indent, path = match.groups()
        content = (ROOT / path).read_text().rstrip("\n")
        return "\n".join(indent + line if line else line for line in content.splitlines())

    return SNIPPET.sub(include, text)


def blocks(page: Path) -> list[Block]:
    text = expand_snippets(page.read_text())
    found = []
    for match in FENCE.finditer(text):
        indent = len(match["indent"])
        body = "\n".join(line[indent:] for line in match["body"].splitlines()) + "\n"
        title = TITLE.search(match["attrs"])
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(match["lang"], title[1] if title else "", body, line))
    return found


def runnable_pages() -> list[Path]:
    guides = sorted((DOCS / "guides").glob("*.md")) + sorted((DOCS / "guides" / "ci").glob("*.md"))
    return [DOCS / "index.md", *guides, DOCS / "troubleshooting.md"]


def check_fragments(page: Path) -> list[str]:
    """The lines of each fragment that stand in no complete program above it."""
    problems = []
    seen: list[str] = []
    for block in blocks(page):
        if block.kind == "program":
            seen.extend(line.strip() for line in block.body.splitlines())
        elif block.kind == "fragment":
            known = set(seen)
            for line in block.body.splitlines():
                if line.strip() and line.strip() not in known:
                    problems.append(f"{page.name}:{block.line}: {line.strip()!r}")
    return problems


def expected_lines_found(expected: str, output: str) -> str | None:
    """None when every line of `expected` matches a line of `output`, in order; else the
    first line that did not."""
    lines = [line.rstrip() for line in output.splitlines()]
    at = 0
    for wanted in expected.splitlines():
        wanted = wanted.strip()
        if not wanted:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in wanted.split("...")))
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        if at == len(lines):
            return wanted
        at += 1
    return None


@dataclass
class PageRun:
    """What one page printed, block by block, and the commands that failed."""

    page: Path
    outputs: dict[int, str] = field(default_factory=dict)  # shell block's line -> output
    failures: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # what each server printed
    returncode: int = 0
    transcript: str = ""

    def problems(self) -> list[str]:
        found = [f"{self.page.name}: a command failed: {failure}" for failure in self.failures]
        if self.returncode:
            found.append(f"{self.page.name}: the shell exited {self.returncode}")
        shown = blocks(self.page)
        for before, block in itertools.pairwise(shown):
            if block.kind == "output":
                if before.kind != "shell":
                    found.append(f"{self.page.name}:{block.line}: output after a {before.kind}")
                    continue
                missing = expected_lines_found(block.body, self.outputs.get(before.line, ""))
                if missing is not None:
                    found.append(
                        f"{self.page.name}:{block.line}: not printed: {missing!r}\n"
                        f"--- what the block printed:\n{self.outputs.get(before.line, '')}"
                    )
        return found


MARK = "@@asyncclient-docs-block@@"


class Servers:
    """The page's "another terminal" blocks: each in a fresh shell of its own, in the clone's
    root, stopped (SIGINT, as Ctrl-C, then SIGKILL) when the page ends."""

    def __init__(self, cwd: Path, env: dict[str, str], logs: Path) -> None:
        self.cwd, self.env, self.logs = cwd, env, logs
        self.running: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, block: Block, timeout: float = 120.0) -> None:
        log = self.logs / f"server-{len(self.running)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", block.body],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running.append((process, log))
        deadline = time.monotonic() + timeout
        while not re.search(r"https?://", log.read_text(errors="replace")):
            if process.poll() is not None:
                raise AssertionError(
                    f"the server block exited {process.returncode}:\n"
                    f"{block.body}\n{log.read_text(errors='replace')}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"the server block printed no address:\n{block.body}")
            time.sleep(0.05)

    def stop(self) -> list[str]:
        printed = []
        for process, log in self.running:
            with _suppress_lookup():
                os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                with _suppress_lookup():
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)
            printed.append(log.read_text(errors="replace"))
        self.running.clear()
        return printed


class _suppress_lookup:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is ProcessLookupError


def run_page(
    page: Path, clone: Path, env: dict[str, str], work: Path, skip: frozenset[int] = frozenset()
) -> PageRun:
    """Run `page` in `clone`: servers as they come (the shell blocks before each server run
    first), then the rest, each in the one shell of the page."""
    result = PageRun(page)
    errors = work / f"{page.stem}.errors"
    errors.write_text("")
    servers = Servers(clone, env, work)
    # Cut the page where its servers start: the shell runs up to a server, the server starts,
    # then the shell goes on. One bash process per page keeps the shell's state between
    # pieces: the pieces are fed to its standard input as they come.
    pieces: list[list[Block]] = [[]]
    for block in blocks(page):
        if block.line in skip:
            continue
        if block.kind == "server":
            pieces.append([block])
            pieces.append([])
        else:
            pieces[-1].append(block)
    transcript = work / f"{page.stem}.out"
    with transcript.open("wb") as out:
        shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-o", "pipefail"],
            cwd=clone,
            env=env,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    assert shell.stdin is not None
    trap = f'trap \'printf "%s\\t%s\\n" "$?" "$BASH_COMMAND" >> {shlex.quote(str(errors))}\' ERR\n'
    shell.stdin.write(trap.encode())
    try:
        for number, piece in enumerate(pieces):
            if piece and piece[0].kind == "server":
                servers.start(piece[0])
                continue
            # Sourced from a file with /dev/null as its input, so a command that reads its
            # standard input cannot swallow the rest of the page.
            script = work / f"{page.stem}-{number}.sh"
            script.write_text(_script(piece))
            shell.stdin.write(
                f"source {shlex.quote(str(script))} </dev/null\necho {MARK}done{number}\n".encode()
            )
            shell.stdin.flush()
            _wait_for(transcript, f"{MARK}done{number}", shell)
        shell.stdin.close()
        result.returncode = shell.wait(60)
    finally:
        if not shell.stdin.closed:
            shell.stdin.close()
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
        result.servers = servers.stop()
    text = transcript.read_text(errors="replace")
    result.transcript = text
    for chunk in text.split(MARK)[1:]:
        head, _, body = chunk.partition("\n")
        if head.isdigit():
            result.outputs[int(head)] = body
    for line in errors.read_text().splitlines():
        status, _, command = line.partition("\t")
        if not command.startswith(f"source {shlex.quote(str(work))}"):  # the piece's own exit
            result.failures.append(f"{command} (exit {status})")
    return result


def _script(piece: list[Block]) -> str:
    parts = []
    for block in piece:
        if block.kind == "shell":
            parts.append(f"echo {MARK}{block.line}\n{block.body}")
        elif block.kind in ("program", "file"):
            end = "ASYNCCLIENT_DOCS_PROGRAM_END"
            parts.append(f"cat > {shlex.quote(block.title)} <<'{end}'\n{block.body}{end}\n")
    return "".join(parts)


def _wait_for(transcript: Path, marker: str, shell: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 600
    while marker not in transcript.read_text(errors="replace"):
        if shell.poll() is not None:
            raise AssertionError(
                f"the page's shell exited {shell.returncode}:\n{transcript.read_text()}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"the page did not finish:\n{transcript.read_text()}")
        time.sleep(0.05)


def clone_of_the_repository(dest: Path) -> Path:
    """The files a clone holds: what git tracks, plus new files not ignored, as they are in
    the working tree (the change under test)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if not source.is_file():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
        target.chmod(source.stat().st_mode & 0o777)
    return dest


def iter_shell_lines(page: Path) -> Iterator[str]:
    for block in blocks(page):
        if block.kind in ("shell", "server"):
            yield from block.body.splitlines()
