"""asyncclient.failures: a failure's signature (a pure function, its worked examples the docs'
table) and the clusters of runs that share one."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncclient.failures import SIGNATURE_LIMIT, cluster, general, signature
from asyncclient.models import Run

TABLE = Path(__file__).resolve().parent.parent / "docs" / "snippets" / "failure-signatures.md"
T0 = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)


def failed(
    run_id: str,
    test_id: str,
    status: str = "failed",
    *,
    headline: str = "",
    error: dict[str, str] | None = None,
    checks: list[dict[str, str]] | None = None,
    minutes: float = 0.0,
) -> Run:
    return Run(
        id=run_id,
        test_id=test_id,
        status=status,
        final=True,
        headline=headline,
        error=error,
        requirements=checks or [],
        created_at=T0 + timedelta(minutes=minutes),
    )


def table_rows() -> list[tuple[Run, str]]:
    """The docs' table of worked examples, each row read back into a run."""
    rows = []
    for n, line in enumerate(TABLE.read_text().splitlines()):
        ended, said = line.removeprefix("- ").split(":<br>", 1)
        expected = said.strip().strip("`")
        status = re.match(r"`(\w+)`", ended)
        assert status is not None, line
        kwargs: dict[str, Any] = {}
        if (m := re.search(r'headline "(.*)"$', ended)) is not None:  # the run's part
            kwargs["headline"] = m.group(1)
        if (m := re.search(r'error `(\w+)` "(.*)"$', ended)) is not None:
            kwargs["error"] = {"code": m.group(1), "message": m.group(2)}
        if (m := re.search(r'check `(\w+)` "(.*)"$', ended)) is not None:
            kwargs["checks"] = [{"id": m.group(1), "result": "failed", "reason": m.group(2)}]
        rows.append((failed(f"j_row{n:08d}", f"t_row{n}", status.group(1), **kwargs), expected))
    return rows


@pytest.mark.parametrize(("run", "expected"), table_rows(), ids=lambda v: getattr(v, "id", ""))
def test_the_docs_worked_examples_are_what_signature_says(run: Run, expected: str) -> None:
    assert signature(run) == expected


@pytest.mark.parametrize(
    ("text", "general_form"),
    [
        ("Timed out after 30.5 s", "timed out after <n> s"),
        ("at 2026-11-27T10:00:01.123+02:00 on build ab_7f3e9c2d", "at <time> on build <id>"),
        ("id 123e4567-e89b-12d3-a456-426614174000", "id <hex>"),
        ("  Spaces\tand\n\nlines  ", "spaces and lines"),
        ("sha deadbeefcafe0042", "sha <hex>"),
        ("word 'one' and \"two\"", "word <q> and <q>"),
        ("a cafe and a decade", "a cafe and a decade"),  # hex-looking words without a digit stay
    ],
)
def test_what_varies_becomes_a_placeholder(text: str, general_form: str) -> None:
    assert general(text) == general_form


def test_a_signature_is_bounded_whatever_the_service_sends() -> None:
    huge = failed(
        "j_big00000000",
        "t_big",
        headline="x" * 100_000,
        error={"code": "E" * 1000, "message": "y " * 50_000},
        checks=[{"id": f"c{i}", "result": "failed", "reason": "z" * 10_000} for i in range(500)],
    )
    found = signature(huge)
    assert len(found) <= SIGNATURE_LIMIT
    assert found.startswith("failed | " + "x" * 100)


