"""A failure's signature and the clusters of runs that share one: the run's status, headline,
error and failed checks, made general (URLs, times, ids, hex, quoted values and numbers become
`<url>`, `<time>`, `<id>`, `<hex>`, `<q>`, `<n>`), evened out and cut to SIGNATURE_LIMIT.
`signature()` and `cluster()` are pure.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from difflib import SequenceMatcher
from typing import Final

import attrs

from asyncclient._values._lenient import error_fields
from asyncclient.failures._categories import DEFAULT_CATEGORIES, Categories, Category
from asyncclient.models import FINAL_STATUSES, Run

__all__ = [
    "MAX_PART",
    "SIGNATURE_LIMIT",
    "SIMILAR",
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
    """The clusters of the runs that failed (final, not passed, not stopped): one per cause,
    the largest first (then the one seen first). The one grouping of failures: a job's reports
    and `failure_clusters` both call it.

    A cause is a signature; infrastructure failures (the categories' kind) that ended alike
    (status, error code) and whose signatures differ only where a device, host or session is
    named (at least SIMILAR of their words aligned) are one cause, its signature their shared
    template with `<*>` where they differ: an outage across devices is one cause.

    Args:
        runs: Any runs (a job's, a project's history); the others are left out.
        categories: The categories in force (default: the built-in ones).

    Returns:
        The clusters; the runs of one test may fall in several.
    """
    categories = categories or DEFAULT_CATEGORIES
    counted: list[tuple[Run, str]] = []
    kinds: dict[str, tuple[str, str, bool]] = {}  # signature -> (status, code, infrastructure)
    for run in runs:
        status = run.status_kind  # read once: each read parses the service's field
        if not _counts(run, status):
            continue
        shared = _signature(run, status)
        counted.append((run, shared))
        if shared not in kinds:
            infrastructure = categories.of(run).kind == "infrastructure"
            kinds[shared] = (status, error_fields(run.error)[0].lower(), infrastructure)
    template = _templates(kinds)
    groups: dict[str, list[Run]] = {}
    for run, shared in counted:
        groups.setdefault(template.get(shared, shared), []).append(run)
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
                    category=categories.of(members[0]),
                    builds=tuple(
                        dict.fromkeys(run.used_build_id for run in members if run.used_build_id)
                    ),
                ),
            )
        )
    return [item for _, _, item in sorted(found, key=lambda entry: entry[:2])]


SIMILAR: Final = 0.7
"""The share of two infrastructure signatures' words that must align for them to be one cause."""
_WORDS: Final = re.compile(r"<[a-z*]+>|\w+|[^\w\s]")
_VARYING: Final = frozenset({"<n>", "<id>", "<hex>"})  # compared as one: a name's parts vary
_MAX_COMPARED: Final = 2000  # distinct infrastructure signatures aligned (the rest: their own)
_MAX_GROUPS: Final = 100  # templates one signature is tried against (the rest: their own)
_MAX_PAIRS: Final = 20_000  # signatures compared in one call: a hostile history's bound


def _words(shared: str) -> list[tuple[str, int, int]]:
    """The signature's words (placeholders as one) with where each is in it."""
    return [
        ("<v>" if m.group() in _VARYING else m.group(), m.start(), m.end())
        for m in _WORDS.finditer(shared)
    ]


def _templates(kinds: dict[str, tuple[str, str, bool]]) -> dict[str, str]:
    """Each infrastructure signature that aligns with another of its ending (status and error
    code) -> their template. The same set of signatures gives the same templates whatever
    their order: each is tried, in sorted order, against the first of every group so far."""
    buckets: dict[tuple[str, str], list[str]] = {}
    for shared, (status, code, infrastructure) in kinds.items():
        if infrastructure:
            buckets.setdefault((status, code), []).append(shared)
    found: dict[str, str] = {}
    budget, pairs = _MAX_COMPARED, 0
    for signatures in buckets.values():
        groups: list[tuple[list[str], SequenceMatcher[str]]] = []
        for shared in sorted(signatures)[: max(budget, 0)]:
            words = [word for word, _, _ in _words(shared)]
            for members, matcher in groups[:_MAX_GROUPS]:
                if pairs >= _MAX_PAIRS:
                    break
                pairs += 1
                matcher.set_seq1(words)
                if matcher.real_quick_ratio() < SIMILAR or matcher.quick_ratio() < SIMILAR:
                    continue
                if matcher.ratio() >= SIMILAR:
                    members.append(shared)
                    break
            else:
                matcher = SequenceMatcher(None, autojunk=False)
                matcher.set_seq2(words)
                groups.append(([shared], matcher))
        budget -= len(signatures)
        for members, _ in groups:
            if len(members) > 1:
                made = _template(members)
                found.update(dict.fromkeys(members, made))
    return found


def _template(members: Sequence[str]) -> str:
    """The first signature with each span of words that some other one lacks as `<*>`."""
    first, *others = members
    spans = _words(first)
    words = [word for word, _, _ in spans]
    kept = [True] * len(spans)
    for other in others:
        matcher = SequenceMatcher(None, words, [word for word, _, _ in _words(other)], False)
        matched = [False] * len(spans)
        for block in matcher.get_matching_blocks():
            matched[block.a : block.a + block.size] = [True] * block.size
        kept = [a and b for a, b in zip(kept, matched, strict=True)]
    out, at, gap = [], 0, False
    for keep, (_, start, end) in zip(kept, spans, strict=True):
        if keep:
            out.append(first[at:end] if not gap else " " + first[start:end])
            gap = False
        elif not gap:
            out.append(first[at:start].rstrip() + " <*>")
            gap = True
        at = end
    if not gap:
        out.append(first[at:])
    return _SPACES.sub(" ", "".join(out)).strip()[:SIGNATURE_LIMIT]
