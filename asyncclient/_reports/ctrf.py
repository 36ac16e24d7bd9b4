"""The CTRF report of a suite (`--ctrf FILE`), as the `ctrf` npm package's schema describes it:
a test per test, its last run the verdict, earlier attempts as `retries`, `flaky` when it
passed on a re-run, a quarantined failure or a test not started `skipped` with its reason,
the run's files as attachments, the job's device time in `results.summary.extra`.
"""

from __future__ import annotations

import json
import mimetypes
import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from asyncclient._core._untrusted import json_text
from asyncclient._core._wording import run_files
from asyncclient._local._files import write_atomically
from asyncclient._reports.model import Attempt, SuiteReport, TestReport
from asyncclient._version import __version__

__all__ = ["SPEC_VERSION", "ctrf_report", "write_ctrf"]

SPEC_VERSION: Final = "0.0.0"

# The report model's outcome of a run, in CTRF's five words.
_STATUS: Final = {
    "passed": "passed",
    "failed": "failed",
    "error": "failed",
    "cancelled": "skipped",
    "not_final": "pending",
}


def _ms(seconds: float | None) -> int:
    return max(0, round((seconds or 0.0) * 1000))


def _epoch_ms(moment: datetime | None) -> int | None:
    return None if moment is None else round(moment.timestamp() * 1000)


def _trace(attempt: Attempt) -> str:
    return "\n".join(check.line for check in attempt.checks)


def _attachments(
    attempt: Attempt, evidence: Mapping[str, Sequence[str]], base: Path | None
) -> list[dict[str, str]]:
    saved = evidence.get(attempt.id)
    if saved:
        paths = [str((base or Path()) / rel) for rel in saved]
    else:
        paths = [f.link or f.path or "" for f in run_files(attempt.run)]
    found = []
    for path in paths:
        if not path:
            continue
        name = path.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0] or path
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        found.append({"name": name, "contentType": kind, "path": path})
    return found


def _timed(entry: dict[str, Any], attempt: Attempt) -> None:
    run = attempt.run
    start, stop = _epoch_ms(run.started_at), _epoch_ms(run.finished_at)
    if start is not None:
        entry["start"] = start
    if stop is not None:
        entry["stop"] = stop


def _attempt(
    attempt: Attempt, evidence: Mapping[str, Sequence[str]], base: Path | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "attempt": attempt.number,
        "status": _STATUS.get(attempt.outcome, "other"),
        "duration": _ms(attempt.seconds),
        "message": attempt.message,
    }
    trace = _trace(attempt)
    if trace:
        entry["trace"] = trace
    _timed(entry, attempt)
    attachments = _attachments(attempt, evidence, base)
    if attachments:
        entry["attachments"] = attachments
    entry["extra"] = {
        "runId": attempt.id,
        "rawStatus": attempt.status,
        "link": attempt.link,
        "kind": attempt.kind,
        "stopped": attempt.stopped,
    }
    return entry


def _test(
    test: TestReport, suite: str, evidence: Mapping[str, Sequence[str]], base: Path | None
) -> dict[str, Any]:
    final = test.final
    excused = test.excused and final.outcome in ("failed", "error", "not_final")
    status = "skipped" if excused else _STATUS.get(final.outcome, "other")
    entry: dict[str, Any] = {
        "name": test.title or test.test_id,
        "testId": test.test_id,
        "status": status,
        "duration": _ms(final.seconds),
        "suite": [suite],
        "rawStatus": final.status,
        "retries": sum(1 for attempt in test.earlier if not attempt.stopped),
        "flaky": test.flaky,
    }
    _timed(entry, final)
    if final.outcome != "passed":
        entry["message"] = (
            f"quarantined: {test.quarantine}; {final.message}" if excused else final.message
        )
        if test.fail_fast:
            entry["message"] = f"stopped by fail-fast (--max-failures); {entry['message']}"
        if test.pre_existing:
            entry["message"] = f"pre-existing: {test.baseline}; {entry['message']}"
        trace = _trace(final)
        if trace:
            entry["trace"] = trace
    if test.earlier:
        entry["retryAttempts"] = [_attempt(attempt, evidence, base) for attempt in test.earlier]
    attachments = _attachments(final, evidence, base)
    if attachments:
        entry["attachments"] = attachments
    extra: dict[str, Any] = {
        "runId": final.id,
        "link": final.link,
        "mode": final.run.mode,
        "cost": test.cost.fields(),
    }
    if test.quarantine is not None:
        extra["quarantine"] = test.quarantine
    if test.cause is not None:
        extra["cause"] = test.cause.fields(with_tests=False)
    if test.not_rerun:
        extra["notRerun"] = test.not_rerun
    if test.baseline:
        extra["baseline"] = test.baseline
        extra["preExisting"] = test.pre_existing
    if final.reused is not None:
        extra["reused"] = final.reused.fields()
    if test.repeated:
        extra["newTest"] = test.new_test_fields()
    entry["extra"] = extra
    return entry


def ctrf_report(
    report: SuiteReport,
    *,
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
    generated: datetime | None = None,
) -> dict[str, Any]:
    """The CTRF document, as JSON values. evidence: per run id the downloaded files' paths
    relative to evidence_dir (the attachments then name those files)."""
    now = generated or datetime.now(UTC)
    base = Path(evidence_dir) if evidence_dir is not None else None
    files = evidence or {}
    tests = [_test(test, report.name, files, base) for test in report.tests]
    tests += [
        {
            "name": test_id,
            "testId": test_id,
            "status": "skipped",
            "duration": 0,
            "suite": [report.name],
            "message": reason or "not started",
            "rawStatus": "not started",
        }
        for test_id, reason in report.skipped
    ]
    runs = [attempt.run for test in report.tests for attempt in test.attempts]
    starts = [t for run in runs if (t := _epoch_ms(run.created_at)) is not None]
    stops = [t for run in runs if (t := _epoch_ms(run.finished_at)) is not None]
    at_now = round(now.timestamp() * 1000)
    start = min(starts) if starts else at_now
    stop = max([*stops, start]) if stops else max(at_now, start)
    count = {word: sum(1 for t in tests if t["status"] == word) for word in _WORDS}
    summary: dict[str, Any] = {
        "tests": len(tests),
        **count,
        "flaky": sum(1 for test in report.tests if test.flaky),
        "suites": 1,
        "start": start,
        "stop": stop,
        "duration": max(0, stop - start),
        "extra": {
            "passed": report.passed,
            "counts": report.counts,
            **report.cost.fields(),
            "causes": [cause.fields() for cause in report.causes],
        },
    }
    return {
        "reportFormat": "CTRF",
        "specVersion": SPEC_VERSION,
        "reportId": str(uuid.uuid4()),
        "timestamp": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "generatedBy": "asyncclient",
        "results": {
            "tool": {"name": "asyncclient", "version": __version__},
            "summary": summary,
            "tests": tests,
            "environment": {"reportName": report.name},
        },
    }


_WORDS: Final = ("passed", "failed", "skipped", "pending", "other")


def write_ctrf(
    path: str | os.PathLike[str],
    report: SuiteReport,
    *,
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write ctrf_report() to `path` atomically (a temp file beside it, then a rename)."""
    document = ctrf_report(report, evidence=evidence, evidence_dir=evidence_dir)
    # The same value with terminal and CI controls escaped.
    text = json_text(json.dumps(document, ensure_ascii=False, indent=2)) + "\n"
    return write_atomically(path, text.encode("utf-8"))
