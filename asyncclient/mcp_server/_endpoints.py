"""The endpoints toolset: list_endpoints (paged), add_endpoint and delete_endpoint."""

from __future__ import annotations

from typing import Annotated, Any, Final

from mcp.types import CallToolResult
from pydantic import WithJsonSchema

from asyncclient._core import _checks as checks
from asyncclient.mcp_server._base import (
    DEFAULT_PAGE,
    Bounded,
    EndpointId,
    Offset,
    PageSize,
    ProjectId,
    ToolKit,
    check_page,
    compact,
    paged,
    string,
)
from asyncclient.mcp_server._builds import DeletedResult
from asyncclient.mcp_server._catalogue import tools_of

__all__ = ["TOOLS", "EndpointTools"]

TOOLS: Final = tools_of("endpoints")


class EndpointsResult(Bounded):
    total: int
    offset: int
    nextOffset: int | None
    endpoints: list[dict[str, Any]]


class EndpointAddedResult(Bounded):
    id: str


class EndpointTools(ToolKit):
    async def list_endpoints(
        self, project_id: ProjectId, offset: Offset = 0, page_size: PageSize = DEFAULT_PAGE
    ) -> Annotated[CallToolResult, EndpointsResult]:
        """List a project's tester endpoints (calls into the customer's own systems that the
        tester may make during a run), one page at a time (20 by default): id, name,
        description, method, url and times. Header values are never returned. total is how many
        there are; while nextOffset is not null, call again with offset=nextOffset."""

        async def work() -> dict[str, Any]:
            check_page(offset, page_size)
            endpoints = await self._session.list_endpoints(project_id)
            return paged(
                [compact(endpoint) for endpoint in endpoints],
                key="endpoints",
                offset=offset,
                page_size=page_size,
                budget=self._options.result_chars,
                again="list_endpoints",
            )

        return await self._answer(work())

    async def add_endpoint(
        self,
        project_id: ProjectId,
        name: Annotated[
            str,
            string(
                "Short name, such as create_voucher",
                minLength=1,
                maxLength=checks.ENDPOINT_NAME_MAX,
            ),
        ],
        description: Annotated[
            str,
            string(
                "What the call does and when the tester should use it",
                minLength=1,
                maxLength=checks.ENDPOINT_DESCRIPTION_MAX,
            ),
        ],
        url: Annotated[str, string("The address to call: https:// only", pattern="^https://")],
        method: Annotated[
            str, string("HTTP method (default POST)", enum=sorted(checks.ENDPOINT_METHODS))
        ] = "POST",
        # Any: the library refuses it without echoing values.
        headers: Annotated[
            Any,
            WithJsonSchema(
                {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "maxProperties": checks.ENDPOINT_HEADERS_MAX,
                    "description": "Request headers (up to 20), such as an Authorization "
                    "token: stored encrypted, never returned or shown",
                }
            ),
        ] = None,
        body_template: Annotated[
            str,
            string(
                "Optional request body text, often JSON; {{param}} placeholders are filled in "
                "by the tester"
            ),
        ] = "",
    ) -> Annotated[CallToolResult, EndpointAddedResult]:
        """Register a tester endpoint in a project: a call into the customer's own system (for
        example creating a voucher) that the automated tester may make during a run. The tester
        sees only its name, description and what the call returned. Using endpoints in runs
        needs a paid plan; adding one needs a key that can also create and edit tests."""

        async def work() -> EndpointAddedResult:
            endpoint_id = await self._session.add_endpoint(
                project_id,
                name,
                description,
                url,
                method=method,
                headers=headers,
                body_template=body_template or None,
            )
            return {"id": endpoint_id}

        # Header values are secrets: never in a result.
        return await self._answer(work())

    async def delete_endpoint(
        self, endpoint_id: EndpointId
    ) -> Annotated[CallToolResult, DeletedResult]:
        """Delete a tester endpoint. Needs a key that can also create and edit tests."""

        async def work() -> DeletedResult:
            await self._session.delete_endpoint(endpoint_id)
            return {"id": endpoint_id, "ok": True}

        return await self._answer(work())
