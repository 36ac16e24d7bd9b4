"""The builds toolset: list_builds (paged and filtered), get_build, upload_build, delete_build."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final

from mcp.types import CallToolResult
from pydantic import Field

from asyncclient._core import _wording
from asyncclient.errors import ValidationError
from asyncclient.mcp_server._base import (
    DEFAULT_PAGE,
    Bounded,
    BuildId,
    Offset,
    PageSize,
    ProgressReporter,
    ProjectId,
    ToolContext,
    ToolKit,
    check_page,
    compact,
    paged,
    string,
)
from asyncclient.mcp_server._catalogue import tools_of
from asyncclient.models import Build

__all__ = ["TOOLS", "BuildTools"]

TOOLS: Final = tools_of("builds")
PLATFORMS: Final = ("android", "ios")


class BuildsResult(Bounded):
    total: int
    offset: int
    nextOffset: int | None
    builds: list[dict[str, Any]]
    maxBytes: int | None
    partBytes: int | None


class BuildResult(Bounded):
    build: dict[str, Any]


class DeletedResult(Bounded):
    id: str
    ok: bool


def _matches(build: Build, status: str, app_id: str, platform: str, label: str) -> bool:
    if status and status.strip().lower() not in (build.status_kind, str(build.status).lower()):
        return False
    if app_id and build.app_id != app_id.strip():
        return False
    if platform and platform.strip().lower() not in (build.platform or "").lower():
        return False
    return not label or build.label == label


def _local_path(path: str) -> Path:
    return Path(path).expanduser()


class BuildTools(ToolKit):
    async def list_builds(
        self,
        project_id: ProjectId,
        status: Annotated[
            str,
            string(
                "Only builds in this state: ready, uploading, checking or rejected (the "
                "service's word, in any case)"
            ),
        ] = "",
        app_id: Annotated[str, string("Only builds of this app id, such as com.example.shop")] = "",
        platform: Annotated[
            str, string("Only android or only ios builds", enum=["", *PLATFORMS])
        ] = "",
        label: Annotated[str, string("Only builds with exactly this label")] = "",
        offset: Offset = 0,
        page_size: PageSize = DEFAULT_PAGE,
    ) -> Annotated[CallToolResult, BuildsResult]:
        """List a project's app builds, newest first, one page at a time (20 by default): id,
        status (uploading, ready, rejected), platform, app id and name, version, label, size
        and times; also the largest build the service takes (maxBytes) and the upload part size
        (partBytes).

        The service answers every build at once; this tool pages over that answer: total is how
        many match the filters, and while nextOffset is not null, call again with the same
        filters and offset=nextOffset for the next page. leftOut says what a page left out."""

        async def work() -> dict[str, Any]:
            check_page(offset, page_size)
            if platform and platform.strip().lower() not in PLATFORMS:
                raise ValidationError(
                    f"platform must be android or ios; got {platform!r}: leave it out for both"
                )
            found = await self._session.list_builds(project_id)
            return paged(
                [
                    compact(build)
                    for build in found.builds
                    if _matches(build, status, app_id, platform, label)
                ],
                key="builds",
                offset=offset,
                page_size=page_size,
                budget=self._options.result_chars,
                again="list_builds with the same filters",
                maxBytes=found.max_bytes,
                partBytes=found.part_bytes,
            )

        return await self._answer(work())

    async def get_build(self, build_id: BuildId) -> Annotated[CallToolResult, BuildResult]:
        """Show one build with every field: status, app id, version, version code, minimum OS,
        ABIs or architectures, warnings from the service's check, sha256 and label."""

        async def work() -> BuildResult:
            return {"build": compact(await self._session.get_build(build_id))}

        return await self._answer(work())

    async def delete_build(self, build_id: BuildId) -> Annotated[CallToolResult, DeletedResult]:
        """Delete a build. Runs that used it keep their results; a build that a test pins cannot
        be deleted. Needs a key that can also create and edit tests."""

        async def work() -> DeletedResult:
            await self._session.delete_build(build_id)
            return {"id": build_id, "ok": True}

        return await self._answer(work())

    async def upload_build(
        self,
        project_id: ProjectId,
        path: Annotated[
            str,
            string(
                "Path on the machine this server runs on: an Android .apk, a zipped iOS "
                "Simulator app (.app.zip) or an iOS Simulator .app folder; relative paths start "
                "at the server's working directory",
                minLength=1,
            ),
        ],
        ctx: ToolContext,
        # Plain `str`: the SDK parses JSON-like `str | None`.
        label: Annotated[
            str, string("Optional free label kept with the build, such as a commit")
        ] = "",
        skip_existing: Annotated[
            bool,
            Field(
                description="Return a ready build of the project with the same file name, size "
                "and sha256 instead of uploading it again"
            ),
        ] = False,
    ) -> Annotated[CallToolResult, BuildResult]:
        """Upload an app build from this machine and return it checked by the service: app id,
        version, platform and whether its devices can run it (a build they cannot run is an
        error that says why). The file is checked first, sent in parallel parts, resumed if an
        earlier upload of it was cut off, and its sha256 verified. Progress is reported in bytes.
        Use the returned build id with run_project or run_test."""

        async def work() -> BuildResult:
            file = _local_path(path)
            reporter = ProgressReporter(ctx)
            size = _wording.format_size

            def progress(done: int, total: int) -> None:
                reporter.update(
                    done, total, f"uploading {file.name}: {size(done)} of {size(total)}"
                )

            try:
                build = await self._session.upload_build(
                    project_id,
                    file,
                    label=label or None,
                    progress=progress,
                    skip_existing=skip_existing,
                )
            finally:
                await reporter.close()
            return {"build": compact(build)}

        return await self._answer(work())
