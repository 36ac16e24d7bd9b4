"""Real apps of many small parts (64 KiB) and what the uploader's tests count on the emulator."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import asyncclient.upload._hashing as _hashing
from asyncclient import AsyncSession
from asyncclient.testing import FakeService, NetworkConditions
from asyncclient.testing.builders import build_apk
from asyncclient.upload import _journal

PART = 64 * 1024
SLOW = NetworkConditions(part_bandwidth=4_000_000)  # a 64 KiB part takes ~16 ms to arrive


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