def test_an_outage_across_tests_is_one_cluster_first() -> None:
    # 12 failures: 9 tests lost the device (other ids, times), 3 app failures of two kinds.
    outage = [
        failed(
            f"j_out{i:08d}",
            f"t_{i:02d}",
            "error",
            minutes=i,
            error={"code": "DEVICE_LOST", "message": f"Device {i:08x}ff0 dropped at 10:{i:02d}:07"},
        )
        for i in range(9)
    ]
    total = [
        failed(f"j_tot{i:08d}", "t_checkout", minutes=20 + i,
               headline=f"The total stayed ${40 + i}.00 instead of ${36 + i}.00.")
        for i in range(2)
    ]  # fmt: skip
    search = failed("j_sea00000000", "t_search", minutes=30, headline="No results for 'shoes'.")
    passed = Run(id="j_ok000000000", test_id="t_ok", status="passed", final=True)
    stopped = Run(id="j_st000000000", test_id="t_st", status="cancelled", final=True)
    going = Run(id="j_go000000000", test_id="t_go", status="running")

    found = cluster([*outage, *total, search, passed, stopped, going])

    assert [c.count for c in found] == [9, 2, 1]
    first = found[0]
    assert first.status == "error"
    assert first.tests == tuple(f"t_{i:02d}" for i in range(9))
    assert first.first == T0
    assert first.last == T0 + timedelta(minutes=8)
    assert first.example is outage[0]
    assert first.signature == "error | error: device_lost device <hex> dropped at <time>"
    assert re.fullmatch(r"c_[0-9a-f]{8}", first.id)
    assert found[1].tests == ("t_checkout",)
    # The same signature gives the same id wherever it is made.
    assert cluster(list(reversed(outage)))[0].id == first.id


def test_clusters_of_a_labelled_corpus_are_pure() -> None:
    """Failures of five known causes, each with varied ids, numbers, times and quoted values:
    every cluster holds one cause, and each cause is one cluster."""

    def device(i: int) -> dict[str, Any]:
        clock = f"1{i % 10}:0{i % 6}:3{i % 10}"
        message = f"Device {i * 7919:010x} dropped at {clock}"
        return {"status": "error", "error": {"code": "DEVICE_LOST", "message": message}}

    def network(i: int) -> dict[str, Any]:
        return {"status": "error", "headline": f"No answer from https://api{i}.example in {i} s"}

    def total(i: int) -> dict[str, Any]:
        return {"headline": f"The total stayed ${i}.{i % 100:02d} instead of ${i + 3}.00."}

    def text(i: int) -> dict[str, Any]:
        return {"status": "inconclusive", "headline": f"Could not type 'word {i}' in the field."}

    def login(i: int) -> dict[str, Any]:
        reason = f'User user{i}@example.com saw "Welcome back" after {i} ms'
        return {"checks": [{"id": f"r{i % 3 + 1}", "result": "failed", "reason": reason}]}

    causes = {"device": device, "network": network, "total": total, "text": text, "login": login}
    runs, labels = [], {}
    for n in range(500):
        cause = list(causes)[n % 5]
        options = causes[cause](n)
        run = failed(f"j_{n:012d}", f"t_{n % 40:02d}", options.pop("status", "failed"), **options)
        runs.append(run)
        labels[run.id] = cause
    found = cluster(runs)
    for each in found:
        assert len({labels[i] for i in each.run_ids}) == 1, each.signature
    assert len(found) == 5


def test_a_jobs_reports_say_first_that_nine_failures_share_one_cause() -> None:
    """The report model groups the job's failures; the summary, the step summary, the HTML page,
    CTRF and JUnit (still valid) carry it; a test that did not pass names its cause."""
    import json

    import jsonschema
    import xmlschema

    from asyncclient._reports import junit as _junit
    from asyncclient._reports import model as _model
    from asyncclient._reports.ctrf import ctrf_report
    from asyncclient._reports.html import html_report
    from asyncclient._reports.markdown import step_summary_markdown
    from asyncclient._reports.text import summary_lines

    lost = "The device lost its connection to the tester after {} s."
    outage = [
        failed(f"j_out{i:08d}", f"t_{i:02d}", "error", headline=lost.format(10 + i))
        for i in range(9)
    ]
    app = [
        failed(f"j_app{i:08d}", f"t_a{i}", headline=f"The total stayed ${40 + i}.00.")
        for i in range(3)
    ]
    report = _model.runs_report([*outage, *app], name="p_demo")

    first = report.causes[0]
    assert (first.count, first.failures, first.category) == (9, 12, "infrastructure")
    assert report.causes[1].tests == ("t_a0", "t_a1", "t_a2")
    lines = summary_lines(report)
    assert lines[0] == (
        "why it failed: 9 of 12 failures share: The device lost its connection to the tester "
        "after 10 s. (error, infrastructure; 9 tests: t_00, t_01, t_02, t_03, t_04, ...)"
    )
    assert lines[1].startswith("why it failed: 3 of 12 failures share: The total stayed $40.00.")
    assert report.tests[0].cause is first
    assert first.fields(with_tests=False) == {
        "clusterId": first.id,
        "signature": "error | the device lost its connection to the tester after <n> s.",
        "category": "infrastructure",
        "categoryName": "run error",
        "size": 9,
        "firstAt": "2026-11-27T09:00:00.000Z",  # its runs' earliest and latest creation
        "lastAt": "2026-11-27T09:00:00.000Z",
    }
    assert "- 9 of 12 failures share\\: The device lost" in step_summary_markdown(report)
    page = html_report(report)
    assert page.index("Why it failed") < page.index('id="test-t_00"')
    schema = json.loads((TABLE.parent.parent.parent / "tests" / "data" / "ctrf-schema-0.0.json")
                        .read_text())  # fmt: skip
    document = ctrf_report(report)
    jsonschema.Draft7Validator(schema).validate(document)
    assert document["results"]["summary"]["extra"]["causes"][0]["size"] == 9
    xsd = TABLE.parent.parent.parent / "tests" / "data" / "surefire-test-report.xsd"
    xmlschema.XMLSchema(xsd).validate(_junit.junit_xml(report).decode())


