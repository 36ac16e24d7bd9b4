"""The emulator's records, which hold each other (a project its tests, builds, runs and
endpoints; a run its test), in one module so the stores and the shared state import them from
here. A run's status is a function of the clock: no task moves it along.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path
from typing import Any

import attrs

from asyncclient.apps import Problem
from asyncclient.testing import _files
from asyncclient.testing._build_files import PartWriter
from asyncclient.testing._clock import Clock
from asyncclient.testing._seed import SeedRequirement, SeedTest

__all__ = [
    "FINAL_STATUSES",
    "MODES",
    "RUN_STATUSES",
    "Build",
    "BuildRef",
    "Endpoint",
    "MiB",
    "Project",
    "Run",
    "Test",
]

MiB = 1 << 20


@attrs.define(eq=False)
class Project:
    id: str
    name: str
    plan: str
    included_runs: int
    counted_runs: int = 0
    tests: list[Test] = attrs.Factory(list)
    builds: list[Build] = attrs.Factory(list)
    endpoints: list[Endpoint] = attrs.Factory(list)
    runs: list[Run] = attrs.Factory(list)


@attrs.define(eq=False)
class Test:
    seed: SeedTest
    learned: str  # "fresh" | "stale" | "none"
    # Cold runs that will pass: the first makes the path fresh.
    passing_cold: list[tuple[float, int, Run]] = attrs.Factory(list)
    runs: list[Run] = attrs.Factory(list)
    # Runs since a project run last started (flakyRuns).
    runs_since_suite: int = 0

    @property
    def id(self) -> str:
        return self.seed.id


@attrs.define(eq=False)
class Build:
    id: str
    project_id: str
    file_name: str
    size: int
    label: str | None
    created_at: float
    directory: Path
    part_bytes: int
    parts: int
    status: str = "uploading"  # "uploading" | "ready" | "rejected"
    platform: str | None = None
    app_id: str | None = None
    app_name: str | None = None
    version: str | None = None
    version_code: str | None = None
    min_os: str | None = None
    abis: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    sha256: str | None = None
    ready_at: float | None = None
    uploaded: dict[int, tuple[str, int]] = attrs.Factory(dict)  # part -> (etag, length)
    completing: bool = False
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    # Held while a part is copied into place.
    place_lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    # sha256 over each prefix of parts in place.
    prefix: list[Any] = attrs.Factory(lambda: [hashlib.sha256()])
    clock: Clock | None = attrs.field(default=None, repr=False)  # its times on the wall
    hash_generation: int = 0  # bumped when a part the hasher may be reading is replaced
    hasher: asyncio.Task[None] | None = None
    # Parts received in place, and commit_part's (0: none).
    writers: dict[int, PartWriter] = attrs.Factory(dict)
    placing: int = 0
    # Writers take turns and sleep; the kernel's waiters spin.
    file_lock: threading.Lock = attrs.Factory(threading.Lock)

    def part_length(self, number: int) -> int:
        if number < self.parts:
            return self.part_bytes
        return self.size - (self.parts - 1) * self.part_bytes

    def part_offset(self, number: int) -> int:
        return (number - 1) * self.part_bytes

    @property
    def path(self) -> Path:
        return self.directory / self.file_name


RUN_STATUSES = (
    "queued",
    "running",
    "passed",
    "failed",
    "blocked",
    "inconclusive",
    "error",
    "cancelled",
)
FINAL_STATUSES = frozenset({"passed", "failed", "blocked", "inconclusive", "error", "cancelled"})
MODES = ("auto", "cold", "warm")


@attrs.frozen
class BuildRef:
    """What a run keeps of its build: it survives the build's deletion."""

    id: str
    app_id: str | None
    version: str | None
    version_code: str | None
    platform: str | None
    sha256: str | None = None  # the file's, so that a run says which bytes it ran


