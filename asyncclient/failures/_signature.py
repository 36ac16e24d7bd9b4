"""A failure's signature and the clusters of runs that share one: the run's status, headline,
error and failed checks, made general (URLs, times, ids, hex, quoted values and numbers become
`<url>`, `<time>`, `<id>`, `<hex>`, `<q>`, `<n>`), evened out and cut to SIGNATURE_LIMIT.
`signature()` and `cluster()` are pure.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Final

import attrs

from asyncclient._values._lenient import error_fields
from asyncclient.failures._categories import DEFAULT_CATEGORIES, Categories, Category
from asyncclient.models import FINAL_STATUSES, Run

__all__ = [
    "MAX_PART",
    "SIGNATURE_LIMIT",
    "Cluster",
    "cluster",
    "failure_record",
    "general",
    "signature",
]

SIGNATURE_LIMIT: Final = 400
"""The most characters of a signature."""
MAX_PART: Final = 160
"""The most characters each part (headline, error, a check) brings to a signature."""
_MAX_CHECKS: Final = 5  # failed checks named, in the run's order

# Most specific first: URLs hold numbers and hex.
_RULES: Final = (
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)\]>\"']+", re.I), "<url>"),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[t ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?)?"
            r"|\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b",
            re.I,
        ),
        "<time>",
    ),
    (re.compile(r"\b[a-z]{1,4}_[a-z0-9]{4,}\b", re.I), "<id>"),  # j_..., ab_..., req_...
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<hex>",
    ),
    (re.compile(r"\b(?:0x)?(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.I), "<hex>"),
    # Quoted values: "...", '...', and the curly quotes \u201c...\u201d and \u2018...\u2019.
    (
        re.compile(
            "\"[^\"\n]{0,200}\"|'[^'\n]{0,200}'"
            "|\u201c[^\u201d\n]{0,200}\u201d|\u2018[^\u2019\n]{0,200}\u2019"
        ),
        "<q>",
    ),
    # Letters then digits (SAVE10, build42): a code or id.
    (re.compile(r"\b[a-z]+\d[a-z0-9]*\b", re.I), "<id>"),
    (re.compile(r"[$€£]?[+-]?\d+(?:[.,]\d+)*%?"), "<n>"),
)
_SPACES: Final = re.compile(r"\s+")
# One pass: at one place, the earlier rule wins.
_PLACEHOLDERS: Final = tuple(placeholder for _, placeholder in _RULES)
_GROUPED: Final = re.compile(
    "|".join(f"(?P<r{i}>{pattern.pattern})" for i, (pattern, _) in enumerate(_RULES)),
    re.IGNORECASE,
)


def _placeholder(match: re.Match[str]) -> str:
    return _PLACEHOLDERS[int(match.lastgroup[1:])]  # type: ignore[index]


@functools.lru_cache(maxsize=4096)
def general(text: str) -> str:
    """`text` with what varies from one failure to the next replaced by placeholders, in lower
    case, its spaces evened out, at most MAX_PART characters.

    Args:
        text: A headline, an error message or a check's reason, as the service gave it.
    """
    found = _GROUPED.sub(_placeholder, text[: 4 * MAX_PART])  # never reads more of a part
    return _SPACES.sub(" ", found).strip().lower()[:MAX_PART]


def signature(run: Run) -> str:
    """The run's failure, made general: what runs that failed for the same cause share.

    Args:
        run: A final run (any status; a passed one has a signature too, of little use).

    Returns:
        `status | headline | error: code message | check: name: reason ...`, at most
        SIGNATURE_LIMIT characters.
    """
    return _signature(run, run.status_kind)


_RECORD_ID: Final = 200  # kept of an id or a link


def failure_record(run: Run) -> Run:
    """What is kept of a failed run to group it by cause: its id, test, project, status, time,
    build and link, its headline, error and first failed checks, each cut to what a signature
    or a category reads; no captures or files. A few KB a run, whatever the service sent."""
    code, message = error_fields(run.error)
    checks = [
        {
            "id": check.name[:_RECORD_ID],
            "title": check.title[: MAX_PART * 4],
            "result": "failed",
            "reason": check.reason[: MAX_PART * 4],
        }
        for check in run.failed_requirements[:_MAX_CHECKS]
    ]
    return Run(
        id=run.id[:_RECORD_ID],
        status=run.status_kind,
        final=run.final,
        test_id=None if run.test_id is None else run.test_id[:_RECORD_ID],
        project_id=None if run.project_id is None else run.project_id[:_RECORD_ID],
        created_at=run.created_at,
        build_id=None if run.used_build_id is None else run.used_build_id[:_RECORD_ID],
        link=run.link[: _RECORD_ID * 10] if isinstance(run.link, str) else None,
        headline=run.headline_text[: MAX_PART * 4],
        error={"code": code[:_RECORD_ID], "message": message[: MAX_PART * 4]}
        if code or message
        else None,
        requirements=checks,
    )


def _signature(run: Run, status: str) -> str:
    parts = [status]
    headline = general(run.headline_text)
    if headline:
        parts.append(headline)
    code, said = error_fields(run.error)
    if code or said:
        message = general(said)
        if message == headline:  # the error repeats the headline: said once
            message = ""
        parts.append(f"error: {code.lower()[:40]} {message}".strip())
    for check in run.failed_requirements[:_MAX_CHECKS]:
        name = general(check.title or check.name)[:60]  # the title: an id varies by service
        reason = general(check.reason)
        parts.append(f"check: {name}: {reason}" if reason else f"check: {name}")
    return " | ".join(parts)[:SIGNATURE_LIMIT]


@attrs.frozen
class Cluster:
    """Runs that failed the same way.

    Attributes:
        id: A short name of the signature (`c_` and 8 hex digits), the same wherever it is made.
        signature: What the runs share (`signature()`).
        status: The status they ended in.
        tests: The tests they are runs of, in the order first seen.
        run_ids: The runs, in the order given.
        first: When the earliest of them was created (None: no run said).
        last: When the latest of them was created.
        example: One of them, to show (the first given).
        category: The category of its example (the categories in force: the file's first).
        builds: The builds they ran on, in the order first seen (none for web tests).
    """

    id: str
    signature: str
    status: str
    tests: tuple[str, ...]
    run_ids: tuple[str, ...]
    first: datetime | None
    last: datetime | None
    example: Run
    category: Category = attrs.field(default=DEFAULT_CATEGORIES.all[-1])
    builds: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """How many runs failed so."""
        return len(self.run_ids)


def _counts(run: Run, status: str) -> bool:
    """A run that failed: final, not passed, not stopped (a stopped run is not counted)."""
    final = run.final if run.final is not None else status in FINAL_STATUSES
    return final and status not in ("passed", "cancelled")


def cluster(runs: Iterable[Run], categories: Categories | None = None) -> list[Cluster]:
    """The clusters of the runs that failed (final, not passed, not stopped): one per signature,
    the largest first (then the one seen first).

    Args:
        runs: Any runs (a job's, a project's history); the others are left out.
        categories: The categories in force (default: the built-in ones).

    Returns:
        The clusters; the runs of one test may fall in several.
    """
    groups: dict[str, list[Run]] = {}
    for run in runs:
        status = run.status_kind  # read once: each read parses the service's field
        if _counts(run, status):
            groups.setdefault(_signature(run, status), []).append(run)
    found = []
    for order, (shared, members) in enumerate(groups.items()):
        times = [run.created_at for run in members if run.created_at is not None]
        found.append(
            (
                -len(members),
                order,
                Cluster(
                    id="c_" + hashlib.blake2b(shared.encode(), digest_size=4).hexdigest(),
                    signature=shared,
                    status=members[0].status_kind,
                    tests=tuple(dict.fromkeys(run.test_id or run.id for run in members)),
                    run_ids=tuple(run.id for run in members),
                    first=min(times, default=None),
                    last=max(times, default=None),
                    example=members[0],
                    category=(categories or DEFAULT_CATEGORIES).of(members[0]),
                    builds=tuple(
                        dict.fromkeys(run.used_build_id for run in members if run.used_build_id)
                    ),
                ),
            )
        )
    return [item for _, _, item in sorted(found, key=lambda entry: entry[:2])]
