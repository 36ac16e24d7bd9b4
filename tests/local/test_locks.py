"""asyncclient._local._locks: the lock between processes that guards journals and downloaded files.
Holders are real processes; a killed one must not leave its lock behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from asyncclient._local._locks import Claim, claim, lock_path_for

HOLD = """
import asyncio, sys
from pathlib import Path
from asyncclient._local._locks import claim

async def main():
    got = await claim(Path(sys.argv[1]))
    print("held", flush=True)
    line = await asyncio.to_thread(sys.stdin.readline)
    got.lock.release({"buildId": line.strip()} if line.strip() else None)

asyncio.run(main())
"""


async def holder(path: Path) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD, str(path),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    assert await asyncio.wait_for(process.stdout.readline(), 30) == b"held\n"
    return process


async def waiting(path: Path) -> tuple[asyncio.Task[Claim], list[int | None]]:
    """claim(path) in a task, returned once it waits (with the pids it was told)."""
    told: list[int | None] = []
    event = asyncio.Event()

    def on_wait(pid: int | None) -> None:
        told.append(pid)
        event.set()

    task = asyncio.create_task(claim(path, on_wait=on_wait))
    await asyncio.wait_for(event.wait(), 30)
    return task, told


async def test_a_waiter_reads_the_holders_pid_and_then_its_outcome(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    process = await holder(path)
    waiter, told = await waiting(path)
    assert told == [process.pid]
    assert not waiter.done()

    assert process.stdin is not None
    process.stdin.write(b"ab_42\n")
    await process.stdin.drain()
    got = await asyncio.wait_for(waiter, 30)
    await process.wait()

    assert got.lock is None
    assert got.waited
    assert got.outcome is not None
    assert got.outcome["buildId"] == "ab_42"
    assert got.outcome["pid"] == process.pid
    assert not path.exists()  # the holder removed its lock file


async def test_a_killed_holders_lock_is_released_by_the_os(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    process = await holder(path)
    waiter, _ = await waiting(path)

    os.kill(process.pid, signal.SIGKILL)
    await process.wait()
    got = await asyncio.wait_for(waiter, 30)

    assert got.lock is not None  # the work is this process's now (a journal to resume)
    assert got.waited
    assert path.exists()
    got.lock.release(None)
    assert not path.exists()
    again = await claim(path)  # nothing left behind
    assert again.lock is not None
    assert not again.waited
    again.lock.release(None)


async def test_a_holder_that_gives_up_hands_the_lock_on(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    process = await holder(path)
    waiter, _ = await waiting(path)
    assert process.stdin is not None
    process.stdin.write(b"\n")  # released without an outcome: it failed
    await process.stdin.drain()
    got = await asyncio.wait_for(waiter, 30)
    await process.wait()

    assert got.lock is not None
    assert got.waited
    got.lock.release(None)


async def test_a_wait_is_cancelled_at_once(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    process = await holder(path)
    waiter, _ = await waiting(path)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert waiter.cancelled()
    assert process.stdin is not None
    process.stdin.write(b"\n")
    await process.stdin.drain()
    await process.wait()


def test_lock_files_are_named_by_the_target_in_their_own_folder(tmp_path: Path) -> None:
    a = lock_path_for(tmp_path / "locks", Path("out/video.mp4"))
    b = lock_path_for(tmp_path / "locks", Path("out/../out/video.mp4").resolve())
    assert a.parent == tmp_path / "locks"
    assert a.suffix == ".lock"
    assert a != lock_path_for(tmp_path / "locks", Path("other/video.mp4"))
    assert b.name == lock_path_for(tmp_path / "locks", Path(os.path.abspath("out/video.mp4"))).name
