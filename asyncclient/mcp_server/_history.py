"""The runs toolset's tools that read a project's history across jobs: flaky_tests (which tests
flake) and failure_clusters (the failures grouped by cause). RunTools offers them."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.types import CallToolResult
from pydantic import WithJsonSchema

from asyncclient.mcp_server._base import Bounded, ProjectId, ToolKit

__all__ = ["ClustersResult", "FlakyResult", "HistoryTools"]


Days = Annotated[
    float | None,
    WithJsonSchema(
        {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 365,
            "description": "The window: runs created in the last this many days (default 14)",
        }
    ),
]


class FlakyResult(Bounded):
    projectId: str
    days: float
    tests: list[dict[str, Any]]


class ClustersResult(Bounded):
    projectId: str
    days: float
    failures: int
    clusters: list[dict[str, Any]]


class HistoryTools(ToolKit):
    async def flaky_tests(
        self,
        project_id: ProjectId,
        days: Days = None,
        test_ids: Annotated[
            list[str] | None,
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^t_"},
                    "minItems": 1,
                    "maxItems": 50,
                    "description": "Only these tests (t_...); default every test the "
                    "project's newest 200 runs name",
                }
            ),
        ] = None,
    ) -> Annotated[CallToolResult, FlakyResult]:
        """Which tests of a project flake across jobs, from its run history, what hurts most
        first. Per test: state (broken: its runs on each of its last 3 builds all did not
        pass, a regression; flaky: on some build it both passed and did not pass; stable),
        runs (final, not stopped), notPassed, builds, flakyBuilds, failureRate, lastFlakyAt,
        deviceSecondsLost and recent (its newest statuses, oldest first). Use it to tell a
        known flake from a new failure before re-running or blaming a change. Bounded
        whatever the service answers: at most 200 tests and 1 + 200 x 5 requests, each
        listing cut to 200 runs, titles cut to 500 characters."""

        async def work() -> FlakyResult:
            window = 14.0 if days is None else days
            report = await self._session.flakiness(project_id, window, tests=test_ids)
            return {
                "projectId": project_id,
                "days": window,
                "tests": [test.to_json() for test in report.tests],
            }

        return await self._answer(
            work(),
            parts=("tests",),
            advice={"tests": "name fewer tests with test_ids (the most hurting come first)"},
        )

    async def failure_clusters(
        self,
        project_id: ProjectId,
        days: Days = None,
    ) -> Annotated[CallToolResult, ClustersResult]:
        """A project's failures over a window grouped by cause, across tests and jobs: twelve
        failures may be one outage. Per cause: signature (status, headline, error and failed
        checks with ids, numbers, times, quoted values and URLs made general), category
        (name; kind infrastructure or app, from the failure-categories.toml where the server
        runs, else built in: error and inconclusive are the infrastructure's), runs,
        testCount and tests, builds, firstAt, lastAt, new (first seen within a day) and an
        example run with its link; the cause that hit most runs first. Use it before
        re-running or blaming a change: an infrastructure cause is re-run, an app cause that
        fails the same way on every run is a regression. Reads the same bounded listings as
        flaky_tests (no other request); at most 50 causes."""

        async def work() -> ClustersResult:
            from asyncclient.failures import find_categories

            window = 14.0 if days is None else days
            report = await self._session.failure_clusters(
                project_id, window, categories=find_categories()
            )
            return {
                "projectId": project_id,
                "days": window,
                "failures": report.failures,
                "clusters": [report.cluster_json(found) for found in report.clusters],
            }

        return await self._answer(
            work(),
            parts=("clusters",),
            advice={"clusters": "give fewer days (the widest causes come first)"},
        )
