"""Read app files (an Android .apk, a zipped iOS Simulator .app) and check what devices can run:
the client's pre-flight check before an upload, and the emulator's when an upload completes.
Both binary formats are read without an SDK (`android`, `ios`); `devices` checks a profile."""

import os
import struct
import zipfile

from asyncclient.apps._values import (
    ANDROID,
    IOS,
    UNDECODABLE_MEMBER,
    AppError,
    AppInfo,
    Compatibility,
    DeviceProfile,
    Problem,
    shown,
)
from asyncclient.apps.android import inspect_apk
from asyncclient.apps.devices import check_compatibility
from asyncclient.apps.ios import ditto_command, inspect_app_zip

__all__ = [
    "AppError",
    "AppInfo",
    "Compatibility",
    "DeviceProfile",
    "Problem",
    "check_compatibility",
    "inspect_app",
]


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
            advice = f"zip the Simulator .app folder ({ditto_command(display)})"
        raise AppError(f"{display} is not a zip file: {advice}") from exc
    except OSError as exc:
        raise AppError(f"cannot read {display}: {exc.strerror or exc}") from exc
    except (*UNDECODABLE_MEMBER, UnicodeDecodeError, ValueError, EOFError, struct.error) as exc:
        # zipfile's other complaints about a damaged central directory
        raise AppError(f"{display} is a damaged zip file ({shown(str(exc))}): rebuild it") from exc
    with archive:
        if platform == ANDROID:
            return inspect_apk(archive, display)
        return inspect_app_zip(archive, display)


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
