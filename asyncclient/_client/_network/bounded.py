"""Reading an answer into memory within a limit: at most max_response_bytes arrive (checked on
the Content-Length before reading, and on the bytes as they arrive, after decompression), and of
those only the first `keep` are kept: all of an answer, the first bytes of an error's."""

from collections.abc import Callable
from typing import Any, Final

import aiohttp

__all__ = ["ERROR_BODY_LIMIT", "read_bounded"]

#: How much of an error answer is kept.
ERROR_BODY_LIMIT: Final = 64 << 10


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
    plain = not resp.headers.get("Content-Encoding")
    if declared is not None and plain:
        if declared > limit:
            raise too_large(call, f"Content-Length {declared:,} bytes")
        if keep is None or declared <= keep:
            return await resp.read()  # aiohttp reads no more than the Content-Length
    chunks: list[bytes] = []
    kept = total = 0
    # aiohttp >= 3.14.1 inflates in bounded steps.
    while chunk := await resp.content.readany():
        total += len(chunk)
        if total > limit:
            raise too_large(call, f"more than {limit:,} bytes arrived")
        if keep is None:
            chunks.append(chunk)
        elif kept < keep:
            chunks.append(chunk[: keep - kept])
            kept += len(chunks[-1])
    return b"".join(chunks)
