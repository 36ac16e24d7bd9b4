"""Write real, valid test apps: an Android .apk with a compiled manifest, an iOS Simulator .app.

Used by the tests, the demo and the benchmarks; an optional filler asset makes big apps in chunks.
"""

import hashlib
import os
import plistlib
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

from asyncclient._values._bounds import digits

__all__ = ["build_apk", "build_app_dir", "build_app_zip"]

_CHUNK: Final = 1 << 20  # filler is produced and written 1 MiB at a time
# Forces zip64 above this size: a header cannot grow later.
_FORCE_ZIP64_FROM: Final = 1 << 30
_EPOCH: Final = (1980, 1, 1, 0, 0, 0)  # fixed timestamps keep builds byte-for-byte reproducible
_FILLER_APK: Final = "assets/filler.bin"
_FILLER_APP: Final = "filler.bin"

# --- binary XML (AXML) ----------------------------------------------------------------------------

_RES_STRING_POOL_TYPE: Final = 0x0001
_RES_XML_TYPE: Final = 0x0003
_RES_XML_START_NAMESPACE_TYPE: Final = 0x0100
_RES_XML_END_NAMESPACE_TYPE: Final = 0x0101
_RES_XML_START_ELEMENT_TYPE: Final = 0x0102
_RES_XML_END_ELEMENT_TYPE: Final = 0x0103
_RES_XML_RESOURCE_MAP_TYPE: Final = 0x0180
_UTF8_FLAG: Final = 1 << 8
_NO_INDEX: Final = 0xFFFFFFFF
_TYPE_REFERENCE: Final = 0x01
_TYPE_STRING: Final = 0x03
_TYPE_INT_DEC: Final = 0x10
_TYPE_INT_BOOLEAN: Final = 0x12
_ANDROID_NS: Final = "http://schemas.android.com/apk/res/android"
# android: attributes we write, in resource id order.
_ANDROID_ATTRS: Final = {
    "label": 0x01010001,
    "minSdkVersion": 0x0101020C,
    "versionCode": 0x0101021B,
    "versionName": 0x0101021C,
    "targetSdkVersion": 0x01010270,
}

_Attr = tuple[bool, str, str | int | None, int]  # android namespace?, name, value, value type


class _StringPool:
    def __init__(self, first: Iterable[str]) -> None:
        self.strings: list[str] = []
        self._index: dict[str, int] = {}
        for text in first:
            self.add(text)

    def add(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.strings)
            self.strings.append(text)
        return self._index[text]

    def chunk(self, utf8: bool) -> bytes:
        offsets: list[int] = []
        data = bytearray()
        for text in self.strings:
            offsets.append(len(data))
            units = len(text.encode("utf-16-le")) // 2
            if utf8:
                encoded = text.encode("utf-8")
                data += _length8(units) + _length8(len(encoded)) + encoded + b"\0"
            else:
                data += _length16(units) + text.encode("utf-16-le") + b"\0\0"
        data += bytes(-len(data) % 4)
        strings_start = 28 + 4 * len(offsets)
        header = struct.pack(
            "<HHIIIIII",
            _RES_STRING_POOL_TYPE,
            28,
            strings_start + len(data),
            len(offsets),
            0,  # styles
            _UTF8_FLAG if utf8 else 0,
            strings_start,
            0,  # styles start
        )
        return header + struct.pack(f"<{len(offsets)}I", *offsets) + bytes(data)


def _length8(n: int) -> bytes:
    if n > 0x7FFF:
        raise ValueError(f"string of {n} characters is too long for a UTF-8 string pool")
    return bytes([n]) if n < 0x80 else bytes([0x80 | n >> 8, n & 0xFF])


def _length16(n: int) -> bytes:
    if n > 0x7FFF:
        return struct.pack("<HH", 0x8000 | n >> 16, n & 0xFFFF)
    return struct.pack("<H", n)


