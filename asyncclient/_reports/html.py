"""The HTML report of a suite (`--html PATH`): one self-contained page (inline CSS, no script,
nothing from another host), an article per test with its attempts, drawn by report.html.j2
with autoescaping (the service's text is shown as text), written to a temp name and renamed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from asyncclient._local._files import write_atomically
from asyncclient._reports import flakiness_verdict, format_duration
from asyncclient._version import __version__

if TYPE_CHECKING:
    from asyncclient._reports.model import SuiteReport, TestReport

__all__ = ["html_report", "write_html"]

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
# Tests to look at first come first.
_ORDER = {
    "failed": 0,
    "flaky_on_arrival": 0,
    "not_final": 1,
    "flaky": 2,
    "cancelled": 3,
    "passed": 4,
    "reused": 5,
}


def _files(
    test: TestReport, evidence: Mapping[str, Sequence[str]], base: Path, here: Path
) -> list[dict[str, Any]]:
    """The downloaded evidence of the test's attempts, linked by its path from the page's
    folder, so that the page and its evidence move together."""
    files = []
    for attempt in test.attempts:
        for rel in evidence.get(attempt.id, ()):
            href = quote(os.path.relpath(base / rel, here).replace(os.sep, "/"))
            files.append(
                {
                    "run_id": attempt.id,
                    "name": rel.split("/", 1)[-1],
                    "href": href,
                    "image": rel.lower().endswith(_IMAGE_SUFFIXES),
                }
            )
    return files


# The trend: a bar per run, height duration, colour status.
_BAR, _GAP, _HEIGHT = 10, 3, 36


def _trend(test: TestReport) -> dict[str, Any] | None:
    """The geometry of a test's trend chart (an inline SVG the template draws), or None when
    its history was not read. Text (the titles) stays text: the template escapes it."""
    points = test.trend
    if len(points) < 2:
        return None
    longest = max((p.seconds or 0.0 for p in points), default=0.0) or 1.0
    bars, marks = [], []
    for i, point in enumerate(points):
        x = i * (_BAR + _GAP)
        height = max(2.0, (point.seconds or 0.0) / longest * _HEIGHT)
        kind = point.status if point.final else "not_final"
        if i and point.build != points[i - 1].build:
            marks.append(x - _GAP / 2)
        said = [point.run_id, point.status, format_duration(point.seconds)]
        said += [point.build or "", "this job" if point.this_job else ""]
        bars.append(
            {
                "x": x,
                "y": round(_HEIGHT - height, 1),
                "height": round(height, 1),
                "kind": kind if kind in _KINDS else "other",
                "this_job": point.this_job,
                "title": " · ".join(part for part in said if part),
            }
        )
    return {
        "width": len(points) * (_BAR + _GAP),
        "height": _HEIGHT,
        "bar": _BAR,
        "bars": bars,
        "marks": marks,
        "longest": format_duration(longest),
    }


_KINDS = frozenset(
    {"passed", "failed", "error", "blocked", "inconclusive", "cancelled", "not_final"}
)


def html_report(
    report: SuiteReport,
    *,
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
    report_dir: str | os.PathLike[str] = ".",
    generated: datetime | None = None,
) -> str:
    """The page, as text. evidence: per run id the downloaded files' paths relative to
    evidence_dir; report_dir: where the page will be (links to the files are relative)."""
    from asyncclient._core._extras import require

    require("the HTML report (--html)", "cli", "jinja2")
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
    files = {test.test_id: _files(test, evidence or {}, base, here) for test in report.tests}
    quarantined = [test for test in report.tests if test.quarantine is not None]
    tests = [test for test in report.tests if test.quarantine is None]
    tests.sort(key=lambda test: _ORDER.get(test.outcome, 0))
    counts = {key: sum(test.outcome == key for test in tests) for key in _ORDER}
    template = env.get_template("report.html.j2")
    return template.render(
        name=report.name,
        tests=tests,
        quarantined=quarantined,
        fail_on_quarantined=report.fail_on_quarantined,
        counts=counts,
        total=len(report.tests),
        summary=report.summary,
        cost=report.cost,
        causes=[cause.line() for cause in report.causes]
        if len(report.causes) and report.causes[0].failures > 1
        else [],
        passed=report.passed,
        skipped=[{"test_id": t, "reason": r} for t, r in report.skipped],
        evidence=files,
        flakiness_verdict=flakiness_verdict,
        trend=_trend,
        generated=(generated or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC"),
        version=__version__,
    )


def write_html(
    path: str | os.PathLike[str],
    report: SuiteReport,
    *,
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write html_report() to `path` atomically; links to evidence relative to its folder."""
    target = Path(path)
    page = html_report(
        report, evidence=evidence, evidence_dir=evidence_dir, report_dir=target.parent
    )
    return write_atomically(target, page.encode("utf-8"))
