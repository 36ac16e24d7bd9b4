"""Pre-flight, before any request: the file exists, is an app the service takes, and its app id
and version can be read; an .app folder is zipped into a temporary .app.zip."""

import asyncio
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from asyncclient.apps import AppError, AppInfo, inspect_app
from asyncclient.errors import (
    ValidationError,
)

if TYPE_CHECKING:
    pass

from asyncclient.upload._hashing import Hasher, Stopped
from asyncclient.upload._values import CHUNK, LocalBuild

__all__ = ["inspect_build_file"]

log = logging.getLogger("asyncclient.upload")


class TempDirs:
    """The temporary folders of one call (zipped .app folders), removed all together at its end.

    Pre-flight threads run on after a cancelled call: one that asks for a folder after close()
    is refused, so nothing is left behind.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirs: list[Path] = []
        self._closed = False

    def new(self) -> Path:
        with self._lock:
            if self._closed:
                raise Stopped
            made = Path(tempfile.mkdtemp(prefix="asyncclient-app-"))
            self._dirs.append(made)
            return made

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Blocking: remove every folder made so far."""
        with self._lock:
            self._closed = True
            made, self._dirs = self._dirs, []
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


@attrs.define
class Source:
    """A pre-flighted file: what is sent (the file itself or a temporary zip of an .app)."""

    given: Path
    send_path: Path
    file_name: str
    size: int
    mtime_ns: int
    info: AppInfo
    sha256: str | None = None  # known up front only for a zipped folder
    temp_dir: Path | None = None

    def cleanup(self) -> None:
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None


def preflight(path: Path, temps: TempDirs) -> Source:
    """Every local check, with the fix in each message; raises ValidationError. Blocking."""
    shown = os.fspath(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ValidationError(
            f"{shown}: no such file: check the path (give an .apk, an .app.zip or an .app folder)"
        ) from None
    except OSError as exc:
        raise ValidationError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        if not path.name.lower().endswith(".app"):
            raise ValidationError(
                f"{shown} is a folder, not an app: give an .apk, an .app.zip, or the iOS "
                "Simulator .app folder itself"
            )
        return _zip_source(path, temps)
    if not stat.S_ISREG(st.st_mode):
        raise ValidationError(f"{shown} is not a regular file: give the app file itself")
    if st.st_size == 0:
        raise ValidationError(f"{shown} is empty (0 bytes): rebuild the app")
    info = _inspect(path, path.name)
    return Source(path, path, path.name, st.st_size, st.st_mtime_ns, info)


def _inspect(path: Path, file_name: str) -> AppInfo:
    try:
        return inspect_app(path, file_name)
    except AppError as exc:
        raise ValidationError(str(exc)) from None
    except PermissionError:
        raise ValidationError(
            f"cannot read {path}: permission denied: check its permissions"
        ) from None


def _zip_source(app_dir: Path, temps: TempDirs) -> Source:
    temp_dir = temps.new()
    try:
        dest = temp_dir / f"{app_dir.name}.zip"
        digest = _zip_app_dir(app_dir, dest)
        st = dest.stat()
        info = _inspect(dest, dest.name)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return Source(app_dir, dest, dest.name, st.st_size, st.st_mtime_ns, info, digest, temp_dir)


_ZIP_EPOCH: Final = (1980, 1, 1, 0, 0, 0)


def _zip_app_dir(app_dir: Path, dest: Path) -> str:
    """Zip `Name.app/` (the folder itself at the top, like `ditto -ck --keepParent`) to dest and
    return the zip's sha256.

    Byte-for-byte the same for the same folder contents (sorted names, fixed timestamps), so a
    resumed or repeated upload of a folder finds its journal and its existing build.
    """
    top = app_dir.name
    try:
        with zipfile.ZipFile(dest, "w") as archive:
            for root, dirs, files in os.walk(app_dir, onerror=_raise):
                dirs.sort()
                base = Path(root)
                rel = top if base == app_dir else f"{top}/{base.relative_to(app_dir).as_posix()}"
                _zip_member(archive, base, f"{rel}/")
                links = [d for d in dirs if (base / d).is_symlink()]
                dirs[:] = [d for d in dirs if d not in links]
                for name in sorted(files + links):
                    _zip_member(archive, base / name, f"{rel}/{name}")
    except OSError as exc:
        where = exc.filename or app_dir
        raise ValidationError(f"cannot zip {app_dir}: {exc.strerror or exc}: {where}") from None
    digest = hashlib.sha256()
    with dest.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _raise(exc: OSError) -> None:
    raise exc


def _zip_member(archive: zipfile.ZipFile, source: Path, name: str) -> None:
    st = source.lstat()
    info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
    info.create_system = 3  # unix: external_attr carries the mode, so executables stay executable
    info.external_attr = (st.st_mode & 0xFFFF) << 16
    if name.endswith("/"):
        info.external_attr |= 0x10  # MS-DOS directory flag
        archive.writestr(info, b"")
    elif stat.S_ISLNK(st.st_mode):
        archive.writestr(info, os.readlink(source).encode())
    else:
        info.compress_type = zipfile.ZIP_DEFLATED
        info.file_size = st.st_size  # lets zipfile choose zip64 for members over 2 GiB
        with source.open("rb") as src, archive.open(info, "w") as out:
            shutil.copyfileobj(src, out, CHUNK)


async def inspect_build_file(path: "str | os.PathLike[str]", *, sha256: bool = True) -> LocalBuild:
    """The upload pre-flight on its own (no request): read the app and, optionally, hash it.

    An .app folder is zipped as an upload would zip it; the temporary zip is removed again.
    Raises ValidationError with the fix for anything the upload would refuse locally.
    """
    temps = TempDirs()
    try:
        source = await asyncio.to_thread(preflight, Path(path), temps)
        digest = source.sha256
        if sha256 and digest is None:
            hasher = Hasher(source.send_path, source.size)
            try:
                digest = await hasher.result()
            finally:
                await hasher.stop()
        return LocalBuild(source.given, source.file_name, source.size, source.info, digest)
    finally:
        await asyncio.to_thread(temps.close)
