"""Reading an answer into memory within a limit: at most max_response_bytes arrive (checked on
the Content-Length before reading, and on the bytes as they arrive, after decompression), and of
those only the first `keep` are kept: all of an answer, the first bytes of an error's."""

from collections.abc import Callable
from typing import Any, Final

import aiohttp

__all__ = ["ERROR_BODY_LIMIT", "Kept", "Over", "read_bounded"]

#: How much of an error answer is kept.
ERROR_BODY_LIMIT: Final = 64 << 10


class Over(Exception):
    """More than the limit arrived, or is declared (the message says which)."""


class Kept:
    """An answer's bytes as they arrive (after decompression), each transport's: `Over` once
    more than `limit` have come, the first `keep` kept (None: all)."""

    __slots__ = ("_chunks", "_keep", "_kept", "_limit", "_total")

    def __init__(self, limit: int, keep: int | None) -> None:
        self._limit = limit
        self._keep = keep
        self._chunks: list[bytes] = []
        self._kept = self._total = 0

    def declared(self, length: int | None) -> None:
        """The answer's Content-Length of a body sent as it is (not compressed)."""
        if length is not None and length > self._limit:
            raise Over(_declared_over(length))

    def room(self) -> int:
        """Bytes that may still arrive before the limit is passed, and one more."""
        return self._limit - self._total + 1

    def add(self, chunk: bytes) -> None:
        self._total += len(chunk)
        if self._total > self._limit:
            raise Over(f"more than {self._limit:,} bytes arrived")
        keep = self._keep
        if keep is None:
            self._chunks.append(chunk)
        elif self._kept < keep:
            self._chunks.append(chunk[: keep - self._kept])
            self._kept += len(self._chunks[-1])

    def body(self) -> bytes:
        return b"".join(self._chunks)


async def read_bounded(
    resp: aiohttp.ClientResponse,
    limit: int,
    call: Any,
    too_large: Callable[[Any, str], BaseException],
    *,
    keep: int | None = None,
) -> bytes:
    """The answer's first `keep` bytes (None: all of it). If more than `limit` bytes would
    arrive, `too_large(call, what)` is raised as soon as that is known, before the rest is read.
    The bytes past `keep` are read and dropped, so that the connection can serve again."""
    declared = resp.content_length
    if declared is not None and not resp.headers.get("Content-Encoding"):
        if declared > limit:
            raise too_large(call, _declared_over(declared))
        if keep is None or declared <= keep:
            return await resp.read()  # aiohttp reads no more than the Content-Length
    kept = Kept(limit, keep)
    try:
        # aiohttp >= 3.14.1 inflates in bounded steps.
        while chunk := await resp.content.readany():
            kept.add(chunk)
    except Over as over:
        raise too_large(call, str(over)) from None
    return kept.body()


def _declared_over(length: int) -> str:
    return f"Content-Length {length:,} bytes"
