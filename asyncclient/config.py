"""Settings in files, with profiles, read the way CI tools and Python projects expect:
`asyncclient.toml`, `[tool.asyncclient]` in `pyproject.toml`, the user's file; a flag beats an
environment variable, which beats a file, which beats the default."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from asyncclient._core._config_keys import COMMAND_KEYS, GLOBAL_KEYS, TYPE_WORDS, Key
from asyncclient._core._suggest import closest
from asyncclient.errors import ValidationError

__all__ = ["Config", "Setting", "config_paths", "load_config"]

PROFILE_ENV: Final = "ASYNCCLIENT_PROFILE"
PROJECT_FILE: Final = "asyncclient.toml"
ALLOW_OUTSIDE_ENV: Final = "ASYNCCLIENT_ALLOW_OUTSIDE_PATHS"
"""Set to 1 to let a project file name report, evidence and download paths outside its
repository (the paths a command writes; a pull request can change that file)."""
# The keys whose path a command writes to (reports, evidence, downloads).
WRITTEN_PATHS: Final = frozenset(
    {
        "junit",
        "html",
        "ctrf",
        "allure_results",
        "events",
        "download_failed",
        "download_dir",
        "write_quarantine",
    }
)


@attrs.frozen
class Setting:
    """An effective value and where it came from: "--flag", "ENV_NAME", "FILE:LINE" or
    "default"."""

    value: Any
    origin: str


@attrs.frozen
class _Layer:
    """The values one file gives, with the line of each (profile values first)."""

    path: Path
    values: Mapping[str, tuple[Any, int]]  # "key" or "command.key" -> (value, line)


@attrs.frozen
class Config:
    """The files read and the settings they give, resolved with the environment.

    `settings`: every global key that has a value ("api_key" is never here, only
    `api_key_set`/`api_key_origin`); `commands`: per command, its keys that a file set;
    `files`: the files read, project file first."""

    files: tuple[Path, ...]
    profile: str | None
    settings: Mapping[str, Setting]
    commands: Mapping[str, Mapping[str, Setting]]
    api_key_origin: str | None
    _api_key: str | None = attrs.field(default=None, repr=False)

    @property
    def api_key_set(self) -> bool:
        return self._api_key is not None

    @property
    def missing_key_hint(self) -> str | None:
        """When no key was found but a file names a variable for it (api_key_env): the
        one-line fix naming that variable and the file, for the "no API key" error."""
        named = self.settings.get("api_key_env")
        if self._api_key is not None or named is None:
            return None
        return f"set {named.value} (api_key_env in {named.origin}) or ASYNCCLIENT_API_KEY"

    def session_options(self) -> dict[str, Any]:
        """AsyncSession keyword arguments from these settings (the key included)."""
        names = {
            "request_timeout": "timeout",
            "retries": "max_retries",
        }
        options: dict[str, Any] = {}
        for key, setting in self.settings.items():
            if key in ("api_key_env", "log"):  # the CLI's, not the session's
                continue
            value = setting.value
            options[names.get(key, key)] = os.fspath(value) if isinstance(value, Path) else value
        if self._api_key is not None:
            options["api_key"] = self._api_key
        return options

    def command(self, name: str) -> dict[str, Any]:
        """The values the files give the command `name` (run, watch, upload, download, mcp)."""
        return {key: setting.value for key, setting in self.commands.get(name, {}).items()}


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's own file: $XDG_CONFIG_HOME/asyncclient/config.toml (default
    ~/.config/...) on Linux, ~/Library/Application Support/asyncclient/config.toml on macOS,
    %APPDATA%\\asyncclient\\config.toml on Windows (platformdirs)."""
    if sys.platform in ("darwin", "win32"):
        import platformdirs

        folder = Path(platformdirs.user_config_path("asyncclient", appauthor=False))
        return folder / "config.toml"
    environ = os.environ if environ is None else environ
    xdg = environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "asyncclient" / "config.toml"


