"""The runs toolset: run_test, run_project, list_runs, get_run, stop_run, wait_for_runs and
verify_fix, with flaky_tests and failure_clusters from _history; what they share lives in
_base and _wait."""

from __future__ import annotations

from typing import Annotated, Any, Final

from mcp.types import CallToolResult
from pydantic import WithJsonSchema

from asyncclient._core import _checks as checks
from asyncclient._core import _wording
from asyncclient._reports.model import read_attempt
from asyncclient.errors import ValidationError, WatchTimeoutError
from asyncclient.eta import JobEta
from asyncclient.mcp_server._base import (
    Bounded,
    ProgressReporter,
    ProjectId,
    RunId,
    TestId,
    ToolContext,
    compact,
    string,
)
from asyncclient.mcp_server._bisect import BisectTools
from asyncclient.mcp_server._catalogue import tools_of
from asyncclient.mcp_server._fleet import FleetTools
from asyncclient.mcp_server._history import HistoryTools
from asyncclient.mcp_server._wait import (
    STATUS_ORDER,
    FailedRequirement,
    WaitResult,
    failed,
    wait_result,
)
from asyncclient.models import Run
from asyncclient.reruns._policy import MAX_RETRY_FAILED
from asyncclient.suite import wait_with_retries

__all__ = ["TOOLS", "RunTools"]

TOOLS: Final = tools_of("runs")
ETA_TESTS: Final = 200  # the tests whose history a partial result's ETA reads
DEFAULT_WAIT_TIMEOUT: Final = 600.0
MAX_WAIT_TIMEOUT: Final = 3600.0

_MODE_TEXT = (
    "auto (default): replay the learned path when it is fresh, otherwise explore; "
    "cold: always explore; warm: only replay"
)
Mode = Annotated[str | None, string(_MODE_TEXT, enum=sorted(checks.MODES))]
IdempotencyKey = Annotated[
    str | None,
    string(
        "Optional. The same key on a retried call returns the first call's runs instead of "
        "starting new ones; one is made up when left out",
        minLength=1,
        maxLength=255,
    ),
]

# How long a tool waits; each says what then happens.
_SECONDS: Final = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT_TIMEOUT}
WaitSeconds = Annotated[
    float,
    WithJsonSchema(
        {
            **_SECONDS,
            "description": "Give up waiting after this many seconds (default 600, at most "
            "3600); the runs keep going on the service",
        }
    ),
]
VerifySeconds = Annotated[
    float,
    WithJsonSchema(
        {
            **_SECONDS,
            "description": "Wait at most this many seconds (default 600, at most 3600); the "
            "runs still going are then stopped and not counted",
        }
    ),
]


class RunStartResult(Bounded):
    runId: str
    mode: str | None
    overage: Any
    link: str | None


class ProjectRunResult(Bounded):
    runIds: list[str]
    started: list[dict[str, Any]]
    skipped: list[dict[str, Any]]


class RunsResult(Bounded):
    runs: list[dict[str, Any]]


class RunResult(Bounded):
    run: dict[str, Any]
    failedRequirements: list[FailedRequirement]
    captures: dict[str, str]
    files: list[str]


class StopResult(Bounded):
    id: str
    status: str


class VerifyResult(Bounded):
    fixed: bool
    summary: list[str]
    tests: list[dict[str, Any]]


VERIFY_RUNS: Final = 50  # the most runs of a test one call starts
VERIFY_TESTS: Final = 5  # the most tests one call runs


