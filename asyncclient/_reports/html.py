"""The HTML report of a suite (`--html PATH`): one self-contained page, inline CSS, no script,
nothing loaded from another host; one row per test with its attempts.

Everything the service sent is text to the template, escaped by Jinja2's autoescaping: a reason
holding `<script>` shows those characters. The page is written to a temporary name and renamed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from asyncclient import _reports
from asyncclient._local._files import write_atomically
from asyncclient._version import __version__

if TYPE_CHECKING:
    from asyncclient.models import Run
    from asyncclient.reruns import Attempts, SuiteResult

__all__ = ["html_report", "write_html"]

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
# Only these link targets are written as links: a javascript: or data: URL from the service is
# shown as text.
_SAFE_SCHEMES = ("http://", "https://")


def _safe_url(url: str | None) -> str | None:
    return url if url and url.lower().startswith(_SAFE_SCHEMES) else None


def _attempt(run: Run, number: int) -> dict[str, Any]:
    return {
        "number": number,
        "run_id": run.id,
        "status": _reports.status_of(run),
        "outcome": _reports.outcome(run),
        "headline": _reports.headline(run),
        "duration": _reports.format_duration(_reports.duration_seconds(run)),
        "requirements": [
            {"name": r.title or r.name, "reason": r.reason}
            for r in _reports.failed_requirements(run)
        ],
        "link": _safe_url(run.link),
        "link_text": run.link or "",
    }


def _test_row(
    test: Attempts, evidence: Mapping[str, Sequence[str]], base: Path, here: Path
) -> dict[str, Any]:
    final = test.final
    files = []
    for attempt in test.runs:
        for rel in evidence.get(attempt.id, ()):
            # By its path from the report's folder, so the page and its evidence move together.
            href = quote(os.path.relpath(base / rel, here).replace(os.sep, "/"))
            files.append(
                {
                    "run_id": attempt.id,
                    "name": rel.split("/", 1)[-1],
                    "href": href,
                    "image": rel.lower().endswith(_IMAGE_SUFFIXES),
                }
            )
    return {
        "test_id": test.test_id,
        "title": _reports.title(final),
        "outcome": test.outcome,
        "status": _reports.status_of(final),
        "flaky": test.flaky,
        "attempts": [_attempt(run, n) for n, run in enumerate(test.runs, 1)],
        "duration": _reports.format_duration(_reports.duration_seconds(final)),
        "headline": _reports.headline(final),
        "requirements": _attempt(final, test.attempts)["requirements"],
        "captures": sorted(_reports.captures(final).items()),
        "link": _safe_url(final.link),
        "link_text": final.link or "",
        "files": files,
        "start_error": test.start_error,
        # Every field of the --json summary, for the template to show (a new field is one
        # line in _reports.report_fields and its place in report.html.j2).
        "fields": _reports.report_fields(final),
    }


def html_report(
    result: SuiteResult,
    *,
    name: str = "asyncclient",
    skipped: Sequence[tuple[str, str]] = (),
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
    report_dir: str | os.PathLike[str] = ".",
    generated: datetime | None = None,
) -> str:
    """The page, as text. evidence: per run id the downloaded files' paths relative to
    evidence_dir; report_dir: where the page will be (links to the files are relative)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("asyncclient._reports", ""),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    base = Path(evidence_dir or ".").absolute()
    here = Path(report_dir).absolute()
    rows = [_test_row(test, evidence or {}, base, here) for test in result.tests]
    history = result.history or {}
    for test, row in zip(result.tests, rows, strict=True):
        found = history.get(test.test_id)
        row["history"] = None
        if test.test_id in history:
            strip = found.strip if found is not None else ""
            row["history"] = {"runs": 0, **_reports.history_fields(found), "strip": strip}
        row["quarantined"] = result.quarantined.get(test.test_id)
    quarantined = [row for row in rows if row["quarantined"] is not None]
    rows = [row for row in rows if row["quarantined"] is None]
    order = {"failed": 0, "not_final": 1, "flaky": 2, "cancelled": 3, "passed": 4}
    rows.sort(key=lambda row: order.get(row["outcome"], 0))
    counts = {key: sum(row["outcome"] == key for row in rows) for key in order}
    template = env.get_template("report.html.j2")
    return template.render(
        name=name,
        rows=rows,
        quarantined=quarantined,
        fail_on_quarantined=result.fail_on_quarantined,
        counts=counts,
        total=len(rows) + len(quarantined),
        summary=result.summary(),
        passed=result.passed,
        skipped=[{"test_id": t, "reason": r} for t, r in skipped],
        generated=(generated or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC"),
        version=__version__,
    )


def write_html(
    path: str | os.PathLike[str],
    result: SuiteResult,
    *,
    name: str = "asyncclient",
    skipped: Sequence[tuple[str, str]] = (),
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write html_report() to `path` atomically; links to evidence relative to its folder."""
    target = Path(path)
    page = html_report(
        result,
        name=name,
        skipped=skipped,
        evidence=evidence,
        evidence_dir=evidence_dir,
        report_dir=target.parent,
    )
    return write_atomically(target, page.encode("utf-8"))
