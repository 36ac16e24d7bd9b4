"""Starts written to the ledger before they are sent (`Start`), so that a job killed between the
service's answer and the beat that records its runs leaves nothing a reaper cannot stop; and
the session whose starts go through the fleet (`GovernedSession`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs

from asyncclient._core import _checks as checks
from asyncclient.errors import ApiError, NotStartedError, TransportError, ValidationError
from asyncclient.fleet._common import log, run_ids, text

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession

__all__ = ["STARTS_KEPT", "GovernedSession", "Start", "StartsJob", "starts_in"]

#: Unanswered starts one job records at once (a start past it goes ahead unrecorded), and
#: those of a dead job a reaper asks again for: a forged ledger costs at most this many starts,
#: each stopped at once.
STARTS_KEPT: Final = 20
_START_BYTES: Final = 4096


class StartsJob(Protocol):
    """What the governed session needs of a job in the fleet (a FleetJob)."""

    async def acquire(self, runs: int = 1, *, strict: bool = True, on_wait: Any = None) -> None: ...

    async def intend(self, start: Start) -> None: ...

    def answered(self, start: Start, run_ids: Sequence[str]) -> None: ...

    def free(self, runs: int = 1) -> None: ...

    async def learn(self, why: str, *, less: int = 0) -> None: ...


@attrs.frozen
class Start:
    """A start asked of the service, recorded in the ledger before it is sent and forgotten in
    the beat that records its runs: a job killed in between leaves it for a reaper, which asks
    again with the same Idempotency-Key (the service answers with the same runs, and starts
    none) and stops what the answer names.

    Attributes:
        key: The start's Idempotency-Key.
        kind: "test" (run_test) or "project" (run_project).
        target: The test or project id.
        body: The JSON body sent (mode, buildId, buildIds).
    """

    key: str
    kind: str
    target: str
    body: Mapping[str, Any] = attrs.field(factory=dict)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "target": self.target, "body": dict(self.body)})

    @classmethod
    def from_ledger(cls, key: Any, raw: Any) -> Start | None:
        """The start the ledger holds, checked as the session checks a start it is given
        (ids, mode, key); None for anything else: it is never asked again."""
        try:
            key_text, blob = text(key), raw if isinstance(raw, bytes) else text(raw).encode()
            if len(blob) > _START_BYTES:
                return None
            found = json.loads(blob)
            kind, target, body = found["kind"], found["target"], found["body"]
            if kind not in ("test", "project") or not isinstance(body, dict):
                return None
            if set(body) - {"mode", "buildId", "buildIds"}:
                return None
            checks.check_id(kind, target)
            payload, checked = checks.run_body(
                body.get("mode"),
                body.get("buildIds") if kind == "project" else None,
                body.get("buildId"),
                key_text,
            )
        except (ValueError, KeyError, TypeError, ValidationError, RecursionError):
            return None
        if payload != body:
            return None
        return cls(checked, kind, target, payload)

    async def ask_again(self, session: AsyncSession) -> tuple[str, ...]:
        """The runs the service names when asked again with this start's key (none when it
        refuses: then nothing was started)."""
        options = {
            "mode": self.body.get("mode"),
            "build_id": self.body.get("buildId"),
            "idempotency_key": self.key,
        }
        try:
            if self.kind == "test":
                return run_ids([(await session.run_test(self.target, **options)).run_id])
            answer = await session.run_project(
                self.target, build_ids=self.body.get("buildIds"), **options
            )
        except (ApiError, TransportError) as exc:
            log.warning("could not ask again for start %s of %s: %s", self.key, self.target, exc)
            return ()
        return run_ids(s.run_id for s in answer.started)


def starts_in(values: Sequence[Any]) -> list[Start]:
    """The starts a REAP answer holds (key, JSON, key, JSON...), the well-formed ones."""
    found = (Start.from_ledger(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2))
    return [start for start in found if start is not None][:STARTS_KEPT]


class GovernedSession:
    """`session` with each start recorded in the ledger before it is sent (`Start`: a job killed
    before its answer is written leaves nothing the fleet cannot stop) and waiting its turn for
    the fleet's device slots (`job.acquire`): a test's start takes one slot; a project's start
    waits for one free slot and is charged each run it began. Everything else is the
    session's own. Give each ended run's slot back with `job.free()`."""

    def __init__(self, session: AsyncSession, job: StartsJob, on_wait: Any = None) -> None:
        self._session = session
        self._job = job
        self._on_wait = on_wait

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    @contextlib.asynccontextmanager
    async def _sending(self, start: Start, *, strict: bool) -> AsyncIterator[None]:
        """The start waits its turn for a slot and is written down before the block sends it.
        A refusal forgets it (nothing started; a project's 402 teaches the limit); an unknown
        end keeps it, asked again at the job's end. The slot goes back either way."""
        job = self._job
        await job.acquire(1, strict=strict, on_wait=self._on_wait)
        await job.intend(start)
        try:
            yield
        except ApiError as exc:
            job.answered(start, ())
            job.free(1)
            if isinstance(exc, NotStartedError) and exc.status == 402:
                await job.learn("402 not_started", less=1)
            raise
        except BaseException:
            job.free(1)
            raise

    async def run_test(
        self,
        test_id: str,
        mode: str | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        test_id = checks.check_id("test", test_id)
        body, key = checks.run_body(mode, None, build_id, idempotency_key)
        start = Start(key, "test", test_id, body)
        async with self._sending(start, strict=True):
            answer = await self._session.run_test(
                test_id, mode=mode, build_id=build_id, idempotency_key=key
            )
        self._job.answered(start, [answer.run_id])
        if answer.overage is True:
            await self._job.learn("overage (the plan's included runs are spent)")
        return answer

    async def run_project(
        self,
        project_id: str,
        mode: str | None = None,
        build_ids: Sequence[str] | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        project_id = checks.check_id("project", project_id)
        body, key = checks.run_body(mode, build_ids, build_id, idempotency_key)
        start = Start(key, "project", project_id, body)
        async with self._sending(start, strict=False):
            result = await self._session.run_project(
                project_id, mode=mode, build_ids=build_ids, build_id=build_id, idempotency_key=key
            )
        self._job.answered(start, [s.run_id for s in result.started])
        self._job.free(1 - len(result.started))  # charged each run it began
        return result
