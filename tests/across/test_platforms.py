"""Each platform branch, driven by injection on Linux (a fake msvcrt, a patched sys.platform, a
fake resource module, a loop that cannot watch sockets), never by skipping: the Windows lock
backend, names any platform can store, renames while another program holds a file, console
encodings, the open-files limit, signals, platform folders and the trust store."""

from __future__ import annotations

import asyncio
import errno
import io
import ntpath
import os
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest

from asyncclient._core import _names
from asyncclient._local import _files, _limits, _locks
from asyncclient.cli import _platform
from asyncclient.cli._platform import fit_console_streams, raise_open_files_limit
from asyncclient.errors import LocalFileError, ValidationError

# --- the Windows lock backend, with a fake msvcrt ------------------------------------------------


class FakeMsvcrt:
    """msvcrt.locking's rules: a locked byte range belongs to one descriptor (Windows: one
    handle); LK_NBLCK on a range another holds fails with EACCES at once; closing drops it."""

    LK_UNLCK, LK_LOCK, LK_NBLCK = 0, 1, 2

    def __init__(self) -> None:
        self.held: dict[tuple[int, int, int], int] = {}  # (dev, ino, offset) -> fd
        self.calls: list[tuple[int, int, int]] = []

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, os.lseek(fd, 0, os.SEEK_CUR))
        self.calls.append((mode, key[2], nbytes))
        for held_key, holder in list(self.held.items()):
            try:
                os.fstat(holder)
            except OSError:  # closed: the OS dropped its locks
                del self.held[held_key]
        if mode == self.LK_UNLCK:
            if self.held.get(key) == fd:
                del self.held[key]
            return
        holder = self.held.get(key)
        if holder is not None and holder != fd:
            raise PermissionError(errno.EACCES, "Permission denied")
        self.held[key] = fd


async def test_the_windows_backend_locks_one_byte_past_the_record(tmp_path: Path) -> None:
    fake = FakeMsvcrt()
    backend = _locks.backend_for(None, fake)  # type: ignore[arg-type]
    assert not backend.removes_open_files
    path = tmp_path / "x.lock"
    first = await _locks.claim(path, backend=backend)
    assert first.lock is not None
    assert not first.waited
    # The lock is one byte at 1 GiB: the record at the start stays readable to waiters.
    assert fake.calls[-1] == (FakeMsvcrt.LK_NBLCK, 1 << 30, 1)
    waits: list[int | None] = []
    second = asyncio.create_task(_locks.claim(path, backend=backend, on_wait=waits.append))
    for _ in range(50):
        await asyncio.sleep(0.01)
        if waits:
            break
    assert waits == [os.getpid()]  # it read the holder's pid through the lock
    assert not second.done()
    first.lock.release({"buildId": "ab_1"})
    got = await asyncio.wait_for(second, 5)
    # The waiter takes the holder's outcome instead of doing the work again.
    assert got.lock is None
    assert got.waited
    assert got.outcome is not None
    assert got.outcome["buildId"] == "ab_1"
    assert not path.exists()  # removed once no process held it open
    # A later claim, not waiting, does the work afresh.
    third = await _locks.claim(path, backend=backend)
    assert third.lock is not None
    assert not third.waited
    third.lock.release(None)


