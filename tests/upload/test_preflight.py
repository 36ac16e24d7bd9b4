"""What is refused before any request (the file, the arguments, max bytes) and an .app folder
zipped on the fly."""

from __future__ import annotations

import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from upload_support import (
    PART,
    make_apk,
    ops,
    sha256,
)

from asyncclient import AsyncSession
from asyncclient.errors import (
    ValidationError,
)
from asyncclient.testing import FakeService, ServiceSettings
from asyncclient.testing.builders import build_apk, build_app_dir
from asyncclient.upload import (
    inspect_build_file,
)

# Over plain HTTP in every dialect, then over HTTPS and HTTPS through a real proxy.
pytestmark = pytest.mark.networks


# --- pre-flight: zero requests for local problems -------------------------------------------------


def _not_a_zip(tmp: Path) -> Path:
    path = tmp / "fake.apk"
    path.write_bytes(b"not a zip at all")
    return path


def _zip_without_app(tmp: Path) -> Path:
    path = tmp / "Shop.app.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("README.txt", "hello")
    return path


def _empty(tmp: Path) -> Path:
    path = tmp / "empty.apk"
    path.write_bytes(b"")
    return path


def _folder(tmp: Path) -> Path:
    path = tmp / "build-output"
    path.mkdir()
    return path


def _app_folder_without_plist(tmp: Path) -> Path:
    path = tmp / "Broken.app"
    path.mkdir()
    (path / "Broken").write_bytes(b"\0" * 64)
    return path


def _renamed(suffix: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        return build_apk(tmp / f"shop{suffix}")

    return make


@pytest.mark.parametrize(
    ("make", "fix"),
    [
        (lambda tmp: tmp / "missing.apk", "no such file: check the path"),
        (_empty, "empty (0 bytes): rebuild the app"),
        (_folder, "is a folder, not an app"),
        (_renamed(".txt"), "neither an .apk nor an .app.zip"),
        (_renamed(".ipa"), "build the app for the Simulator"),
        (_renamed(".aab"), "bundletool"),
        (_not_a_zip, "not a zip file"),
        (_zip_without_app, "has no Name.app/Info.plist"),
        (_app_folder_without_plist, "has no Name.app/Info.plist"),
    ],
    ids=[
        "missing",
        "empty",
        "folder",
        "txt",
        "ipa",
        "aab",
        "not-a-zip",
        "zip-without-app",
        "app-folder-without-plist",
    ],
)
async def test_local_problems_are_refused_before_any_request(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    make: Callable[[Path], Path],
    fix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A temp folder of this test's own: other tests (or processes) zip .app folders meanwhile.
    temps = tmp_path / "tmp"
    temps.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temps))
    with pytest.raises(ValidationError, match=re.escape(fix)):
        await client.upload_build(svc.project_id, make(tmp_path), journal_dir=journal)
    assert svc.requests == []
    assert list(temps.iterdir()) == []  # nothing zipped on the way is left behind


async def test_a_file_over_max_bytes_costs_only_the_listing(
    tmp_path: Path, journal: Path, waits: list[float]
) -> None:
    apk = make_apk(tmp_path / "big.apk", parts=4)
    settings = ServiceSettings(part_bytes=PART, max_bytes=PART * 2)
    async with (
        FakeService(settings=settings) as svc,
        AsyncSession(svc.run_key, svc.url) as session,
    ):
        with pytest.raises(ValidationError, match=r"over the service's limit of 131072 bytes"):
            await session.upload_build(svc.project_id, apk, journal_dir=journal)
        assert ops(svc) == ["list_builds"]


@pytest.mark.parametrize(
    ("project_id", "options", "fix"),
    [
        ("nope", {}, "project"),
        ("p_demo", {"concurrency": 0}, "concurrency must be a whole number of at least 1"),
        ("p_demo", {"label": 42}, "label must be a string"),
    ],
)
async def test_bad_arguments_are_refused_before_any_request(
    svc: FakeService,
    client: AsyncSession,
    tmp_path: Path,
    journal: Path,
    project_id: str,
    options: dict[str, Any],
    fix: str,
) -> None:
    apk = make_apk(tmp_path / "shop.apk", parts=1)
    with pytest.raises(ValidationError, match=fix):
        await client.upload_build(project_id, apk, journal_dir=journal, **options)
    assert svc.requests == []


# --- an .app folder -------------------------------------------------------------------------------


async def test_an_app_folder_is_zipped_on_the_fly(
    svc: FakeService, client: AsyncSession, tmp_path: Path, journal: Path
) -> None:
    app = build_app_dir(tmp_path / "Shop.app", filler_bytes=3 * PART)
    (app / "Frameworks").mkdir()
    (app / "Frameworks" / "Current").symlink_to("..")  # a link is stored, not followed
    temps_before = set(Path(tempfile.gettempdir()).glob("asyncclient-app-*"))
    build = await client.upload_build(svc.project_id, app, journal_dir=journal)
    assert build.file_name == "Shop.app.zip"
    assert build.platform == "ios"
    assert build.app_id == "com.example.shop.ios"
    stored = svc.backend.builds[build.id].path
    with zipfile.ZipFile(stored) as archive:
        names = archive.namelist()
        assert "Shop.app/Info.plist" in names
        assert "Shop.app/Frameworks/Current" in names
        assert archive.read("Shop.app/filler.bin") == (app / "filler.bin").read_bytes()
        mode = archive.getinfo("Shop.app/Shop").external_attr >> 16
        assert mode & 0o111  # the executable stays executable
    assert set(Path(tempfile.gettempdir()).glob("asyncclient-app-*")) == temps_before
    # The zip is the same bytes every time, so skip_existing recognises the folder.
    svc.reset_requests()
    again = await client.upload_build(svc.project_id, app, skip_existing=True, journal_dir=journal)
    assert again.id == build.id
    assert "upload_part" not in ops(svc)


async def test_inspect_build_file_reads_without_requests(tmp_path: Path) -> None:
    apk = build_apk(tmp_path / "shop.apk", version_name="2.1.0", version_code=210)
    local = await inspect_build_file(apk)
    assert local.file_name == "shop.apk"
    assert local.size == apk.stat().st_size
    assert local.sha256 == sha256(apk)
    assert (local.info.app_id, local.info.version, local.info.version_code) == (
        "com.example.shop",
        "2.1.0",
        "210",
    )
    app = build_app_dir(tmp_path / "Shop.app")
    first = await inspect_build_file(app)
    second = await inspect_build_file(app)
    assert first.file_name == "Shop.app.zip"
    assert first.sha256 == second.sha256  # deterministic zip
    with pytest.raises(ValidationError):
        await inspect_build_file(tmp_path / "nothing.apk")