class Run:
    """One run. Its status is a function of the clock: no task moves it along."""

    __slots__ = (
        "broken",
        "build",
        "clock",
        "created_at",
        "earliest",
        "end_at",
        "flaky_failure",
        "held",
        "id",
        "mode",
        "outcome",
        "overage",
        "project_id",
        "said",
        "seq",
        "source",
        "start_at",
        "stopped_at",
        "test",
    )

    def __init__(
        self,
        *,
        id: str,
        seq: int,
        test: Test,
        build: BuildRef | None,
        mode: str,
        source: str,
        created_at: float,
        queued: float,
        duration: float,
        overage: bool,
        flaky_failure: bool = False,
        broken: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.id = id
        self.clock = clock  # its times on the wall
        self.seq = seq
        self.test = test
        self.project_id = test.seed.project
        self.build = build
        self.mode = mode
        self.source = source
        self.created_at = created_at
        self.start_at = created_at + queued
        self.earliest = self.start_at  # with device slots it may start later (RunStore)
        self.end_at = self.start_at + duration
        self.stopped_at: float | None = None
        self.overage = overage
        self.flaky_failure = flaky_failure  # a passing test's run that fails (seed: flaky*)
        self.broken = broken  # seed: brokenFrom
        self.outcome: str | None = None  # the seed's history: how this run ended
        self.said: tuple[str | None, str | None] = (None, None)  # history: headline, reason
        # FakeService.hold: the state this run stays in until released.
        self.held: str | None = None

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.test.seed.id} {self.mode}>"

    def status_at(self, now: float) -> str:
        if self.stopped_at is not None:
            return "cancelled"
        if now < self.start_at or self.held == "queued":
            return "queued"
        if now < self.end_at or self.held == "running":
            return "running"
        if self.outcome is not None:
            return self.outcome
        if self.broken:
            return "failed"
        return self.test.seed.flaky_status if self.flaky_failure else self.test.seed.outcome

    def started_at(self, now: float) -> float | None:
        if self.stopped_at is not None:
            return self.start_at if self.stopped_at >= self.start_at else None
        return self.start_at if now >= self.start_at and self.held != "queued" else None

    def finished_at(self, now: float) -> float | None:
        if self.stopped_at is not None:
            return self.stopped_at
        return self.end_at if now >= self.end_at and self.held is None else None

    def hold(self, now: float, state: str) -> bool:
        """Keep the run in `state` until `release`; False when it is already past it."""
        status = self.status_at(now)
        if status == "queued" or (status == "running" and state == "running"):
            self.held = state
            return True
        return False

    def release(self, now: float) -> None:
        """Let a held run go on from `now`: what was left of its queue, then its whole run."""
        if self.held == "queued" and self.start_at < now:
            duration = self.end_at - self.start_at
            self.start_at, self.end_at = now, now + duration
        elif self.held == "running":
            self.end_at = max(self.end_at, now)
        self.held = None

    def stop(self, now: float) -> None:
        if self.held == "queued" and self.start_at <= now:
            self.start_at = self.end_at = now + 0.001  # it never left the queue
        self.held = None
        self.stopped_at = now

    @property
    def platform(self) -> str:
        return self.test.seed.target

    def requirements(self, status: str) -> list[SeedRequirement]:
        """Each check with its result and reason, once final ([] before)."""
        if status not in FINAL_STATUSES:
            return []
        if self.said[1] is not None and self.outcome is not None:
            # A history run that said why its first failed check failed.
            seeded = list(self.test.seed.requirements)
            failing = next((i for i, r in enumerate(seeded) if r.result == "failed"), None)
            if self.outcome == self.test.seed.outcome and failing is not None:
                kept = seeded[failing]
                seeded[failing] = SeedRequirement(kept.title, kept.result, self.said[1])
                return seeded
            said = _default_requirement(self.test.seed, self.outcome)
            return [SeedRequirement(said.title, said.result, self.said[1])]
        if self.outcome is not None and self.outcome != self.test.seed.outcome:
            # A history run that ended otherwise than today.
            return [_default_requirement(self.test.seed, self.outcome)]
        seeded = list(self.test.seed.requirements) or [_default_requirement(self.test.seed)]
        if status == "cancelled":
            return [SeedRequirement(r.title, "skipped", "The run was stopped.") for r in seeded]
        if self.broken:
            first, *rest = seeded
            return [
                SeedRequirement(first.title, "failed", self.test.seed.broken_reason),
                *(SeedRequirement(r.title, "skipped", "Not reached.") for r in rest),
            ]
        if self.flaky_failure:
            # The first check fails outside the app; the rest unreached.
            first, *rest = seeded
            return [
                SeedRequirement(first.title, "failed", self.test.seed.flaky_reason),
                *(SeedRequirement(r.title, "skipped", "Not reached.") for r in rest),
            ]
        return seeded

    def file_names(self, status: str) -> list[str]:
        """The run's files: once final, except when it was stopped."""
        if status not in FINAL_STATUSES or status == "cancelled":
            return []
        return _files.file_names(self.test.seed.screenshots)


def _default_requirement(test: SeedTest, outcome: str | None = None) -> SeedRequirement:
    outcome = outcome or test.outcome
    result = {"passed": "passed", "failed": "failed"}.get(outcome, "skipped")
    reason = {
        "passed": "The goal was reached.",
        "failed": "The goal was not reached.",
        "blocked": "The app blocked the tester before this check.",
        "inconclusive": "The tester could not tell whether the goal was reached.",
        "error": "The run ended in an error before this check.",
    }[outcome]
    return SeedRequirement(test.title, result, reason)


@attrs.define(eq=False)
class Endpoint:
    id: str
    project_id: str
    name: str
    description: str
    method: str
    url: str
    headers: dict[str, str] = attrs.field(repr=False)  # write-only: never returned or logged
    body_template: str | None = attrs.field(repr=False)
    created_at: float
    uses: list[Run] = attrs.Factory(list)
    clock: Clock | None = attrs.field(default=None, repr=False)  # its times on the wall

    def last_used_at(self, now: float) -> float | None:
        """When a run last called it: half-way through a run that got that far, not stopped."""
        latest: float | None = None
        for run in self.uses:
            used = (run.start_at + run.end_at) / 2
            if used <= now and (run.stopped_at is None or run.stopped_at > used):
                latest = used if latest is None else max(latest, used)
        return latest