def _axml_manifest(
    *,
    package: str,
    version_name: str,
    version_code: int,
    min_sdk: int | str,
    target_sdk: int,
    label: str | int | None,
    utf8: bool = False,
    activities: int = 0,
    uses_sdk_last: bool = False,
) -> bytes:
    """A compiled AndroidManifest.xml: manifest > (uses-sdk, application > activity * N).

    ``label`` is a string literal, an int (a resource reference such as @string/app_name) or None
    (no label); ``min_sdk`` may be a preview codename string. ``activities``: that many
    <activity android:name android:exported> in the application, as a real app's manifest has
    (100 make it about 21 KB). ``uses_sdk_last``: <uses-sdk> after the application.
    """
    pool = _StringPool(_ANDROID_ATTRS)  # names with resource ids first, matching the resource map
    prefix, uri = pool.add("android"), pool.add(_ANDROID_NS)
    app_attrs: list[_Attr] = []
    if isinstance(label, str):
        app_attrs.append((True, "label", label, _TYPE_STRING))
    elif label is not None:
        app_attrs.append((True, "label", label, _TYPE_REFERENCE))
    elements: list[tuple[int, str, list[_Attr]]] = [
        (
            0,
            "manifest",
            [
                (True, "versionCode", version_code, _TYPE_INT_DEC),
                (True, "versionName", version_name, _TYPE_STRING),
                (False, "package", package, _TYPE_STRING),
            ],
        ),
        (
            1,
            "uses-sdk",
            [
                (
                    True,
                    "minSdkVersion",
                    min_sdk,
                    _TYPE_STRING if isinstance(min_sdk, str) else _TYPE_INT_DEC,
                ),
                (True, "targetSdkVersion", target_sdk, _TYPE_INT_DEC),
            ],
        ),
        (1, "application", app_attrs),
    ]
    for number in range(activities):
        activity = f"{package}.ui.feature{number}.Screen{number}Activity"
        elements.append(
            (
                2,
                "activity",
                [
                    (True, "name", activity, _TYPE_STRING),
                    (True, "exported", 0, _TYPE_INT_BOOLEAN),
                ],
            )
        )
    if uses_sdk_last:
        elements.append(elements.pop(1))

    body = bytearray(_xml_node(_RES_XML_START_NAMESPACE_TYPE, 1, struct.pack("<II", prefix, uri)))
    open_tags: list[tuple[int, int]] = []  # (depth, name index)
    for line, (depth, tag, attrs) in enumerate(elements, start=2):
        while open_tags and open_tags[-1][0] >= depth:
            body += _end_element(open_tags.pop()[1], line)
        name = pool.add(tag)
        encoded = bytearray()
        for in_android, attr_name, value, kind in attrs:
            raw = _NO_INDEX
            if kind == _TYPE_STRING:
                raw = data = pool.add(str(value))
            else:
                data = int(value or 0) & 0xFFFFFFFF
            encoded += struct.pack(
                "<IIIHBBI",
                uri if in_android else _NO_INDEX,
                pool.add(attr_name),
                raw,
                8,  # Res_value size
                0,
                kind,
                data,
            )
        extension = struct.pack("<IIHHHHHH", _NO_INDEX, name, 20, 20, len(attrs), 0, 0, 0)
        body += _xml_node(_RES_XML_START_ELEMENT_TYPE, line, extension + encoded)
        open_tags.append((depth, name))
    end_line = len(elements) + 2
    while open_tags:
        body += _end_element(open_tags.pop()[1], end_line)
    body += _xml_node(_RES_XML_END_NAMESPACE_TYPE, end_line, struct.pack("<II", prefix, uri))

    ids = list(_ANDROID_ATTRS.values())
    resource_map = struct.pack(
        f"<HHI{len(ids)}I", _RES_XML_RESOURCE_MAP_TYPE, 8, 8 + 4 * len(ids), *ids
    )
    string_pool = pool.chunk(utf8)
    size = 8 + len(string_pool) + len(resource_map) + len(body)
    return struct.pack("<HHI", _RES_XML_TYPE, 8, size) + string_pool + resource_map + bytes(body)


def _xml_node(kind: int, line: int, extension: bytes) -> bytes:
    # ResXMLTree_node: header (type, header size 16, size), line number, comment (none).
    return struct.pack("<HHIII", kind, 16, 16 + len(extension), line, _NO_INDEX) + extension


def _end_element(name: int, line: int) -> bytes:
    return _xml_node(_RES_XML_END_ELEMENT_TYPE, line, struct.pack("<II", _NO_INDEX, name))


# --- small real files -----------------------------------------------------------------------------


def _dex() -> bytes:
    """A classes.dex that is only a header: right magic, checksum, signature and sizes."""
    header = bytearray(0x70)
    header[:8] = b"dex\n035\0"
    struct.pack_into("<II", header, 32, len(header), 0x70)  # file_size, header_size
    struct.pack_into("<I", header, 40, 0x12345678)  # endian_tag
    header[12:32] = hashlib.sha1(header[32:], usedforsecurity=False).digest()
    struct.pack_into("<I", header, 8, zlib.adler32(header[12:]))
    return bytes(header)