def config_paths(
    start: str | os.PathLike[str] = ".", environ: Mapping[str, str] | None = None
) -> list[tuple[Path, bool]]:
    """The files load_config would read, in order (project, then user), each with whether
    it is there: the project candidates looked at up to the repository root, then the user's."""
    found: list[tuple[Path, bool]] = []
    project = _project_file(Path(start))
    if project is not None:
        found.append((project, True))
    else:
        found.append((Path(start).absolute() / PROJECT_FILE, False))
    user = user_config_path(environ)
    found.append((user, user.is_file()))
    return found


def _parents(start: Path) -> list[Path]:
    """start and its parents up to the first holding .git (included) or the root."""
    folders: list[Path] = []
    for folder in [start.absolute(), *start.absolute().parents]:
        folders.append(folder)
        if (folder / ".git").exists():
            break
    return folders


def _project_file(start: Path) -> Path | None:
    folders = _parents(start)
    for folder in folders:
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            return candidate
    for folder in folders:
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "tool" in (data := _read(candidate)):
            tool = data["tool"]
            if isinstance(tool, dict) and "asyncclient" in tool:
                return candidate
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8 TOML"
        ) from None
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ValidationError(f"{path}: nested too deeply to be a configuration file") from None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_of_error(str(exc))
        where = f"{path}:{line}" if line else str(path)
        detail = str(exc).split(" (at line", 1)[0]
        raise ValidationError(f"{where}: not valid TOML ({detail}); fix the file") from None


def _line_of_error(message: str) -> int | None:
    found = re.search(r"at line (\d+)", message)
    return int(found.group(1)) if found else None


def _lines(path: Path, prefix: tuple[str, ...]) -> dict[str, int]:
    """The line of each key set in the file: "key", "run.key", "profiles.ci.key" (without the
    `prefix` table, e.g. ("tool", "asyncclient") in pyproject.toml)."""
    lines: dict[str, int] = {}
    table: list[str] = []
    header = re.compile(r"^\s*\[+\s*([^\]]+?)\s*\]+")
    assignment = re.compile(r"^\s*([A-Za-z0-9_.\"-]+)\s*=")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return lines
    for number, raw in enumerate(text.splitlines(), 1):
        if match := header.match(raw):
            table = [part.strip().strip('"') for part in match.group(1).split(".")]
            continue
        if match := assignment.match(raw):
            names = table + [p.strip().strip('"') for p in match.group(1).split(".")]
            if tuple(names[: len(prefix)]) != prefix:
                continue
            lines.setdefault(".".join(names[len(prefix) :]), number)
    return lines


def _check_type(
    path: Path,
    name: str,
    key: Key,
    value: Any,
    line: int | None,
    *,
    confine: bool = False,
) -> Any:
    where = f"{path}:{line}" if line else str(path)
    kind = key.kind
    ok = (
        (kind in ("str", "path") and isinstance(value, str))
        or (kind == "int" and isinstance(value, int) and not isinstance(value, bool))
        or (kind == "float" and isinstance(value, int | float) and not isinstance(value, bool))
        or (kind == "bool" and isinstance(value, bool))
        or (kind == "list" and isinstance(value, list) and all(isinstance(v, str) for v in value))
    )
    if not ok:
        raise ValidationError(
            f"{where}: {name} must be {TYPE_WORDS[kind]}, got {type(value).__name__} {value!r}"[
                :300
            ]
        )
    if kind == "path":
        if confine and name.rsplit(".", 1)[-1] in WRITTEN_PATHS:
            return _inside_repository(path, name, value, where)
        candidate = Path(value).expanduser()
        return candidate if candidate.is_absolute() else (path.parent / candidate)
    if kind == "float":
        return float(value)
    return value


def repository_root(path: Path) -> Path:
    """The git work tree that holds a file (the nearest folder with `.git`), else its folder."""
    folder = path.absolute().parent
    for candidate in [folder, *folder.parents]:
        if (candidate / ".git").exists():
            return candidate
    return folder


_VCS_FOLDERS = frozenset({".git", ".hg", ".svn", ".bzr", "_darcs", ".jj", ".pijul", "CVS"})


