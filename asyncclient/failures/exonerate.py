"""Is it my change? A test that failed on the job's build runs on a baseline build (main's
newest); when it fails there too, with the same cause, its failure was there before the change:
pre-existing. Pure rules here (`repeats_for`, `judge`, the CI label); `find_baseline` reads
the builds, and `exonerate` runs a test on the baseline by itself (the MCP tool's)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from asyncclient._core import _checks as checks
from asyncclient._core import _untrusted
from asyncclient.errors import AsyncClientError, ValidationError, WatchTimeoutError
from asyncclient.failures._categories import DEFAULT_CATEGORIES, Categories
from asyncclient.failures._signature import cluster
from asyncclient.models import Build, Run

__all__ = [
    "BaselineVerdict",
    "PreExistingMode",
    "exonerate",
    "find_baseline",
    "judge",
    "repeats_for",
]

PreExistingMode = Literal["fail", "pass", "warn"]
PRE_EXISTING_MODES: Final = ("fail", "pass", "warn")
FALSE_EXONERATION: Final = 0.05
"""The most a flaky test's flakes alone may exonerate a failure the change brought."""
MOST_BASELINE_RUNS: Final = 5
_LABEL: Final = re.compile(r"(?:^|\s)ref=(\S{1,200}) commit=([0-9a-f]{7,64})(?:\s|$)")
State = Literal["pre-existing", "new", "undecided"]


def repeats_for(failure_rate: float | None) -> int:
    """Baseline failures (same cause) that call a failure pre-existing: 1 for a test its
    history does not call flaky (`failure_rate` None or 0); else the fewest r >= 2 with
    failure_rate**r <= FALSE_EXONERATION, at most MOST_BASELINE_RUNS (a test flaking more
    than about half its runs is never exonerated by chance more than 5 % of the time only
    with more runs than that: it gets the most, and its rate is said)."""
    if failure_rate is None or not 0.0 < failure_rate < 1.0:
        return 1
    r = math.ceil(math.log(FALSE_EXONERATION) / math.log(failure_rate) - 1e-9)
    return max(2, min(MOST_BASELINE_RUNS, r))


@attrs.frozen
class BaselineVerdict:
    """What the baseline said of one test's failure.

    Attributes:
        test_id: The test.
        baseline: The baseline build.
        state: `pre-existing` (it failed there too, the same way, `needed` times), `new`
            (it passed there, or failed another way: the change's), or `undecided` (its
            baseline runs did not end, were stopped, or failed for the infrastructure).
        runs: The baseline runs, in the order started.
        same_cause: How many of them failed with the job's failure's cause.
        needed: How many had to (`repeats_for`).
        why: One line for every report.
        device_seconds: What the baseline runs took (those that said).
    """

    test_id: str
    baseline: str
    state: State
    runs: tuple[str, ...]
    same_cause: int
    needed: int
    why: str
    device_seconds: float = 0.0

    @property
    def pre_existing(self) -> bool:
        return self.state == "pre-existing"


def judge(
    failure: Run,
    baseline_runs: Sequence[Run],
    *,
    baseline: str,
    needed: int,
    categories: Categories = DEFAULT_CATEGORIES,
) -> BaselineVerdict:
    """The verdict on `failure` (the test's failed run on the job's build) from its runs on
    `baseline`: one pass there makes the failure the change's; `needed`
    failures in the one cluster with `failure` (asyncclient.failures.cluster, the grouping
    every report uses) make it pre-existing; a failure there with another cause is new."""
    test = failure.test_id or failure.id
    ids = tuple(run.id for run in baseline_runs)
    seconds = sum(run.duration_seconds or 0.0 for run in baseline_runs if run.is_final)
    same = other = 0

    def made(state: State, why: str) -> BaselineVerdict:
        return BaselineVerdict(test, baseline, state, ids, same, needed, why, seconds)

    for run in baseline_runs:
        if not run.is_final or run.status_kind == "cancelled" or categories.infrastructure(run):
            continue
        if run.passed:
            shown = _untrusted.clip(_untrusted.line(run.id), 40)
            return made(
                "new",
                f"passes on the baseline {baseline} (run {shown}): the failure is the change's",
            )
        groups = cluster([failure, run], categories)
        if len(groups) == 1 and len(groups[0].run_ids) == 2:
            same += 1
        else:
            other += 1
    if same >= needed:
        return made(
            "pre-existing",
            f"fails on the baseline {baseline} too ({same} of {len(ids)} runs, same cause)",
        )
    if other:
        return made(
            "new",
            f"fails on the baseline {baseline} another way ({other} of {len(ids)} runs): "
            "not the same failure",
        )
    return made(
        "undecided",
        f"the baseline {baseline} did not tell: {same} of {needed} failures the same way "
        f"from {len(ids)} run(s)",
    )


def is_branch(ref: object) -> bool:
    """Whether `ref` can be a branch name here: 1 to 200 printable characters, no space."""
    return (
        isinstance(ref, str)
        and 0 < len(ref) <= 200
        and ref.isprintable()
        and not any(ch.isspace() for ch in ref)
    )


