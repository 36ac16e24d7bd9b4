"""Request bodies streamed to disk (parts, the sink): checksummed as they arrive, capped, paced.

A part's etag is its crc32 and length (`part_etag`); the bandwidth cap is the conditions' own.
"""

import asyncio
import hashlib
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from asyncclient.testing._build_files import PartWriter
from asyncclient.testing._errors import ServiceError

__all__ = ["ClientGone", "Crc32", "format_etag", "part_etag", "receive"]

#: Bodies go to a thread in batches of about this.
_BATCH = 1 << 20
#: A capped connection sleeps this far ahead (s).
_NAP = 0.005


class ClientGone(Exception):
    """The client's connection broke while its body was being read."""


class Crc32:
    """zlib.crc32 behind hashlib's update/hexdigest: a part's etag. It names the bytes received
    for a part at a third of sha256's CPU; the build's own checksum stays sha256."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def part_etag(data: bytes) -> str:
    """The etag the emulator answers for a part of these bytes: opaque to clients (the API spec
    says only that complete must list it), here the part's crc32 and length."""
    crc = Crc32()
    crc.update(data)
    return format_etag(crc.hexdigest(), len(data))


def format_etag(crc: str, length: int) -> str:
    return f"{crc}-{length}"


def _absorb(out: BinaryIO | PartWriter, digest: Any, chunks: list[bytes]) -> None:
    """Hash and write one batch of a body's chunks. Blocking: runs in a worker thread (hashlib
    and the writes release the GIL on buffers this size)."""
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)


async def receive(
    request: web.Request,
    dest: Path | PartWriter,
    limit: int,
    bandwidth: int | None,
    checksum: Callable[[], Any] = hashlib.sha256,
    link: Callable[[int], float] | None = None,
) -> tuple[str, int]:
    """Stream the body to `dest` (a new file, or a part's place) in chunks, checksumming as it
    goes: (hex checksum, length). A new file is removed when the body does not arrive whole.

    Refuses a body longer than `limit`. With `bandwidth`, reads at most that many bytes/s on
    average: a body takes length/bandwidth at the least, taken in as the connection buffered it.
    With `link` (FaultPlan.link.take), the bytes also wait their turn on the link every body
    shares: the later of the two decides.
    The event loop only reads, taking the chunks as the connection buffered them (no joining
    copies); each batch of about _BATCH bytes is hashed and written by a worker thread while the
    loop reads the next one.
    """
    loop = asyncio.get_running_loop()
    digest = checksum()
    total = 0
    content = request.content
    began = loop.time()
    link_free = began  # when this body's bytes so far have crossed the shared link
    batch: list[bytes] = []
    batched = 0
    pending: asyncio.Future[None] | None = None
    # Opening is a metadata operation of microseconds.
    out = dest.open("wb") if isinstance(dest, Path) else dest  # closed once the last batch is in
    try:
        while True:
            try:
                chunk, boundary = await content.readchunk()
            except (OSError, HttpProcessingError, asyncio.IncompleteReadError) as exc:
                raise ClientGone from exc
            if not chunk and boundary:
                continue  # the end of one chunk of a chunked body
            if chunk:
                total += len(chunk)
                if total > limit:
                    raise ServiceError(
                        400, "invalid_part", f"the body is longer than the {limit} bytes expected"
                    )
                batch.append(chunk)
                batched += len(chunk)
            if batched >= _BATCH or (not chunk and batch):
                if pending is not None:
                    await pending
                pending = loop.run_in_executor(None, _absorb, out, digest, batch)
                batch, batched = [], 0
            if bandwidth is not None or link is not None:
                # Sleep off the lead over the caps, in naps.
                now = loop.time()
                ahead = 0.0 if bandwidth is None else began + total / bandwidth - now
                if link is not None and chunk:
                    crossed = now + link(len(chunk))
                    link_free = max(link_free, crossed)
                ahead = max(ahead, link_free - now)
                if ahead >= _NAP or (ahead > 0 and not chunk):
                    await asyncio.sleep(ahead)
            if not chunk:
                break
        if pending is not None:
            await pending
            pending = None
    except BaseException:
        if pending is not None:
            await asyncio.wait([pending])  # the thread may still be writing to `out`
            if not pending.cancelled():
                pending.exception()  # retrieved: the error being raised is the one that counts
        out.close()
        if isinstance(dest, Path):
            # Unlinking a temp file is a metadata operation of microseconds.
            dest.unlink(missing_ok=True)  # noqa: ASYNC240
        raise
    out.close()
    return digest.hexdigest(), total