# ELF e_machine and class of each Android ABI.
_ELF_MACHINES: Final = {
    "armeabi": (40, 32),
    "armeabi-v7a": (40, 32),
    "arm64-v8a": (183, 64),
    "x86": (3, 32),
    "x86_64": (62, 64),
    "riscv64": (243, 64),
    "mips": (8, 32),
    "mips64": (8, 64),
}


def _elf(abi: str) -> bytes:
    """The ELF header of a little-endian shared object (ET_DYN) for ``abi``."""
    machine, bits = _ELF_MACHINES.get(abi, (0, 64))
    ident = b"\x7fELF" + bytes([1 if bits == 32 else 2, 1, 1, 0]) + bytes(8)
    if bits == 64:
        return ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, 0, 0, 64, 0, 0, 64, 0, 0)
    flags = 0x05000000 if machine == 40 else 0  # EF_ARM_EABI_VER5
    return ident + struct.pack("<HHIIIIIHHHHHH", 3, machine, 1, 0, 0, 0, flags, 52, 0, 0, 40, 0, 0)


_CPU_ARCH_ABI64: Final = 0x01000000
_CPU_ARCH_ABI64_32: Final = 0x02000000
_MACH_O_ARCHS: Final = {  # lipo name -> (cputype, cpusubtype)
    "arm64": (12 | _CPU_ARCH_ABI64, 0),
    "arm64e": (12 | _CPU_ARCH_ABI64, 0x80000002),  # pointer-auth ABI capability bit set
    "arm64_32": (12 | _CPU_ARCH_ABI64_32, 1),
    "armv7": (12, 9),
    "armv7s": (12, 11),
    "armv7k": (12, 12),
    "x86_64": (7 | _CPU_ARCH_ABI64, 3),
    "x86_64h": (7 | _CPU_ARCH_ABI64, 8),
    "i386": (7, 3),
}
# LC_BUILD_VERSION platform of each CFBundleSupportedPlatforms value.
_MACH_O_PLATFORMS: Final = {
    "MacOSX": 1,
    "iPhoneOS": 2,
    "AppleTVOS": 3,
    "WatchOS": 4,
    "iPhoneSimulator": 7,
    "AppleTVSimulator": 8,
    "WatchSimulator": 9,
}
_MH_EXECUTE: Final = 2
_MH_PIE: Final = 0x200000
_LC_BUILD_VERSION: Final = 0x32
_FAT_ALIGN: Final = 14  # slices start on 16 KiB pages, as lipo places arm64 slices


def _mach_o_thin(arch: str, *, platform: str, min_os: str, big_endian: bool = False) -> bytes:
    """A Mach-O executable header with one LC_BUILD_VERSION load command."""
    if arch not in _MACH_O_ARCHS:
        raise ValueError(f"unknown Mach-O architecture {arch!r}; known: {', '.join(_MACH_O_ARCHS)}")
    cputype, cpusubtype = _MACH_O_ARCHS[arch]
    is_64 = bool(cputype & _CPU_ARCH_ABI64)
    endian = ">" if big_endian else "<"
    command = struct.pack(
        endian + "IIIIII",
        _LC_BUILD_VERSION,
        24,
        _MACH_O_PLATFORMS.get(platform, 2),
        _packed_version(min_os),
        _packed_version(min_os),  # sdk
        0,  # tools
    )
    magic = 0xFEEDFACF if is_64 else 0xFEEDFACE
    header = struct.pack(
        endian + "IiIIIII", magic, cputype, cpusubtype, _MH_EXECUTE, 1, len(command), _MH_PIE
    )
    if is_64:
        header += bytes(4)  # reserved
    return header + command


