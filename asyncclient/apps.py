"""Read app files (an Android .apk, a zipped iOS Simulator .app) and check what devices can run.

Used by the client's pre-flight check before an upload and by the emulator when an upload completes.
Over 400 lines for one concern: two binary formats (Android's compiled XML in an .apk; Info.plist
and Mach-O headers in an .app.zip) are read here without an SDK.
"""

import functools
import io
import logging
import os
import plistlib
import struct
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Final, Self

import attrs

from asyncclient._axml import Attributes, UnusualManifest, quick_manifest, typed_value

__all__ = [
    "AppError",
    "AppInfo",
    "Compatibility",
    "DeviceProfile",
    "Problem",
    "check_compatibility",
    "inspect_app",
]

ANDROID: Final = "android"
IOS: Final = "ios"

# Real manifests and Info.plists are kilobytes; anything this big is not one (or is a zip bomb).
_MAX_MANIFEST_BYTES: Final = 8 << 20
_MAX_PLIST_BYTES: Final = 8 << 20
# Universal binaries hold a handful of slices; a larger count means the header is not a fat header.
_MAX_FAT_ARCHS: Final = 32
# What zipfile raises for a member it cannot decode: RuntimeError for an encrypted one, and a
# subclass of RuntimeError for a compression method it does not support.
_UNDECODABLE_MEMBER: Final = (RuntimeError,)

# Binary XML (AXML): the document's chunk type, and the android: attribute resource ids we read.
_RES_XML_TYPE: Final = 0x0003
_ATTR_LABEL: Final = 0x01010001
_ATTR_MIN_SDK_VERSION: Final = 0x0101020C
_ATTR_VERSION_CODE: Final = 0x0101021B
_ATTR_VERSION_NAME: Final = 0x0101021C

# Mach-O magics as read big-endian from the first four bytes, and the CPU types we name.
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


class AppError(ValueError):
    """The file is not an app that can be read; ``str(error)`` is one line saying what to fix."""

    def __init__(self, message: str) -> None:
        # Names and texts from a damaged file may hold newlines or control characters.
        line = " ".join(message.split())
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in line))


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class AppInfo:
    """What an app file says about itself."""

    platform: str  # "android" | "ios"
    app_id: str
    app_name: str | None
    version: str | None  # versionName / CFBundleShortVersionString
    version_code: str | None  # versionCode / CFBundleVersion
    min_os: str | None  # "24" (minSdkVersion) / "15.0" (MinimumOSVersion)
    abis: tuple[str, ...] = attrs.field(converter=_strings)
    supported_platforms: tuple[str, ...] = attrs.field(converter=_strings)


@attrs.frozen
class DeviceProfile:
    """What the service's devices can run."""

    android_abis: tuple[str, ...] = attrs.field(default=("arm64-v8a", "x86_64"), converter=_strings)
    android_max_api: int = 35
    ios_platforms: tuple[str, ...] = attrs.field(default=("iPhoneSimulator",), converter=_strings)
    ios_archs: tuple[str, ...] = attrs.field(default=("arm64", "x86_64"), converter=_strings)
    ios_max_version: str = "18.2"


@attrs.frozen
class Problem:
    """One thing the devices cannot run; kind: "abi", "platform", "min_os", "arch", "not_an_app"."""

    kind: str
    found: tuple[str, ...] = attrs.field(converter=_strings)
    supported: tuple[str, ...] = attrs.field(converter=_strings)
    message: str

    def to_json(self) -> dict[str, Any]:
        """The wire shape: ``{"kind", "found": [...], "supported": [...], "message"}``."""
        return {
            "kind": self.kind,
            "found": list(self.found),
            "supported": list(self.supported),
            "message": self.message,
        }

    @classmethod
    def not_an_app(cls, file_name: str, error: AppError | str) -> Self:
        """The problem reported for a file that `inspect_app` refused."""
        return cls("not_an_app", (file_name,), (".apk", ".app.zip"), str(error))


def _problems(values: Iterable[Problem]) -> tuple[Problem, ...]:
    return tuple(values)


