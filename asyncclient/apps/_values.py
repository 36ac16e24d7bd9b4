"""What the app readers share: the two platforms, the values they return (AppInfo, DeviceProfile,
Problem, Compatibility), AppError, and the bounded read of one zip member."""

import zipfile
import zlib
from collections.abc import Iterable
from typing import Any, Final, Self

import attrs

ANDROID: Final = "android"
IOS: Final = "ios"

# Manifests are kilobytes: bigger is not one (or a bomb).
MAX_MANIFEST_BYTES: Final = 8 << 20
MAX_PLIST_BYTES: Final = 8 << 20
# More slices than this: not a fat header.
MAX_FAT_ARCHS: Final = 32
# zipfile's errors for encrypted or unsupported members.
UNDECODABLE_MEMBER: Final = (RuntimeError,)


class AppError(ValueError):
    """The file is not an app that can be read; ``str(error)`` is one line saying what to fix."""

    def __init__(self, message: str) -> None:
        # Damaged files' names may hold controls.
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


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, display: str, limit: int) -> bytes:
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
    except UNDECODABLE_MEMBER as exc:
        raise AppError(
            f"{display}: {info.filename} cannot be read ({exc}): rebuild the app"
        ) from exc
    if len(data) > limit:
        raise AppError(f"{display}: {info.filename} is over {limit} bytes: rebuild the app")
    return data


def shown(text: str) -> str:
    """Text from a damaged file, made safe to put in a one-line message."""
    return text if text.isprintable() and len(text) <= 80 else repr(text[:80])


def as_text(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value or None
    return None