def _mach_o(
    archs: Sequence[str],
    *,
    platform: str = "iPhoneSimulator",
    min_os: str = "15.0",
    fat64: bool = False,
    big_endian: bool = False,
) -> bytes:
    """A thin Mach-O for one architecture, a universal (FAT or FAT_MAGIC_64) one for several."""
    if not archs:
        raise ValueError("an executable needs at least one architecture")
    if len(set(archs)) != len(archs):
        raise ValueError(f"architectures listed twice: {', '.join(archs)}")
    slices = [
        _mach_o_thin(a, platform=platform, min_os=min_os, big_endian=big_endian) for a in archs
    ]
    if len(slices) == 1 and not fat64:
        return slices[0]
    entry = struct.Struct(">iIQQII" if fat64 else ">iIIII")
    page = 1 << _FAT_ALIGN
    out = bytearray(struct.pack(">II", 0xCAFEBABF if fat64 else 0xCAFEBABE, len(slices)))
    offset = -(-(len(out) + entry.size * len(slices)) // page) * page
    placed: list[tuple[int, bytes]] = []
    for arch, body in zip(archs, slices, strict=True):
        cputype, cpusubtype = _MACH_O_ARCHS[arch]
        fields = [cputype, cpusubtype, offset, len(body), _FAT_ALIGN] + ([0] if fat64 else [])
        out += entry.pack(*fields)
        placed.append((offset, body))
        offset = -(-(offset + len(body)) // page) * page
    for start, body in placed:
        out += bytes(start - len(out)) + body
    return bytes(out)


def _packed_version(text: str) -> int:
    """ "15.0.1" as Mach-O packs versions: xxxx.yy.zz in nibbles of 16, 8 and 8 bits."""
    parts = [int(p) if digits(p) else 0 for p in text.split(".")[:3]] + [0, 0]
    return (parts[0] & 0xFFFF) << 16 | (parts[1] & 0xFF) << 8 | (parts[2] & 0xFF)


# --- filler and zips ------------------------------------------------------------------------------


def _filler_chunks(size: int, seed: int) -> Iterator[bytes]:
    """``size`` incompressible bytes, the same for the same seed, produced 1 MiB at a time.

    Each chunk is SHAKE-128 output keyed by the seed and the chunk's index: no two chunks repeat
    and nothing compresses, at about 0.6 GB/s.
    """
    key = f"asyncclient-filler:{seed}:".encode()
    for index, start in enumerate(range(0, size, _CHUNK)):
        block = hashlib.shake_128(key + index.to_bytes(8, "little"))
        yield block.digest(min(_CHUNK, size - start))


def _check_filler(filler_bytes: int) -> None:
    if filler_bytes < 0:
        raise ValueError(f"filler_bytes must be 0 or more, not {filler_bytes}")


def _zip_info(name: str, mode: int = 0o644, *, compress: bool = True) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.create_system = 3  # unix, so external_attr carries the permissions
    if name.endswith("/"):
        info.external_attr = (stat.S_IFDIR | mode) << 16 | 0x10  # MS-DOS directory flag
    else:
        info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    return info


def _write_filler(archive: zipfile.ZipFile, name: str, filler_bytes: int, seed: int) -> None:
    # Stored: random bytes do not shrink.
    info = _zip_info(name, compress=False)
    info.file_size = filler_bytes
    with archive.open(info, "w", force_zip64=filler_bytes >= _FORCE_ZIP64_FROM) as out:
        for chunk in _filler_chunks(filler_bytes, seed):
            out.write(chunk)


def _prepare(path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


# --- Android --------------------------------------------------------------------------------------


def build_apk(
    path: str | os.PathLike[str],
    *,
    package: str = "com.example.shop",
    version_name: str = "1.0.0",
    version_code: int = 1,
    min_sdk: int = 24,
    target_sdk: int = 34,
    label: str = "Shop",
    abis: Sequence[str] = ("arm64-v8a", "x86_64"),
    filler_bytes: int = 0,
    seed: int = 0,
    activities: int = 0,
) -> Path:
    """Write a real .apk to ``path`` and return it.

    The zip holds a compiled AndroidManifest.xml (package, android:versionCode/versionName,
    <uses-sdk minSdkVersion targetSdkVersion>, <application android:label> holding ``activities``
    <activity> elements, as many as a real app's manifest lists), a classes.dex header,
    ``lib/<abi>/libapp.so`` (an ELF header) per ABI (none: a pure Java/Kotlin app) and, when
    ``filler_bytes`` > 0, a stored ``assets/filler.bin`` of that many incompressible bytes, written
    1 MiB at a time. The same arguments give the same bytes.
    """
    _check_filler(filler_bytes)
    if not package:
        raise ValueError("package must not be empty")
    if isinstance(activities, bool) or not isinstance(activities, int) or activities < 0:
        raise ValueError(f"activities must be a whole number, 0 or more, not {activities!r}")
    if not 0 <= version_code <= 0x7FFFFFFF:
        raise ValueError(f"version_code must be 0..2147483647, not {version_code}")
    manifest = _axml_manifest(
        package=package,
        version_name=version_name,
        version_code=version_code,
        min_sdk=min_sdk,
        target_sdk=target_sdk,
        label=label,
        activities=activities,
    )
    target = _prepare(path)
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr(_zip_info("AndroidManifest.xml"), manifest)
        archive.writestr(_zip_info("classes.dex"), _dex())
        for abi in dict.fromkeys(abis):
            archive.writestr(_zip_info(f"lib/{abi}/libapp.so"), _elf(abi))
        if filler_bytes:
            _write_filler(archive, _FILLER_APK, filler_bytes, seed)
    return target


# --- iOS ------------------------------------------------------------------------------------------


def _bundle_files(
    *,
    bundle_id: str,
    name: str,
    version: str,
    build: str,
    min_os: str,
    platforms: Sequence[str],
    archs: Sequence[str],
    binary_plist: bool,
) -> list[tuple[str, bytes, int]]:
    """The small files of a Name.app bundle: (path inside the bundle, bytes, permissions)."""
    if not name or "/" in name:
        raise ValueError(f"name must be a file name, not {name!r}")
    info = {
        "CFBundleDevelopmentRegion": "en",
        "CFBundleDisplayName": name,
        "CFBundleExecutable": name,
        "CFBundleIdentifier": bundle_id,
        "CFBundleInfoDictionaryVersion": "6.0",
        "CFBundleName": name,
        "CFBundlePackageType": "APPL",
        "CFBundleShortVersionString": version,
        "CFBundleSupportedPlatforms": list(platforms),
        "CFBundleVersion": build,
        "MinimumOSVersion": min_os,
        "UIDeviceFamily": [1],
    }
    if platforms:
        info["DTPlatformName"] = platforms[0].lower()
    plist = plistlib.dumps(info, fmt=plistlib.FMT_BINARY if binary_plist else plistlib.FMT_XML)
    platform = platforms[0] if platforms else "iPhoneSimulator"
    executable = _mach_o(archs, platform=platform, min_os=min_os)
    return [
        ("Info.plist", plist, 0o644),
        ("PkgInfo", b"APPL????", 0o644),
        (name, executable, 0o755),
    ]


def build_app_dir(
    path_to_dot_app: str | os.PathLike[str],
    *,
    bundle_id: str = "com.example.shop.ios",
    name: str = "Shop",
    version: str = "1.0.0",
    build: str = "1",
    min_os: str = "15.0",
    platforms: Sequence[str] = ("iPhoneSimulator",),
    archs: Sequence[str] = ("arm64", "x86_64"),
    binary_plist: bool = False,
    filler_bytes: int = 0,
    seed: int = 0,
) -> Path:
    """Write a real iOS .app bundle directory at ``path_to_dot_app`` and return it.

    It holds Info.plist (XML, or binary with ``binary_plist``), PkgInfo, the executable ``name``
    (a thin Mach-O for one arch, a universal one for several) and, when ``filler_bytes`` > 0,
    ``filler.bin`` of that many incompressible bytes, written 1 MiB at a time.
    """
    _check_filler(filler_bytes)
    files = _bundle_files(
        bundle_id=bundle_id,
        name=name,
        version=version,
        build=build,
        min_os=min_os,
        platforms=platforms,
        archs=archs,
        binary_plist=binary_plist,
    )
    root = Path(path_to_dot_app)
    root.mkdir(parents=True, exist_ok=True)
    for relative, data, mode in files:
        (root / relative).write_bytes(data)
        (root / relative).chmod(mode)
    filler = root / _FILLER_APP
    if filler_bytes:
        with filler.open("wb") as out:
            for chunk in _filler_chunks(filler_bytes, seed):
                out.write(chunk)
    else:
        filler.unlink(missing_ok=True)  # left from an earlier build with filler
    return root


def build_app_zip(
    path: str | os.PathLike[str],
    *,
    bundle_id: str = "com.example.shop.ios",
    name: str = "Shop",
    version: str = "1.0.0",
    build: str = "1",
    min_os: str = "15.0",
    platforms: Sequence[str] = ("iPhoneSimulator",),
    archs: Sequence[str] = ("arm64", "x86_64"),
    binary_plist: bool = False,
    filler_bytes: int = 0,
    seed: int = 0,
) -> Path:
    """Write ``path`` (name it Something.app.zip): the bundle of `build_app_dir` as ``Name.app/``.

    Written straight into the zip (no directory on disk); the same arguments give the same bytes.
    """
    _check_filler(filler_bytes)
    files = _bundle_files(
        bundle_id=bundle_id,
        name=name,
        version=version,
        build=build,
        min_os=min_os,
        platforms=platforms,
        archs=archs,
        binary_plist=binary_plist,
    )
    target = _prepare(path)
    folder = f"{name}.app/"
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr(_zip_info(folder, 0o755, compress=False), b"")
        for relative, data, mode in files:
            archive.writestr(_zip_info(folder + relative, mode), data)
        if filler_bytes:
            _write_filler(archive, folder + _FILLER_APP, filler_bytes, seed)
    return target