def test_the_mcp_verdict_names_the_causes_first() -> None:
    from asyncclient.mcp_server._wait import wait_result

    outage = [
        failed(f"j_out{i:08d}", f"t_{i:02d}", "error", headline=f"Lost the device after {i} s.")
        for i in range(3)
    ]
    verdict = wait_result(outage, [], done=True, seconds=1.0, budget=20_000)
    assert verdict["causes"] == [
        "3 of 3 failures share: Lost the device after 0 s. (error, infrastructure; 3 tests: "
        "t_00, t_01, t_02)"
    ]
    assert "causes" not in wait_result(outage[:1], [], done=True, seconds=1.0, budget=20_000)


def test_an_outage_naming_other_devices_is_one_cause_whatever_the_order() -> None:
    devices = ["Pixel 7 (emulator-5554)", "Galaxy S22 Ultra (R5CT20ABCD)", "moto g(8) power",
               "iPhone 15 Pro (00008110-001A2B3C4D5E)", "Redmi Note 12"]  # fmt: skip
    outage = [
        failed(f"j_dev{i:08d}", f"t_{i:02d}", "error", minutes=i,
               headline=f"The device {d} lost its connection at 10:0{i}:00 (session s_{i:06x}).")
        for i, d in enumerate(devices)
    ]  # fmt: skip
    other = failed("j_net00000000", "t_net", "error", headline="No answer from the tester.")
    # App failures that differ in one span are other causes: only the infrastructure's merge.
    app = [
        failed("j_app00000000", "t_a", headline="Could not find the Pay button."),
        failed("j_app00000001", "t_b", headline="Could not find the Email field."),
    ]
    found = cluster([*outage, other, *app])
    assert [c.count for c in found] == [5, 1, 1, 1]
    first = found[0]
    assert first.signature == "error | the device <*> lost its connection at <time> (session <id>)."
    assert first.run_ids == tuple(run.id for run in outage)  # in the order given
    assert cluster(list(reversed([*outage, other, *app])))[0].id == first.id


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["error", "inconclusive", "failed"]), st.text(max_size=300)),
        min_size=1,
        max_size=30,
    )
)
def test_any_texts_cluster_into_bounded_one_line_causes_whatever_their_order(
    failures: list[tuple[str, str]],
) -> None:
    """Hostile headlines (controls, new lines, near-duplicates): every failed run is in one
    cluster, each signature (a template too) is at most SIGNATURE_LIMIT, and the same runs in
    another order give the same causes."""
    runs = [
        failed(f"j_h{i:08d}", f"t_{i}", status, headline=text, minutes=i)
        for i, (status, text) in enumerate(failures)
    ]
    found = cluster(runs)
    placed = [run_id for c in found for run_id in c.run_ids]
    assert sorted(placed) == sorted(run.id for run in runs)
    assert all(len(c.signature) <= SIGNATURE_LIMIT for c in found)
    again = cluster(list(reversed(runs)))
    assert {c.id: set(c.run_ids) for c in found} == {c.id: set(c.run_ids) for c in again}
