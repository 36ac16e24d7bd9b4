"""Runs made by hand for the report tests: a run of 60 s by default, created at T0."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from asyncclient._reports import junit as _junit
from asyncclient.models import Run, RunStatus

XSD = Path(__file__).parent / "data" / "surefire-test-report.xsd"

T0 = datetime(2026, 11, 27, 9, 0, 0, tzinfo=UTC)


def run(run_id: str, test_id: str, status: str, *, seconds: float = 60, queued: float = 5,
        at: float = 0, **fields: Any) -> Run:  # fmt: skip
    created = T0 + timedelta(seconds=at)
    started = created + timedelta(seconds=queued)
    final = status not in ("queued", "running")
    return Run(
        id=run_id,
        status=RunStatus(status),
        test_id=test_id,
        test_title=f"Title of {test_id}",
        final=final,
        duration_ms=round(seconds * 1000) if final else None,
        created_at=created,
        started_at=started,
        finished_at=started + timedelta(seconds=seconds) if final else None,
        link=f"https://svc.example/runs/{run_id}",
        **fields,
    )


def ctrf_is_valid(report: Any) -> dict[str, Any]:
    """The report's CTRF, valid against the CTRF schema (tests/data)."""
    import json

    import jsonschema

    from asyncclient._reports.ctrf import ctrf_report

    document = ctrf_report(report)
    schema = json.loads((XSD.parent / "ctrf-schema-0.0.json").read_text())
    jsonschema.Draft7Validator(schema).validate(document)
    return document


def junit_is_valid(report: Any) -> ET.Element:
    import xmlschema

    body = _junit.junit_xml(report).decode()
    xmlschema.XMLSchema(XSD).validate(body)
    return ET.fromstring(body)
