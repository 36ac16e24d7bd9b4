"""The reports of a followed suite for CI: the summary on stdout (or JSON with --json), JUnit XML
(--junit), the HTML page (--html), the GitHub step summary, and the evidence of the runs that
did not pass (--download-failed)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncclient.cli._common import EXIT_NOT_PASSED, CommandError
from asyncclient.cli._output import Output, to_json

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient._reports.model import SuiteReport, TestReport
    from asyncclient.cli._options import Follow
    from asyncclient.models import Run
    from asyncclient.reruns import SuiteResult

__all__ = ["report"]


async def report(
    session: AsyncSession,
    result: SuiteResult,
    job_report: SuiteReport,
    options: Follow,
    out: Output,
) -> None:
    """Every report asked for, of the suite's report model (built once by the suite loop):
    the summary, --json, --junit, --ctrf, --allure-results, --html, the step summary, and the
    evidence of the runs that did not pass (--download-failed, read from `result`)."""
    from asyncclient._reports import junit as _junit
    from asyncclient._reports.text import summary_lines

    lines = summary_lines(job_report)
    if out.json_mode:
        out.json([_json_test(test, job_report) for test in job_report.tests])
        for line in lines:
            out.info(line)
    elif options.events == "-":  # standard output is the event stream: JSON Lines only
        for line in lines:
            out.info(line)
    else:
        for line in lines:
            out.data(line)
    evidence: dict[str, list[str]] = {}
    if options.download_failed:
        evidence = await _download_failed(session, result, options.download_failed, out)
    junit, html, ctrf = options.junit, options.html, options.ctrf
    if junit:
        _written(out, "JUnit", junit, lambda: _junit.write_junit(junit, job_report))
    if ctrf:
        from asyncclient._reports.ctrf import write_ctrf

        _written(
            out,
            "CTRF",
            ctrf,
            lambda: write_ctrf(
                ctrf, job_report, evidence=evidence, evidence_dir=options.download_failed
            ),
        )
    if options.allure_results:
        from asyncclient._reports.allure import write_allure_results

        folder = options.allure_results
        _written(
            out,
            "Allure",
            folder,
            lambda: write_allure_results(
                folder, job_report, evidence=evidence, evidence_dir=options.download_failed
            ),
            what="results",
        )
    if html:
        from asyncclient._reports import html as _html_report

        _written(
            out,
            "HTML",
            html,
            lambda: _html_report.write_html(
                html, job_report, evidence=evidence, evidence_dir=options.download_failed
            ),
        )
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        from asyncclient._reports.markdown import append_step_summary, step_summary_markdown

        try:
            append_step_summary(summary_path, step_summary_markdown(job_report))
        except OSError as exc:
            # The summary is a courtesy; the result stands.
            out.error(f"cannot append to GITHUB_STEP_SUMMARY ({summary_path}): {exc}")


def _written(
    out: Output, kind: str, target: str, write: Callable[[], Path], what: str = "report"
) -> None:
    """Write one report, say where; a report that cannot be written fails the command."""
    try:
        path = write()
    except OSError as exc:
        raise CommandError(
            f"cannot write the {kind} {what} {target}: {exc.strerror or exc}", EXIT_NOT_PASSED
        ) from exc
    out.info(f"{kind} {what}: {path}")


def _json_test(test: TestReport, report: SuiteReport) -> dict[str, Any]:
    """A test's last run in --json, with its `summary` and the `cost` of all its attempts (the
    job's is their sum); with re-runs in the suite, also the
    test's flaky mark and attempts; with a quarantine, whether the test is quarantined; for a
    test that did not pass, its history when it was read."""
    from asyncclient._reports import flakiness_fields

    final = test.final
    entry = {**to_json(final.run), "summary": final.fields(), "cost": test.cost.fields()}
    if test.fail_fast:
        entry["stoppedBy"] = "fail-fast"
    if final.reused is not None:
        entry["stoppedBy"] = "reuse"
        entry["reused"] = final.reused.fields()
    if test.repeated:
        entry["newTest"] = test.new_test_fields()
    if test.left is not None:  # not final when the wait ended: what its history expects
        entry["left"] = {"seconds": test.left[0], "p90Seconds": test.left[1]}
    if test.usual_seconds is not None:
        slower = test.slower
        entry["slower"] = (
            None if slower is None else {"seconds": slower[0], "usualSeconds": slower[1]}
        )
    if report.quarantine_given:
        entry["quarantined"] = test.quarantine is not None
    if test.cause is not None:
        entry["cause"] = test.cause.fields()
    if test.not_rerun:
        entry["notRerun"] = test.not_rerun
    if test.baseline:
        entry["baseline"] = test.baseline
        entry["preExisting"] = test.pre_existing
    if report.trace_id is not None:  # the job's trace: from a failed test to its spans
        entry["traceId"] = report.trace_id
    if test.flakiness_read:
        entry["history"] = flakiness_fields(test.flakiness)
    if report.reran:
        entry["flaky"] = test.flaky
        entry["attempts"] = [
            {
                "runId": attempt.id,
                "kind": attempt.kind,
                "stopped": attempt.stopped,
                "status": attempt.status,
                "outcome": attempt.outcome,
                "headline": attempt.headline,
                "failedRequirements": [check.fields() for check in attempt.checks],
                "link": attempt.link,
            }
            for attempt in test.attempts
        ]
    return entry


async def _download_failed(
    session: AsyncSession, result: Any, folder: str, out: Output
) -> dict[str, list[str]]:
    """The files of every run that did not pass (flaky tests' failed attempts included) into
    FOLDER/RUN_ID/, a few at once, as `asyncclient download` lays them out. A file that cannot
    be downloaded is named on stderr; it does not change the verdict. Returns, per run id, the
    paths saved (relative to FOLDER)."""

    from asyncclient._core._wording import describe_error, run_files

    base = Path(folder)
    jobs = [
        (run, f.path, f.link)
        for test in result.tests
        for run in test.failed_attempts
        for f in run_files(run)
        if f.path is not None
    ]
    limit = asyncio.Semaphore(4)
    saved: dict[str, list[str]] = {}

    async def one(run: Run, rel: str, link: str) -> None:
        target = base / run.id / rel
        async with limit:
            try:
                await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
                await session.download_run_file(run.id, link, target)
            except Exception as exc:  # named, then the others go on
                message, _ = describe_error(exc)
                out.error(f"could not download {run.id} {rel}: {message}")
                return
        saved.setdefault(run.id, []).append(f"{run.id}/{rel}")

    await asyncio.gather(*(one(run, rel, link) for run, rel, link in jobs))
    order = {f"{run.id}/{rel}": index for index, (run, rel, _) in enumerate(jobs)}
    for files in saved.values():
        files.sort(key=order.__getitem__)  # as the run lists them: the video, then screenshots
    runs = {run.id for run, _, _ in jobs}
    if runs:
        out.info(f"evidence of {len(runs)} run(s) that did not pass: {base}")
    return saved
