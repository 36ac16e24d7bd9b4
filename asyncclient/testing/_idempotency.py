"""Idempotent requests: one answer per (API key, Idempotency-Key), given again to every retry.

`answer_once` runs an operation's work at most once per key and stores its answer for the TTL.
"""

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs

from asyncclient.testing._auth import ApiKey
from asyncclient.testing._errors import ServiceError, invalid
from asyncclient.testing._state import SharedState
from asyncclient.testing.dialects.base import Dialect, WireAnswer, dumps

__all__ = ["AnswerStore", "StoredAnswer", "answer_once", "fingerprint"]

_JSON = "application/json"


@attrs.frozen
class StoredAnswer:
    fingerprint: str
    status: int
    body: bytes = attrs.field(repr=False)
    expires: float
    content_type: str = "application/json"


class AnswerStore:
    """The stored answers, and a lock per (API key, Idempotency-Key) while one is worked out."""

    def __init__(self, state: SharedState) -> None:
        self._state = state
        self._answers: dict[tuple[str, str], StoredAnswer] = {}
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def slot(self, key: ApiKey, idempotency_key: str) -> AsyncIterator[None]:
        """Serialises requests with one (API key, Idempotency-Key): only one does the work."""
        slot = (key.token, idempotency_key)
        entry = self._locks.get(slot)
        if entry is None:
            entry = self._locks[slot] = (asyncio.Lock(), [0])
        entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if entry[1][0] == 0:
                del self._locks[slot]

    def recall(self, key: ApiKey, idempotency_key: str, fingerprint: str) -> StoredAnswer | None:
        """The stored answer for a retry, None for a first request, or 409 for another request."""
        slot = (key.token, idempotency_key)
        stored = self._answers.get(slot)
        if stored is None:
            return None
        if stored.expires <= self._state.now():
            del self._answers[slot]
            return None
        if stored.fingerprint != fingerprint:
            raise ServiceError(
                409,
                "idempotency_conflict",
                "this Idempotency-Key was used with a different request; use a new key",
            )
        return stored

    def remember(
        self,
        key: ApiKey,
        idempotency_key: str,
        fingerprint: str,
        status: int,
        body: bytes,
        content_type: str = "application/json",
    ) -> None:
        now = self._state.now()
        if len(self._answers) >= 10_000:
            self._answers = {s: a for s, a in self._answers.items() if a.expires > now}
        expires = now + self._state.settings.idempotency_ttl
        self._answers[(key.token, idempotency_key)] = StoredAnswer(
            fingerprint, status, body, expires, content_type
        )


def fingerprint(op: str, path: str, raw: bytes) -> str:
    """What makes a retry the same request: the operation, the path and the JSON body."""
    try:
        canonical = json.dumps(json.loads(raw or b"{}"), sort_keys=True, separators=(",", ":"))
    except (ValueError, UnicodeDecodeError):
        canonical = raw.hex()
    return hashlib.sha256(f"{op} {path}\n{canonical}".encode()).hexdigest()


async def answer_once(
    answers: AnswerStore,
    dialect: Dialect,
    key: ApiKey,
    idempotency_key: str | None,
    request: tuple[str, str, bytes],
    work: Callable[[], Awaitable[tuple[int, Any]]],
) -> WireAnswer:
    """Run `work` once per (API key, Idempotency-Key); a retry gets the first answer back.

    request: (operation, path, raw body), what a retry must repeat. Without a key, `work` runs.
    """

    async def answer() -> WireAnswer:
        try:
            status, value = await work()
        except ServiceError as exc:
            return dialect.error_answer(exc)
        return WireAnswer(status, _JSON, dumps(value).encode())

    if idempotency_key is None:
        return await answer()
    if not 1 <= len(idempotency_key) <= 255:
        raise invalid("Idempotency-Key", "the Idempotency-Key header must be 1 to 255 characters")
    digest = fingerprint(*request)
    async with answers.slot(key, idempotency_key):
        stored = answers.recall(key, idempotency_key, digest)
        if stored is not None:
            return WireAnswer(
                stored.status, stored.content_type, stored.body, {"Idempotent-Replayed": "true"}
            )
        answer_ = await answer()
        if answer_.status != 429 and answer_.status < 500:
            answers.remember(
                key, idempotency_key, digest, answer_.status, answer_.body, answer_.content_type
            )
    return answer_
