"""The runs toolset's "is it my change?" tools: bisect, the first build a test fails on
(asyncclient.failures.bisect), within a device-minute and a time budget; exonerate, a failed
run's test run on a baseline build (asyncclient.failures.exonerate), within its runs and time."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Final

from mcp.types import CallToolResult
from pydantic import WithJsonSchema

from asyncclient.errors import ValidationError
from asyncclient.mcp_server._base import (
    Bounded,
    ProgressReporter,
    ProjectId,
    RunId,
    TestId,
    ToolContext,
    ToolKit,
    string,
)

__all__ = ["BisectResult", "BisectTools", "ExonerateResult"]

#: Device minutes one call may spend at most, and by default.
MOST_MINUTES: Final = 600.0
DEFAULT_MINUTES: Final = 120.0
#: Seconds one call waits at most, and by default.
MOST_SECONDS: Final = 3600.0
DEFAULT_SECONDS: Final = 900.0

_BUILD = string("A build (ab_...)", pattern="^ab_")
_BASELINE = string("The baseline build (ab_...): main's newest, say", pattern="^ab_")
#: Baseline runs one exonerate call may start at most, and seconds it waits by default.
MOST_BASELINE_RUNS: Final = 5
DEFAULT_EXONERATE_SECONDS: Final = 900.0


class BisectResult(Bounded):
    firstBad: str | None
    lastGood: str | None
    confidence: float
    summary: str
    runs: int
    deviceMinutes: float
    stopped: str | None
    steps: list[dict[str, Any]]


def _seconds(description: str) -> WithJsonSchema:
    """A wait in seconds, above 0 and at most MOST_SECONDS."""
    return WithJsonSchema(
        {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MOST_SECONDS,
            "description": description,
        }
    )


class ExonerateResult(Bounded):
    state: str
    preExisting: bool
    baseline: str
    runs: list[str]
    sameCause: int
    needed: int
    summary: str


class BisectTools(ToolKit):
    async def bisect(
        self,
        project_id: ProjectId,
        test_id: TestId,
        good: Annotated[str, _BUILD],
        bad: Annotated[str, _BUILD],
        ctx: ToolContext,
        confidence: Annotated[
            float,
            WithJsonSchema(
                {
                    "type": "number",
                    "minimum": 0.5,
                    "maximum": 0.999,
                    "description": "The least chance the answer is right (default 0.95)",
                }
            ),
        ] = 0.95,
        budget_minutes: Annotated[
            float,
            WithJsonSchema(
                {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MOST_MINUTES,
                    "description": "Device minutes the search may spend (default 120, at most "
                    "600); past them it stops with the range it narrowed",
                }
            ),
        ] = DEFAULT_MINUTES,
        timeout_seconds: Annotated[
            float,
            _seconds(
                "Give up waiting after this many seconds (default 900, at most 3600); call "
                "again with the same idempotency_key to go on"
            ),
        ] = DEFAULT_SECONDS,
        idempotency_key: Annotated[
            str | None,
            string(
                "Optional. The same key asks for the same runs: a call cut off by its timeout, "
                "called again with it, goes on where it stopped without new runs",
                minLength=1,
                maxLength=255,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, BisectResult]:
        """Find the first build a test fails on, between a build it passes on (good) and one it
        fails on (bad), by halving the range; a build is called bad only after as many
        failures in a row as the test's flake rate (from its history) needs for the
        confidence, so a flaky test cannot fool it. Returns firstBad, lastGood, the
        confidence, a summary sentence, the runs and device minutes spent, and each step.
        Starts runs (device time), within budget_minutes."""

        async def work() -> BisectResult:
            from asyncclient.failures.bisect import BisectStep, bisect

            if not 0 < budget_minutes <= MOST_MINUTES:
                raise ValidationError(
                    f"budget_minutes must be above 0 and at most {MOST_MINUTES:g}"
                )
            if not 0 < timeout_seconds <= MOST_SECONDS:
                raise ValidationError(
                    f"timeout_seconds must be above 0 and at most {MOST_SECONDS:g}"
                )
            reporter = ProgressReporter(ctx)
            done: list[BisectStep] = []

            def on_step(step: BisectStep) -> None:
                done.append(step)
                # The steps a search of this many builds takes at most: its total.
                reporter.update(len(done), max(len(done), 7), f"{step.build_id}: {step.verdict}")

            try:
                async with asyncio.timeout(timeout_seconds):
                    found = await bisect(
                        self._session,
                        project_id,
                        test_id,
                        good=good,
                        bad=bad,
                        confidence=confidence,
                        budget_minutes=budget_minutes,
                        idempotency_key=idempotency_key,
                        interval=self._options.poll_interval,
                        on_step=on_step,
                    )
            except TimeoutError:
                raise ValidationError(
                    f"not found within {timeout_seconds:g} s ({len(done)} steps done); call "
                    "again with the same idempotency_key to go on where it stopped"
                ) from None
            finally:
                await reporter.close()
            data = found.to_json()
            if found.first_bad is None:
                summary = f"not found: {found.stopped}"
            else:
                summary = (
                    f"{test_id} first fails on {found.first_bad} (last good {found.last_good}), "
                    f"{found.confidence:.1%} confidence; {found.runs} runs, "
                    f"{found.device_minutes:.1f} device minutes"
                )
            return {
                "firstBad": data["firstBad"],
                "lastGood": data["lastGood"],
                "confidence": data["confidence"],
                "summary": summary,
                "runs": data["runs"],
                "deviceMinutes": data["deviceMinutes"],
                "stopped": data["stopped"],
                "steps": data["steps"],
            }

        return await self._answer(work(), parts=("steps",), advice={"steps": "many steps"})

    async def exonerate(
        self,
        run_id: RunId,
        baseline: Annotated[
            str, string("The baseline build (ab_...): main's, say", pattern="^ab_")
        ],
        ctx: ToolContext,
        runs: Annotated[
            int | None,
            WithJsonSchema(
                {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": MOST_BASELINE_RUNS,
                    "description": "Optional. Runs on the baseline (default: 1, or as many as "
                    "the test's flakiness asks, at most 5)",
                }
            ),
        ] = None,
        timeout_seconds: Annotated[
            float,
            _seconds(
                "Stop waiting (and the runs still going) after this many seconds "
                "(default 900, at most 3600)"
            ),
        ] = DEFAULT_EXONERATE_SECONDS,
    ) -> Annotated[CallToolResult, ExonerateResult]:
        """Is a failure the change's? Run the failed run's test on a baseline build (main's)
        and compare: when it fails there too with the same cause, the failure is
        pre-existing; when it passes there, it is the change's. A flaky test (its history)
        needs the failure on the baseline more than once. Returns the state (pre-existing,
        new or undecided), the baseline runs and a summary. Starts runs (device time): at
        most 5."""

        async def work() -> ExonerateResult:
            from asyncclient.failures.exonerate import exonerate
            from asyncclient.flakiness import fetch_flakiness

            if runs is not None and not 1 <= runs <= MOST_BASELINE_RUNS:
                raise ValidationError(f"runs must be 1 to {MOST_BASELINE_RUNS}")
            if not 0 < timeout_seconds <= MOST_SECONDS:
                raise ValidationError(
                    f"timeout_seconds must be above 0 and at most {MOST_SECONDS:g}"
                )
            failed = await self._session.get_run(run_id)
            rate = None
            if failed.test_id and failed.project_id:
                report = await fetch_flakiness(
                    self._session, failed.project_id, tests=[failed.test_id], exclude={run_id}
                )
                found = report.of(failed.test_id)
                rate = found.failure_rate if found is not None and found.state == "flaky" else None
            verdict = await exonerate(
                self._session, run_id, baseline, runs=runs, failure_rate=rate,
                wait_seconds=timeout_seconds,
            )  # fmt: skip
            return {
                "state": verdict.state,
                "preExisting": verdict.pre_existing,
                "baseline": verdict.baseline,
                "runs": list(verdict.runs),
                "sameCause": verdict.same_cause,
                "needed": verdict.needed,
                "summary": f"{verdict.test_id}: {verdict.why}",
            }

        return await self._answer(work())
