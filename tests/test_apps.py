"""Tests for asyncclient.apps (reading apps, device compatibility) and the app builders.

What the builders write is checked with independent parsers (pyaxmlparser, macholib) too.
"""

import hashlib
import logging
import plistlib
import random
import stat
import struct
import subprocess
import sys
import tracemalloc
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from macholib.MachO import MachO
from pyaxmlparser import APK

from asyncclient import apps
from asyncclient.apps import (
    AppError,
    AppInfo,
    Compatibility,
    DeviceProfile,
    Problem,
    _axml,
    check_compatibility,
    inspect_app,
)
from asyncclient.apps._axml import UnusualManifest, quick_manifest
from asyncclient.testing import builders
from asyncclient.testing.builders import build_apk, build_app_dir, build_app_zip

MiB = 1 << 20
CPU_ARM64 = 0x0100000C
CPU_X86_64 = 0x01000007
CPU_ARM = 12
CPU_X86 = 7


def _zip(path: Path, members: Mapping[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _manifest(**overrides: Any) -> bytes:
    fields: dict[str, Any] = {
        "package": "com.example.shop",
        "version_name": "1.0.0",
        "version_code": 1,
        "min_sdk": 24,
        "target_sdk": 34,
        "label": "Shop",
    }
    return builders._axml_manifest(**(fields | overrides))


def _plist(**overrides: Any) -> dict[str, Any]:
    return {
        "CFBundleIdentifier": "com.example.x",
        "CFBundleName": "X",
        "CFBundleExecutable": "X",
        "CFBundleShortVersionString": "2.0",
        "CFBundleVersion": "7",
        "MinimumOSVersion": "16.4",
        "CFBundleSupportedPlatforms": ["iPhoneSimulator"],
    } | overrides


def _app_zip(
    path: Path,
    executable: bytes,
    *,
    plist: Mapping[str, Any] | None = None,
    folder: str = "X.app/",
    extra: Mapping[str, bytes] | None = None,
) -> Path:
    members = {
        folder + "Info.plist": plistlib.dumps(dict(plist if plist is not None else _plist())),
        folder + "X": executable,
    }
    return _zip(path, members | dict(extra or {}))


MANIFEST = _manifest()


# --- Android: round trip and independent checks ---------------------------------------------------

APK_CASES = [
    pytest.param({}, id="defaults"),
    pytest.param(
        {
            "package": "org.demo.shop_app",
            "version_name": "2.3.4-beta+5",
            "version_code": 2_100_000_000,
            "min_sdk": 21,
            "target_sdk": 35,
            "label": "Démo Café ☕",
            "abis": ("x86",),
        },
        id="custom",
    ),
    pytest.param({"abis": ()}, id="no-native-code"),
    pytest.param({"abis": ("x86_64", "armeabi-v7a", "arm64-v8a", "x86")}, id="four-abis"),
]


@pytest.mark.parametrize("kwargs", APK_CASES)
def test_apk_round_trips_every_field(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    path = build_apk(tmp_path / "app.apk", **kwargs)
    expected: dict[str, Any] = {
        "package": "com.example.shop",
        "version_name": "1.0.0",
        "version_code": 1,
        "min_sdk": 24,
        "label": "Shop",
        "abis": ("arm64-v8a", "x86_64"),
    } | kwargs

    assert inspect_app(path) == AppInfo(
        platform="android",
        app_id=expected["package"],
        app_name=expected["label"],
        version=expected["version_name"],
        version_code=str(expected["version_code"]),
        min_os=str(expected["min_sdk"]),
        abis=tuple(sorted(expected["abis"])),
        supported_platforms=(),
    )


@pytest.mark.parametrize("kwargs", APK_CASES)
def test_pyaxmlparser_reads_the_built_apk(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    path = build_apk(tmp_path / "app.apk", **kwargs)
    apk = APK(str(path))
    assert apk.is_valid_APK()
    assert apk.package == kwargs.get("package", "com.example.shop")
    assert apk.version_name == kwargs.get("version_name", "1.0.0")
    assert apk.version_code == str(kwargs.get("version_code", 1))
    assert apk.get_min_sdk_version() == str(kwargs.get("min_sdk", 24))
    assert apk.get_target_sdk_version() == str(kwargs.get("target_sdk", 34))
    assert apk.application == kwargs.get("label", "Shop")


def test_apk_holds_a_real_dex_header_and_elf_libraries(tmp_path: Path) -> None:
    path = build_apk(tmp_path / "app.apk", abis=("arm64-v8a", "armeabi-v7a", "x86", "x86_64"))
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == [
            "AndroidManifest.xml",
            "classes.dex",
            "lib/arm64-v8a/libapp.so",
            "lib/armeabi-v7a/libapp.so",
            "lib/x86/libapp.so",
            "lib/x86_64/libapp.so",
        ]
        dex = archive.read("classes.dex")
        elves = {abi: archive.read(f"lib/{abi}/libapp.so") for abi in ("arm64-v8a", "x86")}
        elves |= {abi: archive.read(f"lib/{abi}/libapp.so") for abi in ("armeabi-v7a", "x86_64")}
    assert dex[:8] == b"dex\n035\0"
    assert struct.unpack_from("<I", dex, 8)[0] == zlib.adler32(dex[12:])
    assert dex[12:32] == hashlib.sha1(dex[32:]).digest()
    assert struct.unpack_from("<II", dex, 32) == (len(dex), 0x70)
    # e_ident class (1 = 32-bit, 2 = 64-bit), e_type ET_DYN and e_machine of each ABI.
    expected = {"arm64-v8a": (2, 183), "armeabi-v7a": (1, 40), "x86": (1, 3), "x86_64": (2, 62)}
    for abi, (elf_class, machine) in expected.items():
        elf = elves[abi]
        assert elf[:4] == b"\x7fELF"
        assert (elf[4], *struct.unpack_from("<HH", elf, 16)) == (elf_class, 3, machine)


def test_utf8_string_pool_resource_label_and_codename_min_sdk(tmp_path: Path) -> None:
    # aapt2 writes UTF-8 string pools; a label may be a resource reference (@string/app_name) and
    # minSdkVersion a preview codename.
    manifest = _manifest(min_sdk="Baklava", label=0x7F0B0001, utf8=True)
    path = _zip(tmp_path / "app.apk", {"AndroidManifest.xml": manifest, "lib/x86/libapp.so": b""})
    info = inspect_app(path)
    assert (info.app_id, info.version, info.version_code) == ("com.example.shop", "1.0.0", "1")
    assert (info.app_name, info.min_os, info.abis) == (None, "Baklava", ("x86",))


def _read_in_full(manifest: bytes, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What apps.py reads from `manifest` through apkInspector alone."""
    with monkeypatch.context() as patch:
        patch.setattr(apps.android, "quick_manifest", _always_unusual)
        return apps.android._decode_manifest(manifest, "app.apk")


def _always_unusual(data: bytes) -> Any:
    raise UnusualManifest


QUICK_CASES = [
    pytest.param({}, id="defaults"),
    pytest.param({"label": None, "min_sdk": "Baklava"}, id="no-label-codename"),
    pytest.param({"label": 0x7F0B0001, "utf8": True}, id="utf8-reference-label"),
    pytest.param({"label": "Démo Café ☕", "version_name": "2.3.4-beta+5"}, id="utf16-non-ascii"),
    pytest.param({"version_code": 2_100_000_000, "package": "org.demo.x" * 20}, id="long"),
    pytest.param({"activities": 300}, id="300-activities"),
    pytest.param({"activities": 40, "uses_sdk_last": True}, id="uses-sdk-after-application"),
    pytest.param({"activities": 40, "utf8": True}, id="utf8-activities"),
]


@pytest.mark.parametrize("overrides", QUICK_CASES)
def test_the_quick_reading_reads_what_apk_inspector_reads(
    overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _manifest(**overrides)
    assert quick_manifest(manifest) == _read_in_full(manifest, monkeypatch)


def test_the_quick_reading_skips_a_chunk_of_an_unknown_type() -> None:
    assert quick_manifest(_with_unknown_chunk(MANIFEST)) == quick_manifest(MANIFEST)


def test_the_quick_reading_decodes_no_more_for_a_larger_manifest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cost must not grow with the app: the strings decoded (and the elements read) are
    # those of <manifest>, <uses-sdk> and <application>, whatever follows them.
    decoded: list[int] = []
    decode = _axml._Strings._decode

    def counting(self: Any, at: int) -> str:
        decoded.append(at)
        return decode(self, at)

    monkeypatch.setattr(_axml._Strings, "_decode", counting)
    counts = []
    for activities in (0, 10, 400):
        decoded.clear()
        assert quick_manifest(_manifest(activities=activities))[0]["package"] == "com.example.shop"
        counts.append(len(decoded))
    assert counts[0] == counts[1] == counts[2]
    assert counts[0] <= 12


def test_a_utf8_pool_with_long_and_non_ascii_strings_is_read_as_android_reads_it(
    tmp_path: Path,
) -> None:
    # In a UTF-8 pool each string gives its length in UTF-16 units and then in bytes (two bytes
    # each from 128 on); apkInspector takes the first as the byte count, which cuts such strings.
    label, package = "Démo Café ☕", "org.example." + "a" * 150
    manifest = _manifest(label=label, package=package, utf8=True)
    path = _zip(tmp_path / "app.apk", {"AndroidManifest.xml": manifest})
    info = inspect_app(path)
    assert (info.app_name, info.app_id) == (label, package)
    independent = APK(str(path))  # pyaxmlparser reads the same
    assert (independent.package, independent.get_app_name()) == (package, label)


UNUSUAL = [
    pytest.param(
        lambda m: m[:8] + m[8:].replace(b"\x14\x00\x14\x00", b"\x18\x00\x14\x00", 1),
        id="attributes-start-elsewhere",
    ),
    pytest.param(lambda m: m[:10] + struct.pack("<H", 0) + m[12:], id="string-pool-header-size-0"),
]


@pytest.mark.parametrize("damage", UNUSUAL)
def test_an_unusual_manifest_is_left_to_the_full_reading(damage: Any) -> None:
    with pytest.raises(UnusualManifest):
        quick_manifest(damage(MANIFEST))


def test_apk_without_label_or_uses_sdk_values(tmp_path: Path) -> None:
    path = _zip(tmp_path / "app.apk", {"AndroidManifest.xml": _manifest(label=None)})
    assert inspect_app(path).app_name is None


def test_file_name_decides_the_kind_and_names_the_file(tmp_path: Path) -> None:
    stored = build_apk(tmp_path / "upload.part")
    assert inspect_app(stored, file_name="Shop.apk").app_id == "com.example.shop"
    with pytest.raises(AppError, match=r"^upload\.part is neither an \.apk nor an \.app\.zip"):
        inspect_app(stored)


def test_builds_are_deterministic_and_filler_depends_on_the_seed(tmp_path: Path) -> None:
    size = 3 * MiB + 5  # a partial last chunk
    first = build_apk(tmp_path / "a.apk", filler_bytes=size, seed=7).read_bytes()
    again = build_apk(tmp_path / "b.apk", filler_bytes=size, seed=7).read_bytes()
    other = build_apk(tmp_path / "c.apk", filler_bytes=size, seed=8).read_bytes()
    assert first == again
    assert first != other
    assert len(first) == len(other)
    ios = [build_app_zip(tmp_path / f"{i}.app.zip", filler_bytes=MiB).read_bytes() for i in "ab"]
    assert ios[0] == ios[1]


def test_filler_is_stored_incompressible_and_inspected_without_reading_it(tmp_path: Path) -> None:
    size = 20 * MiB
    apk = build_apk(tmp_path / "big.apk", filler_bytes=size, seed=3)
    app = build_app_zip(tmp_path / "Big.app.zip", filler_bytes=size, seed=3)
    with zipfile.ZipFile(apk) as archive:
        filler = archive.getinfo("assets/filler.bin")
        with archive.open(filler) as member:
            first, second = member.read(MiB), member.read(MiB)
    assert (filler.compress_type, filler.file_size) == (zipfile.ZIP_STORED, size)
    assert first != second
    assert len(zlib.compress(first + second, 9)) > 2 * MiB  # random bytes do not shrink

    inspect_app(build_apk(tmp_path / "warm.apk"))  # import apkInspector outside the measurement
    tracemalloc.start()
    try:
        android, ios = inspect_app(apk), inspect_app(app)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB // 2  # a 20 MiB file, read in full, would peak at 20 MiB or more
    assert (android.app_id, ios.app_id) == ("com.example.shop", "com.example.shop.ios")


def test_large_filler_forces_zip64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real threshold is 1 GiB; lower it to exercise the zip64 path quickly.
    monkeypatch.setattr(builders, "_FORCE_ZIP64_FROM", MiB)
    path = build_apk(tmp_path / "app.apk", filler_bytes=2 * MiB)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("assets/filler.bin")
        assert archive.read(info) == b"".join(builders._filler_chunks(2 * MiB, 0))
    with path.open("rb") as raw:
        raw.seek(info.header_offset)
        local = raw.read(30)
        name_length, extra_length = struct.unpack_from("<HH", local, 26)
        extra = raw.read(name_length + extra_length)[name_length:]
    assert struct.unpack_from("<H", extra)[0] == 0x0001  # the zip64 extended information field
    assert inspect_app(path).app_id == "com.example.shop"


# --- iOS: round trip and independent checks -------------------------------------------------------


@pytest.mark.parametrize("binary_plist", [False, True], ids=["xml-plist", "binary-plist"])
@pytest.mark.parametrize(
    "archs", [("arm64",), ("arm64", "x86_64"), ("x86_64", "arm64e", "i386")], ids="-".join
)
def test_app_zip_round_trips_every_field(
    tmp_path: Path, binary_plist: bool, archs: tuple[str, ...]
) -> None:
    path = build_app_zip(
        tmp_path / "Shop.app.zip",
        bundle_id="org.demo.shop",
        name="Demo Shop",
        version="3.1",
        build="42",
        min_os="16.0",
        platforms=("iPhoneSimulator",),
        archs=archs,
        binary_plist=binary_plist,
    )
    with zipfile.ZipFile(path) as archive:
        plist = archive.read("Demo Shop.app/Info.plist")
    assert plist.startswith(b"bplist00" if binary_plist else b"<?xml")
    assert inspect_app(path) == AppInfo(
        platform="ios",
        app_id="org.demo.shop",
        app_name="Demo Shop",
        version="3.1",
        version_code="42",
        min_os="16.0",
        abis=archs,
        supported_platforms=("iPhoneSimulator",),
    )


def test_app_zip_layout(tmp_path: Path) -> None:
    path = build_app_zip(tmp_path / "Shop.app.zip", filler_bytes=10)
    with zipfile.ZipFile(path) as archive:
        infos = {info.filename: info for info in archive.infolist()}
    assert list(infos) == [
        "Shop.app/",
        "Shop.app/Info.plist",
        "Shop.app/PkgInfo",
        "Shop.app/Shop",
        "Shop.app/filler.bin",
    ]
    assert infos["Shop.app/"].is_dir()
    assert stat.S_IMODE(infos["Shop.app/Shop"].external_attr >> 16) == 0o755
    assert infos["Shop.app/filler.bin"].compress_type == zipfile.ZIP_STORED


@pytest.mark.parametrize("archs", [("arm64",), ("arm64", "x86_64")], ids=["thin", "fat"])
def test_macholib_reads_the_built_executable(tmp_path: Path, archs: tuple[str, ...]) -> None:
    bundle = build_app_dir(tmp_path / "Shop.app", archs=archs, filler_bytes=3)
    assert sorted(p.name for p in bundle.iterdir()) == [
        "Info.plist",
        "PkgInfo",
        "Shop",
        "filler.bin",
    ]
    assert stat.S_IMODE((bundle / "Shop").stat().st_mode) == 0o755
    assert plistlib.loads((bundle / "Info.plist").read_bytes())["CFBundleExecutable"] == "Shop"

    macho = MachO(str(bundle / "Shop"))
    expected = {"arm64": (CPU_ARM64, 0), "x86_64": (CPU_X86_64, 3)}
    assert [(h.header.cputype, h.header.cpusubtype) for h in macho.headers] == [
        expected[a] for a in archs
    ]
    assert (macho.fat is None) == (len(archs) == 1)
    for header in macho.headers:
        assert header.header.filetype == 2  # MH_EXECUTE
        [(load_command, build_version, _)] = header.commands
        assert load_command.cmd == 0x32  # LC_BUILD_VERSION
        assert (build_version.platform, build_version.minos) == (7, 15 << 16)  # iOS Simulator


@pytest.mark.parametrize(
    ("executable_kwargs", "archs", "cpus"),
    [
        ({"big_endian": True}, ("arm64",), [(CPU_ARM64, 0)]),
        ({"big_endian": True}, ("arm64", "x86_64"), [(CPU_ARM64, 0), (CPU_X86_64, 3)]),
        ({}, ("armv7",), [(CPU_ARM, 9)]),
        ({"big_endian": True}, ("i386",), [(CPU_X86, 3)]),
        ({"fat64": True}, ("arm64", "x86_64"), [(CPU_ARM64, 0), (CPU_X86_64, 3)]),
        ({"fat64": True}, ("x86_64",), [(CPU_X86_64, 3)]),
        ({}, ("armv7", "armv7s", "arm64"), [(CPU_ARM, 9), (CPU_ARM, 11), (CPU_ARM64, 0)]),
    ],
    ids=["thin-be", "fat-be", "thin-32", "thin-32-be", "fat64", "fat64-one", "fat-three"],
)
def test_every_mach_o_shape_is_read(
    tmp_path: Path,
    executable_kwargs: dict[str, Any],
    archs: tuple[str, ...],
    cpus: list[tuple[int, int]],
) -> None:
    executable = builders._mach_o(archs, **executable_kwargs)
    (tmp_path / "X").write_bytes(executable)
    macho = MachO(str(tmp_path / "X"))
    assert [(h.header.cputype, h.header.cpusubtype) for h in macho.headers] == cpus
    assert inspect_app(_app_zip(tmp_path / "X.app.zip", executable)).abis == archs


def test_app_zip_under_payload_skips_nested_bundles_and_macos_metadata(tmp_path: Path) -> None:
    appex = plistlib.dumps(_plist(CFBundleIdentifier="com.example.x.widget"))
    path = _app_zip(
        tmp_path / "X.app.zip",
        builders._mach_o(("arm64",)),
        plist=_plist(CFBundleDisplayName="X Display"),
        folder="Payload/X.app/",
        extra={
            "Payload/X.app/PlugIns/W.appex/Info.plist": appex,
            "__MACOSX/Payload/X.app/._Info.plist": b"\0\5\26\7",
        },
    )
    info = inspect_app(path)
    assert (info.app_id, info.app_name, info.version, info.version_code, info.min_os) == (
        "com.example.x",
        "X Display",
        "2.0",
        "7",
        "16.4",
    )


# --- everything that is not an app ----------------------------------------------------------------


def _garbage(path: Path) -> Path:
    path.write_bytes(b"this is not an app\n" * 50)
    return path


def _no_plist(path: Path) -> Path:
    return _zip(path, {"Shop.app/Shop": builders._mach_o(("arm64",))})


def _bad_plist(path: Path) -> Path:
    return _zip(path, {"Shop.app/Info.plist": b"<?xml version='1.0'?><plist><dict><key>"})


def _plist_not_dict(path: Path) -> Path:
    return _zip(path, {"X.app/Info.plist": plistlib.dumps(["a"])})


def _plist_without(key: str) -> Any:
    def make(path: Path) -> Path:
        plist = _plist()
        del plist[key]
        return _app_zip(path, builders._mach_o(("arm64",)), plist=plist)

    return make


def _no_executable(path: Path) -> Path:
    return _zip(path, {"X.app/Info.plist": plistlib.dumps(_plist())})


def _exe(data: bytes) -> Any:
    return lambda path: _app_zip(path, data)


FAT_ZERO = struct.pack(">II", 0xCAFEBABE, 0)
FAT_CUT = struct.pack(">II", 0xCAFEBABE, 2) + bytes(20)
FAT_PAST_END = struct.pack(">IIiIIII", 0xCAFEBABE, 1, CPU_ARM64, 0, 4096, 99999, 14)


def _apk_with(manifest: bytes) -> Any:
    return lambda path: _zip(path, {"AndroidManifest.xml": manifest})


NOT_AN_APP = [
    (
        "g.apk",
        _garbage,
        "g.apk is not a zip file: build it with your Android toolchain (an .apk is a zip)",
    ),
    (
        "g.app.zip",
        _garbage,
        "g.app.zip is not a zip file: zip the Simulator .app folder "
        "(ditto -ck --keepParent g.app g.app.zip)",
    ),
    (
        "e.apk",
        lambda p: _zip(p, {}),
        "e.apk is an empty zip: build the apk with your Android toolchain",
    ),
    (
        "e.app.zip",
        lambda p: _zip(p, {}),
        "e.app.zip is an empty zip: zip the Simulator .app folder "
        "(ditto -ck --keepParent e.app e.app.zip)",
    ),
    (
        "n.apk",
        lambda p: _zip(p, {"classes.dex": builders._dex()}),
        "n.apk is a zip without an AndroidManifest.xml, so not an apk: "
        "build it with your Android toolchain (Gradle assembleDebug)",
    ),
    (
        "t.apk",
        _apk_with(MANIFEST[:6]),
        "t.apk: AndroidManifest.xml is truncated (6 bytes): rebuild the apk",
    ),
    (
        "t.apk",
        _apk_with(MANIFEST[:100]),
        f"t.apk: AndroidManifest.xml is truncated (100 of {len(MANIFEST)} bytes): rebuild the apk",
    ),
    (
        "t.apk",
        _apk_with(MANIFEST[:-1]),
        f"t.apk: AndroidManifest.xml is truncated ({len(MANIFEST) - 1} of {len(MANIFEST)} bytes): "
        "rebuild the apk",
    ),
    (
        "d.apk",
        _apk_with(MANIFEST[:8] + bytes(len(MANIFEST) - 8)),
        "d.apk: AndroidManifest.xml is damaged and cannot be decoded: rebuild the apk",
    ),
    (
        "r.apk",
        _apk_with(bytes(range(256)) * 4),
        "r.apk: AndroidManifest.xml is not a compiled (binary XML) manifest: rebuild the apk",
    ),
    (
        "x.apk",
        _apk_with(b'<?xml version="1.0"?>\n<manifest package="a.b"/>'),
        "x.apk: AndroidManifest.xml is plain-text XML, not compiled: "
        "build the apk with Gradle or aapt2, which compile the manifest",
    ),
    (
        "p.apk",
        _apk_with(_manifest(package="")),
        "p.apk: AndroidManifest.xml has no package: rebuild the apk",
    ),
    (
        "Shop.app.zip",
        _no_plist,
        "Shop.app.zip has no Name.app/Info.plist: zip the Simulator .app folder itself "
        "(ditto -ck --keepParent Shop.app Shop.app.zip)",
    ),
    (
        "Shop.app.zip",
        lambda p: _zip(p, {"Shop.app/Contents/Info.plist": b""}),
        "Shop.app.zip holds a macOS app (Name.app/Contents/Info.plist): "
        "upload an iOS Simulator .app",
    ),
    (
        "Two.app.zip",
        lambda p: _zip(p, {"B.app/Info.plist": b"", "A.app/Info.plist": b""}),
        "Two.app.zip holds 2 apps (A.app, B.app): zip only the one to test",
    ),
    (
        "Shop.app.zip",
        _bad_plist,
        "Shop.app.zip: Shop.app/Info.plist cannot be parsed (ExpatError): rebuild the app",
    ),
    (
        "X.app.zip",
        _plist_not_dict,
        "X.app.zip: X.app/Info.plist is not a dictionary: rebuild the app",
    ),
    (
        "X.app.zip",
        _plist_without("CFBundleIdentifier"),
        "X.app.zip: X.app/Info.plist has no CFBundleIdentifier: rebuild the app",
    ),
    (
        "X.app.zip",
        _plist_without("CFBundleExecutable"),
        "X.app.zip: X.app/Info.plist has no CFBundleExecutable: rebuild the app",
    ),
    (
        "X.app.zip",
        _no_executable,
        "X.app.zip: the executable X.app/X named by CFBundleExecutable is missing: "
        "zip the complete .app folder",
    ),
    (
        "X.app.zip",
        _exe(b"#!/bin/sh\necho hello\n"),
        "X.app.zip: the executable X.app/X is not a Mach-O executable: "
        "rebuild the app for the Simulator",
    ),
    (
        "X.app.zip",
        _exe(b"\xcf\xfa"),
        "X.app.zip: the executable X.app/X is not a Mach-O executable: "
        "rebuild the app for the Simulator",
    ),
    (
        "X.app.zip",
        _exe(builders._mach_o(("arm64",))[:10]),
        "X.app.zip: the executable X.app/X is truncated: rebuild the app",
    ),
    (
        "X.app.zip",
        _exe(FAT_ZERO),
        "X.app.zip: the executable X.app/X is a universal binary of 0 architectures: "
        "rebuild the app",
    ),
    ("X.app.zip", _exe(FAT_CUT), "X.app.zip: the executable X.app/X is truncated: rebuild the app"),
    (
        "X.app.zip",
        _exe(FAT_PAST_END),
        "X.app.zip: the executable X.app/X is truncated: rebuild the app",
    ),
    (
        "Shop.ipa",
        _garbage,
        "Shop.ipa is an iOS device package: build the app for the Simulator (-sdk iphonesimulator) "
        "and upload the zipped .app (Name.app.zip)",
    ),
    (
        "Shop.aab",
        _garbage,
        "Shop.aab is an Android App Bundle, not an .apk: "
        "build an .apk (bundletool build-apks --mode=universal makes one)",
    ),
    (
        "Shop.zip",
        _garbage,
        "Shop.zip is neither an .apk nor an .app.zip: "
        "upload an Android .apk or a zipped iOS Simulator .app",
    ),
    (
        "Shop.app",
        lambda p: p,
        "Shop.app is an .app folder: zip it first (ditto -ck --keepParent Shop.app Shop.app.zip)",
    ),
    ("missing.apk", lambda p: p, "cannot read missing.apk: No such file or directory"),
]


@pytest.mark.parametrize(("file_name", "make", "message"), NOT_AN_APP)
def test_what_is_not_an_app_is_refused_in_one_line(
    tmp_path: Path, file_name: str, make: Any, message: str
) -> None:
    path = make(tmp_path / file_name)
    with pytest.raises(AppError) as caught:
        inspect_app(path)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_damaged_zips_and_manifests_only_ever_raise_app_error(tmp_path: Path) -> None:
    # A deterministic sample of truncations and byte flips of real apps: each one is read or
    # refused with a printable one-line AppError, never another exception.
    rng = random.Random(5)
    goods = [
        (".apk", build_apk(tmp_path / "good.apk").read_bytes()),
        (".app.zip", build_app_zip(tmp_path / "good.app.zip", binary_plist=True).read_bytes()),
    ]
    messages: list[str] = []
    for suffix, good in goods:
        for round_ in range(150):
            data = bytearray(good)
            if round_ % 3 == 0:
                del data[rng.randrange(len(data)) :]
            else:
                for _ in range(rng.randint(1, 6)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            path = tmp_path / f"damaged{suffix}"
            path.write_bytes(bytes(data))
            try:
                inspect_app(path)
            except AppError as exc:
                messages.append(str(exc))
    assert len(messages) > 100
    assert [m for m in messages if not m.isprintable()] == []


def _with_unknown_chunk(manifest: bytes) -> bytes:
    # Android skips chunk types it does not know; apkInspector does too, and logs a warning.
    chunk = struct.pack("<HHI", 0x0199, 8, 16) + bytes(8)
    return manifest[:4] + struct.pack("<I", len(manifest) + len(chunk)) + manifest[8:] + chunk


def test_apk_inspector_logs_go_to_our_logger_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _zip(tmp_path / "app.apk", {"AndroidManifest.xml": _with_unknown_chunk(MANIFEST)})

    def unusual(data: bytes) -> Any:
        raise UnusualManifest

    monkeypatch.setattr(apps.android, "quick_manifest", unusual)  # read in full, by apkInspector
    with caplog.at_level(logging.DEBUG):
        assert inspect_app(path).app_id == "com.example.shop"
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("asyncclient.apps", logging.DEBUG, "apkInspector: Unknown chunk type found: 0x199")
    ]


def test_reading_an_apk_leaves_the_root_logger_alone(tmp_path: Path) -> None:
    # apkInspector.axml calls logging.basicConfig(level=DEBUG) on import, and its module-level
    # logging.warning() calls would configure the root logger too. A fresh process, since pytest
    # configures the root logger itself.
    plain = build_apk(tmp_path / "plain.apk")
    odd = _zip(tmp_path / "odd.apk", {"AndroidManifest.xml": _with_unknown_chunk(MANIFEST)})
    code = (
        "import logging, sys\n"
        "from asyncclient.apps import inspect_app\n"
        "for path in sys.argv[1:]:\n"
        "    inspect_app(path)\n"
        "root = logging.getLogger()\n"
        "print(len(root.handlers), root.level)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(plain), str(odd)], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "0 30\n", "")


# --- compatibility --------------------------------------------------------------------------------


def _android(**overrides: Any) -> AppInfo:
    fields: dict[str, Any] = {
        "platform": "android",
        "app_id": "com.example.shop",
        "app_name": "Shop",
        "version": "1.0.0",
        "version_code": "1",
        "min_os": "24",
        "abis": ("arm64-v8a", "x86_64"),
        "supported_platforms": (),
    }
    return AppInfo(**(fields | overrides))


def _ios(**overrides: Any) -> AppInfo:
    fields: dict[str, Any] = {
        "platform": "ios",
        "app_id": "com.example.shop.ios",
        "app_name": "Shop",
        "version": "1.0.0",
        "version_code": "1",
        "min_os": "15.0",
        "abis": ("arm64", "x86_64"),
        "supported_platforms": ("iPhoneSimulator",),
    }
    return AppInfo(**(fields | overrides))


DEVICES = DeviceProfile()


@pytest.mark.parametrize(
    "info",
    [
        _android(),
        _android(abis=()),
        _android(min_os="35"),
        _android(min_os=None),
        _ios(),
        _ios(min_os="18.2"),
        _ios(min_os="18.2.0"),
        _ios(min_os="18"),
        _ios(min_os=None),
        _ios(abis=("x86_64", "arm64", "i386")),
    ],
)
def test_runnable_apps_have_no_problems_or_warnings(info: AppInfo) -> None:
    result = check_compatibility(info, DEVICES)
    assert result == Compatibility()
    assert result.ok


ABI_MESSAGE = (
    "native code only for armeabi-v7a; the devices run arm64-v8a, x86_64: "
    "add arm64-v8a or x86_64 to the ABIs you build (ndk abiFilters)"
)
PLATFORM_MESSAGE = (
    "built for a device build (iPhoneOS); the devices run iPhoneSimulator builds: "
    "build it for the Simulator with -sdk iphonesimulator"
)


@pytest.mark.parametrize(
    ("info", "problem"),
    [
        (
            _android(abis=("armeabi-v7a",)),
            Problem("abi", ("armeabi-v7a",), ("arm64-v8a", "x86_64"), ABI_MESSAGE),
        ),
        (
            _android(min_os="36"),
            Problem(
                "min_os",
                ("36",),
                ("35",),
                "minSdkVersion 36 is above the devices' API level 35: "
                "set minSdkVersion to 35 or lower",
            ),
        ),
        (
            _android(min_os="Baklava"),
            Problem(
                "min_os",
                ("Baklava",),
                ("35",),
                "minSdkVersion Baklava is a preview SDK codename; the devices run released API "
                "levels up to 35: build against a released SDK",
            ),
        ),
        (
            _ios(supported_platforms=("iPhoneOS",)),
            Problem("platform", ("iPhoneOS",), ("iPhoneSimulator",), PLATFORM_MESSAGE),
        ),
        (
            _ios(supported_platforms=("MacOSX",)),
            Problem(
                "platform",
                ("MacOSX",),
                ("iPhoneSimulator",),
                "built for MacOSX; the devices run iPhoneSimulator builds: "
                "build it for the Simulator with -sdk iphonesimulator",
            ),
        ),
        (
            _ios(abis=("armv7", "i386")),
            Problem(
                "arch",
                ("armv7", "i386"),
                ("arm64", "x86_64"),
                "executable built only for armv7, i386; the devices run arm64, x86_64: "
                "build it for arm64 or x86_64 (Xcode ARCHS)",
            ),
        ),
        (
            _ios(min_os="18.3"),
            Problem(
                "min_os",
                ("18.3",),
                ("18.2",),
                "MinimumOSVersion 18.3 is above the devices' iOS 18.2: "
                "set the deployment target to 18.2 or lower",
            ),
        ),
        (
            _ios(min_os="18.2.1"),
            Problem(
                "min_os",
                ("18.2.1",),
                ("18.2",),
                "MinimumOSVersion 18.2.1 is above the devices' iOS 18.2: "
                "set the deployment target to 18.2 or lower",
            ),
        ),
        (
            _ios(min_os="latest"),
            Problem(
                "min_os",
                ("latest",),
                ("18.2",),
                "MinimumOSVersion latest is not a version number; the devices run iOS up to 18.2: "
                "set the deployment target (IPHONEOS_DEPLOYMENT_TARGET)",
            ),
        ),
    ],
    ids=[
        "abi",
        "min-sdk",
        "min-sdk-codename",
        "device-build",
        "other-platform",
        "arch",
        "min-ios",
        "min-ios-patch",
        "min-ios-garbage",
    ],
)
def test_each_problem(info: AppInfo, problem: Problem) -> None:
    result = check_compatibility(info, DEVICES)
    assert result.problems == (problem,)
    assert not result.ok
    assert "\n" not in problem.message


@pytest.mark.parametrize(
    ("info", "warning"),
    [
        (_android(abis=("arm64-v8a",)), "no x86_64 code: runs only on arm64-v8a devices"),
        (
            _android(abis=("armeabi-v7a", "x86_64")),
            "no arm64-v8a code: runs only on x86_64 devices",
        ),
        (_ios(abis=("arm64",)), "no x86_64 code: runs only on arm64 devices"),
        (
            _ios(supported_platforms=()),
            "Info.plist names no CFBundleSupportedPlatforms: "
            "cannot tell whether this is a Simulator build",
        ),
    ],
)
def test_each_warning(info: AppInfo, warning: str) -> None:
    assert check_compatibility(info, DEVICES) == Compatibility(warnings=(warning,))


def test_problems_add_up_and_follow_the_device_profile() -> None:
    devices = DeviceProfile(
        android_abis=["x86_64"],  # lists from a JSON or TOML setting become tuples
        android_max_api=30,
        ios_archs=["arm64"],
        ios_max_version="17.0",
    )
    assert devices.android_abis == ("x86_64",)
    android = check_compatibility(_android(abis=("arm64-v8a",), min_os="31"), devices)
    assert [(p.kind, p.found, p.supported) for p in android.problems] == [
        ("abi", ("arm64-v8a",), ("x86_64",)),
        ("min_os", ("31",), ("30",)),
    ]
    ios = check_compatibility(
        _ios(supported_platforms=("iPhoneOS",), abis=("x86_64",), min_os="17.1"), devices
    )
    assert [p.kind for p in ios.problems] == ["platform", "arch", "min_os"]
    assert check_compatibility(_ios(), devices) == Compatibility()


def test_built_apps_are_checked_end_to_end(tmp_path: Path) -> None:
    apk = inspect_app(build_apk(tmp_path / "a.apk", abis=("armeabi-v7a",), min_sdk=36))
    assert [p.kind for p in check_compatibility(apk, DEVICES).problems] == ["abi", "min_os"]
    device_build = build_app_zip(tmp_path / "d.app.zip", platforms=("iPhoneOS",), archs=("arm64",))
    result = check_compatibility(inspect_app(device_build), DEVICES)
    assert result.problems == (
        Problem("platform", ("iPhoneOS",), ("iPhoneSimulator",), PLATFORM_MESSAGE),
    )
    assert result.warnings == ("no x86_64 code: runs only on arm64 devices",)


def test_problem_wire_shape() -> None:
    problem = Problem("abi", ("armeabi-v7a",), ("arm64-v8a", "x86_64"), ABI_MESSAGE)
    assert problem.to_json() == {
        "kind": "abi",
        "found": ["armeabi-v7a"],
        "supported": ["arm64-v8a", "x86_64"],
        "message": ABI_MESSAGE,
    }
    refused = Problem.not_an_app("g.apk", AppError("g.apk is not a zip file: build it"))
    assert refused.to_json() == {
        "kind": "not_an_app",
        "found": ["g.apk"],
        "supported": [".apk", ".app.zip"],
        "message": "g.apk is not a zip file: build it",
    }


# --- builder arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda p: build_apk(p / "a.apk", filler_bytes=-1), "filler_bytes must be 0 or more"),
        (lambda p: build_apk(p / "a.apk", package=""), "package must not be empty"),
        (lambda p: build_apk(p / "a.apk", version_code=-1), "version_code must be"),
        (lambda p: build_app_dir(p / "S.app", archs=()), "at least one architecture"),
        (lambda p: build_app_dir(p / "S.app", archs=("arm64", "arm64")), "listed twice"),
        (lambda p: build_app_zip(p / "S.app.zip", archs=("sparc",)), "unknown Mach-O architecture"),
        (lambda p: build_app_zip(p / "S.app.zip", name="a/b"), "name must be a file name"),
    ],
)
def test_builders_refuse_bad_arguments(tmp_path: Path, build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(tmp_path)


def test_build_app_dir_rebuilds_in_place(tmp_path: Path) -> None:
    bundle = build_app_dir(tmp_path / "deep" / "Shop.app", filler_bytes=MiB + 1, seed=2)
    assert (bundle / "filler.bin").read_bytes() == b"".join(builders._filler_chunks(MiB + 1, 2))
    build_app_dir(bundle, archs=("x86_64",), version="2.0")
    assert not (bundle / "filler.bin").exists()
    plist = plistlib.loads((bundle / "Info.plist").read_bytes())
    assert (plist["CFBundleShortVersionString"], plist["CFBundleIdentifier"]) == (
        "2.0",
        "com.example.shop.ios",
    )
    assert [h.header.cputype for h in MachO(str(bundle / "Shop")).headers] == [CPU_X86_64]


def _set_compression_method(path: Path, member: str, method: int) -> None:
    """Rewrite one member's compression method in its local and central headers."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        local = archive.getinfo(member).header_offset
    struct.pack_into("<H", data, local + 8, method)
    central = data.find(b"PK\x01\x02" + data[local + 4 : local + 8])  # same version and flags
    name = member.encode()
    while data[central + 46 : central + 46 + len(name)] != name:
        central = data.find(b"PK\x01\x02", central + 4)
    struct.pack_into("<H", data, central + 10, method)
    path.write_bytes(bytes(data))


def test_a_member_in_an_unsupported_compression_is_one_clear_refusal(tmp_path: Path) -> None:
    apk = build_apk(tmp_path / "odd.apk")
    _set_compression_method(apk, "AndroidManifest.xml", 99)  # no zipfile decoder for it
    with pytest.raises(AppError, match=r"AndroidManifest\.xml cannot be read .*: rebuild the app$"):
        inspect_app(apk)
