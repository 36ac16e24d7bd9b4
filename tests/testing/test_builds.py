"""Builds: uploads in parts on disk, completion with sha256 and app checks, listing, deletion."""

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from emulator_support import SMALL_SEED, Http, wait_until

from asyncclient.testing import FakeService, ServiceSettings
from asyncclient.testing._bodies import part_etag
from asyncclient.testing.builders import build_apk, build_app_zip
from asyncclient.testing.pytest_plugin import FakeServiceFactory

PART = 64 * 1024


@pytest.fixture
async def up(fake_service_factory: FakeServiceFactory) -> FakeService:
    """SMALL_SEED with 64 KiB parts, so small apps upload in several parts."""
    return await fake_service_factory(
        SMALL_SEED, clock="manual", settings=ServiceSettings(part_bytes=PART, max_bytes=10 << 20)
    )


@pytest.fixture
async def client(clients: Callable[..., Http], up: FakeService) -> Http:
    return clients(up, "k-run")


@pytest.fixture
def apk(tmp_path: Path) -> bytes:
    """A real .apk of about 3.5 parts."""
    return build_apk(tmp_path / "shop.apk", filler_bytes=3 * PART, version_code=7).read_bytes()


async def start(client: Http, size: int, name: str = "shop.apk") -> str:
    reply = await client.post("/api/v1/projects/p_a/builds", json={"fileName": name, "size": size})
    assert reply.status == 201, reply.raw
    return str(reply.json["id"])


async def put(client: Http, build_id: str, number: int, data: bytes) -> str:
    reply = await client.call("PUT", f"/api/v1/builds/{build_id}/parts/{number}", data=data)
    assert reply.status == 200, reply.raw
    assert reply.json == {"partNumber": number, "etag": part_etag(data)}
    return str(reply.json["etag"])


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + PART] for i in range(0, len(data), PART)]


async def test_upload_in_parts_then_complete(client: Http, up: FakeService, apk: bytes) -> None:
    started = await client.post(
        "/api/v1/projects/p_a/builds",
        json={"fileName": "shop.apk", "size": len(apk), "label": "commit abc123"},
    )
    assert started.status == 201
    assert started.json == {"id": started.json["id"], "partBytes": PART, "parts": 4}
    build_id = started.json["id"]
    assert build_id.startswith("ab_")
    # Parts may arrive in any order and concurrently.
    pieces = chunks(apk)
    etags = await asyncio.gather(*(put(client, build_id, n, p) for n, p in enumerate(pieces, 1)))
    parts = [{"partNumber": n, "etag": e} for n, e in enumerate(etags, 1)]
    completed = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert completed.status == 200, completed.raw
    build = completed.json["build"]
    assert list(build) == [
        "id", "projectId", "status", "fileName", "size", "platform", "appId", "appName",
        "version", "versionCode", "minOs", "abis", "warnings", "sha256", "label", "createdAt",
        "readyAt",
    ]  # fmt: skip
    assert build["status"] == "ready"
    assert build["sha256"] == hashlib.sha256(apk).hexdigest()
    assert build["size"] == len(apk)
    assert (build["platform"], build["appId"], build["version"]) == (
        "android",
        "com.example.shop",
        "1.0.0",
    )
    assert (build["versionCode"], build["minOs"], build["appName"]) == ("7", "24", "Shop")
    assert build["abis"] == ["arm64-v8a", "x86_64"]
    assert build["warnings"] == []
    assert build["label"] == "commit abc123"
    assert build["projectId"] == "p_a"
    assert build["createdAt"].endswith("Z")
    assert build["readyAt"].endswith("Z")
    # The file was assembled on disk and the parts are gone.
    stored = up.backend.builds[build_id]
    assert stored.path.read_bytes() == apk
    assert sorted(p.name for p in stored.directory.iterdir()) == ["shop.apk"]
    fetched = await client.get(f"/api/v1/builds/{build_id}")
    assert fetched.json == {"build": build}


