"""The runs toolset's fleet_status: the fleet's ledger as `asyncclient fleet status` shows it
(the jobs, their leases, slots and waiting starts), from ASYNCCLIENT_FLEET where it runs."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.types import CallToolResult

from asyncclient.mcp_server._base import Bounded, ToolKit

__all__ = ["FleetResult", "FleetTools"]


class FleetResult(Bounded):
    jobs: list[dict[str, Any]]
    inFlight: int
    maxRuns: int | None
    learnedLimit: dict[str, float] | None
    queuedStarts: dict[str, int]


class FleetTools(ToolKit):
    async def fleet_status(self) -> Annotated[CallToolResult, FleetResult]:
        """The CI fleet's shared run ledger (a Redis server the jobs share, named by
        ASYNCCLIENT_FLEET where this server runs): per job its id, ref, commit, priority
        class, the runs it holds, leaseLeft (seconds; null: expired, its runs will be
        stopped), supersededBy, inFlight (device slots held) and queuedStarts; and the
        fleet's inFlight against maxRuns (or learnedLimit: runs and secondsLeft, taught by
        the service's overage and 402 answers), with the starts waiting by class. Use it to see
        which jobs are alive, what a fleet is spending and who waits for devices. Reads only;
        at most 500 jobs."""

        async def work() -> FleetResult:
            import os

            from asyncclient.errors import ValidationError
            from asyncclient.fleet import (
                LEASE_ENV,
                MAX_RUNS_ENV,
                URL_ENV,
                Fleet,
                FleetError,
                status_json,
            )

            url = os.environ.get(URL_ENV, "").strip()
            if not url:
                raise ValidationError(
                    f"no fleet ledger: start the server with {URL_ENV}=redis://host:6379/0"
                )
            try:
                lease = float(os.environ.get(LEASE_ENV, "") or 30)
                most_text = os.environ.get(MAX_RUNS_ENV, "").strip()
                fleet = Fleet(url, lease=lease, max_runs=int(most_text) if most_text else None)
                async with fleet:
                    jobs = await fleet.status()
                    learned = await fleet.learned_limit()
            except (ValueError, FleetError) as exc:
                raise ValidationError(str(exc)) from None
            return status_json(jobs, fleet.max_runs, learned)  # type: ignore[return-value]

        return await self._answer(
            work(), parts=("jobs",), advice={"jobs": "the fleet has more jobs than fit"}
        )
