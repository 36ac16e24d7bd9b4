"""A quick reading of a compiled AndroidManifest.xml: the attributes of <manifest>, its first
<uses-sdk> and its first <application>, walking chunks by their headers and decoding only the
strings it needs (bench_apps.py: tens of microseconds at any size). A shape Android's tools do
not write raises UnusualManifest, and android.py reads the file with apkInspector instead.
"""

import struct
from collections.abc import Callable
from typing import Final

__all__ = ["Attributes", "UnusualManifest", "quick_manifest", "typed_value"]

Attributes = dict[int | str, str | int | bool | None]

_STRING_POOL: Final = 0x0001
_START_ELEMENT: Final = 0x0102
_END_ELEMENT: Final = 0x0103
_RESOURCE_MAP: Final = 0x0180
_UTF8_FLAG: Final = 0x100
_NODE_HEADER: Final = 16  # ResXMLTree_node: the chunk header, a line number, a comment
_ATTRIBUTE_SIZE: Final = 20  # ResXMLTree_attribute

_TYPE_REFERENCE: Final = 0x01
_TYPE_ATTRIBUTE: Final = 0x02
_TYPE_STRING: Final = 0x03
_TYPE_INT_DEC: Final = 0x10
_TYPE_INT_HEX: Final = 0x11
_TYPE_INT_BOOLEAN: Final = 0x12
_NO_INDEX: Final = 0xFFFFFFFF

_CHUNK = struct.Struct("<HHI")
_POOL_HEADER = struct.Struct("<IIIII")
_ELEMENT = struct.Struct("<IIHHH")
_ATTRIBUTE = struct.Struct("<IIIHBBI")


class UnusualManifest(Exception):
    """The manifest is not of a shape the quick reading handles: read it in full."""


class _Strings:
    """A string pool whose strings are decoded one at a time, when asked for."""

    __slots__ = ("_data", "_decoded", "_end", "_offsets", "_start", "_utf8")

    def __init__(self, data: bytes, pos: int, header_size: int, size: int) -> None:
        if header_size != 28:
            raise UnusualManifest
        count, _styles, flags, strings_start, _styles_start = _POOL_HEADER.unpack_from(
            data, pos + 8
        )
        if pos + header_size + 4 * count > pos + size or strings_start > size:
            raise UnusualManifest
        self._data = data
        self._offsets = struct.unpack_from(f"<{count}I", data, pos + header_size)
        self._start = pos + strings_start
        self._end = pos + size
        self._utf8 = bool(flags & _UTF8_FLAG)
        self._decoded: dict[int, str] = {}

    def get(self, index: int) -> str | None:
        """The string at `index`; None for an index outside the pool (as apps.py reads one)."""
        if not 0 <= index < len(self._offsets):
            return None
        known = self._decoded.get(index)
        if known is None:
            known = self._decoded[index] = self._decode(self._start + self._offsets[index])
        return known

    def _decode(self, at: int) -> str:
        data = self._data
        if self._utf8:
            # Length in UTF-16 units, then bytes (high bit: two bytes).
            at += 2 if data[at] & 0x80 else 1
            length = data[at]
            if length & 0x80:
                length = ((length & 0x7F) << 8) | data[at + 1]
                at += 1
            at += 1
            end, encoding = at + length, "utf-8"
        else:
            length = data[at] | data[at + 1] << 8
            at += 2
            if length & 0x8000:
                length = ((length & 0x7FFF) << 16) | data[at] | data[at + 1] << 8
                at += 2
            end, encoding = at + 2 * length, "utf-16-le"
        if end > self._end:
            raise UnusualManifest
        try:
            return data[at:end].decode(encoding)
        except UnicodeDecodeError:
            raise UnusualManifest from None


