"""Run files (real PNGs, an ISO-BMFF video), Range answers, and the result page."""

import struct
import zlib

import pytest
from emulator_support import Http

from asyncclient.testing import FakeService
from asyncclient.testing._files import RangeNotSatisfiable, make_mp4, make_png, parse_range


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, raw scanlines) of an 8-bit RGB PNG, checking every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF
        if tag == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif tag == b"IDAT":
            idat += body
        pos += 12 + length
    assert tag == b"IEND"
    assert header is not None
    width, height, depth, colour, *_ = header
    assert (depth, colour) == (8, 2)
    raw = zlib.decompress(idat)
    assert len(raw) == height * (1 + 3 * width)
    return width, height, raw


def boxes(data: bytes) -> list[tuple[bytes, int]]:
    """Top-level ISO-BMFF boxes as (type, size); they must tile the file exactly."""
    found, pos = [], 0
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        assert size >= 8
        found.append((kind, size))
        pos += size
    assert pos == len(data)
    return found


def test_pngs_are_real_and_distinct() -> None:
    images = {make_png(run, i) for run in ("j_a", "j_b") for i in (1, 2, 3)}
    assert len(images) == 6
    for image in images:
        width, height, _raw = png_pixels(image)
        assert (width, height) == (180, 320)
    assert make_png("j_a", 1) == make_png("j_a", 1)


def test_the_video_is_iso_bmff() -> None:
    video = make_mp4("j_a", 42.5)
    found = boxes(video)
    assert [kind for kind, _ in found] == [b"ftyp", b"moov", b"mdat"]
    assert video[8:12] == b"isom"
    moov = video[found[0][1] : found[0][1] + found[1][1]]
    assert moov[12:16] == b"mvhd"
    timescale, duration = struct.unpack(">II", moov[28:36])
    assert duration / timescale == 42.5
    assert 192 * 1024 < len(video) < 400 * 1024
    assert make_mp4("j_a", 42.5) == video
    assert make_mp4("j_b", 42.5) != video