def _inside_repository(path: Path, name: str, value: str, where: str) -> Path:
    """A path that a project file names for a command to write: it must stay inside the
    file's repository (no absolute path, no `~`, no `..` or symlink that climbs out) and out
    of its version control's own folders (`.git/config` runs code on the next git command)."""
    root = repository_root(path)
    candidate = path.absolute().parent / value
    problem = None
    if value.startswith("~"):
        problem = "starts at a home folder"
    elif Path(value).is_absolute() or Path(value).drive or value.startswith(("/", "\\")):
        problem = "is absolute"
    else:
        real_root = Path(os.path.realpath(root))
        real = Path(os.path.realpath(candidate))
        if not real.is_relative_to(real_root):
            problem = "leads outside the repository"
        elif vcs := _VCS_FOLDERS.intersection(real.relative_to(real_root).parts):
            problem = f"is inside the repository's {sorted(vcs)[0]} folder"
    if problem is None:
        return candidate
    raise ValidationError(
        f"{where}: {name} = {value!r} {problem} ({root}); a project file may only name paths "
        f"inside its repository: give the path as a flag or in your own config file, or set "
        f"{ALLOW_OUTSIDE_ENV}=1"
    )


def _unknown(path: Path, name: str, known: list[str], line: int | None) -> ValidationError:
    where = f"{path}:{line}" if line else str(path)
    meant = closest(name.rsplit(".", 1)[-1], known, cutoff=0.6)
    hint = f": did you mean {meant}?" if meant else f" (known: {', '.join(sorted(known))})"
    return ValidationError(f"{where}: unknown key {name}{hint}")


def _layer(
    path: Path,
    *,
    profile: str | None,
    project: bool,
    confine: bool = False,
    given: Collection[str] = (),
) -> tuple[_Layer, list[str]]:
    """The values of one file, its profile's over its top level; and its profiles' names."""
    data = _read(path)
    prefix: tuple[str, ...] = ()
    if path.name == "pyproject.toml":
        prefix = ("tool", "asyncclient")
        table = data.get("tool", {}).get("asyncclient", {})
        if not isinstance(table, dict):
            raise ValidationError(f"{path}: [tool.asyncclient] must be a table")
        data = table
    lines = _lines(path, prefix)
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
        raise ValidationError(f"{path}: profiles must be tables: [profiles.NAME]")
    values: dict[str, tuple[Any, int]] = {}

    def take(table: dict[str, Any], at: str) -> None:
        for name, value in table.items():
            if at == "" and name == "profiles":
                continue
            dotted = f"{at}{name}"
            line = lines.get(dotted, 0)
            if name in COMMAND_KEYS and isinstance(value, dict):
                keys = COMMAND_KEYS[name]
                for sub, subvalue in value.items():
                    subline = lines.get(f"{dotted}.{sub}", line)
                    if sub not in keys:
                        raise _unknown(path, f"{name}.{sub}", list(keys), subline)
                    checked = _check_type(
                        path,
                        f"{name}.{sub}",
                        keys[sub],
                        subvalue,
                        subline,
                        # A path given on the line is never written.
                        confine=confine and f"{name}.{sub}" not in given,
                    )
                    values.setdefault(f"{name}.{sub}", (checked, subline))
                continue
            if name not in GLOBAL_KEYS:
                raise _unknown(path, name, [*GLOBAL_KEYS, *COMMAND_KEYS], line)
            if name == "api_key":
                _check_secret_file(path, project=project, line=line)
            checked = _check_type(path, name, GLOBAL_KEYS[name], value, line, confine=confine)
            values.setdefault(name, (checked, line))

    if profile is not None and profile in profiles:
        take(profiles[profile], f"profiles.{profile}.")
    take(data, "")
    return _Layer(path, values), list(profiles)


def _check_secret_file(path: Path, *, project: bool, line: int) -> None:
    where = f"{path}:{line}" if line else str(path)
    if project:
        raise ValidationError(
            f"{where}: api_key does not belong in a project file (it is committed and "
            "shared): set ASYNCCLIENT_API_KEY, or name the variable that holds the key with "
            "api_key_env"
        )
    if sys.platform == "win32":
        return  # no POSIX modes: the profile's ACL guards it
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValidationError(
            f"{where}: the file holds api_key but others can read it; run: chmod 600 {path}"
        )


