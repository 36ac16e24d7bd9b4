"""Find the build that broke a test: a binary search over a project's builds that a flaky test
cannot fool, calling a build bad only after enough failures in a row for the confidence asked
(the rule and its bounds: docs/reference/uploads-and-runs.md, "Finding the build")."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from asyncclient._core import _checks as checks
from asyncclient._core._checks import is_id
from asyncclient._core._untrusted import clip, line
from asyncclient.errors import AsyncClientError, ValidationError

if TYPE_CHECKING:
    from asyncclient.models import Build, Run

__all__ = ["BisectResult", "BisectStep", "bisect"]

#: The flake rate assumed when the history cannot tell and none is given.
ASSUMED_FLAKE_RATE: Final = 0.2
#: Runs on builds up to `good` the history needs before its flake rate is used.
HISTORY_RUNS_NEEDED: Final = 10
#: The most repeats a step may need (a test flaking more than this allows is refused).
MOST_REPEATS: Final = 12
_SEQ: Final = re.compile(r"(?:^|[\s;,])seq=(\d{1,12})(?:$|[\s;,])")

Verdict = Literal["good", "bad", "unknown"]


def repeats_needed(flake_rate: float, steps: int, confidence: float) -> int:
    """The failures in a row that call a build bad: the least r with
    steps * flake_rate**r <= 1 - confidence."""
    if not 0.0 <= flake_rate < 1.0:
        raise ValidationError(f"the flake rate must be at least 0 and below 1, not {flake_rate}")
    if not 0.5 <= confidence < 1.0:
        raise ValidationError(f"the confidence must be 0.5 to 0.999, not {confidence}")
    if flake_rate == 0.0:
        return 1
    allowed = (1.0 - confidence) / max(1, steps)
    r = max(1, math.ceil(math.log(allowed) / math.log(flake_rate)))
    if r > MOST_REPEATS:
        raise ValidationError(
            f"a test that fails {flake_rate:.0%} of its runs on good builds needs {r} failures "
            f"in a row a step for {confidence:.0%}: fix its flakiness first, or ask for less"
        )
    return r


@attrs.frozen
class BisectStep:
    """One build tried: its runs, how they ended, and what the step called it."""

    build_id: str
    runs: tuple[str, ...]
    passed: int
    failed: int
    not_counted: int
    verdict: Verdict
    device_seconds: float


@attrs.frozen
class BisectResult:
    """What `bisect` found.

    Attributes:
        first_bad: The first build the test fails on (None when the search stopped first).
        last_good: The build before it that passed.
        confidence: The rule's bound on the answer being right, for the steps taken.
        repeats: The failures in a row that called a build bad.
        flake_rate: The rate used, and `flake_source` where it came from (history, given,
            assumed).
        steps: Each build tried, in order.
        runs: Runs started; `device_minutes` the time they took.
        builds: The order searched, good first; `left_out` the builds that could not be used.
        stopped: Why the search ended before an answer (the budget, a step nothing counted
            in); None when it found one.
    """

    first_bad: str | None
    last_good: str | None
    confidence: float
    repeats: int
    flake_rate: float
    flake_source: str
    steps: tuple[BisectStep, ...]
    runs: int
    device_minutes: float
    builds: tuple[str, ...]
    left_out: Mapping[str, str]
    stopped: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "firstBad": self.first_bad,
            "lastGood": self.last_good,
            "confidence": round(self.confidence, 6),
            "repeats": self.repeats,
            "flakeRate": round(self.flake_rate, 6),
            "flakeSource": self.flake_source,
            "runs": self.runs,
            "deviceMinutes": round(self.device_minutes, 3),
            "builds": list(self.builds),
            "leftOut": dict(self.left_out),
            "stopped": self.stopped,
            "steps": [
                {
                    "buildId": s.build_id,
                    "verdict": s.verdict,
                    "runs": list(s.runs),
                    "passed": s.passed,
                    "failed": s.failed,
                    "notCounted": s.not_counted,
                    "deviceSeconds": round(s.device_seconds, 3),
                }
                for s in self.steps
            ],
        }


def _seq(build: Build) -> int | None:
    found = _SEQ.search(build.label or "") if isinstance(build.label, str) else None
    return int(found.group(1)) if found else None


def _order(builds: Sequence[Build], good: Build, bad: Build) -> tuple[list[Build], int, int]:
    """The builds of good's app in commit order (by the `seq=N` their labels carry when every
    one has it, else by when they were made), and where good and bad are in it."""
    if (good.app_id, good.platform) != (bad.app_id, bad.platform):
        raise ValidationError(
            f"--good {good.id} and --bad {bad.id} are builds of different apps: give two "
            "builds of one app"
        )
    same = [
        b
        for b in builds
        if (b.app_id, b.platform) == (good.app_id, good.platform) and is_id("build", b.id)
    ]
    if all(_seq(b) is not None for b in same):
        same.sort(key=lambda b: (_seq(b) or 0, b.id))
    else:
        same.sort(key=lambda b: (b.created_at.timestamp() if b.created_at else 0.0, b.id))
    ids = [b.id for b in same]
    start, end = ids.index(good.id), ids.index(bad.id)
    if start >= end:
        raise ValidationError(
            f"--good {good.id} is not before --bad {bad.id} in the builds' order; swap them"
        )
    return same, start, end


@attrs.define
class _Search:
    """One search's runs: each step's starts (keys derived from the search's), what they
    spent, and how many began."""

    session: Any
    test_id: str
    repeats: int
    key: str
    budget: float | None  # device seconds
    mode: str | None
    interval: float
    spent: float = 0.0
    started: int = 0

    async def _runs(self, build_id: str, attempts: range) -> list[Run]:
        starts = await asyncio.gather(
            *(
                self.session.run_test(
                    self.test_id,
                    mode=self.mode,
                    build_id=build_id,
                    idempotency_key=checks.derived_key(self.key, f"{build_id}/{n}"),
                )
                for n in attempts
            )
        )
        self.started += len(starts)
        # Only well-formed run ids are followed: anything else is no run of this search.
        ids = [s.run_id for s in starts if is_id("run", s.run_id)]
        pending = set(ids)
        final: dict[str, Run] = {}

        async with self.session.watch_runs(ids, interval=self.interval) as watcher:
            async for run in watcher:
                if not run.is_final:
                    continue
                final[run.id] = run
                pending.discard(run.id)
                if _counted(run, build_id) == "passed" and pending:
                    # A pass decides the step: the rest are stopped.
                    await asyncio.gather(*(self._stop(r) for r in sorted(pending)))
        return [final[i] for i in ids if i in final]

    async def _stop(self, run_id: str) -> None:
        with contextlib.suppress(AsyncClientError):  # it ended meanwhile: its time counts
            await self.session.stop_run(run_id)

    async def step(self, build_id: str) -> BisectStep:
        runs = await self._runs(build_id, range(1))
        if all(_counted(r, build_id) != "passed" for r in runs) and self.repeats > 1:
            runs += await self._runs(build_id, range(1, self.repeats))
        counted = [_counted(r, build_id) for r in runs]
        passed, failed = counted.count("passed"), counted.count("failed")
        seconds = sum((r.duration_ms or 0) / 1000 for r in runs)
        self.spent += seconds
        verdict: Verdict = "good" if passed else "bad" if failed >= self.repeats else "unknown"
        return BisectStep(
            build_id,
            tuple(r.id for r in runs),
            passed,
            failed,
            len(runs) - passed - failed,
            verdict,
            seconds,
        )


def _counted(run: Run, build_id: str) -> str:
    """passed, failed, or other: a run of another build than the one asked (or of a build
    the service does not name) is other, as is any other ending (error, blocked, stopped)."""
    if run.used_build_id != build_id:
        return "other"
    kind = run.status_kind
    return kind if kind in ("passed", "failed") else "other"


async def _flake_rate(
    session: Any, test_id: str, known_good: set[str], given: float | None
) -> tuple[float, str]:
    """The test's failures among its runs on builds up to `good` (which it passes on but
    for flakes), from its history; `given` when given; else ASSUMED_FLAKE_RATE."""
    if given is not None:
        return given, "given"
    from asyncclient.eta import read_history

    history = (await read_history(session, [test_id])).get(test_id, [])
    outcomes = [
        r.status_kind
        for r in history
        if r.used_build_id in known_good and r.status_kind in ("passed", "failed")
    ]
    if len(outcomes) >= HISTORY_RUNS_NEEDED:
        return _upper_bound(outcomes.count("failed"), len(outcomes)), "history"
    return ASSUMED_FLAKE_RATE, "assumed"


def _upper_bound(failures: int, runs: int, z: float = 1.645) -> float:
    """The Wilson score's one-sided 95 % upper bound on the flake rate: a short history
    that happened to flake little does not make the search trust failures more than it may."""
    p = failures / runs
    centre = p + z * z / (2 * runs)
    spread = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs))
    return min(0.99, (centre + spread) / (1 + z * z / runs))


async def bisect(
    session: Any,
    project_id: str,
    test_id: str,
    *,
    good: str,
    bad: str,
    confidence: float = 0.95,
    flake_rate: float | None = None,
    budget_minutes: float | None = None,
    mode: str | None = None,
    idempotency_key: str | None = None,
    interval: float = 3.0,
    on_step: Callable[[BisectStep], None] | None = None,
) -> BisectResult:
    """The first build between `good` and `bad` that `test_id` fails on (see the module).

    Args:
        session: An AsyncSession (any object with its run_test, watch_runs, stop_run,
            list_builds, get_build and list_runs).
        project_id: The project whose builds are searched.
        test_id: The test that broke.
        good: A build the test passes on.
        bad: A build it fails on, of the same app, later in the builds' order.
        confidence: The least chance the answer is right, by the rule above (0.5 to 0.999).
        flake_rate: How often the test fails on good builds; default from its history.
        budget_minutes: Device minutes the search may spend; it stops (with the range it
            narrowed) once past them.
        mode: The runs' mode (auto, cold, warm); default the service's.
        idempotency_key: The search's key: each run's is derived from it and its build, so
            the same search asked again starts no new runs. Default: a new one.
        interval: Seconds between sweeps of a step's runs at first.
        on_step: Called with each step as it ends (the command prints it).

    Raises:
        ValidationError: Bad ids, or good/bad not of one app in that order, before any run.
        AsyncClientError: The builds could not be listed.
    """
    checks.check_id("project", project_id)
    checks.check_id("test", test_id)
    checks.check_id("build", good, "--good")
    checks.check_id("build", bad, "--bad")
    if budget_minutes is not None and not budget_minutes > 0:
        raise ValidationError("--budget must be a positive number of device minutes")
    repeats_needed(flake_rate or 0.0, 1, confidence)  # the rule's inputs, before any request
    key = checks.check_idempotency_key(idempotency_key)
    listed = (await session.list_builds(project_id)).builds
    by_id = {b.id: b for b in listed}
    for name, build_id in (("--good", good), ("--bad", bad)):
        if build_id not in by_id:
            raise ValidationError(f"{name} {build_id} is not a build of {project_id}")
    same, start, end = _order(listed, by_id[good], by_id[bad])
    order = same[start : end + 1]
    left_out = {
        b.id: f"it is {clip(line(str(b.status)), 40)}, not ready"
        for b in order[1:-1]
        if not b.is_ready
    }
    usable = [b.id for b in order if b.id not in left_out]
    steps_needed = max(1, math.ceil(math.log2(max(2, len(usable) - 1))))
    known_good = {b.id for b in same[: start + 1]}
    rate, source = await _flake_rate(session, test_id, known_good, flake_rate)
    repeats = repeats_needed(rate, steps_needed, confidence)
    search = _Search(
        session,
        test_id,
        repeats,
        hashlib.sha256(key.encode()).hexdigest()[:24],
        None if budget_minutes is None else budget_minutes * 60,
        mode,
        interval,
    )
    lo, hi = 0, len(usable) - 1  # usable[lo] passes, usable[hi] fails
    steps: list[BisectStep] = []
    stopped = None
    while hi - lo > 1:
        if search.budget is not None and search.spent >= search.budget:
            stopped = f"the budget of {budget_minutes:g} device minutes is spent"
            break
        mid = (lo + hi) // 2
        step = await search.step(usable[mid])
        steps.append(step)
        if on_step is not None:
            on_step(step)
        if step.verdict == "good":
            lo = mid
        elif step.verdict == "bad":
            hi = mid
        else:
            stopped = (
                f"build {usable[mid]}: none of its runs could be counted (another build's, "
                "or ended otherwise than passed or failed)"
            )
            break
    ids = [b.id for b in order]
    unknown = ids[ids.index(usable[lo]) + 1 : ids.index(usable[hi])]
    if stopped is None and unknown:
        # The break may be at a build that could not be tried: no build is named.
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        stopped = (
            f"the test broke after {usable[lo]} and by {usable[hi]}, but {shown} between them "
            "could not be run"
        )
    bad_steps = sum(1 for s in steps if s.verdict == "bad")
    found = stopped is None
    # Each step that called a build bad could be a good build's run of flakes.
    bound = 1.0 - max(1, bad_steps) * rate**repeats if found else 0.0
    return BisectResult(
        first_bad=usable[hi] if found else None,
        last_good=usable[lo] if found else None,
        confidence=max(0.0, bound),
        repeats=repeats,
        flake_rate=rate,
        flake_source=source,
        steps=tuple(steps),
        runs=search.started,
        device_minutes=search.spent / 60,
        builds=tuple(usable),
        left_out=left_out,
        stopped=stopped,
    )
