"""The re-run policy's state for one suite (`Reruns`): each round's final runs recorded, the
tests due another attempt, their starts (under keys derived from the suite's), the budget."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from asyncclient._core import _checks as checks
from asyncclient._core import _untrusted
from asyncclient._values import _bounds as bounds
from asyncclient.errors import AsyncClientError
from asyncclient.reruns._policy import SuitePolicy
from asyncclient.reruns._result import Attempts, SuiteResult, needs_rerun

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import Run
    from asyncclient.spend.reuse import Reuse

__all__ = ["Reruns", "remaining"]

_START_CONCURRENCY = 8
_CLOCK_TICK = timedelta(seconds=1)  # times the service rounds apart


class Reruns:
    """The policy's state for one suite: record each round's final runs, ask which tests are
    due another attempt, start those together, and read the result."""

    def __init__(
        self,
        policy: SuitePolicy | None = None,
        *,
        mode: str | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        from asyncclient.spend.arrival import BUDGET_SECONDS

        if mode is not None:
            checks.check_choice("mode", mode, checks.MODES)
        if build_id is not None:
            build_id = checks.check_id("build", build_id)
        self.policy = policy = policy or SuitePolicy()
        # Flaky on arrival: the device time of new tests' repeats.
        self._new_test_budget = (
            BUDGET_SECONDS if policy.new_test_budget is None else policy.new_test_budget
        )
        self.new_tests: set[str] = set()
        self._repeated: dict[str, int] = {}  # entry -> repeats started
        # Runs stopped for a pass on an identical build.
        self.reused: dict[str, Reuse] = {}
        # Runs whose start said they are past the plan's included runs.
        self.overage: set[str] = set()
        # The runs a fail-fast stopped (--max-failures), added by whoever stopped them.
        self.fail_fast: set[str] = set()
        self._mode = mode
        self._build_id = build_id
        # Re-run keys derive from this: no test starts twice.
        self._key = idempotency_key or f"asyncclient-{uuid.uuid4()}"
        # One entry per first run; its re-runs append.
        self._entries: dict[str, list[Run]] = {}
        self._entry_of: dict[str, str] = {}  # run id -> entry
        self._errors: dict[str, str] = {}  # entry -> why its re-run was refused
        self._rank: dict[str, int] = {}  # first run id -> its place in the result (order())
        # at-once, hedge: runs overlap; the first pass stops others.
        self._kind: dict[str, str] = {}  # run id -> rerun, repeat or copy (first runs: none)
        self.stopped: set[str] = set()  # runs stopped because another run of the test passed
        # Device time re-runs may take, reckoned as they go.
        self.usual_seconds: dict[str, float] = {}  # test id -> its runs' usual duration
        self._reckoned: dict[str, float] = {}  # run id of a re-run or copy -> seconds
        self._budget_spent: set[str] = set()  # entries refused a run by the budget
        # Tests not re-run (failed so before).
        self._kept: dict[str, str] = {}
        self._asked: dict[str, str | None] = {}  # run id started here -> the build asked for
        self.foreign: dict[str, str] = {}  # runs answered for a start, not this job's: why
        self._viewed: set[str] = set()  # runs whose view the service gave (record)

    def keep(self, run: Run, reason: str) -> None:
        """Give `run`'s test no re-run, for `reason` (it fails the same way as before): its
        verdict is this run's."""
        entry = self._entry_of.get(run.id)
        if entry is not None:
            self._kept.setdefault(entry, reason)

    def kept(self, run: Run) -> bool:
        """Whether `run`'s test was given no re-run (keep)."""
        return self._entry_of.get(run.id) in self._kept

    def order(self, run_ids: Iterable[str]) -> None:
        """The order of the tests in the result: that of these first runs (others after)."""
        for run_id in run_ids:
            self._rank.setdefault(run_id, len(self._rank))

    @property
    def key(self) -> str:
        """The suite's key, every start's key derives from (no test starts twice)."""
        return self._key

    @property
    def rerun_mode(self) -> str | None:
        """The mode the first runs were started in, when the caller said."""
        return self._mode

    @property
    def start_errors(self) -> dict[str, str]:
        """Tests whose re-run the service refused (by test id), with the one-line reason."""
        return {self._entries[e][0].test_id or e: error for e, error in self._errors.items()}

    def record(self, runs: Iterable[Run]) -> None:
        """The latest view of each run of a round; a run not seen before (and not a re-run
        started here) is the first attempt of a test of its own. A re-run, copy or repeat that
        turns out to be another test's run is dropped from its test, with the reason; one that
        is another build's, or was created before this job's runs, is not this job's at all
        (`foreign`): no verdict, nothing done to it."""
        for run in runs:
            if run.id in self.foreign:
                continue
            self._viewed.add(run.id)
            why = self._not_ours(run)
            if why is not None:
                self._disown(run.id, why)
                continue
            entry = self._entry_of.setdefault(run.id, run.id)
            attempts = self._entries.setdefault(entry, [])
            test_id = attempts[0].test_id if attempts else None
            if attempts and attempts[0].id != run.id and run.test_id not in (None, test_id):
                other = _untrusted.clip(_untrusted.line(run.test_id), 80)
                self._errors.setdefault(
                    entry,
                    f"the service answered run {run.id} of test {other} for a start of "
                    f"{test_id}: not counted",
                )
                attempts[:] = [seen for seen in attempts if seen.id != run.id]
                continue
            for index, seen in enumerate(attempts):
                if seen.id == run.id:
                    attempts[index] = run
                    break
            else:
                attempts.append(run)

    def _not_ours(self, run: Run) -> str | None:
        """Why a run this job started (a re-run, copy or repeat) is another's: its view names
        a build other than the one asked for, or it was created before this job's first runs
        (by the service's clock); None when it may be ours."""
        if run.id not in self._asked:
            return None
        return self.not_this_jobs(run, self._asked[run.id])

    def not_this_jobs(self, run: Run, asked: str | None) -> str | None:
        """Why `run`, answered for a start of this job on build `asked`, is another's: its view
        names another build, or it was created before this job's first runs; else None."""
        build = run.used_build_id
        answered = _untrusted.clip(_untrusted.line(run.id), 80)
        if asked is not None and build is not None and build != asked:
            shown = _untrusted.clip(_untrusted.line(build), 80)
            return f"not counted: the service answered run {answered} of build {shown}"
        created, since = bounds.moment(run.created_at), self._first_created()
        if created is not None and since is not None and created < since - _CLOCK_TICK:
            return (
                f"not counted: the service answered run {answered}, created "
                f"{(since - created).total_seconds():.0f} s before this job's runs"
            )
        return None

    def _first_created(self) -> datetime | None:
        """When the service created the earliest first run of this job that it has dated."""
        times = [
            bounds.moment(attempts[0].created_at)
            for attempts in self._entries.values()
            if attempts and attempts[0].id not in self._asked and attempts[0].created_at
        ]
        return min((t for t in times if t is not None), default=None)

    def _disown(self, run_id: str, why: str) -> None:
        """A run the service answered for a start of this job that is not this job's: it
        leaves its test's attempts and the budget, and its test gets no more runs."""
        self.foreign[run_id] = why
        entry = self._entry_of.pop(run_id, None)
        self._kind.pop(run_id, None)
        self._reckoned.pop(run_id, None)
        if entry is not None and entry in self._entries:
            attempts = self._entries[entry]
            attempts[:] = [seen for seen in attempts if seen.id != run_id]
            self._errors.setdefault(entry, why)

    def _arriving(self, entry: str) -> bool:
        """Whether the entry is a new test that gets repeats instead of re-runs."""
        return bool(self.policy.new_test_runs) and self._entries[entry][0].test_id in self.new_tests

    def due(self) -> list[Run]:
        """The last attempt of each test to run again: it did not pass, was not stopped, has
        a test id, its re-runs were not refused, and the test has attempts left. A new test
        given repeats (--new-test-runs) is not re-run: its repeats are its evidence."""
        return [
            attempts[-1]
            for entry, attempts in self._entries.items()
            if attempts[0].test_id
            and needs_rerun(attempts[-1])
            and len(attempts) <= self.policy.retry_failed
            and entry not in self._errors
            and entry not in self._kept
            and not self._arriving(entry)
        ]

    def runs_left(self, run: Run) -> int:
        """How many more runs `run`'s test may get (1 + retry_failed in all)."""
        entry = self._entry_of.get(run.id, run.id)
        return max(0, 1 + self.policy.retry_failed - len(self._entries.get(entry, ())))

    def due_at_once(self, run: Run) -> tuple[Run, int] | None:
        """With re-runs at once: `run` just ended without passing; its test's remaining runs
        are due now, unless a run of it passed, it was stopped, it is a new test given
        repeats, its re-runs were refused or it has none left."""
        entry = self._entry_of.get(run.id)
        if entry is None or not self.policy.at_once or not needs_rerun(run):
            return None
        attempts = self._entries[entry]
        if not attempts[0].test_id or entry in self._errors or self._arriving(entry):
            return None
        if entry in self._kept:
            return None
        if any(seen.passed for seen in attempts):
            return None
        going = sum(1 for seen in attempts if not seen.is_final)
        left = self.runs_left(run)
        # A copy going is a chance taken.
        if going or not left:
            return None
        return run, left

    def others_going(self, run: Run) -> list[str]:
        """The runs of `run`'s test other than it still going (to stop once it passed)."""
        entry = self._entry_of.get(run.id)
        if entry is None:
            return []
        return [seen.id for seen in self._entries[entry] if seen.id != run.id and not seen.is_final]

    def unverified(self, run_ids: Iterable[str]) -> list[str]:
        """The runs started here (re-runs, copies, repeats) whose view the service has not
        given yet: whether each is this job's is not known (`_not_ours`)."""
        return [r for r in run_ids if r in self._asked and r not in self._viewed]

    def knows(self, run_id: str) -> bool:
        """Whether `run_id` is one of the job's runs (a first run, re-run, copy or repeat)."""
        return run_id in self._entry_of or run_id in self._asked

    def kind_of(self, run_id: str) -> str:
        """run (a first run), rerun, repeat or copy."""
        return self._kind.get(run_id, "run")

    def budget_used(self) -> float:
        """Seconds re-runs and copies took or are reckoned to take."""
        return sum(self._reckoned.values())

    def reckon(self, run: Run) -> None:
        """A re-run or copy's view: once final, what it took replaces its reckoning; a run the
        service gives no duration for keeps its reckoning (one stopped before it began took
        nothing)."""
        if run.id not in self._reckoned or not run.is_final:
            return
        took = run.duration_seconds
        if took is not None:
            self._reckoned[run.id] = took
        elif run.status_kind == "cancelled" and run.started_at is None:
            self._reckoned[run.id] = 0.0

    def reserve(self, run_id: str, test_id: str) -> None:
        """Reckon a run started beside the re-runs (a baseline run) against the budget."""
        from asyncclient.eta import DEFAULT_RUN_SECONDS

        self._reckoned[run_id] = self.usual_seconds.get(test_id, DEFAULT_RUN_SECONDS)

    def fits(self, test_id: str, runs: int) -> bool:
        """Whether `runs` more runs of the test fit the budget (no budget: always)."""
        if self.policy.budget_seconds is None:
            return True
        from asyncclient.eta import DEFAULT_RUN_SECONDS

        need = self.usual_seconds.get(test_id, DEFAULT_RUN_SECONDS) * runs
        return self.budget_used() + need <= self.policy.budget_seconds

    def _fits(self, entry: str, test_id: str) -> bool:
        """Whether one more re-run or copy of the test fits the budget; one that does not is
        the test's start error (it keeps its verdict so far)."""
        budget = self.policy.budget_seconds
        if budget is None:
            return True
        from asyncclient.eta import DEFAULT_RUN_SECONDS

        need = self.usual_seconds.get(test_id, DEFAULT_RUN_SECONDS)
        used = self.budget_used()
        if used + need <= budget:
            return True
        self._budget_spent.add(entry)
        self._errors.setdefault(
            entry,
            f"the re-run budget of {budget / 60:.1f} min is spent ({used / 60:.1f} min used, "
            f"about {need / 60:.1f} min needed)",
        )
        return False

    def budget_refused(self, test_id: str) -> bool:
        """Whether the budget kept a run of the test from starting."""
        return any(self._entries[e][0].test_id == test_id for e in self._budget_spent)

    def arrivals(self) -> list[tuple[Run, int]]:
        """The new tests whose first run ended (not stopped) and whose repeats have not
        started, each with how many repeats it gets (spend.arrival.repeats_for)."""
        from asyncclient.spend.arrival import repeats_for

        due = []
        for entry, attempts in self._entries.items():
            first = attempts[0]
            if not self._arriving(entry) or entry in self._repeated:
                continue
            if not first.is_final or first.status_kind == "cancelled":
                continue
            count = repeats_for(
                first.duration_seconds, self.policy.new_test_runs, self._new_test_budget
            )
            due.append((first, count))
        return due

    async def start_repeats(
        self, session: AsyncSession, due: Sequence[tuple[Run, int]]
    ) -> list[tuple[str, str, int]]:
        """Start each new test's repeats together, on its first run's build and mode; returns
        (test id, run id, attempt number) of each one started."""
        limit = asyncio.Semaphore(_START_CONCURRENCY)
        for first, count in due:
            self._repeated[self._entry_of[first.id]] = count
        done = await asyncio.gather(
            *(
                self._start_one(session, limit, first, f"repeat/{first.test_id}/{n}", "repeat")
                for first, count in due
                for n in range(1, count + 1)
            )
        )
        return [item for item in done if item is not None]

    async def _start_one(
        self,
        session: AsyncSession,
        limit: asyncio.Semaphore,
        run: Run,
        key: str,
        kind: str = "rerun",
    ) -> tuple[str, str, int] | None:
        """Start another run of `run`'s test (with its first run's build and mode, and the key
        `SUITE_KEY/key`); it is queued, an attempt of the test, until the watcher sees it. The
        service's refusal is kept as the test's start error (the first one)."""
        from asyncclient.models import Run, RunStatus

        entry = self._entry_of[run.id]
        attempts = self._entries[entry]
        test_id = attempts[0].test_id
        assert test_id is not None
        if kind != "repeat" and not self._fits(entry, test_id):
            return None
        if kind != "repeat":
            from asyncclient.eta import DEFAULT_RUN_SECONDS

            placeholder = f"?{key}"  # reckoned before the start answers: the budget holds
            self._reckoned[placeholder] = self.usual_seconds.get(test_id, DEFAULT_RUN_SECONDS)
        options = self.rerun_options(run)
        async with limit:
            try:
                started = await session.run_test(
                    test_id,
                    **options,
                    idempotency_key=checks.derived_key(self._key, key),
                )
            except AsyncClientError as exc:
                self._reckoned.pop(f"?{key}", None)
                self._errors.setdefault(entry, str(exc))
                return None
        reckoned = self._reckoned.pop(f"?{key}", None)
        if started.run_id in self._entry_of:
            # A service that merged two keys: never a second verdict.
            self._errors.setdefault(
                entry,
                f"the service answered run {started.run_id} for a new start of {test_id}, "
                "a run this job already has: not counted twice",
            )
            return None
        self._entry_of[started.run_id] = entry
        self._kind[started.run_id] = kind
        self._asked[started.run_id] = options["build_id"]
        if reckoned is not None:
            self._reckoned[started.run_id] = reckoned
        if started.overage is True:
            self.overage.add(started.run_id)
        attempts.append(Run(id=started.run_id, status=RunStatus.QUEUED, test_id=test_id))
        return test_id, started.run_id, len(attempts)

    def failed_for_good(self, run: Run) -> bool:
        """Whether `run` is its test's verdict and the test did not pass: final, not passed,
        and no re-run will follow (it was stopped, the test has no attempt left, or its re-run
        was refused). A quarantined test never counts (fail-fast: --max-failures)."""
        if not run.is_final or run.passed or (run.test_id or "") in self.policy.quarantined:
            return False
        if run.id in self.reused and run.status_kind == "cancelled":
            return False
        entry = self._entry_of.get(run.id, run.id)
        if self.policy.at_once and entry in self._entries and not self._arriving(entry):
            attempts = self._entries[entry]
            if any(not seen.is_final for seen in attempts):
                return False  # another run of it may still pass
            if any(seen.passed for seen in attempts):
                return False
            if not any(needs_rerun(seen) for seen in attempts):
                return not any(seen.id in self.reused for seen in attempts)
            return (
                len(attempts) > self.policy.retry_failed
                or entry in self._errors
                or entry in self._kept
            )
        if entry in self._entries and self._arriving(entry):
            if entry not in self._repeated and run.status_kind != "cancelled":
                return False  # its repeats are still to come
            test = self._attempts(entry)
            return test.outcome == "failed" or (
                test.outcome == "flaky_on_arrival" and not self.policy.new_test_warn
            )
        return (
            not needs_rerun(run)
            or self.attempt_of(run.id) > self.policy.retry_failed
            or entry in self._errors
            or entry in self._kept
        )

    def attempt_of(self, run_id: str) -> int:
        """1 for a run given at first, 2 for its first re-run, ..."""
        attempts = self._entries.get(self._entry_of.get(run_id, run_id), [])
        return next((n for n, run in enumerate(attempts, 1) if run.id == run_id), 1)

    def rerun_options(self, run: Run) -> dict[str, str | None]:
        """mode and build_id of a re-run of `run`'s test: those of the test's first run (the
        job's build when its view named none, unless it is a web test)."""
        first = self._entries[self._entry_of[run.id]][0]
        mode = self._mode or (first.mode if first.mode in checks.MODES else None)
        build = first.used_build_id or (None if first.platform == "web" else self._build_id)
        return {"mode": mode, "build_id": build}

    async def start(self, session: AsyncSession, due: Sequence[Run]) -> list[tuple[str, str, int]]:
        """Start a re-run of each test of `due` together (a few requests at once); returns
        (test id, run id, attempt number) of each one started. A test whose re-run the service
        refuses keeps its last verdict, with the reason (see Attempts.start_error)."""
        return await self.start_many(session, [(run, 1) for run in due])

    async def start_many(
        self, session: AsyncSession, due: Sequence[tuple[Run, int]], kind: str = "rerun"
    ) -> list[tuple[str, str, int]]:
        """Start `count` more runs of each test of `due` (a re-run's, or a known-flaky test's
        copies: `kind` copy), a few requests at once, each with its own key; returns (test id,
        run id, attempt number) of each one started. One the budget does not fit, or the
        service refuses, is not started: the test keeps its verdict so far, with the reason."""
        limit = asyncio.Semaphore(_START_CONCURRENCY)
        jobs = []
        for run, count in due:
            attempts = self._entries[self._entry_of[run.id]]
            for n in range(count):
                key = f"rerun/{attempts[0].test_id}/{len(attempts) + 1 + n}"
                jobs.append(self._start_one(session, limit, run, key, kind))
        if self.policy.budget_seconds is None:
            done = await asyncio.gather(*jobs)
        else:  # one by one: each start is reckoned against the budget
            done = [await job for job in jobs]
        return [item for item in done if item is not None]

    def _attempts(self, entry: str) -> Attempts:
        runs = list(self._entries[entry])
        repeats = self._repeated.get(entry, 0) and len(runs) - 1
        reused = self.reused.get(runs[-1].id) if len(runs) == 1 else None
        together = self.policy.at_once and not repeats and len(runs) > 1
        decided_on = 0
        if together:
            # The deciding run goes last, where every report reads it.
            counted = [r for r in runs if r.is_final and r.status_kind != "cancelled"]
            decider = next((r for r in counted if r.passed), None)
            decider = decider or next((r for r in runs if not r.is_final), None)
            decider = decider or (counted[-1] if counted else runs[-1])
            decided_on = runs.index(decider) + 1
            runs = [r for r in runs if r is not decider] + [decider]
        return Attempts(
            runs[0].test_id or entry,
            tuple(runs),
            self._errors.get(entry),
            repeats,
            reused,
            kinds=tuple(self.kind_of(r.id) for r in runs),
            at_once=together,
            stopped=frozenset(r.id for r in runs if r.id in self.stopped),
            decided_on=decided_on,
            infrastructure=frozenset(
                r.id for r in runs if self.policy.categories.infrastructure(r)
            ),
            not_rerun=self._kept.get(entry),
        )

    def result(self, *, complete: bool = True, unknown: Sequence[str] = ()) -> SuiteResult:
        rank, last = self._rank, len(self._rank)
        entries = sorted(self._entries, key=lambda entry: rank.get(entry, last))
        return SuiteResult(
            tuple(self._attempts(entry) for entry in entries),
            self.policy,
            complete,
            tuple(unknown),
            overage=frozenset(self.overage),
            fail_fast=frozenset(self.fail_fast),
        )


def remaining(deadline: float | None) -> float | None:
    """Seconds left until `deadline` (time.monotonic), at least a millisecond; None: no limit."""
    return None if deadline is None else max(0.001, deadline - time.monotonic())
