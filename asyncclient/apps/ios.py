"""The iOS reader: a zipped Simulator .app's Info.plist and the architectures in its Mach-O
executable's header (thin or universal), read without Xcode."""

import plistlib
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import Final

from asyncclient.apps._values import (
    IOS,
    MAX_FAT_ARCHS,
    MAX_PLIST_BYTES,
    UNDECODABLE_MEMBER,
    AppError,
    AppInfo,
    as_text,
    read_member,
)

# Mach-O magics (big-endian) and the CPU types we name.
_MH_MAGIC: Final = 0xFEEDFACE
_MH_CIGAM: Final = 0xCEFAEDFE
_MH_MAGIC_64: Final = 0xFEEDFACF
_MH_CIGAM_64: Final = 0xCFFAEDFE
_FAT_MAGIC: Final = 0xCAFEBABE
_FAT_CIGAM: Final = 0xBEBAFECA
_FAT_MAGIC_64: Final = 0xCAFEBABF
_FAT_CIGAM_64: Final = 0xBFBAFECA
_FAT_ARCH: Final = "iIIII"  # fat_arch: cputype, cpusubtype, offset, size, align
_FAT_ARCH_64: Final = "iIQQII"  # fat_arch_64: the same with 64-bit offset and size, reserved
_CPU_ARCH_ABI64: Final = 0x01000000
_CPU_ARCH_ABI64_32: Final = 0x02000000
_CPU_TYPE_X86: Final = 7
_CPU_TYPE_ARM: Final = 12
_CPU_TYPE_POWERPC: Final = 18
_CPU_SUBTYPE_MASK: Final = 0xFF000000  # capability bits (e.g. the arm64e pointer-auth ABI)
_ARM_SUBTYPES: Final[Mapping[int, str]] = {
    5: "armv4t",
    6: "armv6",
    7: "armv5",
    8: "xscale",
    9: "armv7",
    10: "armv7f",
    11: "armv7s",
    12: "armv7k",
    13: "armv8",
    14: "armv6m",
    15: "armv7m",
    16: "armv7em",
}


def inspect_app_zip(archive: zipfile.ZipFile, display: str) -> AppInfo:
    infos = archive.infolist()
    if not infos:
        raise AppError(
            f"{display} is an empty zip: zip the Simulator .app folder ({ditto_command(display)})"
        )
    plist_info = _find_info_plist(infos, display)
    app_dir = plist_info.filename.rsplit("/", 1)[0]
    bundle = app_dir.rsplit("/", 1)[-1]
    data = read_member(archive, plist_info, display, MAX_PLIST_BYTES)
    try:
        plist = plistlib.loads(data)
    except Exception as exc:  # plistlib raises many kinds on damaged plists
        raise AppError(
            f"{display}: {bundle}/Info.plist cannot be parsed ({type(exc).__name__}): "
            "rebuild the app"
        ) from exc
    if not isinstance(plist, dict):
        raise AppError(f"{display}: {bundle}/Info.plist is not a dictionary: rebuild the app")

    bundle_id = plist.get("CFBundleIdentifier")
    if not isinstance(bundle_id, str) or not bundle_id:
        raise AppError(f"{display}: {bundle}/Info.plist has no CFBundleIdentifier: rebuild the app")
    executable = plist.get("CFBundleExecutable")
    if not isinstance(executable, str) or not executable:
        raise AppError(f"{display}: {bundle}/Info.plist has no CFBundleExecutable: rebuild the app")
    try:
        executable_info = archive.getinfo(f"{app_dir}/{executable}")
    except KeyError:
        raise AppError(
            f"{display}: the executable {bundle}/{executable} named by CFBundleExecutable is "
            "missing: zip the complete .app folder"
        ) from None
    archs = _mach_o_archs(archive, executable_info, display, f"{bundle}/{executable}")

    platforms = plist.get("CFBundleSupportedPlatforms")
    if isinstance(platforms, str):
        platforms = [platforms]
    if not isinstance(platforms, list):
        platforms = []
    return AppInfo(
        platform=IOS,
        app_id=bundle_id,
        app_name=as_text(plist.get("CFBundleDisplayName")) or as_text(plist.get("CFBundleName")),
        version=as_text(plist.get("CFBundleShortVersionString")),
        version_code=as_text(plist.get("CFBundleVersion")),
        min_os=as_text(plist.get("MinimumOSVersion")),
        abis=archs,
        supported_platforms=[p for p in platforms if isinstance(p, str)],
    )


def _find_info_plist(infos: list[zipfile.ZipInfo], display: str) -> zipfile.ZipInfo:
    """The Info.plist of the outermost Name.app (at the top, under Payload/ or a wrapper folder)."""
    found: list[tuple[int, zipfile.ZipInfo]] = []
    for info in infos:
        parts = info.filename.split("/")
        if len(parts) < 2 or parts[-1] != "Info.plist" or parts[0] == "__MACOSX":
            continue
        # Skip the Info.plists of nested bundles (PlugIns/X.appex, Frameworks/Y.framework).
        if parts[-2].endswith(".app") and not any(p.endswith(".app") for p in parts[:-2]):
            found.append((len(parts), info))
    if not found:
        if any(info.filename.endswith(".app/Contents/Info.plist") for info in infos):
            raise AppError(
                f"{display} holds a macOS app (Name.app/Contents/Info.plist): "
                "upload an iOS Simulator .app"
            )
        raise AppError(
            f"{display} has no Name.app/Info.plist: zip the Simulator .app folder itself "
            f"({ditto_command(display)})"
        )
    depth = min(d for d, _ in found)
    outermost = [info for d, info in found if d == depth]
    if len(outermost) > 1:
        names = ", ".join(sorted(i.filename.rsplit("/", 2)[-2] for i in outermost))
        raise AppError(f"{display} holds {len(outermost)} apps ({names}): zip only the one to test")
    return outermost[0]


