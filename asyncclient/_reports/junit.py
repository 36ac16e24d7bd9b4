"""JUnit XML of finished runs for CI (`--junit`): one testcase per run, or per test with its
re-runs in Maven Surefire's convention (flakyFailure, rerunFailure). Pure, plus its writer."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC
from pathlib import Path
from typing import Final

from asyncclient._reports import (
    _requirement_line,
    captures,
    duration_seconds,
    error_details,
    failed_requirements,
    headline,
    labelled,
    outcome,
    status_of,
    title,
    write_atomically,
)
from asyncclient.models import Run

__all__ = ["junit_xml", "write_junit"]

# Characters XML 1.0 cannot carry at all, even escaped; a service's text may contain them.
_XML_INVALID: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def _seconds(value: float | None) -> str:
    return f"{(value or 0.0):.3f}"


def junit_xml(
    runs: Sequence[Run],
    *,
    name: str = "asyncclient",
    skipped: Sequence[tuple[str, str]] = (),
    earlier: Mapping[str, Sequence[Run]] | None = None,
) -> bytes:
    """JUnit XML for CI: one <testsuite> with one <testcase> per run.

    testcase: name = test title, classname = test id, time = duration in seconds. A run that
    did not pass carries <failure message=headline type=status> listing its failed requirements
    with reasons; status error maps to <error>, cancelled to <skipped>, a run still going to
    <error type="not_final">. <properties> keep the run id, status, mode, link and captures
    (capture.NAME); <system-out> repeats headline, requirements and link for readers that show
    only that. `skipped`: (test id, reason) of tests the service did not start, each a
    <testcase> with <skipped message=reason>.

    `earlier`: for re-run tests (asyncclient.reruns), the earlier attempts of each final run,
    by its id; `runs` are then the final attempts, one testcase per test, in Maven Surefire's
    convention: a test that passed in the end keeps each failed attempt as <flakyFailure> (or
    <flakyError>); one that never passed has its <failure>/<error> (the last attempt) and a
    <rerunFailure>/<rerunError> for each other attempt. Each carries the attempt's run id and
    headline, and its failed requirements in <stackTrace>.
    """
    tally = Counter(outcome(run) for run in runs)
    total_time = sum(duration_seconds(run) or 0.0 for run in runs)
    counts = {
        "tests": str(len(runs) + len(skipped)),
        "failures": str(tally["failure"]),
        "errors": str(tally["error"] + tally["not_final"]),
        "skipped": str(tally["skipped"] + len(skipped)),
        "time": _seconds(total_time),
    }
    root = ET.Element("testsuites", {"name": _clean(name), **counts})
    suite = ET.SubElement(root, "testsuite", {"name": _clean(name), **counts})
    created = [run.created_at for run in runs if run.created_at is not None]
    if created:
        first = min(created).astimezone(UTC).replace(tzinfo=None)
        suite.set("timestamp", first.isoformat(timespec="seconds"))
    for run in runs:
        _testcase(suite, run, (earlier or {}).get(run.id, ()))
    for test_id, reason in skipped:
        case = ET.SubElement(
            suite, "testcase", {"name": _clean(test_id), "classname": _clean(test_id), "time": "0"}
        )
        ET.SubElement(case, "skipped", {"message": _clean(reason or "not started")})
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


def _testcase(suite: ET.Element, run: Run, earlier: Sequence[Run] = ()) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "name": _clean(title(run)),
            "classname": _clean(run.test_id or run.id),
            "time": _seconds(duration_seconds(run)),
        },
    )
    props = ET.SubElement(case, "properties")
    pairs = [("run_id", run.id), ("status", status_of(run))]
    pairs += [("mode", run.mode or ""), ("link", run.link or "")]
    pairs += [(f"capture.{key}", value) for key, value in captures(run).items()]
    for key, value in pairs:
        if value:
            ET.SubElement(props, "property", {"name": _clean(key), "value": _clean(value)})

    requirement_lines = [_requirement_line(req) for req in failed_requirements(run)]
    status = status_of(run)
    kind = outcome(run)
    if kind == "failure":
        element = ET.SubElement(
            case, "failure", {"message": _clean(headline(run) or status), "type": _clean(status)}
        )
        element.text = _clean("\n".join(requirement_lines or [headline(run) or status]))
    elif kind == "error":
        code, message = error_details(run)
        element = ET.SubElement(
            case,
            "error",
            {
                "message": _clean(message or headline(run) or "error"),
                "type": _clean(code or "error"),
            },
        )
        element.text = _clean("\n".join([headline(run), *requirement_lines]).strip())
    elif kind == "skipped":
        ET.SubElement(case, "skipped", {"message": _clean(headline(run) or "cancelled")})
    elif kind == "not_final":
        ET.SubElement(
            case,
            "error",
            {"message": f"still {_clean(status)} when the watch ended", "type": "not_final"},
        )
    for attempt in earlier:
        _attempt_element(case, attempt, flaky=kind == "passed")
    out_lines = [f"{status}: {headline(run)}" if headline(run) else status]
    out_lines += [labelled(req) for req in failed_requirements(run)]
    if run.link:
        out_lines.append(run.link)
    if earlier:
        out_lines.append(f"attempt {len(earlier) + 1}; earlier: " + ", ".join(
            f"{attempt.id} {status_of(attempt)}" for attempt in earlier
        ))  # fmt: skip
    ET.SubElement(case, "system-out").text = _clean("\n".join(out_lines))


def _attempt_element(case: ET.Element, attempt: Run, *, flaky: bool) -> None:
    """One earlier attempt of a re-run test, as Surefire writes it."""
    kind = outcome(attempt)
    if kind not in ("failure", "error"):
        return  # a stopped attempt is not re-run and counts for nothing
    tag = ("flaky" if flaky else "rerun") + ("Error" if kind == "error" else "Failure")
    status = status_of(attempt)
    element = ET.SubElement(
        case,
        tag,
        {"message": _clean(headline(attempt) or status), "type": _clean(status)},
    )
    trace = [f"run {attempt.id}: {status}"]
    trace += [_requirement_line(req) for req in failed_requirements(attempt)]
    if attempt.link:
        trace.append(attempt.link)
    ET.SubElement(element, "stackTrace").text = _clean("\n".join(trace))


def write_junit(
    path: str | os.PathLike[str],
    runs: Sequence[Run],
    *,
    name: str = "asyncclient",
    skipped: Sequence[tuple[str, str]] = (),
    earlier: Mapping[str, Sequence[Run]] | None = None,
) -> Path:
    """Write junit_xml(runs) to `path` atomically: a temp file beside it, then a rename, so a
    reader never sees half a report."""
    data = junit_xml(runs, name=name, skipped=skipped, earlier=earlier)
    return write_atomically(path, data)
