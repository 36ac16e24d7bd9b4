"""Running the `asyncclient` command in a process of its own and reading its peak resident
memory from the kernel (os.wait4's ru_maxrss), for the tests that bound what a hostile service
can make it hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import attrs


def _command() -> list[str]:
    script = Path(sys.executable).with_name("asyncclient")
    return [str(script)] if script.exists() else [sys.executable, "-m", "asyncclient"]


@attrs.frozen
class Finished:
    code: int
    stdout: str
    stderr: str
    peak_rss_mib: float


# Run in a small process of its own, which forks and execs the command and reads its rusage from
# wait4. Not straight from pytest: Linux carries the high-water mark of the memory a process
# replaces at exec into its ru_maxrss, and a child spawned by pytest (vfork) replaces pytest's.
LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(argv: list[str], env: dict[str, str], tmp: Path) -> Finished:
    """Run the command; its peak resident memory from the kernel (ru_maxrss, KiB on Linux)."""
    out, err, rss = tmp / "stdout", tmp / "stderr", tmp / "maxrss"
    command = _command()
    command[0] = shutil.which(command[0]) or command[0]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        code = subprocess.call(
            [sys.executable, "-c", LAUNCHER, str(rss), *command, *argv],
            stdout=stdout,
            stderr=stderr,
            env=env,
        )
    return Finished(code, out.read_text(), err.read_text(), int(rss.read_text()) / 1024)