async def test_a_windows_waiter_reads_the_outcome_from_a_file_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows refuses to remove a file another process holds open: the holder's removal
    fails while the waiter holds it, and the waiter still takes the last word from it."""
    fake = FakeMsvcrt()
    backend = _locks.backend_for(None, fake)  # type: ignore[arg-type]
    path = tmp_path / "x.lock"
    opened: set[int] = set()
    real_open, real_close, real_unlink = os.open, os.close, os.unlink

    def tracking_open(name: Any, flags: int, mode: int = 0o777) -> int:
        fd = real_open(name, flags, mode)
        opened.add(fd)
        return fd

    def tracking_close(fd: int) -> None:
        opened.discard(fd)
        real_close(fd)

    def refusing_unlink(name: Any) -> None:
        st = os.stat(name)
        for fd in opened:
            with_fd = os.fstat(fd)
            if (with_fd.st_dev, with_fd.st_ino) == (st.st_dev, st.st_ino):
                raise PermissionError(errno.EACCES, "in use", str(name))
        real_unlink(name)

    monkeypatch.setattr(os, "open", tracking_open)
    monkeypatch.setattr(os, "close", tracking_close)
    monkeypatch.setattr(os, "unlink", refusing_unlink)
    first = await _locks.claim(path, backend=backend)
    assert first.lock is not None
    waits: list[int | None] = []
    second = asyncio.create_task(_locks.claim(path, backend=backend, on_wait=waits.append))
    for _ in range(500):  # until the waiter holds the file open and waits: no time window
        if waits:
            break
        await asyncio.sleep(0.01)
    assert waits
    first.lock.release({"size": 42})
    assert path.exists()  # the waiter holds it: not removed
    got = await asyncio.wait_for(second, 5)
    assert got.lock is None
    assert got.outcome is not None
    assert got.outcome["size"] == 42
    assert not path.exists()  # the last one out removed it


def test_neither_lock_module_is_said_in_one_line() -> None:
    with pytest.raises(ImportError, match="neither fcntl nor msvcrt"):
        _locks.backend_for(None, None)


# --- names any platform can store ---------------------------------------------------------------

_WINDOWS_FORBIDDEN = set('<>:"/\\|?*') | {chr(c) for c in range(32)}
_DEVICES = {"CON", "PRN", "AUX", "NUL", *(f"COM{n}" for n in range(1, 10))}
_DEVICES |= {f"LPT{n}" for n in range(1, 10)}


def windows_accepts(name: str) -> bool:
    """Windows' naming rules, as Microsoft's "Naming Files, Paths, and Namespaces" gives them."""
    return (
        bool(name)
        and not (set(name) & _WINDOWS_FORBIDDEN)
        and not name.endswith((".", " "))
        and name.split(".", 1)[0].rstrip(" ").upper() not in _DEVICES
        and len(name.encode("utf-8")) <= 255
    )


@pytest.mark.parametrize(
    ("given", "safe"),
    [
        ("CON.png", "_CON.png"),
        ("con", "_con"),
        ("LPT9.txt", "_LPT9.txt"),
        ("a:b.png", "a_b.png"),
        ("shot2.png.", "shot2.png"),
        ("shot3.png ", "shot3.png"),
        ("..\\..\\evil.png", ".._.._evil.png"),
        ('what?<a|b>"*.png', "what__a_b___.png"),
        ("tab\there.png", "tab_here.png"),
        ("..", "_"),
        ("", "_"),
        ("Anmeldung 日本語 ✓.png", "Anmeldung 日本語 ✓.png"),
        ("e\u0301.png", "\u00e9.png"),  # one normal form (NFC) on every platform
    ],
)
def test_names_are_made_safe_for_every_platform(given: str, safe: str) -> None:
    assert _names.safe_name(given) == safe
    assert windows_accepts(safe)
    # Windows' own path rules keep it one name inside the folder.
    assert ntpath.basename(ntpath.join("C:\\evidence", safe)) == safe
    assert ntpath.dirname(ntpath.join("C:\\evidence", safe)) == "C:\\evidence"


def test_a_long_name_is_cut_and_keeps_its_extension() -> None:
    name = _names.safe_name("ü" * 300 + ".png")
    assert name.endswith(".png")
    assert len(name.encode("utf-8")) <= 255


def test_a_path_cannot_climb_out_of_its_folder() -> None:
    assert _names.safe_relative_path("screenshots/../../CON.png") == "screenshots/_/_/_CON.png"
    assert _names.safe_relative_path("/abs//a:b/./c.png") == "abs/a_b/c.png"


# --- renames while another program holds the file -------------------------------------------------


def _in_use_error() -> PermissionError:
    error = PermissionError(errno.EACCES, "in use")
    error.winerror = 32  # type: ignore[attr-defined]  # ERROR_SHARING_VIOLATION
    return error


def test_a_replace_waits_for_a_file_held_for_a_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = tmp_path / "a.tmp", tmp_path / "a.xml"
    src.write_text("new")
    refusals = [_in_use_error(), _in_use_error()]
    real = os.replace

    def replace(a: Any, b: Any) -> None:
        if refusals:
            raise refusals.pop()
        real(a, b)

    monkeypatch.setattr(os, "replace", replace)
    _files.replace(src, dst, seconds=5)
    assert dst.read_text() == "new"
    assert refusals == []


def test_a_file_held_for_good_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def replace(a: Any, b: Any) -> None:
        raise _in_use_error()

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(LocalFileError) as caught:
        _files.replace(tmp_path / "a.tmp", tmp_path / "report.html", seconds=0.3)
    assert str(caught.value) == (
        f"{tmp_path / 'report.html'} is in use by another program (tried for 0.3 s): close it "
        "and run the same command again"
    )


def test_a_posix_permission_error_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def replace(a: Any, b: Any) -> None:
        calls.append(a)
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PermissionError):
        _files.replace(tmp_path / "a", tmp_path / "b", seconds=5)
    assert len(calls) == 1


# --- console encodings --------------------------------------------------------------------------


def test_a_cp1252_console_gets_escapes_instead_of_an_error() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="cp1252", errors="strict")
    fit_console_streams((stream,))
    print("Anmeldung 日本語 ✓ é ok", file=stream, flush=True)
    assert raw.getvalue().decode("cp1252") == "Anmeldung \\u65e5\\u672c\\u8a9e \\u2713 é ok\n"


# --- the open-files limit -----------------------------------------------------------------------


class FakeResource:
    RLIMIT_NOFILE = 7
    RLIM_INFINITY = -1

    def __init__(self, soft: int, hard: int, refuse_above: int | None = None) -> None:
        self.limits = (soft, hard)
        self.refuse_above = refuse_above

    def getrlimit(self, which: int) -> tuple[int, int]:
        return self.limits

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        if self.refuse_above is not None and limits[0] > self.refuse_above:
            raise ValueError("not allowed")
        self.limits = limits


@pytest.mark.parametrize(
    ("platform", "soft", "hard", "raised"),
    [
        ("darwin", 256, -1, 10240),  # unlimited hard: macOS's OPEN_MAX
        ("darwin", 256, 1 << 20, 10240),
        ("linux", 1024, 524288, 65536),  # enough: not the whole hard limit
        ("linux", 1024, -1, 65536),
        ("linux", 4096, 4096, 4096),  # nothing to raise
    ],
)
def test_the_soft_limit_is_raised_toward_the_hard_one(
    platform: str, soft: int, hard: int, raised: int
) -> None:
    fake = FakeResource(soft, hard)
    assert raise_open_files_limit(fake, platform) == raised
    assert fake.limits == (raised, hard)


def test_a_limit_that_cannot_be_raised_is_kept() -> None:
    fake = FakeResource(256, 100_000, refuse_above=256)
    assert raise_open_files_limit(fake, "darwin") == 256


def test_uploads_fit_the_files_they_may_open() -> None:
    # Room enough: as asked.
    assert _limits.fit_uploads(16, 32, 64, 10_000) == (16, 32)
    # 256 left: 128 parts and 256 builds do not fit; fewer do, and every number is positive.
    parts, builds = _limits.fit_uploads(128, 256, 64, 256)
    assert 1 <= parts <= 128
    assert builds >= 1
    assert min(parts, 64) + builds * _limits.FILES_PER_BUILD <= 256 - 32
    # Unknown (Windows): as asked.
    assert _limits.fit_uploads(400, 800, 64, None) == (400, 800)
    with pytest.raises(ValidationError, match=r"open-files limit .* raise it \(ulimit -n"):
        _limits.fit_uploads(4, 8, 64, 34)


# --- signals and the event loop -------------------------------------------------------------------


def test_sigbreak_stops_a_command_where_it_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signal, "SIGBREAK", signal.SIGUSR1, raising=False)
    import importlib

    platform = importlib.reload(_platform)
    try:
        assert platform.handled_signals() == (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
        assert signal.SIGUSR1 in platform.INTERRUPTS  # exits 130, as Ctrl-C does
    finally:
        monkeypatch.delattr(signal, "SIGBREAK")
        importlib.reload(_platform)
    assert _platform.handled_signals() == (signal.SIGINT, signal.SIGTERM)


def test_a_proactor_loop_keeps_its_own_signal_wakeup() -> None:
    """Windows' proactor loop cannot watch a socket and reads its own wake-up fd: replacing it
    would leave an idle loop deaf to Ctrl-C."""

    class Proactorish:
        def add_reader(self, fd: int, callback: Any) -> None:
            raise NotImplementedError

    import socket

    a, b = socket.socketpair()
    b.setblocking(False)
    try:
        before = signal.set_wakeup_fd(b.fileno(), warn_on_full_buffer=False)
        try:
            with _platform.woken_by_signals(Proactorish()):  # type: ignore[arg-type]
                assert signal.set_wakeup_fd(b.fileno()) == b.fileno()  # still the loop's own
        finally:
            signal.set_wakeup_fd(before)
    finally:
        a.close()
        b.close()


# --- platform folders, the key file's mode, the trust store ---------------------------------------


@pytest.mark.parametrize(
    ("platform", "config", "state"),
    [
        ("darwin", "Library/Application Support/asyncclient", "Library/Caches/asyncclient"),
        ("win32", "AppData/Roaming/asyncclient", "AppData/Local/asyncclient"),
    ],
)  # fmt: skip
def test_folders_are_where_each_platform_keeps_them(
    platform: str,
    config: str,
    state: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import platformdirs

    from asyncclient import config as config_module

    monkeypatch.delenv("ASYNCCLIENT_STATE_DIR", raising=False)
    monkeypatch.setattr(sys, "platform", platform)
    homes = {"config": tmp_path / config, "state": tmp_path / state}
    monkeypatch.setattr(platformdirs, "user_config_path", lambda *a, **k: homes["config"])
    monkeypatch.setattr(platformdirs, "user_state_path", lambda *a, **k: homes["state"])
    assert config_module.user_config_path({}) == homes["config"] / "config.toml"
    assert _locks.state_dir() == homes["state"]
    monkeypatch.setenv("ASYNCCLIENT_STATE_DIR", str(tmp_path / "mine"))
    assert _locks.state_dir() == tmp_path / "mine"


def test_linux_keeps_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncclient import config as config_module

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("ASYNCCLIENT_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert config_module.user_config_path({"XDG_CONFIG_HOME": str(tmp_path / "c")}) == (
        tmp_path / "c" / "asyncclient" / "config.toml"
    )
    assert _locks.state_dir() == tmp_path / "state" / "asyncclient"


def test_a_key_file_mode_is_checked_only_where_modes_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncclient import config as config_module

    user = tmp_path / "config.toml"
    user.write_text('api_key = "k-123"\n')
    user.chmod(0o644)
    monkeypatch.setattr(sys, "platform", "linux")
    with pytest.raises(ValidationError, match="chmod 600"):
        config_module._check_secret_file(user, project=False, line=1)
    monkeypatch.setattr(sys, "platform", "win32")  # no POSIX modes: ACLs guard the profile
    config_module._check_secret_file(user, project=False, line=1)


@pytest.mark.parametrize(
    ("platform", "environ", "ca_file", "chosen"),
    [
        ("darwin", {}, None, "truststore"),
        ("win32", {}, None, "truststore"),
        ("linux", {}, None, "openssl"),
        ("darwin", {}, "corp.pem", "openssl"),  # --ca-file wins
        ("win32", {"SSL_CERT_FILE": "/x.pem"}, None, "openssl"),  # SSL_CERT_FILE wins
        ("darwin", {"SSL_CERT_DIR": "/certs"}, None, "openssl"),
    ],
)
def test_the_trust_store_choice(
    platform: str, environ: dict[str, str], ca_file: str | None, chosen: str
) -> None:
    from asyncclient._client import _network

    assert _network.trust_store(environ, ca_file, platform) == chosen


def test_the_platform_trust_store_is_truststore(monkeypatch: pytest.MonkeyPatch) -> None:
    import truststore

    from asyncclient._client import _network

    context = _network.base_context({}, None, "darwin")
    assert isinstance(context, truststore.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert isinstance(_network.base_context({}, None, "linux"), ssl.SSLContext)
    assert not isinstance(_network.base_context({}, None, "linux"), truststore.SSLContext)