def ci_label(ref: str | None, commit: str | None) -> str | None:
    """The label an upload in CI gives its build when none is given: `ref=REF commit=SHA`
    (the form `read_label` and `--baseline auto` read); None without both, or with a ref
    that has a space or a commit that is not hex."""
    if not is_branch(ref) or not commit:
        return None
    commit = commit.lower()
    if not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        return None
    return f"ref={ref} commit={commit}"


def read_label(label: object) -> tuple[str, str] | None:
    """(ref, commit) from a label in `ci_label`'s form, or None: no label, another form, or
    one cut short (a commit under 7 hex digits, no commit)."""
    if not isinstance(label, str):
        return None
    found = _LABEL.search(label)
    return (found.group(1), found.group(2)) if found else None


async def find_baseline(session: Any, build_id: str, ref: str) -> tuple[str | None, str]:
    """The baseline of `build_id` for `--baseline auto`: the newest ready build of the same
    file name whose label says `ref` (read_label), other than the build itself; and a line
    saying what was found or why nothing was (a service that drops or cuts labels gives
    none: no baseline, never a wrong one)."""
    build = await session.get_build(checks.check_id("build", build_id))
    if not build.project_id or not checks.is_id("project", build.project_id):
        return None, f"no baseline: the service did not say which project {build_id} is in"
    listing = await session.list_builds(build.project_id)
    labelled = 0
    for other in listing.builds:  # newest first
        read = read_label(other.label)
        labelled += read is not None
        if (
            read is not None
            and read[0] == ref
            and other.id != build.id
            and checks.is_id("build", other.id)
            and other.file_name == build.file_name
            and other.status_kind == "ready"
        ):
            return other.id, (
                f"baseline {other.id}: the newest ready build of {_shown(build)} on {ref} "
                f"(commit {read[1][:12]})"
            )
    if not labelled:
        return None, (
            "no baseline: no build of the project carries a label of the form "
            "'ref=REF commit=SHA' (uploads in CI write it; give --baseline BUILD)"
        )
    return None, f"no baseline: no ready build of {_shown(build)} is labelled ref={ref}"


def _shown(build: Build) -> str:
    return _untrusted.clip(_untrusted.line(build.file_name or build.id), 80)


async def exonerate(
    session: Any,
    run_id: str,
    baseline: str,
    *,
    runs: int | None = None,
    failure_rate: float | None = None,
    categories: Categories = DEFAULT_CATEGORIES,
    wait_seconds: float = 1800.0,
) -> BaselineVerdict:
    """Run the test of a failed run on `baseline` and say whether its failure is
    pre-existing: `runs` runs (default: repeats_for(failure_rate)) started together, each
    with its own key, followed to their end or for `wait_seconds` (those still going are
    then stopped); they stop at the first pass.

    Raises:
        ValidationError: `run_id` or `baseline` is not an id, the run did not fail, or is of
            a web test (no build to compare with).
        ApiError, TransportError: as the session's calls raise them.
    """
    checks.check_id("build", baseline)
    failure = await session.get_run(checks.check_id("run", run_id))
    if not failure.is_final or failure.passed or failure.status_kind == "cancelled":
        raise ValidationError(f"run {run_id} did not fail ({failure.status}): nothing to exonerate")
    if not failure.test_id or not checks.is_id("test", failure.test_id):
        raise ValidationError(f"run {run_id} does not name its test: nothing to run on {baseline}")
    if failure.platform == "web" or failure.used_build_id is None:
        raise ValidationError(f"run {run_id} ran on no build (a web test): nothing to compare with")
    needed = repeats_for(failure_rate)
    count = needed if runs is None else checks.check_count("runs", runs)
    count = min(count, MOST_BASELINE_RUNS)
    key = checks.derived_key(f"exonerate/{run_id}", baseline)
    started = await asyncio.gather(
        *(
            session.run_test(
                failure.test_id,
                build_id=baseline,
                mode=failure.mode if failure.mode in ("cold", "warm") else None,
                idempotency_key=checks.derived_key(key, str(n)),
            )
            for n in range(count)
        )
    )
    ids = [checks.check_id("run", s.run_id, "the answer's runId") for s in started]
    seen: dict[str, Run] = {}
    with contextlib.suppress(WatchTimeoutError):  # judged on what ended in time
        async with session.watch_runs(ids, timeout=wait_seconds, stop_on_timeout=True) as watcher:
            async for run in watcher:
                if _not_started_here(run, failure, baseline):
                    watcher.forget(run.id)  # not counted, left alone
                    continue
                seen[run.id] = run
                if run.is_final and run.passed:
                    with contextlib.suppress(AsyncClientError):
                        await watcher.stop()
                    break
    return judge(
        failure,
        [seen[i] for i in ids if i in seen],
        baseline=baseline,
        needed=needed,
        categories=categories,
    )


def _not_started_here(run: Run, failure: Run, baseline: str) -> bool:
    """A run the service answered for a start on `baseline` that is no evidence: another
    build's, the failed run itself, or one created before it (an old run)."""
    if run.used_build_id not in (None, baseline) or run.id == failure.id:
        return True
    created, since = run.created_at, failure.created_at
    return created is not None and since is not None and created < since
