"""One upload per file across the fleet: the first job to claim a file uploads it, the others
wait for its build and reuse it once it reads back as that file's."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import TYPE_CHECKING, Any, Final

from asyncclient._core._checks import is_id
from asyncclient.errors import ApiError, TransportError
from asyncclient.fleet._common import FleetError, shown, text

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.fleet import Fleet

__all__ = ["UPLOADED_TTL", "UploadClaims", "reusable"]


#: How long a finished upload's build id stays in the ledger for later jobs to reuse.
UPLOADED_TTL: Final = 86_400
_SHA256: Final = re.compile(r"[0-9a-f]{64}")


class UploadClaims:
    """Who uploads a file (by project and sha256) in the fleet: the first to claim it; the
    others wait for its build, read it back and reuse it when it is that file's, in that
    project, ready (`reusable`), else upload it themselves. A claim is a key with the lease's
    expiry that its holder renews while it uploads, so a holder that dies frees it."""

    def __init__(self, fleet: Fleet, holder: str) -> None:
        self.fleet = fleet
        self.holder = holder
        self._renewing: dict[str, asyncio.Task[None]] = {}

    def _keys(self, project_id: str, sha256: str) -> tuple[str, str]:
        if not (is_id("project", project_id) and _SHA256.fullmatch(sha256)):
            raise ValueError("a claim needs a project id and a lower-case sha256")
        p = self.fleet.prefix
        return f"{p}upload:{project_id}:{sha256}", f"{p}uploaded:{project_id}:{sha256}"

    async def claim(self, project_id: str, sha256: str) -> str | None:
        """Claim the upload: None when this holder has it now (renewed until `done`), else
        the holder that has it."""
        claim, _ = self._keys(project_id, sha256)
        r = self.fleet._redis
        lease = int(self.fleet.lease * 1000)
        try:
            if await r.set(claim, self.holder, nx=True, px=lease):
                self._renewing[claim] = asyncio.create_task(self._renew(claim, lease))
                return None
            holder = await r.get(claim)
        except Exception as exc:
            raise FleetError(f"the fleet's Redis failed: {type(exc).__name__}") from None
        return shown(holder) if holder is not None else ""

    async def _renew(self, claim: str, lease: int) -> None:
        with contextlib.suppress(Exception):
            while True:
                await asyncio.sleep(lease / 3000)
                await self.fleet._redis.set(claim, self.holder, xx=True, px=lease)

    async def done(self, project_id: str, sha256: str, build_id: str | None) -> None:
        """The holder's upload ended: its build (None: it failed) published for the others,
        the claim let go."""
        claim, uploaded = self._keys(project_id, sha256)
        task = self._renewing.pop(claim, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        r = self.fleet._redis
        with contextlib.suppress(Exception):
            if build_id is not None and is_id("build", build_id):
                await r.set(uploaded, build_id, ex=UPLOADED_TTL)
            if text(await r.get(claim) or b"") == self.holder:
                await r.delete(claim)

    async def published(self, project_id: str, sha256: str) -> tuple[str | None, bool]:
        """(the build id another job published for this file, whether a claim is held)."""
        claim, uploaded = self._keys(project_id, sha256)
        r = self.fleet._redis
        try:  # one read of both: a holder's `done` between two reads would hide its build
            build, holder = await r.mget(uploaded, claim)
        except Exception as exc:
            raise FleetError(f"the fleet's Redis failed: {type(exc).__name__}") from None
        found = text(build) if build is not None else None
        return (found if found and is_id("build", found) else None), holder is not None

    async def close(self) -> None:
        for task in self._renewing.values():
            task.cancel()
        await asyncio.gather(*self._renewing.values(), return_exceptions=True)
        self._renewing.clear()


async def reusable(session: AsyncSession, build_id: str, project_id: str, sha256: str) -> Any:
    """The build when it is this file's in this project and ready, read back from the
    service; None otherwise, and None when it cannot be read (fail closed, as reuse does)."""
    try:
        build = await session.get_build(build_id)
    except (ApiError, TransportError):
        return None
    same = (
        build.project_id == project_id
        and isinstance(build.sha256, str)
        and build.sha256.lower() == sha256
        and build.status == "ready"
    )
    return build if same else None
