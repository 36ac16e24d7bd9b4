"""The Android reader: an .apk's AndroidManifest.xml (binary XML), read quickly by _axml for
the usual shapes and by apkInspector for any other, and its native code (lib/<abi>/)."""

import functools
import io
import logging
import zipfile
from typing import Any, Final

from asyncclient.apps._axml import Attributes, UnusualManifest, quick_manifest, typed_value
from asyncclient.apps._values import (
    ANDROID,
    MAX_MANIFEST_BYTES,
    AppError,
    AppInfo,
    as_text,
    read_member,
    shown,
)

# AXML chunk type and the android: resource ids we read.
_RES_XML_TYPE: Final = 0x0003
_ATTR_LABEL: Final = 0x01010001
_ATTR_MIN_SDK_VERSION: Final = 0x0101020C
_ATTR_VERSION_CODE: Final = 0x0101021B
_ATTR_VERSION_NAME: Final = 0x0101021C

_log = logging.getLogger("asyncclient.apps")


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
        # apkInspector configures the root logger on import: undo it.
        root.handlers[:] = handlers
        root.setLevel(level)
    apkInspector.axml.logging = _ApkInspectorLogging()
    return apkInspector.axml


def inspect_apk(archive: zipfile.ZipFile, display: str) -> AppInfo:
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
    data = read_member(archive, manifest_info, display, MAX_MANIFEST_BYTES)
    manifest, uses_sdk, application = _decode_manifest(data, display)

    package = as_text(manifest.get("package"))
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
        app_name=as_text(label),
        version=as_text(_android_attr(manifest, _ATTR_VERSION_NAME, "versionName")),
        version_code=as_text(_android_attr(manifest, _ATTR_VERSION_CODE, "versionCode")),
        min_os=as_text(_android_attr(uses_sdk, _ATTR_MIN_SDK_VERSION, "minSdkVersion")),
        abis=sorted(abis),
        supported_platforms=(),
    )


def _decode_manifest(data: bytes, display: str) -> tuple[Attributes, Attributes, Attributes]:
    """The attributes of <manifest>, its <uses-sdk> and <application>: read quickly by
    asyncclient.apps._axml when the manifest has the usual shape, else decoded by apkInspector."""
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
        # The usual shape, read lazily; anything else in full.
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
                    found = f"<{shown(name)}>" if name else "an element without a name"
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
    # android: attributes match by resource id, others by name.
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
    # Floats and signed ints back to their bits.
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