def load_config(
    profile: str | None = None,
    start: str | os.PathLike[str] = ".",
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    given: Collection[str] = (),
) -> Config:
    """Read the project and user files (see the module's docstring) and resolve every setting:
    `flags` (key -> value given on a command line; None: not given) > the environment > the
    project file > the user file. profile: the profile to use (default ASYNCCLIENT_PROFILE);
    one no file defines is refused, naming the known ones. Raises ValidationError for any
    mistake in a file.

    Args:
        profile: The `[profiles.NAME]` to use. Default: `$ASYNCCLIENT_PROFILE`, else none.
        start: The folder to look for the project file from.
        environ: The environment to read (default: `os.environ`).
        flags: Settings given on a command line, by key (None: not given); they win over
            everything else.
        given: The command keys (`run.html`) the command line gives: a project file's path
            for one of them is never used, so it is not held to the repository.

    Returns:
        The `Config`: each setting with its origin (`file:line`, a variable, a flag).

    Raises:
        ValidationError: A mistake in a file (naming the file and line), or a profile no file
            defines (naming the known ones).
    """
    environ = os.environ if environ is None else environ
    flags = flags or {}
    if profile is None:
        profile = environ.get(PROFILE_ENV) or None
    project = _project_file(Path(start))
    user = user_config_path(environ)
    layers: list[_Layer] = []
    known_profiles: set[str] = set()
    for path, is_project in ((project, True), (user if user.is_file() else None, False)):
        if path is None:
            continue
        confine = is_project and environ.get(ALLOW_OUTSIDE_ENV, "").strip() not in ("1", "true")
        layer, names = _layer(
            path, profile=profile, project=is_project, confine=confine, given=given
        )
        layers.append(layer)
        known_profiles.update(names)
    if profile is not None and profile not in known_profiles:
        shown = ", ".join(sorted(known_profiles)) or "none"
        read = ", ".join(str(layer.path) for layer in layers) or "no file was found"
        raise ValidationError(
            f"unknown profile {profile!r}: the profiles defined are {shown} ({read})"
        )

    def from_files(name: str) -> Setting | None:
        for layer in layers:
            if name in layer.values:
                value, line = layer.values[name]
                return Setting(value, f"{layer.path}:{line}" if line else str(layer.path))
        return None

    settings: dict[str, Setting] = {}
    for name, key in GLOBAL_KEYS.items():
        if name == "api_key":
            continue
        if flags.get(name) is not None and key.flag:
            settings[name] = Setting(flags[name], key.flag)
        elif key.env and environ.get(key.env, "").strip():
            settings[name] = Setting(_from_env(key, environ[key.env].strip()), key.env)
        elif (found := from_files(name)) is not None:
            settings[name] = found
    api_key, api_origin = _api_key(flags, environ, settings, from_files)
    commands: dict[str, dict[str, Setting]] = {}
    for command, keys in COMMAND_KEYS.items():
        for name in keys:
            found = from_files(f"{command}.{name}")
            if found is not None:
                commands.setdefault(command, {})[name] = found
    return Config(
        files=tuple(layer.path for layer in layers),
        profile=profile,
        settings=settings,
        commands=commands,
        api_key_origin=api_origin,
        api_key=api_key,
    )


def _from_env(key: Key, text: str) -> Any:
    """A variable's text as the key's type; text that is not is kept as it is, for the
    session (or the command) to refuse with its own message naming the variable."""
    with contextlib.suppress(ValueError):
        if key.kind == "int":
            return int(text)
        if key.kind == "float":
            return float(text)
    return Path(text).expanduser() if key.kind == "path" else text


def _api_key(
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    settings: Mapping[str, Setting],
    from_files: Any,
) -> tuple[str | None, str | None]:
    """The key and where it came from: --api-key, ASYNCCLIENT_API_KEY, the variable that
    api_key_env names, or the user file."""
    if flags.get("api_key"):
        return str(flags["api_key"]), "--api-key"
    if environ.get("ASYNCCLIENT_API_KEY", "").strip():
        return environ["ASYNCCLIENT_API_KEY"], "ASYNCCLIENT_API_KEY"
    named = settings.get("api_key_env")
    if named is not None:
        variable = str(named.value)
        if environ.get(variable, "").strip():
            return environ[variable], f"{variable} (api_key_env, {named.origin})"
    found = from_files("api_key")
    if found is not None:
        return str(found.value), found.origin
    return None, None
