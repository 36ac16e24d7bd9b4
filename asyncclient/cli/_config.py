"""`asyncclient config show` and `config path`, and applying the configuration files to a
command line (asyncclient.config): a flag or a variable wins over a file, a file over the
default."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asyncclient._core._config_keys import COMMAND_KEYS, GLOBAL_KEYS
from asyncclient.cli._common import EXIT_OK, add_command, add_group
from asyncclient.cli._options import Globals, read
from asyncclient.cli._output import Output
from asyncclient.config import Config, config_paths, load_config

_EXAMPLES = """\
  asyncclient config show                      # each setting and where it came from
  asyncclient config show --profile ci --json
  asyncclient config path                      # the files it would read
"""


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = add_group(
        sub,
        "config",
        parents,
        help="show the settings from asyncclient.toml, pyproject.toml and the user's file",
        examples=_EXAMPLES,
    )
    add_command(
        group,
        "show",
        parents,
        handler="asyncclient.cli._config:show",
        help="each effective setting and where it came from (flag, variable, file:line, "
        "default); the API key only as set or not",
        examples=_EXAMPLES,
    )
    add_command(
        group,
        "path",
        parents,
        handler="asyncclient.cli._config:path",
        help="the configuration files read, in order, and whether each is there",
        examples=_EXAMPLES,
        uses_service=False,
    )


def _given(argv: Sequence[str], flag: str | None) -> bool:
    if flag is None:
        return False
    return any(token == flag or token.startswith(flag + "=") for token in argv)


def apply_config(args: argparse.Namespace, argv: Sequence[str]) -> Config:
    """Fill what the command line and the environment left unset from the files; returns the
    configuration read. Raises ValidationError (exit 2) for a mistake in a file."""
    line = read(Globals, args)
    flags = _flag_values(args, argv)
    table = line.command or ""
    given = [
        f"{table}.{name}"
        for name, key in COMMAND_KEYS.get(table, {}).items()
        if _given(argv, key.flag)
    ]
    config = load_config(line.profile, flags=flags, given=given)
    args.log_setting = config.settings.get("log")  # ASYNCCLIENT_LOG or `log` (run_handler)
    if line.verbose and config.files:
        files_read = ", ".join(str(path) for path in config.files)
        profile = f" (profile {config.profile})" if config.profile else ""
        print(f"config: read {files_read}{profile}", file=sys.stderr, flush=True)
    # The files fill what the line left unset, for this parser.
    parsed = vars(args)
    for name, setting in config.settings.items():
        if not _from_file(setting.origin, config) or name not in parsed:
            continue
        if parsed[name] is None:
            value = setting.value
            parsed[name] = os.fspath(value) if isinstance(value, Path) else value
    from_a_file = config.api_key_origin not in (None, "ASYNCCLIENT_API_KEY", "--api-key")
    if config.api_key_set and not parsed.get("api_key") and from_a_file:
        args.api_key = config.session_options()["api_key"]
        args.api_key_origin = config.api_key_origin
    args.api_key_hint = config.missing_key_hint
    args.fleet_config = config.commands.get("fleet", {})  # asyncclient.cli._fleet reads it
    # Tables named after commands (`run`: test and project).
    if table in COMMAND_KEYS:
        keys = COMMAND_KEYS[table]
        for name, setting in config.commands.get(table, {}).items():
            key = keys[name]
            if _given(argv, key.flag) or (key.env and os.environ.get(key.env, "").strip()):
                continue
            if name not in parsed:
                continue
            value = setting.value
            if isinstance(value, Path):
                value = os.fspath(value)
            if key.kind == "list":
                value = [",".join(value)]
            parsed[name] = value
    return config


def _from_file(origin: str, config: Config) -> bool:
    return any(origin.startswith(str(path)) for path in config.files)


async def show(args: argparse.Namespace, out: Output) -> int:
    line = read(Globals, args)
    config = load_config(line.profile, flags=_flag_values(args, line.argv or sys.argv[1:]))
    rows: list[tuple[str, Any, str]] = []
    for name, key in GLOBAL_KEYS.items():
        if name == "api_key":
            rows.append((name, "set" if config.api_key_set else "not set",
                         config.api_key_origin or "default"))  # fmt: skip
            continue
        setting = config.settings.get(name)
        if setting is None:
            rows.append((name, key.default, "default"))
        else:
            value = setting.value
            rows.append((name, os.fspath(value) if isinstance(value, Path) else value,
                         setting.origin))  # fmt: skip
    for command, settings in config.commands.items():
        for name, setting in settings.items():
            value = setting.value
            shown = os.fspath(value) if isinstance(value, Path) else value
            rows.append((f"{command}.{name}", shown, setting.origin))
    if out.json_mode:
        out.json(
            {
                "files": [str(path) for path in config.files],
                "profile": config.profile,
                "settings": {name: {"value": v, "origin": o} for name, v, o in rows},
            }
        )
        return EXIT_OK
    if config.profile:
        out.data(f"profile: {config.profile}")
    out.data("files: " + (", ".join(str(p) for p in config.files) or "none"))
    width = max(len(name) for name, _, _ in rows)
    for name, value, origin in rows:
        shown = "" if value is None else str(value)
        out.data(f"{name.ljust(width)}  {shown}  ({origin})")
    return EXIT_OK


def _flag_values(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """The global options given on the line (`argv`), by their configuration keys."""
    parsed = vars(args)
    return {
        name: parsed.get(name) if _given(argv, key.flag) else None
        for name, key in GLOBAL_KEYS.items()
    }


async def path(args: argparse.Namespace, out: Output) -> int:
    for file, there in config_paths():
        out.data(f"{file}  ({'read' if there else 'not there'})")
    return EXIT_OK
