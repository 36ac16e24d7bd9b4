"""The files toolset: download_run_file, which writes a run's video or screenshot into the
server's download folder and never outside it."""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePosixPath
from typing import Annotated, Final

from mcp.types import CallToolResult

from asyncclient._core import _checks as checks
from asyncclient._core import _wording
from asyncclient.errors import ValidationError
from asyncclient.mcp_server._base import Bounded, RunId, ToolKit, string
from asyncclient.mcp_server._catalogue import tools_of

__all__ = ["TOOLS", "FileTools"]

TOOLS: Final = tools_of("files")


class DownloadResult(Bounded):
    runId: str
    file: str
    path: str
    size: int


class FileTools(ToolKit):
    async def download_run_file(
        self,
        run_id: RunId,
        file: Annotated[
            str,
            string(
                "The file: a path such as video.mp4 or screenshots/01.png (get_run lists them "
                "under files), or its full link",
                minLength=1,
            ),
        ],
        save_as: Annotated[
            str | None,
            string(
                "Where to save it, relative to the server's download folder (default "
                "RUN_ID/FILE); absolute paths and '..' are refused",
                minLength=1,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, DownloadResult]:
        """Download one file of a finished run (its video or a screenshot) into the download
        folder this server was started with, never outside it. A partial file from an earlier
        attempt is resumed. Returns the saved path (relative to the download folder and on this
        machine) and its size."""

        async def work() -> DownloadResult:
            rel = _wording.file_path(file, checks.check_id("run", run_id))
            target = self._target(save_as if save_as is not None else f"{run_id}/{rel}")
            await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
            saved = await self._session.download_run_file(run_id, file.strip(), target)
            size = (await asyncio.to_thread(saved.stat)).st_size
            return {
                "runId": run_id,
                "file": rel,
                "path": saved.relative_to(self._options.download_dir).as_posix(),
                "size": size,
            }

        return await self._answer(work())

    def _target(self, relative: str) -> Path:
        """`relative` inside the download folder, or ValidationError: no absolute path, no '..',
        and no symbolic link that leads out of it."""
        root = self._options.download_dir
        posix = PurePosixPath(relative.replace("\\", "/"))
        if posix.is_absolute() or Path(relative).is_absolute() or Path(relative).drive:
            raise ValidationError(
                f"save_as {relative!r} is an absolute path: give a path relative to the "
                "download folder"
            )
        if any(part == ".." for part in posix.parts) or not posix.parts:
            raise ValidationError(
                f"save_as {relative!r} leaves the download folder: give a path inside it, "
                "without '..'"
            )
        target = (root / Path(*posix.parts)).resolve()
        if not target.is_relative_to(root) or target == root:
            raise ValidationError(
                f"save_as {relative!r} leads outside the download folder (a symbolic link): "
                "choose another name"
            )
        return target