@attrs.frozen
class Compatibility:
    """The outcome of `check_compatibility`: problems make the build unrunnable, warnings do not."""

    problems: tuple[Problem, ...] = attrs.field(default=(), converter=_problems)
    warnings: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    @property
    def ok(self) -> bool:
        return not self.problems


# --- inspect_app ----------------------------------------------------------------------------------


def inspect_app(path: str | os.PathLike[str], file_name: str | None = None) -> AppInfo:
    """Read the app id, versions, minimum OS and native code of an .apk or an .app.zip.

    Blocking. The kind is decided by ``file_name`` (or the path's name). Reads only the zip's
    central directory and the few members it needs, never the whole file. Raises `AppError`.
    """
    display = os.path.basename(file_name if file_name is not None else os.fspath(path))
    platform = _platform_of(display)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        if platform == ANDROID:
            advice = "build it with your Android toolchain (an .apk is a zip)"
        else:
            advice = f"zip the Simulator .app folder ({_ditto(display)})"
        raise AppError(f"{display} is not a zip file: {advice}") from exc
    except OSError as exc:
        raise AppError(f"cannot read {display}: {exc.strerror or exc}") from exc
    except (*_UNDECODABLE_MEMBER, UnicodeDecodeError, ValueError, EOFError, struct.error) as exc:
        # zipfile's other complaints about a damaged central directory
        raise AppError(f"{display} is a damaged zip file ({_shown(str(exc))}): rebuild it") from exc
    with archive:
        if platform == ANDROID:
            return _inspect_apk(archive, display)
        return _inspect_app_zip(archive, display)


def _platform_of(name: str) -> str:
    lower = name.lower()
    if lower.endswith(".apk"):
        return ANDROID
    if lower.endswith(".app.zip"):
        return IOS
    if lower.endswith(".aab"):
        raise AppError(
            f"{name} is an Android App Bundle, not an .apk: "
            "build an .apk (bundletool build-apks --mode=universal makes one)"
        )
    if lower.endswith(".ipa"):
        raise AppError(
            f"{name} is an iOS device package: build the app for the Simulator "
            "(-sdk iphonesimulator) and upload the zipped .app (Name.app.zip)"
        )
    if lower.endswith(".app"):
        raise AppError(
            f"{name} is an .app folder: zip it first (ditto -ck --keepParent {name} {name}.zip)"
        )
    raise AppError(
        f"{name} is neither an .apk nor an .app.zip: "
        "upload an Android .apk or a zipped iOS Simulator .app"
    )