class RunTools(HistoryTools, FleetTools, BisectTools):
    async def run_test(
        self,
        test_id: TestId,
        mode: Mode = None,
        build_id: Annotated[
            str | None,
            string(
                "For app tests: run this build (ab_...); without it the newest ready build of "
                "the test's app runs",
                pattern="^ab_",
            ),
        ] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Annotated[CallToolResult, RunStartResult]:
        """Start a run of one test. Returns the run id (j_...), the mode actually used, whether
        the run goes beyond the plan's included runs (overage) and the result page link. Runs
        take minutes: follow them with wait_for_runs."""

        async def work() -> RunStartResult:
            start = await self._session.run_test(
                test_id, mode=mode, build_id=build_id, idempotency_key=idempotency_key
            )
            return {
                "runId": start.run_id,
                "mode": start.mode,
                "overage": start.overage,
                "link": start.link,
            }

        return await self._answer(work())

    async def run_project(
        self,
        project_id: ProjectId,
        mode: Mode = None,
        build_ids: Annotated[
            list[str] | None,
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^ab_"},
                    "maxItems": checks.IDS_PER_REQUEST,
                    "description": "Builds to run (ab_..., up to 50, at most one per app): each "
                    "app test runs the build of its own app",
                }
            ),
        ] = None,
        build_id: Annotated[
            str | None,
            string("One build to run (ab_...), the same as build_ids with one id", pattern="^ab_"),
        ] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Annotated[CallToolResult, ProjectRunResult]:
        """Start a run of every test of a project (a suite). Returns runIds (pass them to
        wait_for_runs), each started run with its test, mode, build and link, and the tests that
        could not start with the reason. When nothing starts it is an error listing why. For a
        very large suite the details of each start are left out first (leftOut says so)."""

        async def work() -> ProjectRunResult:
            if build_ids is not None and len(build_ids) > checks.IDS_PER_REQUEST:
                raise ValidationError(
                    f"build_ids takes at most {checks.IDS_PER_REQUEST} builds; got {len(build_ids)}"
                )
            start = await self._session.run_project(
                project_id,
                mode=mode,
                build_ids=build_ids,
                build_id=build_id,
                idempotency_key=idempotency_key,
            )
            return {
                "runIds": [run.run_id for run in start.started],
                "started": [compact(run) for run in start.started],
                "skipped": [compact(test) for test in start.skipped],
            }

        return await self._answer(
            work(),
            budget=self._options.wait_result_chars,
            parts=("started", "skipped", "runIds"),
            advice={
                "started": "runIds has every run started",
                "runIds": f"list_runs with project_id={project_id} lists the newest runs",
            },
        )

    async def list_runs(
        self,
        ids: Annotated[
            list[str] | None,
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^j_"},
                    "minItems": 1,
                    "maxItems": checks.IDS_PER_REQUEST,
                    "description": "Up to 50 run ids (j_...): their full views, in this order",
                }
            ),
        ] = None,
        test_id: Annotated[
            str | None, string("Only runs of this test (t_...)", pattern="^t_")
        ] = None,
        project_id: Annotated[
            str | None, string("Only runs of this project (p_...)", pattern="^p_")
        ] = None,
        status: Annotated[
            str | None, string("Only runs with this status", enum=STATUS_ORDER)
        ] = None,
        limit: Annotated[
            int | None,
            WithJsonSchema(
                {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": checks.LIST_LIMIT_MAX,
                    "description": "At most this many runs (default 50, at most 200)",
                }
            ),
        ] = None,
    ) -> Annotated[CallToolResult, RunsResult]:
        """List runs, newest first: id, test, status, mode, source, platform, build, times,
        duration and link. Filter by test, project or status; with ids, those runs in full
        (verdict, headline, requirements) in the order given. Runs that do not fit the result's
        size are left out, with a note saying how many. To wait for runs to finish use
        wait_for_runs instead of calling this repeatedly."""

        async def work() -> RunsResult:
            if ids is not None and len(ids) > checks.IDS_PER_REQUEST:
                raise ValidationError(
                    f"list_runs takes at most {checks.IDS_PER_REQUEST} ids; got {len(ids)}: "
                    "ask in several calls, or use wait_for_runs, which takes any number"
                )
            runs = await self._session.list_runs(
                ids=ids, test_id=test_id, project_id=project_id, status=status, limit=limit
            )
            return {"runs": [compact(run) for run in runs]}

        more = (
            "ask for the rest by fewer ids, or get_run for one in full"
            if ids
            else "narrow with status or test_id, or ask for a lower limit"
        )
        return await self._answer(work(), parts=("runs",), advice={"runs": more})

    async def get_run(self, run_id: RunId) -> Annotated[CallToolResult, RunResult]:
        """Show one run. While it is not final only its status means something; once final: the
        verdict, headline, each requirement's result with its reason (failedRequirements lists
        those that failed), values captured, the run's files (for download_run_file) and the
        result page link. A very long run is cut to fit, the raw view first, then captures, then
        failedRequirements; leftOut names each cut."""

        async def work() -> RunResult:
            run = await self._session.get_run(run_id)
            return {
                "run": compact(run),
                "failedRequirements": failed(read_attempt(run)),
                "captures": run.capture_values,
                "files": [f.path or f.link for f in _wording.run_files(run)],
            }

        return await self._answer(work(), parts=("run", "captures", "failedRequirements", "files"))

    async def stop_run(self, run_id: RunId) -> Annotated[CallToolResult, StopResult]:
        """Stop a queued or running run; it ends cancelled and is not counted. A run that is
        already final cannot be stopped."""

        async def work() -> StopResult:
            return {"id": run_id, "status": str(await self._session.stop_run(run_id))}

        return await self._answer(work())

    async def verify_fix(
        self,
        test_ids: Annotated[
            list[str],
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^t_"},
                    "minItems": 1,
                    "maxItems": VERIFY_TESTS,
                    "description": "The tests whose fix to prove (t_...), such as a "
                    "quarantined test",
                }
            ),
        ],
        ctx: ToolContext,
        runs: Annotated[
            int,
            WithJsonSchema(
                {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": VERIFY_RUNS,
                    "description": "Runs of each test (default 20: 20 of 20 passed bound the "
                    "failure rate below 14 % at 95 % confidence)",
                }
            ),
        ] = 20,
        build_id: Annotated[
            str | None, string("Optional. The build to run (ab_...); default the newest")
        ] = None,
        mode: Mode = None,
        timeout_seconds: VerifySeconds = DEFAULT_WAIT_TIMEOUT,
        idempotency_key: IdempotencyKey = None,
    ) -> Annotated[CallToolResult, VerifyResult]:
        """Prove a fix: run each test `runs` times together and wait for them. Per test: how
        many passed and failed, and what that supports, as a sentence ("20 of 20 passed: its
        failure rate is below 14 % at 95 % confidence", the exact binomial bound) and as
        failureRateBound; fixed is true only when every run passed. Use it before lifting a
        quarantine or closing a flaky-test issue. Starts runs (device time): at most 5 tests
        and 50 runs each; a stopped run gives no verdict. Calling again with the same
        idempotency_key starts nothing new."""

        async def work() -> VerifyResult:
            from asyncclient.spend.verify import verify_fix

            if isinstance(runs, bool) or not 1 <= runs <= VERIFY_RUNS:
                raise ValidationError(f"runs must be 1 to {VERIFY_RUNS}; got {runs!r}")
            if len(test_ids) > VERIFY_TESTS:
                raise ValidationError(
                    f"at most {VERIFY_TESTS} tests per call; got {len(test_ids)}: call again "
                    "with the others"
                )
            if isinstance(timeout_seconds, bool) or not 0 < timeout_seconds <= MAX_WAIT_TIMEOUT:
                raise ValidationError(
                    f"timeout_seconds must be above 0 and at most {MAX_WAIT_TIMEOUT:g}"
                )
            reporter = ProgressReporter(ctx)
            total = len(test_ids) * runs
            final: set[str] = set()

            def on_run(run: Run) -> None:
                if run.is_final:
                    final.add(run.id)
                reporter.update(len(final), total, f"{len(final)} of {total} runs final")

            try:
                checks_ = await verify_fix(
                    self._session,
                    test_ids,
                    runs=runs,
                    build_id=build_id,
                    mode=mode,
                    idempotency_key=idempotency_key,
                    timeout=timeout_seconds,
                    on_run=on_run,
                    interval=self._options.poll_interval,
                )
            finally:
                await reporter.close()
            return {
                "fixed": all(check.fixed for check in checks_),
                "summary": [f"{check.test_id}: {check.sentence()}" for check in checks_],
                "tests": [check.fields() for check in checks_],
            }

        return await self._answer(work())

    async def wait_for_runs(
        self,
        run_ids: Annotated[
            list[str],
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^j_"},
                    "minItems": 1,
                    "description": "The runs to wait for (j_...), any number, such as the "
                    "runIds that run_project returned",
                }
            ),
        ],
        ctx: ToolContext,
        timeout_seconds: WaitSeconds = DEFAULT_WAIT_TIMEOUT,
        retry_failed: Annotated[
            int,
            WithJsonSchema(
                {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_RETRY_FAILED,
                    "description": "Run each test whose run did not pass (not a stopped one) "
                    "again, up to this many times, with the same build and mode; a test that "
                    "passes on a re-run is flaky (listed in flaky) and counts as passed "
                    "(default 0)",
                }
            ),
        ] = 0,
    ) -> Annotated[CallToolResult, WaitResult]:
        """Wait until every run is final. Returns a one-line summary and the counts by status;
        then each run that did not pass with its verdict, headline, failed requirements and
        their reasons, error and link (notPassed); then the ids still going (pending) and those
        the service does not know (unknown); then each passed run in one short line. However
        many runs, the result stays within its size: what did not fit is counted in leftOut,
        and get_run gives any run in full. Polls in batches (50 runs per request), reporting
        progress as runs finish. If the time limit passes first, done is false: call again with
        the same ids. With retry_failed, the tests that did not pass are re-run (the re-runs are
        watched too, within the same time limit): the result shows each test's last run, and
        flaky lists the tests that passed only on a re-run."""

        async def work() -> WaitResult:
            if isinstance(timeout_seconds, bool) or not 0 < timeout_seconds <= MAX_WAIT_TIMEOUT:
                raise ValidationError(
                    f"timeout_seconds must be above 0 and at most {MAX_WAIT_TIMEOUT:g}; "
                    f"got {timeout_seconds!r}: wait again with the pending ids for longer"
                )
            if isinstance(retry_failed, bool) or not 0 <= retry_failed <= MAX_RETRY_FAILED:
                raise ValidationError(
                    f"retry_failed must be 0 to {MAX_RETRY_FAILED}; got {retry_failed!r}"
                )
            if retry_failed:
                return await self._wait_with_retries(run_ids, ctx, timeout_seconds, retry_failed)
            return await self._wait(run_ids, ctx, timeout_seconds)

        return await self._answer(work(), budget=self._options.wait_result_chars)

    async def _wait_with_retries(
        self, run_ids: list[str], ctx: ToolContext, seconds: float, retry_failed: int
    ) -> WaitResult:
        interval = self._options.poll_interval
        reporter = ProgressReporter(ctx)
        final: set[str] = set()
        total = len(set(run_ids))

        def on_run(run: Run) -> None:
            if run.is_final:
                final.add(run.id)
            count = f"{len(final)} of {total} runs final"
            reporter.update(len(final), total, f"{count}; {run.id} is {run.status}")

        def on_rerun(started: list[tuple[str, str, int]]) -> None:
            nonlocal total
            total += len(started)

        try:
            result = await wait_with_retries(
                self._session,
                run_ids,
                retry_failed=retry_failed,
                timeout=seconds,
                raise_on_timeout=False,
                on_run=on_run,
                on_rerun=on_rerun,
                interval=interval,
                max_interval=max(interval, 30.0),
            )
        finally:
            await reporter.close()
        finals = list(result.final_runs)
        return wait_result(
            finals,
            list(result.unknown),
            done=result.complete,
            seconds=seconds,
            budget=self._options.wait_result_chars,
            suite=result,
            eta=await self._eta(finals, exclude=[run.id for run in result.runs]),
        )

    async def _wait(self, run_ids: list[str], ctx: ToolContext, seconds: float) -> WaitResult:
        interval = self._options.poll_interval
        watcher = self._session.watch_runs(
            run_ids, interval=interval, max_interval=max(interval, 30.0), timeout=seconds
        )
        total = len(watcher.run_ids)
        final: set[str] = set()
        reporter = ProgressReporter(ctx)
        done = True
        async with watcher:
            try:
                async for run in watcher:
                    if run.is_final:
                        final.add(run.id)
                    count = f"{len(final)} of {total} runs final"
                    reporter.update(len(final), total, f"{count}; {run.id} is {run.status}")
            except WatchTimeoutError:
                done = False
            finally:
                await reporter.close()
            runs = list(watcher.runs.values())
            unknown = list(watcher.unknown)
        return wait_result(
            runs,
            unknown,
            done=done,
            seconds=seconds,
            budget=self._options.wait_result_chars,
            eta=await self._eta(runs, exclude=[run.id for run in runs]),
        )

    async def _eta(self, runs: list[Run], *, exclude: list[str]) -> JobEta | None:
        """How long the runs still going have to go, from their tests' history (one listing
        per test, at most ETA_TESTS tests): only when some run is still going (a partial
        result)."""
        going = [run for run in runs if not run.is_final]
        if not going:
            return None
        from asyncclient.eta import expected_of, job_eta, read_history

        tests = sorted({run.test_id for run in going if run.test_id})[:ETA_TESTS]
        history = await read_history(self._session, tests, exclude=exclude)
        modes = {run.test_id: run.mode for run in going if run.test_id}
        expected = {test: expected_of(found, modes.get(test)) for test, found in history.items()}
        return job_eta(going, expected)
