"""A failed test's runs on the baseline build (SuitePolicy.baseline, a build or `auto`: found
by label for the failed run's build): started at once, beside its re-runs, within the re-run
budget; followed by the round's watcher, apart from the test's attempts; judged
(asyncclient.failures.exonerate.judge) once they tell; stopped if the test passes after all."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from asyncclient._core import _checks as checks
from asyncclient.errors import AsyncClientError
from asyncclient.failures.exonerate import BaselineVerdict, find_baseline, judge, repeats_for

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.failures import Categories
    from asyncclient.models import Run
    from asyncclient.reruns import Reruns

__all__ = ["BaselineRuns"]


class BaselineRuns:
    """One suite's runs on its baseline (`baseline`: a build id, or `auto` for the newest
    ready build of the same file labelled `ref`), by test."""

    def __init__(
        self,
        session: AsyncSession,
        baseline: str,
        key: str,
        reruns: Reruns,
        categories: Categories,
        *,
        ref: str = "main",
    ) -> None:
        self.spec = baseline if baseline == "auto" else checks.check_id("build", baseline)
        self.ref = ref
        self.said: list[str] = []  # what auto found, a line each
        self._found: dict[str, str | None] = {}  # the job's build -> its baseline (auto)
        self._base: dict[str, str] = {}  # test -> its baseline
        self._session = session
        self._key = key
        self._reruns = reruns
        self._categories = categories
        self._tests: dict[str, list[str]] = {}  # test -> its baseline runs
        self._owner: dict[str, str] = {}  # baseline run -> its test
        self._views: dict[str, Run] = {}
        self._failure: dict[str, Run] = {}  # test -> its failure on the job's build
        self._needed: dict[str, int] = {}
        self.errors: dict[str, str] = {}  # test -> why it did not run on the baseline
        self.not_counted: dict[str, str] = {}  # run -> why
        self._judged: set[str] = set()
        self._skipped: dict[str, list[str]] = {}  # test -> why runs did not count

    def owns(self, run_id: str) -> bool:
        return run_id in self._owner or run_id in self.not_counted

    def wants(self, run: Run) -> bool:
        """Whether `run` (a final run of the job's) is a failure to try on the baseline: it
        failed (not stopped, not for the infrastructure), on another build than the
        baseline, and its test has not been tried yet."""
        test = run.test_id
        return (
            run.is_final
            and not run.passed
            and run.status_kind != "cancelled"
            and test is not None
            and checks.is_id("test", test)
            and test not in self._tests
            and test not in self.errors
            and run.used_build_id != self.spec
            and not self._categories.infrastructure(run)
        )

    async def _baseline_of(self, run: Run) -> str | None:
        """The baseline of the build `run` used; with `auto`, found once per build (and said
        once); None with the reason in `errors`."""
        if self.spec != "auto":
            return self.spec
        build = run.used_build_id
        if build is None or not checks.is_id("build", build):
            self.errors[run.test_id or run.id] = "no baseline: the run did not say its build"
            return None
        if build not in self._found:
            try:
                found, said = await find_baseline(self._session, build, self.ref)
            except AsyncClientError as exc:
                found, said = None, f"no baseline for {build}: {exc}"
            self._found[build] = found
            self.said.append(said)
        found = self._found[build]
        if found is None or found == build:
            self.errors[run.test_id or run.id] = f"no baseline for {build} on {self.ref}"
        return found if found != build else None

    async def start(self, run: Run, failure_rate: float | None) -> tuple[str, ...]:
        """Start the runs of `run`'s test on the baseline (repeats_for(failure_rate) of
        them, each with its own key); their ids, or () with the reason in `errors`."""
        test = run.test_id
        assert test is not None
        needed = repeats_for(failure_rate)
        self._failure[test] = run
        self._needed[test] = needed
        self._tests[test] = []
        baseline = await self._baseline_of(run)
        if baseline is None:
            return ()
        self._base[test] = baseline
        if not self._reruns.fits(test, needed):
            self.errors[test] = (
                f"not run on the baseline {baseline}: the re-run budget does not fit "
                f"{needed} more run(s)"
            )
            return ()
        mode = run.mode if run.mode in ("cold", "warm") else self._reruns.rerun_mode

        async def one(n: int) -> str:
            started = await self._session.run_test(
                test,
                mode=mode,
                build_id=baseline,
                idempotency_key=checks.derived_key(self._key, "baseline", test, str(n)),
            )
            return checks.check_id("run", started.run_id, "the answer's runId")

        done = await asyncio.gather(*(one(n) for n in range(needed)), return_exceptions=True)
        answered = [d for d in done if isinstance(d, str)]
        # The job's own run, answered here, is not the baseline's.
        ids = tuple(d for d in answered if not self._reruns.knows(d))
        if answered and not ids:
            self.errors[test] = (
                f"not run on the baseline {baseline}: the service answered a run of this job "
                f"({answered[0]}): not counted"
            )
        refused = [d for d in done if isinstance(d, BaseException)]
        for error in refused:
            if not isinstance(error, AsyncClientError):
                raise error
        if refused and not ids:
            self.errors[test] = f"not run on the baseline {baseline}: {refused[0]}"
        self._tests[test] = list(ids)
        for run_id in ids:
            self._owner[run_id] = test
            self._reruns.reserve(run_id, test)
        return ids

    def seen(self, run: Run) -> None:
        """A baseline run's latest view; one of another build is not counted (nor stopped)."""
        test = self._owner.get(run.id)
        if test is None:
            return
        why = self._reruns.not_this_jobs(run, self._base.get(test))
        if why is not None:  # not counted, left alone
            self.not_counted[run.id] = why
            self._skipped.setdefault(test, []).append(why)
            del self._owner[run.id]
            self._tests[test].remove(run.id)
            return
        self._views[run.id] = run
        self._reruns.reckon(run)

    def test_of(self, run_id: str) -> str | None:
        return self._owner.get(run_id)

    def baseline_of(self, test_id: str) -> str | None:
        return self._base.get(test_id)

    def going(self, test_id: str) -> list[str]:
        """The test's baseline runs not final yet."""
        return [
            r
            for r in self._tests.get(test_id, [])
            if r not in self._views or not self._views[r].is_final
        ]

    def verdict(self, test_id: str) -> BaselineVerdict | None:
        """What the baseline says of the test's failure (None: it did not run there)."""
        failure = self._failure.get(test_id)
        if failure is None:
            return None
        error = self.errors.get(test_id)
        baseline = self._base.get(test_id, self.spec)
        if error is not None:
            needed = self._needed[test_id]
            return BaselineVerdict(test_id, baseline, "undecided", (), 0, needed, error)
        runs: Sequence[Run] = [self._views[r] for r in self._tests[test_id] if r in self._views]
        verdict = judge(
            failure,
            runs,
            baseline=baseline,
            needed=self._needed[test_id],
            categories=self._categories,
        )
        skipped = self._skipped.get(test_id)
        if skipped and verdict.state == "undecided":
            verdict = attrs.evolve(verdict, why=f"{verdict.why}; {skipped[0]}")
        return verdict

    def newly_judged(self, test_id: str) -> BaselineVerdict | None:
        """The test's verdict, once: when its baseline runs told, or all of them ended."""
        verdict = self.verdict(test_id)
        if verdict is None or test_id in self._judged:
            return None
        if verdict.state == "undecided" and self.going(test_id):
            return None
        self._judged.add(test_id)
        return verdict

    def verdicts(self) -> dict[str, BaselineVerdict]:
        return {t: v for t in self._failure if (v := self.verdict(t)) is not None}

    async def stop(self, test_id: str) -> tuple[str, ...]:
        """Stop the test's baseline runs still going (its verdict no longer needs them)."""
        stopped = []
        for run_id in self.going(test_id):
            with contextlib.suppress(AsyncClientError):  # ended meanwhile
                await self._session.stop_run(run_id)
                stopped.append(run_id)
        return tuple(stopped)