def ditto_command(display: str) -> str:
    """The command that zips the .app an .app.zip of this name should hold."""
    bundle = display[: -len(".zip")] if display.lower().endswith(".app.zip") else "Name.app"
    return f"ditto -ck --keepParent {bundle} {bundle}.zip"


def _mach_o_archs(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, display: str, label: str
) -> tuple[str, ...]:
    """The architectures of a thin or universal Mach-O, from its headers alone."""
    try:
        with archive.open(info) as executable:
            head = executable.read(8)
            head += executable.read(_mach_o_header_rest(head))
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        raise AppError(
            f"{display}: the executable {label} is damaged ({exc}): rebuild the app"
        ) from exc
    except UNDECODABLE_MEMBER as exc:
        raise AppError(f"{display}: the executable {label} cannot be read ({exc})") from exc
    return _parse_mach_o(head, info.file_size, f"{display}: the executable {label}")


def _mach_o_header_rest(head: bytes) -> int:
    """How many bytes after the first eight the headers of this Mach-O need."""
    if len(head) < 8:
        return 0
    magic, count = struct.unpack(">II", head)
    if magic in (_FAT_CIGAM, _FAT_CIGAM_64):
        (count,) = struct.unpack("<I", head[4:])
    if magic in (_FAT_MAGIC, _FAT_CIGAM):
        return struct.calcsize("<" + _FAT_ARCH) * min(int(count), MAX_FAT_ARCHS + 1)
    if magic in (_FAT_MAGIC_64, _FAT_CIGAM_64):
        return struct.calcsize("<" + _FAT_ARCH_64) * min(int(count), MAX_FAT_ARCHS + 1)
    return 4  # the cpusubtype of a thin header


def _parse_mach_o(head: bytes, size: int, what: str) -> tuple[str, ...]:
    """The architecture names in a Mach-O's first header bytes; ``size`` is the file's size."""
    if len(head) < 8:
        raise AppError(f"{what} is not a Mach-O executable: rebuild the app for the Simulator")
    (magic,) = struct.unpack(">I", head[:4])
    if magic in (_MH_MAGIC, _MH_MAGIC_64, _MH_CIGAM, _MH_CIGAM_64):
        if len(head) < 12:
            raise AppError(f"{what} is truncated: rebuild the app")
        endian = ">" if magic in (_MH_MAGIC, _MH_MAGIC_64) else "<"
        cputype, cpusubtype = struct.unpack(endian + "iI", head[4:12])
        return (_arch_name(cputype, cpusubtype),)
    if magic not in (_FAT_MAGIC, _FAT_CIGAM, _FAT_MAGIC_64, _FAT_CIGAM_64):
        raise AppError(f"{what} is not a Mach-O executable: rebuild the app for the Simulator")
    endian = ">" if magic in (_FAT_MAGIC, _FAT_MAGIC_64) else "<"
    entry = struct.Struct(
        endian + (_FAT_ARCH_64 if magic in (_FAT_MAGIC_64, _FAT_CIGAM_64) else _FAT_ARCH)
    )
    (count,) = struct.unpack(endian + "I", head[4:8])
    if not 0 < count <= MAX_FAT_ARCHS:
        raise AppError(f"{what} is a universal binary of {count} architectures: rebuild the app")
    if len(head) < 8 + entry.size * count:
        raise AppError(f"{what} is truncated: rebuild the app")
    archs: list[str] = []
    for index in range(count):
        cputype, cpusubtype, offset, length = entry.unpack_from(head, 8 + index * entry.size)[:4]
        if offset + length > size:
            raise AppError(f"{what} is truncated: rebuild the app")
        name = _arch_name(cputype, cpusubtype)
        if name not in archs:
            archs.append(name)
    return tuple(archs)


def _arch_name(cputype: int, cpusubtype: int) -> str:
    """The name lipo and Xcode use for a Mach-O cputype/cpusubtype pair."""
    subtype = cpusubtype & ~_CPU_SUBTYPE_MASK
    if cputype == _CPU_TYPE_X86:
        return "i386"
    if cputype == _CPU_TYPE_X86 | _CPU_ARCH_ABI64:
        return "x86_64h" if subtype == 8 else "x86_64"
    if cputype == _CPU_TYPE_ARM:
        return _ARM_SUBTYPES.get(subtype, "arm")
    if cputype == _CPU_TYPE_ARM | _CPU_ARCH_ABI64:
        return {1: "arm64v8", 2: "arm64e"}.get(subtype, "arm64")
    if cputype == _CPU_TYPE_ARM | _CPU_ARCH_ABI64_32:
        return "arm64_32"
    if cputype == _CPU_TYPE_POWERPC:
        return "ppc"
    if cputype == _CPU_TYPE_POWERPC | _CPU_ARCH_ABI64:
        return "ppc64"
    return f"cputype-{cputype & 0xFFFFFFFF:#x}"