async def test_list_builds_newest_first_with_limits(client: Http, apk: bytes) -> None:
    first = await client.upload(apk, "one.apk", project="p_a")
    second = await client.upload(apk, "two.apk", project="p_a")
    listed = await client.get("/api/v1/projects/p_a/builds")
    assert listed.status == 200
    assert listed.json["maxBytes"] == 10 << 20
    assert listed.json["partBytes"] == PART
    ids = [b["id"] for b in listed.json["builds"]]
    assert ids == [second.json["build"]["id"], first.json["build"]["id"], "ab_ios_2", "ab_ios_1"]
    element = listed.json["builds"][0]
    assert "sha256" not in element
    assert "projectId" not in element
    assert element["fileName"] == "two.apk"


async def test_part_count_follows_the_size(client: Http) -> None:
    for size, parts in [(1, 1), (PART, 1), (PART + 1, 2), (3 * PART, 3), (3 * PART + 5, 4)]:
        reply = await client.post(
            "/api/v1/projects/p_a/builds", json={"fileName": "a.apk", "size": size}
        )
        assert reply.json["parts"] == parts


async def test_parts_must_have_the_exact_length(client: Http, up: FakeService) -> None:
    size = 2 * PART + 100
    build_id = await start(client, size)
    path = f"/api/v1/builds/{build_id}/parts"
    for number, length, expected in [(1, PART - 1, PART), (1, PART + 1, PART), (3, 99, 100)]:
        reply = await client.call("PUT", f"{path}/{number}", data=b"x" * length)
        assert reply.status == 400
        assert reply.code == "invalid_part"
        assert reply.json["error"]["expectedBytes"] == expected
    for bad in ("0", "4", "x", "-1"):
        reply = await client.call("PUT", f"{path}/{bad}", data=b"x" * 100)
        assert reply.status == 400
        assert reply.code == "invalid_part"

    async def chunked(total: int) -> AsyncIterator[bytes]:
        for _ in range(total // 1000):
            yield b"y" * 1000

    # Without a Content-Length (chunked), the length is checked as the body streams.
    too_short = await client.call("PUT", f"{path}/3", data=chunked(0))  # type: ignore[arg-type]
    assert too_short.status == 400
    assert too_short.code == "invalid_part"
    too_long = await client.call("PUT", f"{path}/3", data=chunked(5000))  # type: ignore[arg-type]
    assert too_long.status == 400

    async def tens() -> AsyncIterator[bytes]:
        for digit in range(10):
            yield str(digit).encode() * 10

    # A chunked body of the right length is stored whole, chunk boundaries and all.
    exact = await client.call("PUT", f"{path}/3", data=tens())  # type: ignore[arg-type]
    assert exact.status == 200, exact.raw
    build = up.backend.builds[build_id]
    assert build.path.read_bytes()[2 * PART :] == b"".join(str(d).encode() * 10 for d in range(10))
    assert await put(client, build_id, 3, b"z" * 100)
    # No temp file is left: the part went into its place in the build file.
    assert [p.name for p in build.directory.iterdir()] == ["shop.apk"]
    assert build.path.read_bytes()[2 * PART :] == b"z" * 100


async def test_a_part_sent_again_replaces_the_earlier_one(client: Http, apk: bytes) -> None:
    build_id = await start(client, len(apk))
    pieces = chunks(apk)
    wrong = await put(client, build_id, 1, bytes(len(pieces[0])))
    etags = [await put(client, build_id, n, p) for n, p in enumerate(pieces, 1)]
    stale = [{"partNumber": 1, "etag": wrong}] + [
        {"partNumber": n, "etag": e} for n, e in enumerate(etags[1:], 2)
    ]
    refused = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": stale})
    assert refused.status == 400
    assert refused.code == "invalid_parts"
    parts = [{"partNumber": n, "etag": e} for n, e in enumerate(etags, 1)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()


async def test_a_cut_off_part_leaves_the_earlier_one_intact(
    client: Http, up: FakeService, apk: bytes
) -> None:
    build_id = await start(client, len(apk))
    pieces = chunks(apk)
    etags = [await put(client, build_id, n, p) for n, p in enumerate(pieces, 1)]
    # A raw connection sends half of another part 1, then hangs up.
    _reader, writer = await asyncio.open_connection("127.0.0.1", up.port)
    head = (
        f"PUT /api/v1/builds/{build_id}/parts/1 HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer k-run\r\nContent-Length: {PART}\r\n\r\n"
    )
    writer.write(head.encode() + b"\xff" * (PART // 2))
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    await wait_until(lambda: any(r.op == "upload_part" and r.status == 0 for r in up.requests))
    # No temp file is left, and the earlier part 1 is the one that counts.
    build = up.backend.builds[build_id]
    assert [p.name for p in build.directory.iterdir()] == ["shop.apk"]
    assert build.path.read_bytes() == apk
    parts = [{"partNumber": n, "etag": e} for n, e in enumerate(etags, 1)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.status == 200
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()


async def test_complete_checks_the_part_list(client: Http, apk: bytes) -> None:
    build_id = await start(client, len(apk))
    pieces = chunks(apk)
    etags = [await put(client, build_id, n, p) for n, p in enumerate(pieces[:3], 1)]
    good = [{"partNumber": n, "etag": e} for n, e in enumerate(etags, 1)]
    path = f"/api/v1/builds/{build_id}/complete"
    not_uploaded = [*good, {"partNumber": 4, "etag": "0" * 64}]
    for parts, words in [
        (good, "lacks part(s) 4"),
        (not_uploaded, "part 4 has not been uploaded"),
        ([*good, good[0]], "part 1 is listed twice"),
        ([{**good[0], "etag": etags[1]}, *good[1:]], "etag of part 1"),
        ([*good, {"partNumber": 9, "etag": "e"}], "part 9 is outside 1..4"),
    ]:
        reply = await client.post(path, json={"parts": parts})
        assert reply.status == 400, reply.raw
        assert reply.code == "invalid_parts"
        assert words in reply.json["error"]["message"]
    last = await put(client, build_id, 4, pieces[3])
    done = await client.post(path, json={"parts": [*good, {"partNumber": 4, "etag": last}]})
    assert done.status == 200


async def test_completing_again_returns_the_same_build(client: Http, apk: bytes) -> None:
    first = await client.upload(apk, "shop.apk", project="p_a")
    build = first.json["build"]
    parts = [{"partNumber": 1, "etag": "whatever"}]
    again = await client.post(f"/api/v1/builds/{build['id']}/complete", json={"parts": parts})
    assert again.status == 200
    assert again.json == first.json
    late = await client.call("PUT", f"/api/v1/builds/{build['id']}/parts/1", data=b"x" * PART)
    assert late.status == 409
    assert late.code == "invalid_state"


async def test_concurrent_completes_give_one_build(client: Http, apk: bytes) -> None:
    build_id = await start(client, len(apk))
    etags = [await put(client, build_id, n, p) for n, p in enumerate(chunks(apk), 1)]
    parts = [{"partNumber": n, "etag": e} for n, e in enumerate(etags, 1)]
    path = f"/api/v1/builds/{build_id}/complete"
    replies = await asyncio.gather(*(client.post(path, json={"parts": parts}) for _ in range(4)))
    assert {r.status for r in replies} == {200}
    assert len({r.raw for r in replies}) == 1


@pytest.mark.parametrize(
    ("name", "make", "kind", "found"),
    [
        (
            "v7.apk",
            lambda p: build_apk(p, abis=("armeabi-v7a",)),
            "abi",
            ["armeabi-v7a"],
        ),
        (
            "device.app.zip",
            lambda p: build_app_zip(p, platforms=("iPhoneOS",), archs=("arm64",)),
            "platform",
            ["iPhoneOS"],
        ),
        ("garbage.apk", lambda p: p.write_bytes(b"not a zip at all" * 100), "not_an_app", None),
        ("garbage.app.zip", lambda p: p.write_bytes(b"\x00" * 5000), "not_an_app", None),
    ],
)
async def test_builds_the_devices_cannot_run_are_422(
    client: Http,
    tmp_path: Path,
    name: str,
    make: Callable[[Path], object],
    kind: str,
    found: list[str] | None,
) -> None:
    path = tmp_path / name
    make(path)
    data = path.read_bytes()
    reply = await client.upload(data, name, project="p_a")
    assert reply.status == 422, reply.raw
    error = reply.json["error"]
    assert error["code"] == "build_rejected"
    assert [p["kind"] for p in error["problems"]] == [kind]
    problem = error["problems"][0]
    assert set(problem) == {"kind", "found", "supported", "message"}
    assert problem["message"]
    if found is not None:
        assert problem["found"] == found
        assert problem["supported"]
    assert error["build"]["status"] == "rejected"
    assert error["build"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert error["build"]["readyAt"] is None
    build_id = error["build"]["id"]
    # Completing again answers the same 422; the rejected build stays visible.
    again = await client.post(
        f"/api/v1/builds/{build_id}/complete", json={"parts": [{"partNumber": 1, "etag": "x"}]}
    )
    assert (again.status, again.json) == (422, reply.json)
    assert (await client.get(f"/api/v1/builds/{build_id}")).json["build"]["status"] == "rejected"


async def test_warnings_go_into_the_build(client: Http, tmp_path: Path) -> None:
    data = build_apk(tmp_path / "arm.apk", abis=("arm64-v8a",)).read_bytes()
    reply = await client.upload(data, "arm.apk", project="p_a")
    assert reply.status == 200
    assert reply.json["build"]["status"] == "ready"
    assert any("x86_64" in w for w in reply.json["build"]["warnings"])


async def test_delete_build(
    clients: Callable[..., Http], up: FakeService, client: Http, apk: bytes
) -> None:
    editor = clients(up, "k-edit")
    build = (await client.upload(apk, "shop.apk", project="p_a")).json["build"]
    run = await client.post("/api/v1/tests/t_app/run")
    assert run.status == 201
    directory = up.backend.builds[build["id"]].directory
    deleted = await editor.call("DELETE", f"/api/v1/builds/{build['id']}")
    assert deleted.json == {"ok": True}
    assert not directory.exists()
    assert (await client.get(f"/api/v1/builds/{build['id']}")).status == 404
    assert (await editor.call("DELETE", f"/api/v1/builds/{build['id']}")).status == 404
    # The run that used it keeps its build.
    up.advance(1000)
    kept = (await client.get(f"/api/v1/runs/{run.json['runId']}")).json["run"]
    assert kept["build"]["id"] == build["id"]
    assert kept["status"] == "passed"


async def test_a_pinned_build_cannot_be_deleted(
    clients: Callable[..., Http], up: FakeService
) -> None:
    editor = clients(up, "k-edit")
    refused = await editor.call("DELETE", "/api/v1/builds/ab_ios_1")
    assert refused.status == 409
    assert refused.code == "build_pinned"
    assert refused.json["error"]["tests"] == ["t_pinned"]
    assert (await editor.get("/api/v1/builds/ab_ios_1")).status == 200
    assert (await editor.call("DELETE", "/api/v1/builds/ab_ios_2")).status == 200


async def test_an_upload_to_a_deleted_build_is_404(
    clients: Callable[..., Http], up: FakeService, client: Http
) -> None:
    build_id = await start(client, 10)
    assert (await clients(up, "k-edit").call("DELETE", f"/api/v1/builds/{build_id}")).status == 200
    reply = await client.call("PUT", f"/api/v1/builds/{build_id}/parts/1", data=b"x" * 10)
    assert reply.status == 404


# --- the whole-file hash is computed as the parts arrive ------------------------------------------


async def hashed_parts(up: FakeService, build_id: str) -> int:
    """How many leading parts the background hasher has covered, once it is idle."""
    build = up.backend.builds[build_id]
    while build.hasher is not None and not build.hasher.done():
        await build.hasher
    return len(build.prefix) - 1


async def test_parts_out_of_order_are_hashed_once_the_prefix_is_there(
    client: Http, up: FakeService, apk: bytes
) -> None:
    build_id = await start(client, len(apk))
    pieces = chunks(apk)
    etags = {n: await put(client, build_id, n, pieces[n - 1]) for n in (4, 2, 3)}
    assert await hashed_parts(up, build_id) == 0  # part 1 is missing: nothing can be hashed
    etags[1] = await put(client, build_id, 1, pieces[0])
    assert await hashed_parts(up, build_id) == 4
    parts = [{"partNumber": n, "etag": etags[n]} for n in range(1, 5)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()
    assert up.backend.builds[build_id].path.read_bytes() == apk


async def test_a_part_sent_again_after_the_hash_passed_it_restarts_the_hash(
    client: Http, up: FakeService, apk: bytes
) -> None:
    build_id = await start(client, len(apk))
    pieces = chunks(apk)
    garbled = [bytes(len(p)) for p in pieces]
    for n, piece in enumerate(garbled, 1):
        await put(client, build_id, n, piece)
    assert await hashed_parts(up, build_id) == 4
    # Parts 4 and 2 are sent again with the right bytes, then 3: each time the hash restarts
    # from the part sent (its earlier digests would be of the zeros).
    etags = {1: await put(client, build_id, 1, garbled[0])}
    for n in (4, 2):
        etags[n] = await put(client, build_id, n, pieces[n - 1])
    assert await hashed_parts(up, build_id) == 4
    etags[3] = await put(client, build_id, 3, pieces[2])
    assert await hashed_parts(up, build_id) == 4
    expected = garbled[0] + b"".join(pieces[1:])
    assert up.backend.builds[build_id].path.read_bytes() == expected
    parts = [{"partNumber": n, "etag": etags[n]} for n in range(1, 5)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    # Part 1 is zeros: not an app, but the checksum is that of the bytes stored.
    assert done.status == 422
    assert up.backend.builds[build_id].sha256 == hashlib.sha256(expected).hexdigest()
    # With the right part 1 the build is good... in a new upload (this one is final).
    build_id = await start(client, len(apk))
    for n in (3, 1, 4, 2, 1):
        etags[n] = await put(client, build_id, n, pieces[n - 1])
    parts = [{"partNumber": n, "etag": etags[n]} for n in range(1, 5)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()


async def test_complete_while_the_hasher_has_not_finished(
    client: Http, up: FakeService, apk: bytes
) -> None:
    build_id = await start(client, len(apk))
    pieces = chunks(apk)
    etags = [await put(client, build_id, n, p) for n, p in enumerate(pieces, 1)]
    build = up.backend.builds[build_id]
    if build.hasher is not None:  # complete hashes what the background hasher has not
        build.hasher.cancel()
    del build.prefix[2:]
    parts = [{"partNumber": n, "etag": e} for n, e in enumerate(etags, 1)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()


# --- a part sent for the first time is received straight into its place -----------------------


async def send_half(up: FakeService, build_id: str, number: int) -> asyncio.StreamWriter:
    """A raw connection that sends the head and half the body of a part, and stays open."""
    reader, writer = await asyncio.open_connection("127.0.0.1", up.port)
    head = (
        f"PUT /api/v1/builds/{build_id}/parts/{number} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer k-run\r\nContent-Length: {PART}\r\n\r\n"
    )
    writer.write(head.encode() + b"\xff" * (PART // 2))
    await writer.drain()
    writer.reader = reader  # type: ignore[attr-defined]
    return writer


async def test_a_first_part_cut_off_is_not_recorded(
    client: Http, up: FakeService, apk: bytes
) -> None:
    build_id = await start(client, len(apk))
    build = up.backend.builds[build_id]
    pieces = chunks(apk)
    etags = {1: await put(client, build_id, 1, pieces[0])}
    writer = await send_half(up, build_id, 2)
    await wait_until(lambda: 2 in build.writers)  # written in place: no temp file
    assert [p.name for p in build.directory.iterdir()] == ["shop.apk"]
    writer.close()
    await writer.wait_closed()
    await wait_until(lambda: any(r.op == "upload_part" and r.status == 0 for r in up.requests))
    assert build.writers == {}
    assert set(build.uploaded) == {1}
    assert await hashed_parts(up, build_id) == 1  # the half-written region is not hashed
    listed = [{"partNumber": 1, "etag": etags[1]}, {"partNumber": 2, "etag": "0" * 64}]
    refused = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": listed})
    assert refused.status == 400
    assert "part 2 has not been uploaded" in refused.json["error"]["message"]
    # Parts 4 and 3 arrive before 2: the hash waits for 2, then covers them all.
    for n in (4, 3):
        etags[n] = await put(client, build_id, n, pieces[n - 1])
    assert await hashed_parts(up, build_id) == 1
    etags[2] = await put(client, build_id, 2, pieces[1])
    assert await hashed_parts(up, build_id) == 4
    assert [p.name for p in build.directory.iterdir()] == ["shop.apk"]
    parts = [{"partNumber": n, "etag": etags[n]} for n in range(1, 5)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()
    assert build.path.read_bytes() == apk


async def test_a_first_part_then_sent_again_is_replaced(
    client: Http, up: FakeService, apk: bytes
) -> None:
    build_id = await start(client, len(apk))
    build = up.backend.builds[build_id]
    pieces = chunks(apk)
    garbled = [bytes(len(p)) for p in pieces]
    # Every part first arrives wrong (in place), is hashed, then is sent again (via a copy).
    for n in (3, 1, 4, 2):
        await put(client, build_id, n, garbled[n - 1])
    assert await hashed_parts(up, build_id) == 4
    assert build.path.read_bytes() == b"".join(garbled)
    etags = {n: await put(client, build_id, n, pieces[n - 1]) for n in (2, 4, 1, 3)}
    assert await hashed_parts(up, build_id) == 4
    assert build.path.read_bytes() == apk
    assert [p.name for p in build.directory.iterdir()] == ["shop.apk"]
    parts = [{"partNumber": n, "etag": etags[n]} for n in range(1, 5)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()


async def test_a_resend_while_the_first_copy_is_written_in_place_wins(
    client: Http, up: FakeService, apk: bytes
) -> None:
    build_id = await start(client, len(apk))
    build = up.backend.builds[build_id]
    pieces = chunks(apk)
    writer = await send_half(up, build_id, 2)
    await wait_until(lambda: 2 in build.writers)
    # The same part sent meanwhile goes through a file and replaces the one being written.
    etags = {n: await put(client, build_id, n, pieces[n - 1]) for n in (2, 1, 3, 4)}
    assert await hashed_parts(up, build_id) == 4
    # The first copy then arrives whole: it is answered, but it stopped writing and counts not.
    writer.write(b"\xff" * (PART - PART // 2))
    await writer.drain()
    status_line = await writer.reader.readline()  # type: ignore[attr-defined]
    assert status_line.startswith(b"HTTP/1.1 200")
    writer.close()
    await writer.wait_closed()
    assert build.writers == {}
    assert build.uploaded[2][0] == etags[2]
    assert await hashed_parts(up, build_id) == 4
    assert build.path.read_bytes() == apk
    parts = [{"partNumber": n, "etag": etags[n]} for n in range(1, 5)]
    done = await client.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})
    assert done.json["build"]["sha256"] == hashlib.sha256(apk).hexdigest()