def _read_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, display: str, limit: int
) -> bytes:
    if info.file_size > limit:
        raise AppError(
            f"{display}: {info.filename} is {info.file_size} bytes, far more than a real one "
            f"(at most {limit}): rebuild the app"
        )
    try:
        with archive.open(info) as member:
            data = member.read(limit + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        raise AppError(f"{display}: {info.filename} is damaged ({exc}): rebuild the app") from exc
    except _UNDECODABLE_MEMBER as exc:
        raise AppError(
            f"{display}: {info.filename} cannot be read ({exc}): rebuild the app"
        ) from exc
    if len(data) > limit:
        raise AppError(f"{display}: {info.filename} is over {limit} bytes: rebuild the app")
    return data


# --- Android --------------------------------------------------------------------------------------


_log = logging.getLogger(__name__)


class _ApkInspectorLogging:
    """Stands in for the ``logging`` module inside apkInspector.axml.

    Its module-level ``logging.warning(...)`` calls would run ``logging.basicConfig()`` on an
    unconfigured root logger and print to stderr about input we refuse with an AppError anyway;
    they go to this module's logger at DEBUG instead.
    """

    def _log(self, msg: object, *args: object, **kwargs: Any) -> None:
        _log.debug("apkInspector: " + str(msg), *args, **kwargs)

    debug = info = warning = error = critical = _log

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        _log.debug("apkInspector: " + str(msg), *args, exc_info=True, **kwargs)


@functools.cache
def _axml() -> Any:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        import apkInspector.axml
    finally:
        # apkInspector.axml calls logging.basicConfig(level=DEBUG) when imported, which would
        # configure the application's root logger behind its back: undo it.
        root.handlers[:] = handlers
        root.setLevel(level)
    apkInspector.axml.logging = _ApkInspectorLogging()
    return apkInspector.axml


def _inspect_apk(archive: zipfile.ZipFile, display: str) -> AppInfo:
    infos = archive.infolist()
    if not infos:
        raise AppError(f"{display} is an empty zip: build the apk with your Android toolchain")
    try:
        manifest_info = archive.getinfo("AndroidManifest.xml")
    except KeyError:
        raise AppError(
            f"{display} is a zip without an AndroidManifest.xml, so not an apk: "
            "build it with your Android toolchain (Gradle assembleDebug)"
        ) from None
    data = _read_member(archive, manifest_info, display, _MAX_MANIFEST_BYTES)
    manifest, uses_sdk, application = _decode_manifest(data, display)

    package = _text(manifest.get("package"))
    if not package:
        raise AppError(f"{display}: AndroidManifest.xml has no package: rebuild the apk")
    label = _android_attr(application, _ATTR_LABEL, "label")
    abis: set[str] = set()
    for info in infos:  # native libraries are files in lib/<abi>/
        parts = info.filename.split("/")
        if len(parts) >= 3 and parts[0] == "lib" and parts[1] and parts[-1]:
            abis.add(parts[1])
    return AppInfo(
        platform=ANDROID,
        app_id=package,
        app_name=_text(label),
        version=_text(_android_attr(manifest, _ATTR_VERSION_NAME, "versionName")),
        version_code=_text(_android_attr(manifest, _ATTR_VERSION_CODE, "versionCode")),
        min_os=_text(_android_attr(uses_sdk, _ATTR_MIN_SDK_VERSION, "minSdkVersion")),
        abis=sorted(abis),
        supported_platforms=(),
    )


def _decode_manifest(data: bytes, display: str) -> tuple[Attributes, Attributes, Attributes]:
    """The attributes of <manifest>, its <uses-sdk> and <application>: read quickly by
    asyncclient._axml when the manifest has the usual shape, else decoded by apkInspector."""
    if data.lstrip()[:1] == b"<":
        raise AppError(
            f"{display}: AndroidManifest.xml is plain-text XML, not compiled: "
            "build the apk with Gradle or aapt2, which compile the manifest"
        )
    axml = _axml()
    header = axml.ResChunkHeader.parse(io.BytesIO(data))
    if header is None:
        raise AppError(
            f"{display}: AndroidManifest.xml is truncated ({len(data)} bytes): rebuild the apk"
        )
    if header.type != _RES_XML_TYPE:
        raise AppError(
            f"{display}: AndroidManifest.xml is not a compiled (binary XML) manifest: "
            "rebuild the apk"
        )
    if header.total_size > len(data):
        raise AppError(
            f"{display}: AndroidManifest.xml is truncated "
            f"({len(data)} of {header.total_size} bytes): rebuild the apk"
        )
    try:
        # The usual shape, read without decoding what is not needed; anything else in full.
        return quick_manifest(data)
    except UnusualManifest:
        pass
    try:
        parsed = axml.ManifestStruct.parse(io.BytesIO(data))
    except Exception as exc:  # apkInspector raises whatever struct/index/decode error it meets
        raise AppError(
            f"{display}: AndroidManifest.xml is damaged and cannot be decoded: rebuild the apk"
        ) from exc
    strings: list[str] = list(parsed.string_pool.string_list)
    resource_ids: list[int] = list(parsed.resource_map.resids)

    manifest: Attributes | None = None
    uses_sdk: Attributes = {}
    application: Attributes = {}
    seen_uses_sdk = seen_application = False
    depth = 0
    for element in parsed.elements:
        if isinstance(element, axml.XmlStartElement):
            name = _pool_string(strings, element.attrext[1])
            if depth == 0 and manifest is None:
                if name != "manifest":
                    found = f"<{_shown(name)}>" if name else "an element without a name"
                    raise AppError(
                        f"{display}: AndroidManifest.xml starts with {found}, not <manifest>: "
                        "rebuild the apk"
                    )
                manifest = _attributes(element, strings, resource_ids)
            elif depth == 1 and name == "uses-sdk" and not seen_uses_sdk:
                uses_sdk, seen_uses_sdk = _attributes(element, strings, resource_ids), True
            elif depth == 1 and name == "application" and not seen_application:
                application, seen_application = _attributes(element, strings, resource_ids), True
            depth += 1
        elif isinstance(element, axml.XmlEndElement):
            depth = max(depth - 1, 0)
    if manifest is None:
        raise AppError(f"{display}: AndroidManifest.xml has no <manifest> element: rebuild the apk")
    return manifest, uses_sdk, application


def _attributes(element: Any, strings: list[str], resource_ids: list[int]) -> Attributes:
    # Android matches android: attributes by resource id (the name may be obfuscated); plain
    # attributes such as package have none and are matched by name.
    out: Attributes = {}
    for attribute in element.attributes:
        index = int(attribute.name_index)
        key: int | str | None = resource_ids[index] if index < len(resource_ids) else None
        if not key:
            key = _pool_string(strings, index)
        if key is not None:
            out.setdefault(key, _attribute_value(attribute, strings))
    return out


def _attribute_value(attribute: Any, strings: list[str]) -> str | int | bool | None:
    # apkInspector gives a float's data as a float and a decimal int's as signed: back to bits.
    data = attribute.typed_value_data
    bits = int(data) & 0xFFFFFFFF if isinstance(data, int) else 0
    return typed_value(
        int(attribute.typed_value_datatype),
        bits,
        int(attribute.raw_value_index),
        lambda index: _pool_string(strings, index),
    )


def _android_attr(attributes: Attributes, resource_id: int, name: str) -> str | int | bool | None:
    if resource_id in attributes:
        return attributes[resource_id]
    return attributes.get(name)


def _pool_string(strings: list[str], index: int) -> str | None:
    return str(strings[index]) if 0 <= index < len(strings) else None


def _shown(text: str) -> str:
    """Text from a damaged file, made safe to put in a one-line message."""
    return text if text.isprintable() and len(text) <= 80 else repr(text[:80])


def _text(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value or None
    return None


# --- iOS ------------------------------------------------------------------------------------------


def _inspect_app_zip(archive: zipfile.ZipFile, display: str) -> AppInfo:
    infos = archive.infolist()
    if not infos:
        raise AppError(
            f"{display} is an empty zip: zip the Simulator .app folder ({_ditto(display)})"
        )
    plist_info = _find_info_plist(infos, display)
    app_dir = plist_info.filename.rsplit("/", 1)[0]
    bundle = app_dir.rsplit("/", 1)[-1]
    data = _read_member(archive, plist_info, display, _MAX_PLIST_BYTES)
    try:
        plist = plistlib.loads(data)
    except Exception as exc:  # plistlib raises many kinds of error on damaged XML or binary plists
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
        app_name=_text(plist.get("CFBundleDisplayName")) or _text(plist.get("CFBundleName")),
        version=_text(plist.get("CFBundleShortVersionString")),
        version_code=_text(plist.get("CFBundleVersion")),
        min_os=_text(plist.get("MinimumOSVersion")),
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
            f"({_ditto(display)})"
        )
    depth = min(d for d, _ in found)
    outermost = [info for d, info in found if d == depth]
    if len(outermost) > 1:
        names = ", ".join(sorted(i.filename.rsplit("/", 2)[-2] for i in outermost))
        raise AppError(f"{display} holds {len(outermost)} apps ({names}): zip only the one to test")
    return outermost[0]


def _ditto(display: str) -> str:
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
    except _UNDECODABLE_MEMBER as exc:
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
        return struct.calcsize("<" + _FAT_ARCH) * min(int(count), _MAX_FAT_ARCHS + 1)
    if magic in (_FAT_MAGIC_64, _FAT_CIGAM_64):
        return struct.calcsize("<" + _FAT_ARCH_64) * min(int(count), _MAX_FAT_ARCHS + 1)
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
    if not 0 < count <= _MAX_FAT_ARCHS:
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


# --- check_compatibility --------------------------------------------------------------------------


def check_compatibility(info: AppInfo, devices: DeviceProfile) -> Compatibility:
    """What in ``info`` the devices cannot run (problems) or run only in part (warnings)."""
    if info.platform == ANDROID:
        problems, warnings = _check_android(info, devices)
    elif info.platform == IOS:
        problems, warnings = _check_ios(info, devices)
    else:
        problems = [
            Problem(
                "platform",
                (info.platform,),
                (ANDROID, IOS),
                f"platform {info.platform} is not one the devices run: upload an Android .apk "
                "or an iOS Simulator .app.zip",
            )
        ]
        warnings = []
    return Compatibility(tuple(problems), tuple(warnings))


def _check_android(info: AppInfo, devices: DeviceProfile) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    warnings: list[str] = []
    # An apk without lib/<abi>/ is pure Java or Kotlin and runs on every ABI.
    if info.abis:
        runnable = [abi for abi in devices.android_abis if abi in info.abis]
        if not runnable:
            problems.append(
                Problem(
                    "abi",
                    info.abis,
                    devices.android_abis,
                    f"native code only for {', '.join(info.abis)}; the devices run "
                    f"{', '.join(devices.android_abis)}: add {' or '.join(devices.android_abis)} "
                    "to the ABIs you build (ndk abiFilters)",
                )
            )
        elif missing := [abi for abi in devices.android_abis if abi not in info.abis]:
            warnings.append(
                f"no {', '.join(missing)} code: runs only on {', '.join(runnable)} devices"
            )
    if info.min_os is not None:
        max_api = devices.android_max_api
        if not info.min_os.isdigit():
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (str(max_api),),
                    f"minSdkVersion {info.min_os} is a preview SDK codename; the devices run "
                    f"released API levels up to {max_api}: build against a released SDK",
                )
            )
        elif int(info.min_os) > max_api:
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (str(max_api),),
                    f"minSdkVersion {info.min_os} is above the devices' API level {max_api}: "
                    f"set minSdkVersion to {max_api} or lower",
                )
            )
    return problems, warnings


