"""Failures grouped by cause across jobs: a project's failed runs over a window, read with the
flakiness report's bounded listings, clustered by signature and ranked by how many runs,
tests and builds each cause hit (`session.failure_clusters("p_demo", days=14)`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import attrs

from asyncclient._core._untrusted import TITLE_LIMIT, clip
from asyncclient.failures._categories import DEFAULT_CATEGORIES, Categories
from asyncclient.failures._signature import Cluster, cluster

if TYPE_CHECKING:
    from asyncclient.models import Run

__all__ = ["MAX_CLUSTERS", "NEW_WITHIN", "FailureReport", "failure_report", "rank"]

MAX_CLUSTERS: Final = 50
"""The most clusters a failure report keeps (the others are counted in `more`)."""
NEW_WITHIN: Final = timedelta(days=1)
"""A cause first seen this recently is new."""
_TESTS_SHOWN: Final = 20


def rank(clusters: Sequence[Cluster]) -> list[Cluster]:
    """The clusters, the one that hit most runs first, then most tests, then most builds,
    then the newest."""
    return sorted(
        clusters,
        key=lambda c: (
            -c.count,
            -len(c.tests),
            -len(c.builds),
            -(c.last.timestamp() if c.last else 0.0),
            c.id,
        ),
    )


@attrs.frozen
class FailureReport:
    """What `AsyncSession.failure_clusters` found.

    Attributes:
        project_id: The project read.
        days: The window, in days.
        since: The window's start.
        now: When it was read (a cause first seen within NEW_WITHIN of it is new).
        clusters: The causes, ranked (see rank), at most MAX_CLUSTERS.
        more: How many causes there were beyond those.
        failures: The failed runs read (final, not passed, not stopped).
        requests: How many requests it took.
    """

    project_id: str
    days: float
    since: datetime
    now: datetime
    clusters: tuple[Cluster, ...]
    more: int = 0
    failures: int = 0
    requests: int = 0

    def is_new(self, found: Cluster) -> bool:
        """Whether the cause was first seen within a day of the report."""
        return found.first is not None and found.first >= self.now - NEW_WITHIN

    def to_json(self) -> dict[str, object]:
        """The report as `asyncclient failures --json` prints it (camelCase, ISO 8601)."""
        return {
            "projectId": self.project_id,
            "days": self.days,
            "since": _iso(self.since),
            "failures": self.failures,
            "more": self.more,
            "clusters": [self.cluster_json(found) for found in self.clusters],
        }

    def cluster_json(self, found: Cluster) -> dict[str, object]:
        """One cause: its signature, category, reach, times and a recent run."""
        newest = found.example
        return {
            "clusterId": found.id,
            "signature": found.signature,
            "status": found.status,
            "category": found.category.to_json(),
            "runs": found.count,
            "tests": list(found.tests[:_TESTS_SHOWN]),
            "testCount": len(found.tests),
            "builds": len(found.builds),
            "firstAt": _iso(found.first),
            "lastAt": _iso(found.last),
            "new": self.is_new(found),
            "example": {
                "runId": newest.id,
                "testId": newest.test_id,
                "headline": clip(newest.headline_text, TITLE_LIMIT),
                "link": newest.link if isinstance(newest.link, str) else None,
            },
        }


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def failure_report(
    project_id: str,
    failed_runs: Sequence[Run],
    *,
    days: float,
    since: datetime,
    now: datetime,
    requests: int,
    categories: Categories | None = None,
) -> FailureReport:
    """The project's failed runs (the flakiness report's listings, read by
    AsyncSession.failure_clusters) grouped by cause and ranked."""
    # The example is the newest run, opened first.
    newest_first = sorted(
        failed_runs,
        key=lambda run: run.created_at.timestamp() if run.created_at else 0.0,
        reverse=True,
    )
    # Signatures and categories in a worker thread: never on the loop that serves requests.
    found = await asyncio.to_thread(
        lambda: rank(cluster(newest_first, categories or DEFAULT_CATEGORIES))
    )
    return FailureReport(
        project_id=project_id,
        days=days,
        since=since,
        now=now,
        clusters=tuple(found[:MAX_CLUSTERS]),
        more=max(0, len(found) - MAX_CLUSTERS),
        failures=sum(item.count for item in found),
        requests=requests,
    )
