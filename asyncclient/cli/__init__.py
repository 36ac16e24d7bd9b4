"""The `asyncclient` command: argument parsing and dispatch to the command modules.

Only argparse and the light command modules load at start-up; aiohttp and rich load when a
command needs them, so `asyncclient --help` stays quick.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import NoReturn

from asyncclient._core._suggest import closest, did_you_mean
from asyncclient._core._untrusted import block
from asyncclient._version import __version__
from asyncclient.cli._common import JSON_OUTPUT, add_global_options

# Each module has register(subparsers, parents); its handler is imported lazily.
_COMMAND_MODULES = (
    "asyncclient.cli._upload",
    "asyncclient.cli._run",
    "asyncclient.cli._builds",
    "asyncclient.cli._runs",
    "asyncclient.cli._flaky",
    "asyncclient.cli._failures",
    "asyncclient.cli._quarantine",
    "asyncclient.cli._download",
    "asyncclient.cli._endpoints",
    "asyncclient.cli._mcp",
    "asyncclient.cli._serve",
    "asyncclient.cli._demo",
    "asyncclient.cli._config",
    "asyncclient.cli._fleet",
    "asyncclient.cli._bisect",
)

_EPILOG = """\
examples:
  asyncclient demo                                  # a tour against the embedded emulator
  export ASYNCCLIENT_BASE_URL=https://service.example.com ASYNCCLIENT_API_KEY=...
  BUILD=$(asyncclient upload p_123 app.apk --label "$GIT_SHA")
  asyncclient run project p_123 --build "$BUILD" --wait --junit report.xml
  asyncclient runs list --project p_123 --status failed --json

{json_output}

exit codes: 0 ok, 1 a run did not pass, a test did not start or the watch timed out,
2 bad input (nothing sent), 3 the service refused, 4 the service could not be reached,
5 a local file could not be written (disk full, permissions), 130 interrupted, 141 the reader
of stdout went away (`| head`)
"""


_INVALID_CHOICE = re.compile(
    r"(?P<head>argument [^:]+: )invalid choice: '(?P<value>.*)' \(choose from (?P<choices>.*)\)$"
)
_QUOTED = re.compile(r"'([^']*)'")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors that never echo stray values (a mistyped flag may be
    followed by a secret) and that suggest the option meant."""

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            words = message[len(prefix) :].split()
            flags = [w.partition("=")[0] for w in words if w.startswith("-")]
            hidden = len(words) - len(flags)
            shown = " ".join(flags)
            if hidden:
                shown = f"{shown} ({hidden} more value(s), not shown)".lstrip()
            message = prefix + shown
            known = self._option_strings()
            # A flag's name is no secret: a looser match is fine.
            meant = [m for f in flags if f not in known and (m := closest(f, known, cutoff=0.6))]
            if meant:
                message += f" (did you mean {' '.join(meant)}?)"
            for flag in (f for f in flags if f in known):
                takers = ", ".join(repr(c) for c in self._commands_taking(flag)[:3])
                where = f"is an option of {takers}, not this one" if takers else "goes first"
                message += f" ({flag} {where})"
        choice = _INVALID_CHOICE.match(message)
        if choice:
            # May be a secret: named only when near a choice.
            value, choices = choice["value"], _QUOTED.findall(choice["choices"])
            hint = did_you_mean(value, choices)
            message = (
                f"{choice['head']}invalid choice '{value}'{hint}"
                if hint
                else f"{choice['head']}invalid choice (choose from {choice['choices']})"
            )
        self.exit(2, f"error: {message}; see '{self.prog} --help'\n")

    def _commands_taking(self, flag: str) -> list[str]:
        """The commands (as typed) among this parser's sub-commands that take `flag`."""
        found: list[str] = []
        for action in self._actions:
            choices = action.choices if isinstance(action.choices, dict) else {}
            for parser in dict.fromkeys(choices.values()):
                if isinstance(parser, _Parser):
                    if flag in parser._option_string_actions:
                        found.append(parser.prog)
                    found += parser._commands_taking(flag)
        return list(dict.fromkeys(found))

    def _option_strings(self) -> set[str]:
        """Every option of this parser and of its sub-commands, for suggestions."""
        found = set(self._option_string_actions)
        for action in self._actions:
            # A sub-commands action holds the parsers it chooses between.
            choices = action.choices if isinstance(action.choices, dict) else {}
            for parser in choices.values():
                if isinstance(parser, _Parser):
                    found |= parser._option_strings()
        return found


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="asyncclient",
        description="Upload app builds, start test runs and follow them on the Test-Run Service.",
        epilog=_EPILOG.format(json_output=textwrap.fill(f"--json output: {JSON_OUTPUT}.", 90)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"asyncclient {__version__}")
    # Before the command, --timeout is --request-timeout.
    add_global_options(parser, suppress=False, timeout_alias=False)
    # Globals after the command too, defaults suppressed.
    common = _Parser(add_help=False)
    add_global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub, [common])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code."""
    from asyncclient.cli._common import EXIT_BAD_INPUT, quiet_broken_pipe, run_handler
    from asyncclient.cli._platform import fit_console_streams, raise_open_files_limit

    fit_console_streams()
    raise_open_files_limit()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help/--version
        return int(exc.code or 0) if exc.code in (0, None) else EXIT_BAD_INPUT
    except BrokenPipeError:  # `asyncclient --help | head -1`
        return quiet_broken_pipe()
    args.argv = list(sys.argv[1:] if argv is None else argv)
    from asyncclient._core._extras import require
    from asyncclient.cli._config import apply_config
    from asyncclient.errors import MissingExtraError, ValidationError

    try:
        # The display needs the cli extra.
        require("the asyncclient command", "cli", "rich")
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT

    try:
        apply_config(args, args.argv)
    except ValidationError as exc:
        print(block(f"error: {exc}"), file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    return run_handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
