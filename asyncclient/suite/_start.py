"""The start of a project's whole suite (`SuiteRun.for_project`): its arguments checked before
any request, and the one `run_project` call the loop makes, under the suite's key."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from asyncclient._core import _checks as checks

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import ProjectRunStart

__all__ = ["ProjectStart"]


class ProjectStart:
    """What starts a project's suite, checked when made: awaiting a call of it starts every
    test once (the key makes a second call the same start)."""

    def __init__(
        self,
        session: AsyncSession,
        project_id: str,
        build_id: str | None,
        build_ids: Sequence[str] | None,
        mode: str | None,
        idempotency_key: str | None,
    ) -> None:
        self.project_id = checks.check_id("project", project_id)
        self.build_id = None if build_id is None else checks.check_id("build", build_id)
        self.build_ids = (
            None if build_ids is None else checks.check_id_list("build", build_ids, "build_ids")
        )
        self.mode = None if mode is None else checks.check_choice("mode", mode, checks.MODES)
        self.key = idempotency_key or f"asyncclient-suite-{os.urandom(12).hex()}"
        self._session = session

    async def __call__(self) -> ProjectRunStart:
        return await self._session.run_project(
            self.project_id,
            mode=self.mode,
            build_ids=self.build_ids,
            build_id=self.build_id,
            idempotency_key=self.key,
        )
