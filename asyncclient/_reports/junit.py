"""JUnit XML of finished runs for CI (`--junit`): one testcase per run, or per test with its
re-runs in Maven Surefire's convention (flakyFailure, rerunFailure), valid against Surefire's
own schema. Renders the report model (`model.SuiteReport`). Pure, plus its writer."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import UTC
from pathlib import Path
from typing import Final

from asyncclient._local._files import write_atomically
from asyncclient._reports.model import Attempt, SuiteReport, TestReport

__all__ = ["junit_xml", "write_junit"]

# Characters XML 1.0 cannot carry, even escaped.
_XML_INVALID: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def _seconds(value: float | None) -> str:
    return f"{(value or 0.0):.3f}"


def junit_xml(report: SuiteReport) -> bytes:
    """JUnit XML for CI: one <testsuite> with one <testcase> per test, valid against Maven
    Surefire's own schema (surefire-test-report.xsd), which Jenkins and strict readers hold.

    testcase: name = test title, classname = test id, time = duration in seconds of its last
    run. A run that did not pass carries <failure message=headline type=status> listing its
    failed requirements with reasons; status error maps to <error>, cancelled to <skipped>, a
    run still going to <error type="not_final">. The schema allows no <properties> in a
    testcase: the suite's <properties> keep each run's id, status, mode, link and captures,
    named `RUN_ID.status`, `RUN_ID.capture.NAME`, ...; <system-out> repeats the run id,
    headline, requirements and link for readers that show only that. The tests the service did
    not start are each a <testcase> with <skipped message=reason>.

    A re-run test follows Maven Surefire's convention: one that passed in the end keeps each
    failed attempt as <flakyFailure> (or <flakyError>); one that never passed has its
    <failure>/<error> (the last attempt) and a <rerunFailure>/<rerunError> for each other
    attempt. Each carries the attempt's run id and headline, and its failed requirements in
    <stackTrace>.

    A quarantined test that did not pass and is excused is a <skipped message="quarantined:
    REASON"> (it does not fail the job), its attempts told in <system-out>.

    A test reused from an earlier pass on an identical build (--reuse-passed) is a passed
    testcase with the property `RUN_ID.reusedFrom` and <system-out> naming the earlier run. A
    new test's repeats (--new-test-runs) are its attempts, the one that decides it last: flaky
    on arrival is a <failure> with a <rerunFailure> for each other failed run.
    """
    tests = report.tests
    kinds = [_kind(test) for test in tests]
    tally = Counter(kinds)
    total_time = sum(test.final.seconds or 0.0 for test in tests)
    skipped = report.skipped
    suite = ET.Element(
        "testsuite",
        {
            "name": _clean(report.name),
            "time": _seconds(total_time),
            "tests": str(len(tests) + len(skipped)),
            "errors": str(tally["error"] + tally["not_final"]),
            "skipped": str(tally["cancelled"] + tally["quarantined"] + len(skipped)),
            "failures": str(tally["failed"]),
        },
    )
    props = ET.SubElement(suite, "properties")
    cost = report.cost
    if cost.runs:
        for name, figure in cost.fields().items():
            _property(props, f"asyncclient.{name}", str(figure))
    created = [test.final.run.created_at for test in tests if test.final.run.created_at]
    if created:
        first = min(created).astimezone(UTC).replace(tzinfo=None)
        _property(props, "timestamp", first.isoformat(timespec="seconds"))
    for test in tests:
        run = test.final
        pairs = [("status", run.status), ("mode", run.run.mode or ""), ("link", run.link or "")]
        pairs += [(f"capture.{key}", value) for key, value in run.captures.items()]
        if run.reused is not None:
            pairs.append(("reusedFrom", run.reused.earlier_run_id))
        if test.repeated:
            pairs.append(("newTestRuns", str(len(test.attempts))))
        if test.baseline:
            pairs.append(("preExisting", "true" if test.pre_existing else "false"))
            pairs.append(("baseline", test.baseline))
        for key, value in pairs:
            _property(props, f"{run.id}.{key}", value)
    if not len(props):
        suite.remove(props)
    for test, kind in zip(tests, kinds, strict=True):
        _testcase(suite, test, quarantined=kind == "quarantined")
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


def _kind(test: TestReport) -> str:
    """The test's outcome in the report: its last run's, or "quarantined" (reported as
    skipped) for an excused test whose last run failed, erred or did not end. JUnit's own
    words (<failure>, <skipped>) are said only where the elements are written."""
    kind = test.final.outcome
    if kind in ("failed", "error", "not_final") and test.excused:
        return "quarantined"
    return kind


def _testcase(suite: ET.Element, test: TestReport, *, quarantined: bool) -> None:
    """One testcase, its children in the order Surefire's schema demands: failure,
    rerunFailure, flakyFailure, skipped, error, rerunError, flakyError, system-out."""
    run, earlier = test.final, test.earlier
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "name": _clean(run.title),
            "classname": _clean(run.run.test_id or run.id),
            "time": _seconds(run.seconds),
        },
    )
    children: dict[str, list[ET.Element]] = {tag: [] for tag in _CHILD_ORDER}
    requirement_lines = [check.line for check in run.checks]
    status, kind, headline = run.status, run.outcome, run.headline
    if quarantined:
        children["skipped"].append(
            ET.Element("skipped", {"message": _clean(f"quarantined: {test.quarantine}")})
        )
    elif kind == "failed":
        element = ET.Element(
            "failure", {"message": _clean(headline or status), "type": _clean(status)}
        )
        element.text = _clean("\n".join(requirement_lines or [headline or status]))
        children["failure"].append(element)
    elif kind == "error":
        code, message = run.error or ("", "")
        element = ET.Element(
            "error",
            {"message": _clean(message or headline or "error"), "type": _clean(code or "error")},
        )
        element.text = _clean("\n".join([headline, *requirement_lines]).strip())
        children["error"].append(element)
    elif kind == "cancelled":
        said = headline or "cancelled"
        if test.fail_fast:
            said = "stopped by fail-fast (--max-failures)" + (f": {headline}" if headline else "")
        children["skipped"].append(ET.Element("skipped", {"message": _clean(said)}))
    elif kind == "not_final":
        children["error"].append(
            ET.Element(
                "error",
                {"message": f"still {_clean(status)} when the watch ended", "type": "not_final"},
            )
        )
    if not quarantined:
        for attempt in earlier:
            earlier_element = _attempt_element(attempt, flaky=kind == "passed")
            if earlier_element is not None:
                children[earlier_element.tag].append(earlier_element)
    out_lines = [f"run {run.id}" + (f" (mode {run.run.mode})" if run.run.mode else "")]
    out_lines.append(f"{status}: {headline}" if headline else status)
    out_lines += [check.labelled for check in run.checks]
    if run.link:
        out_lines.append(run.link)
    if earlier and test.repeated:
        passed = sum(1 for attempt in test.attempts if attempt.passed)
        out_lines.append(
            f"new test: {passed} of {len(test.attempts)} runs passed"
            + (" (flaky on arrival)" if test.outcome == "flaky_on_arrival" else "")
            + "; the others: "
            + ", ".join(f"{attempt.id} {attempt.status}" for attempt in earlier)
        )
    elif earlier:
        out_lines.append(f"attempt {run.number}; earlier: " + ", ".join(
            f"{attempt.id} {attempt.status}" for attempt in earlier
        ))  # fmt: skip
    if quarantined:
        out_lines.append(f"quarantined: {test.quarantine}; its attempts:")
        for attempt in test.attempts:
            said = attempt.headline
            out_lines.append(
                f"  {attempt.number}. {attempt.id} {attempt.status}" + (f": {said}" if said else "")
            )
            out_lines += [f"     {check.line}" for check in attempt.checks]
    if test.cause is not None:
        out_lines.append(f"category: {test.cause.category_name} ({test.cause.category})")
    if test.not_rerun:
        out_lines.append(f"not re-run: {test.not_rerun}")
    if test.baseline:
        said = "pre-existing: " if test.pre_existing else "baseline: "
        out_lines.append(said + test.baseline)
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


def _attempt_element(attempt: Attempt, *, flaky: bool) -> ET.Element | None:
    """One earlier attempt of a re-run test, as Surefire writes it (None: a stopped attempt,
    which is not re-run and counts for nothing)."""
    kind = attempt.outcome
    if kind not in ("failed", "error"):
        return None
    tag = ("flaky" if flaky else "rerun") + ("Error" if kind == "error" else "Failure")
    status = attempt.status
    element = ET.Element(
        tag, {"message": _clean(attempt.headline or status), "type": _clean(status)}
    )
    trace = [f"run {attempt.id}: {status}"]
    trace += [check.line for check in attempt.checks]
    if attempt.link:
        trace.append(attempt.link)
    ET.SubElement(element, "stackTrace").text = _clean("\n".join(trace))
    return element


def write_junit(path: str | os.PathLike[str], report: SuiteReport) -> Path:
    """Write junit_xml(report) to `path` atomically: a temp file beside it, then a rename, so a
    reader never sees half a report."""
    return write_atomically(path, junit_xml(report))
