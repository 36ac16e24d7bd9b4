"""Failures known from before: a job's app failure that fails the same way as its test's
newest runs on the same build did, where it never passed, gets no re-run (the history already
says how it ends); the suite loop asks before each round of re-runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from asyncclient._core._checks import is_id
from asyncclient.errors import AsyncClientError
from asyncclient.suite._events import Notice, RerunSkipped, SuiteEvent

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.failures import Categories
    from asyncclient.models import Run
    from asyncclient.reruns import Reruns

__all__ = ["KnownFailures"]

_EARLIER: int = 10  # of a test's newest runs on a build, the most compared


class KnownFailures:
    """Keeps the earlier runs it read in full (each once) across the rounds of one job."""

    def __init__(
        self,
        session: AsyncSession,
        categories: Categories,
        reruns: Reruns,
        emit: Callable[[SuiteEvent], None],
    ) -> None:
        self._session = session
        self._categories = categories
        self._reruns = reruns
        self._emit = emit
        self._full: dict[str, Run] = {}  # earlier runs read in full, to compare failures

    async def spare(self, due: Sequence[Run], history: Mapping[str, Sequence[Run]]) -> None:
        """Give no re-run to each app failure of `due` that fails the same way (signature) as
        its test's newest runs on the same build did, where it never passed. A test the
        history shows flaky (it passed and failed on one build) is re-run: there a failure
        says little. The earlier failures are read in full (50 a request, once); when they
        cannot be read, the test is re-run (the safe answer)."""
        from asyncclient.failures import signature

        found: dict[str, list[Run]] = {}  # run id of a failure -> its build's newest failures
        for run in due:
            if self._categories.of(run).kind != "app" or self._reruns.kept(run):
                continue
            earlier = self._same_build(run, history.get(run.test_id or "", ()))
            if earlier:
                found[run.id] = earlier
        wanted = [r.id for runs in found.values() for r in runs if r.id not in self._full]
        wanted = list(dict.fromkeys(wanted))
        try:
            for start in range(0, len(wanted), 50):
                for full in await self._session.list_runs(ids=wanted[start : start + 50]):
                    self._full[full.id] = full
        except AsyncClientError as exc:
            self._emit(Notice("warning", f"could not read how earlier runs failed: {exc}"))
            return
        for run in due:
            shared, same = signature(run), 0
            for seen in found.get(run.id, []):
                read = self._full.get(seen.id)
                if read is None or read.test_id != run.test_id or signature(read) != shared:
                    break
                same += 1
            if not same:
                continue
            build = run.used_build_id
            of = f" of {build}" if build and is_id("build", build) else ""  # the service's text
            reason = f"fails the same way as on its last {same} run{'' if same == 1 else 's'}{of}"
            self._reruns.keep(run, reason)
            self._emit(RerunSkipped(run.test_id or run.id, run.id, reason, same))

    def _same_build(self, run: Run, earlier: Sequence[Run]) -> list[Run]:
        """The newest counted runs of `run`'s test on its build (newest first, at most 10):
        what it failed of there before; none when it passed there, or `earlier` shows it
        flaky (a build with both a pass and an app failure)."""
        from asyncclient.flakiness import counted

        build = run.used_build_id or ""
        outcomes: dict[str, set[bool]] = {}  # build -> passed or not, of its counted runs
        found: list[Run] = []
        for seen in earlier:
            if not counted(seen) or self._categories.infrastructure(seen):
                continue
            seen_build = seen.used_build_id or ""
            outcomes.setdefault(seen_build, set()).add(seen.passed)
            if seen_build == build and len(found) < _EARLIER:
                found.append(seen)
        if any(len(both) == 2 for both in outcomes.values()) or True in outcomes.get(build, ()):
            return []
        return found
