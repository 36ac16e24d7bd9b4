"""JUnit XML of finished runs for CI (`--junit`): one testcase per run, or per test with its
re-runs in Maven Surefire's convention (flakyFailure, rerunFailure), valid against Surefire's
own schema. Pure, plus its writer."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC
from pathlib import Path
from typing import Final

from asyncclient._local._files import write_atomically
from asyncclient._reports import (
    captures,
    duration_seconds,
    error_details,
    failed_requirements,
    headline,
    labelled,
    outcome,
    requirement_line,
    status_of,
    title,
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
    quarantined: Mapping[str, str] | None = None,
) -> bytes:
    """JUnit XML for CI: one <testsuite> with one <testcase> per run, valid against Maven
    Surefire's own schema (surefire-test-report.xsd), which Jenkins and strict readers hold.

    testcase: name = test title, classname = test id, time = duration in seconds. A run that
    did not pass carries <failure message=headline type=status> listing its failed requirements
    with reasons; status error maps to <error>, cancelled to <skipped>, a run still going to
    <error type="not_final">. The schema allows no <properties> in a testcase: the suite's
    <properties> keep each run's id, status, mode, link and captures, named `RUN_ID.status`,
    `RUN_ID.capture.NAME`, ...; <system-out> repeats the run id, headline, requirements and
    link for readers that show only that. `skipped`: (test id, reason) of tests the service
    did not start, each a <testcase> with <skipped message=reason>.

    `earlier`: for re-run tests (asyncclient.reruns), the earlier attempts of each final run,
    by its id; `runs` are then the final attempts, one testcase per test, in Maven Surefire's
    convention: a test that passed in the end keeps each failed attempt as <flakyFailure> (or
    <flakyError>); one that never passed has its <failure>/<error> (the last attempt) and a
    <rerunFailure>/<rerunError> for each other attempt. Each carries the attempt's run id and
    headline, and its failed requirements in <stackTrace>.

    `quarantined`: test id -> the quarantine's reason; such a test that did not pass is a
    <skipped message="quarantined: REASON"> (it does not fail the job), its attempts told in
    <system-out>.
    """
    quarantine = quarantined or {}
    kinds = [_kind(run, quarantine) for run in runs]
    tally = Counter(kinds)
    total_time = sum(duration_seconds(run) or 0.0 for run in runs)
    suite = ET.Element(
        "testsuite",
        {
            "name": _clean(name),
            "time": _seconds(total_time),
            "tests": str(len(runs) + len(skipped)),
            "errors": str(tally["error"] + tally["not_final"]),
            "skipped": str(tally["skipped"] + tally["quarantined"] + len(skipped)),
            "failures": str(tally["failure"]),
        },
    )
    props = ET.SubElement(suite, "properties")
    created = [run.created_at for run in runs if run.created_at is not None]
    if created:
        first = min(created).astimezone(UTC).replace(tzinfo=None)
        _property(props, "timestamp", first.isoformat(timespec="seconds"))
    for run in runs:
        pairs = [("status", status_of(run)), ("mode", run.mode or ""), ("link", run.link or "")]
        pairs += [(f"capture.{key}", value) for key, value in captures(run).items()]
        for key, value in pairs:
            _property(props, f"{run.id}.{key}", value)
    if not len(props):
        suite.remove(props)
    for run, kind in zip(runs, kinds, strict=True):
        reason = quarantine.get(run.test_id or "") if kind == "quarantined" else None
        _testcase(suite, run, (earlier or {}).get(run.id, ()), quarantine_reason=reason)
    for test_id, why in skipped:
        case = ET.SubElement(
            suite, "testcase", {"name": _clean(test_id), "classname": _clean(test_id), "time": "0"}
        )
        ET.SubElement(case, "skipped", {"message": _clean(why or "not started")})
    ET.indent(suite)
    body: bytes = ET.tostring(suite, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


def _property(props: ET.Element, name: str, value: str) -> None:
    if value:
        ET.SubElement(props, "property", {"name": _clean(name), "value": _clean(value)})


def _kind(run: Run, quarantined: Mapping[str, str]) -> str:
    """The run's outcome in the report; a quarantined test's run that did not pass is
    "quarantined" (reported as skipped)."""
    kind = outcome(run)
    if kind in ("failure", "error", "not_final") and (run.test_id or "") in quarantined:
        return "quarantined"
    return kind


def _testcase(
    suite: ET.Element,
    run: Run,
    earlier: Sequence[Run] = (),
    *,
    quarantine_reason: str | None = None,
) -> None:
    """One testcase, its children in the order Surefire's schema demands: failure,
    rerunFailure, flakyFailure, skipped, error, rerunError, flakyError, system-out."""
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "name": _clean(title(run)),
            "classname": _clean(run.test_id or run.id),
            "time": _seconds(duration_seconds(run)),
        },
    )
    children: dict[str, list[ET.Element]] = {tag: [] for tag in _CHILD_ORDER}
    requirement_lines = [requirement_line(req) for req in failed_requirements(run)]
    status = status_of(run)
    kind = outcome(run)
    quarantined = quarantine_reason is not None  # given only for a test _kind says is
    if quarantined:
        children["skipped"].append(
            ET.Element("skipped", {"message": _clean(f"quarantined: {quarantine_reason}")})
        )
    elif kind == "failure":
        element = ET.Element(
            "failure", {"message": _clean(headline(run) or status), "type": _clean(status)}
        )
        element.text = _clean("\n".join(requirement_lines or [headline(run) or status]))
        children["failure"].append(element)
    elif kind == "error":
        code, message = error_details(run)
        element = ET.Element(
            "error",
            {
                "message": _clean(message or headline(run) or "error"),
                "type": _clean(code or "error"),
            },
        )
        element.text = _clean("\n".join([headline(run), *requirement_lines]).strip())
        children["error"].append(element)
    elif kind == "skipped":
        children["skipped"].append(
            ET.Element("skipped", {"message": _clean(headline(run) or "cancelled")})
        )
    elif kind == "not_final":
        children["error"].append(
            ET.Element(
                "error",
                {"message": f"still {_clean(status)} when the watch ended", "type": "not_final"},
            )
        )
    if not quarantined:
        for attempt in earlier:
            told = _attempt_element(attempt, flaky=kind == "passed")
            if told is not None:
                children[told.tag].append(told)
    out_lines = [f"run {run.id}" + (f" (mode {run.mode})" if run.mode else "")]
    out_lines.append(f"{status}: {headline(run)}" if headline(run) else status)
    out_lines += [labelled(req) for req in failed_requirements(run)]
    if run.link:
        out_lines.append(run.link)
    if earlier:
        out_lines.append(f"attempt {len(earlier) + 1}; earlier: " + ", ".join(
            f"{attempt.id} {status_of(attempt)}" for attempt in earlier
        ))  # fmt: skip
    if quarantined:
        out_lines.append(f"quarantined: {quarantine_reason}; its attempts:")
        for number, attempt in enumerate([*earlier, run], 1):
            said = headline(attempt)
            out_lines.append(
                f"  {number}. {attempt.id} {status_of(attempt)}" + (f": {said}" if said else "")
            )
            out_lines += [f"     {requirement_line(r)}" for r in failed_requirements(attempt)]
    system_out = ET.Element("system-out")
    system_out.text = _clean("\n".join(out_lines))
    children["system-out"].append(system_out)
    for tag in _CHILD_ORDER:
        case.extend(children[tag])


# The children a <testcase> may have, in the order surefire-test-report.xsd requires.
_CHILD_ORDER: Final = (
    "failure",
    "rerunFailure",
    "flakyFailure",
    "skipped",
    "error",
    "rerunError",
    "flakyError",
    "system-out",
)


def _attempt_element(attempt: Run, *, flaky: bool) -> ET.Element | None:
    """One earlier attempt of a re-run test, as Surefire writes it (None: a stopped attempt,
    which is not re-run and counts for nothing)."""
    kind = outcome(attempt)
    if kind not in ("failure", "error"):
        return None
    tag = ("flaky" if flaky else "rerun") + ("Error" if kind == "error" else "Failure")
    status = status_of(attempt)
    element = ET.Element(
        tag, {"message": _clean(headline(attempt) or status), "type": _clean(status)}
    )
    trace = [f"run {attempt.id}: {status}"]
    trace += [requirement_line(req) for req in failed_requirements(attempt)]
    if attempt.link:
        trace.append(attempt.link)
    ET.SubElement(element, "stackTrace").text = _clean("\n".join(trace))
    return element


def write_junit(
    path: str | os.PathLike[str],
    runs: Sequence[Run],
    *,
    name: str = "asyncclient",
    skipped: Sequence[tuple[str, str]] = (),
    earlier: Mapping[str, Sequence[Run]] | None = None,
    quarantined: Mapping[str, str] | None = None,
) -> Path:
    """Write junit_xml(runs) to `path` atomically: a temp file beside it, then a rename, so a
    reader never sees half a report."""
    data = junit_xml(runs, name=name, skipped=skipped, earlier=earlier, quarantined=quarantined)
    return write_atomically(path, data)
