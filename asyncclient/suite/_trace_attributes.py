"""What a job's spans say (asyncclient.suite._trace): each attribute by its convention's name
(`test.case.*`) or ours (`asyncclient.*`), made of the service's text through the one
sanitiser and cut to `VALUE_LIMIT` characters; a link without its query (a signature is a
secret). docs/guides/see-the-fleet.md has the tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from asyncclient._client import _telemetry
from asyncclient._core._untrusted import clip, line

if TYPE_CHECKING:
    from asyncclient._reports.model import Attempt, TestReport

__all__ = ["VALUE_LIMIT", "event_fields", "link", "run_attributes", "test_attributes", "text"]

VALUE_LIMIT: Final = 256
"""The longest attribute value made of the service's or the CI's text (characters)."""


def text(value: object, limit: int = VALUE_LIMIT) -> str:
    return clip(line(value), limit)


def link(value: str | None) -> str:
    """A run's page for an attribute: http(s) only, without credentials, query or fragment."""
    if not value or not value.startswith(("https://", "http://")):
        return ""
    try:
        return text(_telemetry.url_full(value, ""), 2 * VALUE_LIMIT)
    except ValueError:  # "http://[x]": not a link Python can read
        return ""


def run_attributes(read: Attempt, kind: str, stopped_as: str | None) -> dict[str, Any]:
    """A run span's attributes once its run is read: status, outcome, kind, mode, queue and
    device seconds, its page (no query), its headline, and whether the suite stopped it."""
    run = read.run
    found: dict[str, Any] = {
        "asyncclient.run.status": text(run.status),
        "asyncclient.run.outcome": read.outcome,
        "asyncclient.run.kind": kind,
    }
    if run.mode:
        found["asyncclient.run.mode"] = text(run.mode, 32)
    if read.queue_seconds is not None:
        found["asyncclient.run.queue.seconds"] = round(read.queue_seconds, 3)
    if read.seconds is not None:
        found["asyncclient.run.device.seconds"] = round(read.seconds, 3)
    page = link(read.link)
    if page:
        found["asyncclient.run.link"] = page
    if read.headline:
        found["asyncclient.run.headline"] = text(read.headline)
    if stopped_as is not None:
        found["asyncclient.run.stopped_by"] = "a passing run of its test"
    return found


def test_attributes(test: TestReport) -> dict[str, Any]:
    final = test.final
    found: dict[str, Any] = {
        "test.case.name": text(test.test_id),
        "test.case.result.status": "pass" if final.passed else "fail",
        "asyncclient.test.outcome": test.outcome,
        "asyncclient.test.attempts": len(test.attempts),
        "asyncclient.test.flaky": test.flaky,
        "asyncclient.test.reused": final.reused is not None,
        "asyncclient.test.quarantined": test.quarantine is not None,
    }
    cause = test.cause
    if cause is not None:
        found["asyncclient.failure.cause"] = text(cause.id, 64)
        found["asyncclient.failure.category"] = text(cause.label, 64)
        found["asyncclient.failure.kind"] = text(cause.category, 32)
        said = cause.example.headline or cause.example.status
        found["asyncclient.failure.headline"] = text(said)
    if test.baseline:
        found["asyncclient.test.pre_existing"] = test.pre_existing
        found["asyncclient.test.baseline"] = text(test.baseline)
    return found


def event_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """An event's fields as span event attributes: text one bounded line, at most 64 ids of
    a list; what has no attribute type (a mapping, None) left out."""
    found: dict[str, Any] = {}
    for key, value in fields.items():
        name = f"asyncclient.{key}"
        if isinstance(value, bool | int | float):
            found[name] = value
        elif isinstance(value, str):
            found[name] = text(value)
        elif isinstance(value, list | tuple):
            found[name] = [text(item, 64) for item in value[:64]]
    return found