@pytest.mark.parametrize(
    ("header", "span"),
    [
        ("bytes=0-9", (0, 9)),
        ("bytes=5-", (5, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=-1000", (0, 99)),
        ("bytes=90-1000", (90, 99)),
        ("bytes=99-99", (99, 99)),
        ("BYTES = 1-2", (1, 2)),
        ("bytes=0-1,5-6", None),
        ("bytes=9-1", None),
        ("bytes=a-b", None),
        ("items=0-1", None),
        ("bytes=-", None),
        ("bytes", None),
    ],
)
def test_parse_range(header: str, span: tuple[int, int] | None) -> None:
    assert parse_range(header, 100) == span


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=100-200", "bytes=-0"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_range(header, 100)


async def finished_run(client: Http, svc: FakeService) -> str:
    run_id = str((await client.post("/api/v1/tests/t_web/run")).json["runId"])
    svc.advance(110)
    return run_id


async def test_files_exist_once_the_run_is_final(a_run: Http, small: FakeService) -> None:
    run_id = (await a_run.post("/api/v1/tests/t_web/run")).json["runId"]
    early = await a_run.get(f"/api/v1/runs/{run_id}/files/video.mp4")
    assert early.status == 404
    assert early.code == "not_found"
    small.advance(110)
    run = (await a_run.get(f"/api/v1/runs/{run_id}")).json["run"]
    prefix = f"{small.url}/api/v1/runs/{run_id}/files/"
    names = [link.removeprefix(prefix) for link in [run["video"], *run["screenshots"]]]
    assert names == ["video.mp4", "screenshots/01.png", "screenshots/02.png"]
    video = await a_run.get(f"/api/v1/runs/{run_id}/files/video.mp4")
    assert video.status == 200
    assert video.headers["Content-Type"] == "video/mp4"
    assert [k for k, _ in boxes(video.raw)] == [b"ftyp", b"moov", b"mdat"]
    shots = [await a_run.get(f"/api/v1/runs/{run_id}/files/{n}") for n in names[1:]]
    assert {s.headers["Content-Type"] for s in shots} == {"image/png"}
    assert shots[0].raw != shots[1].raw
    for shot in shots:
        png_pixels(shot.raw)
    for missing in ("screenshots/03.png", "screenshots/00.png", "video.mov", "../secret"):
        assert (await a_run.get(f"/api/v1/runs/{run_id}/files/{missing}")).status == 404
    # Files of a stopped run: none.
    stopped = (await a_run.post("/api/v1/tests/t_web/run")).json["runId"]
    await a_run.post(f"/api/v1/runs/{stopped}/stop")
    assert (await a_run.get(f"/api/v1/runs/{stopped}/files/video.mp4")).status == 404


async def test_range_answers(a_run: Http, small: FakeService) -> None:
    run_id = await finished_run(a_run, small)
    path = f"/api/v1/runs/{run_id}/files/video.mp4"
    whole = await a_run.get(path)
    size = len(whole.raw)
    etag = whole.headers["ETag"]
    assert whole.headers["Accept-Ranges"] == "bytes"
    assert etag.startswith('"')
    for header, first, last in [
        ("bytes=0-99", 0, 99),
        ("bytes=1000-", 1000, size - 1),
        ("bytes=-500", size - 500, size - 1),
        (f"bytes=10-{size + 50}", 10, size - 1),
    ]:
        part = await a_run.get(path, headers={"Range": header})
        assert part.status == 206, header
        assert part.raw == whole.raw[first : last + 1]
        assert part.headers["Content-Range"] == f"bytes {first}-{last}/{size}"
        assert part.headers["Content-Length"] == str(last - first + 1)
        assert (part.headers["Accept-Ranges"], part.headers["ETag"]) == ("bytes", etag)
    refused = await a_run.get(path, headers={"Range": f"bytes={size}-"})
    assert refused.status == 416
    assert refused.code == "range_not_satisfiable"
    assert refused.headers["Content-Range"] == f"bytes */{size}"
    assert (refused.headers["Accept-Ranges"], refused.headers["ETag"]) == ("bytes", etag)
    # Several ranges or a malformed header: the whole file.
    for header in ("bytes=0-1,4-5", "bytes=x-y"):
        assert (await a_run.get(path, headers={"Range": header})).raw == whole.raw


async def test_if_range(a_run: Http, small: FakeService) -> None:
    run_id = await finished_run(a_run, small)
    path = f"/api/v1/runs/{run_id}/files/screenshots/01.png"
    whole = await a_run.get(path)
    etag, modified = whole.headers["ETag"], whole.headers["Last-Modified"]
    for if_range, status in [
        (etag, 206),
        (modified, 206),
        ('"other"', 200),
        (f"W/{etag}", 200),
        ("Mon, 01 Jan 2001 00:00:00 GMT", 200),
    ]:
        reply = await a_run.get(path, headers={"Range": "bytes=0-9", "If-Range": if_range})
        assert reply.status == status, if_range
        assert reply.raw == (whole.raw[:10] if status == 206 else whole.raw)


async def test_head_of_a_file(a_run: Http, small: FakeService) -> None:
    run_id = await finished_run(a_run, small)
    reply = await a_run.call("HEAD", f"/api/v1/runs/{run_id}/files/video.mp4")
    assert reply.status == 200
    assert reply.raw == b""
    assert int(reply.headers["Content-Length"]) > 100_000


async def test_the_result_page(a_run: Http, small: FakeService) -> None:
    run_id = (await a_run.post("/api/v1/tests/t_fail/run")).json["runId"]
    browser = a_run.as_key(None)  # a browser sends no API key
    page = await browser.get(f"/runs/{run_id}")
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert b"queued" in page.raw
    small.advance(110)
    page = await browser.get(f"/runs/{run_id}")
    assert b"The voucher did not apply." in page.raw
    assert b"The total did not change." in page.raw
    assert (await browser.get("/runs/j_nope")).status == 404
