"""Run files of the emulator: real PNG screenshots and an ISO-BMFF video, made deterministically.

Also the pure parser of the HTTP `Range` header the download handler uses.
"""

import functools
import hashlib
import random
import struct
import zlib

import attrs

from asyncclient._values._bounds import digits

__all__ = [
    "RangeNotSatisfiable",
    "RunFile",
    "file_names",
    "make_mp4",
    "make_png",
    "parse_range",
    "run_file",
]

VIDEO = "video.mp4"
_PNG_SIZE = (180, 320)


@attrs.frozen
class RunFile:
    name: str
    content_type: str
    data: bytes = attrs.field(repr=False)
    etag: str


def file_names(screenshots: int) -> list[str]:
    """The files of a finished run: the video, then screenshots/01.png, 02.png, ..."""
    return [VIDEO, *(f"screenshots/{i:02d}.png" for i in range(1, screenshots + 1))]


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("/".join(parts).encode()).digest()


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(tag + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)


def make_png(run_id: str, index: int) -> bytes:
    """A 180x320 RGB PNG: a colour and a barcode of 64 bits, both taken from (run_id, index)."""
    width, height = _PNG_SIZE
    digest = _digest(run_id, str(index))
    background = digest[0:3]
    accent = bytes(255 - b for b in background)
    # Stripes encode 8 bytes of the digest: distinct images.
    bits = int.from_bytes(digest[3:11], "big")
    barcode = b"".join((accent if bits >> (63 - i) & 1 else background) * 2 for i in range(64))
    margin = background * ((width - 128) // 2)
    barcode_row = b"\x00" + margin + barcode + margin
    plain_row = b"\x00" + background * width
    band_top = 40 + (index * 37) % (height - 80)
    band_row = b"\x00" + accent * width
    rows = []
    for y in range(height):
        if 8 <= y < 40:
            rows.append(barcode_row)
        elif band_top <= y < band_top + 24:
            rows.append(band_row)
        else:
            rows.append(plain_row)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(b"".join(rows), 6))
        + _png_chunk(b"IEND", b"")
    )


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def make_mp4(run_id: str, duration_s: float) -> bytes:
    """An ISO-BMFF file (ftyp, moov/mvhd, mdat) of 192 to 384 KiB, deterministic for the run."""
    digest = _digest(run_id, "video")
    ftyp = _box(b"ftyp", b"isom" + struct.pack(">I", 512) + b"isomiso2mp41")
    timescale = 1000
    mvhd = (
        struct.pack(">I", 0)  # version 0, flags 0
        + struct.pack(">IIII", 0, 0, timescale, max(1, round(duration_s * timescale)))
        + struct.pack(">IH", 0x00010000, 0x0100)  # rate 1.0, volume 1.0
        + bytes(10)
        + struct.pack(">9I", 0x00010000, 0, 0, 0, 0x00010000, 0, 0, 0, 0x40000000)
        + bytes(24)
        + struct.pack(">I", 2)  # next track id
    )
    moov = _box(b"moov", _box(b"mvhd", mvhd))
    size = (192 + digest[0] * 192 // 256) * 1024
    mdat = _box(b"mdat", random.Random(digest).randbytes(size))
    return ftyp + moov + mdat


@functools.lru_cache(maxsize=64)
def run_file(run_id: str, name: str, screenshots: int, duration_s: float) -> RunFile | None:
    """The file `name` of a finished run, or None when the run has no such file."""
    if name == VIDEO:
        data = make_mp4(run_id, duration_s)
        content_type = "video/mp4"
    elif name.startswith("screenshots/") and name in file_names(screenshots):
        data = make_png(run_id, int(name[len("screenshots/") : -len(".png")]))
        content_type = "image/png"
    else:
        return None
    etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
    return RunFile(name, content_type, data, etag)


class RangeNotSatisfiable(ValueError):
    """The Range header asks for bytes the file does not have (answered 416)."""


def parse_range(value: str, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive for a single `bytes=` range, or None to send the whole file.

    Forms: `bytes=a-b`, `bytes=a-`, `bytes=-n`. A malformed header or several ranges are ignored
    (the whole file is sent, as RFC 9110 allows); a range starting past the end raises
    RangeNotSatisfiable.
    """
    unit, sep, spec = value.partition("=")
    if not sep or unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_s, dash, last_s = spec.strip().partition("-")
    if not dash:
        return None
    first_s, last_s = first_s.strip(), last_s.strip()
    if (first_s and not digits(first_s)) or (last_s and not digits(last_s)):
        return None
    if not first_s:
        if not last_s:
            return None
        suffix = int(last_s)
        if suffix == 0 or size == 0:
            raise RangeNotSatisfiable(value)
        return max(0, size - suffix), size - 1
    first = int(first_s)
    if last_s:
        last = int(last_s)
        if last < first:
            return None
    else:
        last = size - 1
    if first >= size:
        raise RangeNotSatisfiable(value)
    return first, min(last, size - 1)
