"""Reading answers into memory within a limit: the whole answer up to max_response_bytes
(checked on its Content-Length before reading, and on the bytes as they arrive, after
decompression), or of an error answer only its first bytes, enough for its message."""

from collections.abc import Callable
from typing import Any, Final

import aiohttp

__all__ = ["ERROR_BODY_LIMIT", "read_answer", "read_error"]

#: How much of an error answer is read: plenty for its message (a proxy's HTML page included).
ERROR_BODY_LIMIT: Final = 64 << 10


async def read_answer(
    resp: aiohttp.ClientResponse,
    limit: int,
    call: Any,
    too_large: Callable[[Any, str], BaseException],
) -> bytes:
    """The whole answer if it is at most `limit` bytes; otherwise `too_large(call, what)` is
    raised as soon as that is known, before the rest is read."""
    declared = resp.content_length
    plain = not resp.headers.get("Content-Encoding")
    if declared is not None and plain:
        if declared > limit:
            raise too_large(call, f"Content-Length {declared:,} bytes")
        return await resp.read()  # aiohttp reads no more than the Content-Length
    chunks: list[bytes] = []
    total = 0
    # aiohttp (>= 3.14.1, as pyproject asks) inflates a compressed answer in bounded steps.
    while chunk := await resp.content.readany():
        total += len(chunk)
        if total > limit:
            raise too_large(call, f"more than {limit:,} bytes arrived")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_error(
    resp: aiohttp.ClientResponse,
    keep: int,
    limit: int,
    call: Any,
    too_large: Callable[[Any, str], BaseException],
) -> bytes:
    """The first `keep` bytes of an error answer, enough for its message. The rest is read
    and dropped, so that the connection can serve again, but only up to `limit`: an error
    answer larger than that raises `too_large` (known from its Content-Length before reading),
    since retrying would only fetch it again."""
    declared = resp.content_length
    if declared is not None and declared > limit and not resp.headers.get("Content-Encoding"):
        raise too_large(call, f"Content-Length {declared:,} bytes")
    chunks: list[bytes] = []
    kept = total = 0
    while chunk := await resp.content.readany():
        total += len(chunk)
        if total > limit:
            raise too_large(call, f"more than {limit:,} bytes arrived")
        if kept < keep:
            chunks.append(chunk[: keep - kept])
            kept += len(chunks[-1])
    return b"".join(chunks)