def _check_ios(info: AppInfo, devices: DeviceProfile) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    warnings: list[str] = []
    supported = devices.ios_platforms
    if not info.supported_platforms:
        warnings.append(
            "Info.plist names no CFBundleSupportedPlatforms: cannot tell whether this is a "
            "Simulator build"
        )
    elif not any(p in supported for p in info.supported_platforms):
        found = ", ".join(info.supported_platforms)
        what = f"a device build ({found})" if "iPhoneOS" in info.supported_platforms else found
        sdk = supported[0].lower() if supported else "iphonesimulator"
        problems.append(
            Problem(
                "platform",
                info.supported_platforms,
                supported,
                f"built for {what}; the devices run {', '.join(supported)} builds: build it for "
                f"the Simulator with -sdk {sdk}",
            )
        )
    runnable = [arch for arch in devices.ios_archs if arch in info.abis]
    if not runnable:
        problems.append(
            Problem(
                "arch",
                info.abis,
                devices.ios_archs,
                f"executable built only for {', '.join(info.abis) or 'no architecture'}; the "
                f"devices run {', '.join(devices.ios_archs)}: build it for "
                f"{' or '.join(devices.ios_archs)} (Xcode ARCHS)",
            )
        )
    elif missing := [arch for arch in devices.ios_archs if arch not in info.abis]:
        warnings.append(f"no {', '.join(missing)} code: runs only on {', '.join(runnable)} devices")
    if info.min_os is not None:
        max_version = devices.ios_max_version
        wanted, ceiling = _version_tuple(info.min_os), _version_tuple(max_version)
        if wanted is None:
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (max_version,),
                    f"MinimumOSVersion {info.min_os} is not a version number; the devices run iOS "
                    f"up to {max_version}: set the deployment target (IPHONEOS_DEPLOYMENT_TARGET)",
                )
            )
        elif ceiling is not None and wanted > ceiling:
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (max_version,),
                    f"MinimumOSVersion {info.min_os} is above the devices' iOS {max_version}: "
                    f"set the deployment target to {max_version} or lower",
                )
            )
    return problems, warnings


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = text.strip().split(".")
    if not all(part.isdigit() for part in parts):
        return None
    numbers = [int(part) for part in parts]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()  # "18.0" == "18"
    return tuple(numbers)