def quick_manifest(data: bytes) -> tuple[Attributes, Attributes, Attributes]:
    """The attributes of <manifest>, its first <uses-sdk> and its first <application> (empty
    when there is none), keyed like apps.py's: an android: attribute by its resource id, any
    other by its name. `data` is a whole compiled manifest whose first header apps.py checked.
    Raises UnusualManifest for anything but the plain shape Android's tools write."""
    try:
        return _walk(data)
    except (struct.error, IndexError):
        raise UnusualManifest from None


def _walk(data: bytes) -> tuple[Attributes, Attributes, Attributes]:
    _kind, pos, end = _CHUNK.unpack_from(data, 0)
    strings: _Strings | None = None
    resource_ids: tuple[int, ...] = ()
    manifest: Attributes | None = None
    uses_sdk: Attributes | None = None
    application: Attributes | None = None
    depth = 0
    while pos + 8 <= end:
        kind, header_size, size = _CHUNK.unpack_from(data, pos)
        if header_size < 8 or size < header_size or pos + size > end:
            raise UnusualManifest
        if kind == _STRING_POOL:
            if strings is not None:
                raise UnusualManifest
            strings = _Strings(data, pos, header_size, size)
        elif kind == _RESOURCE_MAP:
            count = (size - header_size) // 4
            resource_ids = struct.unpack_from(f"<{count}I", data, pos + header_size)
        elif kind == _START_ELEMENT:
            if strings is None or header_size != _NODE_HEADER:
                raise UnusualManifest
            _ns, name, first, each, count = _ELEMENT.unpack_from(data, pos + _NODE_HEADER)
            if first != _ATTRIBUTE_SIZE or each != _ATTRIBUTE_SIZE:
                raise UnusualManifest
            if _NODE_HEADER + first + count * each > size:
                raise UnusualManifest
            at = pos + _NODE_HEADER + first
            if depth == 0 and manifest is None:
                if strings.get(name) != "manifest":
                    raise UnusualManifest  # apps.py words what it is instead
                manifest = _attributes(data, at, count, strings, resource_ids)
            elif depth == 1 and (uses_sdk is None or application is None):
                tag = strings.get(name)
                if tag == "uses-sdk" and uses_sdk is None:
                    uses_sdk = _attributes(data, at, count, strings, resource_ids)
                elif tag == "application" and application is None:
                    application = _attributes(data, at, count, strings, resource_ids)
                if uses_sdk is not None and application is not None:
                    break  # all three found: the rest is never read
            depth += 1
        elif kind == _END_ELEMENT:
            depth = max(depth - 1, 0)
        pos += size
    if manifest is None:
        raise UnusualManifest
    return manifest, uses_sdk or {}, application or {}


def _attributes(
    data: bytes, at: int, count: int, strings: _Strings, resource_ids: tuple[int, ...]
) -> Attributes:
    # android: attributes match by resource id, others by name.
    out: Attributes = {}
    for _ in range(count):
        _ns, name, raw, _size, _res0, kind, value = _ATTRIBUTE.unpack_from(data, at)
        at += _ATTRIBUTE_SIZE
        key: int | str | None = resource_ids[name] if name < len(resource_ids) else None
        if not key:
            key = strings.get(name)
        if key is not None:
            out.setdefault(key, typed_value(kind, value, raw, strings.get))
    return out


def typed_value(
    kind: int, value: int, raw: int, string: Callable[[int], str | None]
) -> str | int | bool | None:
    """An attribute's value from its type, its 32 data bits (unsigned) and its raw string's
    index; `string(index)` is the string pool's string there, or None."""
    if kind == _TYPE_STRING:
        return string(value)
    if kind == _TYPE_INT_DEC:
        return value - (1 << 32) if value & 0x80000000 else value  # signed, as Android reads it
    if kind == _TYPE_INT_HEX:
        return value
    if kind == _TYPE_INT_BOOLEAN:
        return bool(value)
    if kind in (_TYPE_REFERENCE, _TYPE_ATTRIBUTE):
        return None  # a resource reference: its value lives in resources.arsc
    return string(raw) if raw != _NO_INDEX else None
