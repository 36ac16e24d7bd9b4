"""What every command shares: global options, sessions, running a command, its refusals
(CommandError), one-line errors and Ctrl-C; kept free of aiohttp and rich at import time so
that parsing stays quick. Output is `_output`; exit codes and error wording `_core._wording`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from types import FrameType
from typing import Any

from asyncclient._core import _wording
from asyncclient._core._untrusted import block
from asyncclient._core._wording import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_LOCAL_IO,
    EXIT_NOT_PASSED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
)
from asyncclient.cli._connection import add_network_options, open_session
from asyncclient.cli._logging import asked_level, remove_logging, setup_logging
from asyncclient.cli._options import Connection, Globals, read
from asyncclient.cli._output import Output
from asyncclient.cli._platform import INTERRUPTS, handled_signals, woken_by_signals

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_LOCAL_IO",
    "EXIT_NOT_PASSED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "CommandError",
    "add_command",
    "add_global_options",
    "add_group",
    "api_key_source",
    "check_id",
    "describe_error",
    "open_session",
    "run_handler",
]


class CommandError(Exception):
    """A command's own refusal, reported as one line with the given exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def api_key_source(args: argparse.Namespace | None) -> str | None:
    """Where the command's API key came from: "--api-key" or "ASYNCCLIENT_API_KEY" (the flag
    wins, as in open_session); None when unknown."""
    if args is None:
        return None
    return read(Connection, args).key_source


def describe_error(exc: BaseException, *, key_source: str | None = None) -> tuple[str, int]:
    """The one-line message and exit code for an exception a command let escape.

    key_source: where the API key came from (api_key_source), named in a 401's advice.
    """
    if isinstance(exc, CommandError):
        return str(exc), exc.exit_code
    return _wording.describe_error(exc, key_source=key_source)


# What --json prints, worded alike in every help.
JSON_OUTPUT = (
    "JSON with the service's field names (camelCase; snake_case for the endpoint list), "
    "every field present, null when the service did not send it"
)

Handler = Callable[[argparse.Namespace, "Output"], Awaitable[int]]


def add_global_options(
    parser: argparse.ArgumentParser,
    *,
    suppress: bool,
    service: bool = True,
    timeout_alias: bool = True,
) -> None:
    """The options every command accepts, before or after the command name.

    service=False leaves out --base-url and --api-key, for commands that talk to no service;
    timeout_alias=False leaves out --timeout as a name of --request-timeout (run, watch).
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("global options")
    if service:
        group.add_argument(
            "--base-url",
            default=default(None),
            help="service address (default: $ASYNCCLIENT_BASE_URL)",
        )
        group.add_argument(
            "--api-key",
            default=default(None),
            help="API key (default: $ASYNCCLIENT_API_KEY; prefer the variable: flags show in ps)",
        )
    if service:
        add_network_options(parser, default, timeout_alias=timeout_alias)
    group.add_argument(
        "--profile",
        metavar="NAME",
        default=default(None),
        help="use the [profiles.NAME] of the configuration files (default: $ASYNCCLIENT_PROFILE)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help=f"machine-readable output on stdout: {JSON_OUTPUT}",
    )
    group.add_argument(
        "-q", "--quiet", action="store_true", default=default(False), help="no progress output"
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help="log every request to stderr (secrets redacted)",
    )


def add_command(
    sub: Any,
    name: str,
    parents: Sequence[argparse.ArgumentParser],
    *,
    handler: str,
    help: str,
    description: str | None = None,
    examples: str = "",
    uses_service: bool = True,
    brief: Collection[str] = (),
) -> argparse.ArgumentParser:
    """A sub-command whose handler ("module:function") is imported only when it runs.

    uses_service=False (serve, demo, inspect): the command talks to no service, so instead of
    `parents` it takes the global options without --base-url and --api-key, which would mean
    nothing there and only mislead in its --help.

    brief: the options (by dest) its --help shows, for a command with many: every other one
    is in --help-all, and a configuration file's profile sets it once (BriefHelp).
    """
    if not uses_service:
        local = argparse.ArgumentParser(add_help=False)
        add_global_options(local, suppress=True, service=False)
        parents = [local]
    epilog = ("examples:\n" + examples) if examples else None
    formatter: type[argparse.HelpFormatter] = argparse.RawDescriptionHelpFormatter
    if brief:
        formatter = type("Brief", (BriefHelp,), {"shown": frozenset({*brief, "help", "help_all"})})
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        parents=list(parents),
        help=help,
        description=description or help,
        epilog=(epilog or "") + _MORE if brief else epilog,
        formatter_class=formatter,
    )
    if brief:
        parser.add_argument(
            "--help-all", action=_HelpAll, epilog=epilog, help="show every option and exit"
        )
    parser.set_defaults(handler=handler)
    return parser


_MORE = """
More options (re-run strategy and budget, fail-fast, quarantine, categories, baseline,
reuse, new tests, fleet, network, --json): %(prog)s --help-all. A project sets
them once in asyncclient.toml, as [run] or [profiles.NAME.run] keys (--profile NAME).
"""


class BriefHelp(argparse.RawDescriptionHelpFormatter):
    """A command's help showing only the options a person types (`shown`, by dest); the
    parser still reads every other one."""

    shown: frozenset[str] = frozenset()

    def add_usage(
        self,
        usage: str | None,
        actions: Iterable[argparse.Action],
        groups: Iterable[Any],
        prefix: str | None = None,
    ) -> None:
        super().add_usage(usage, [a for a in actions if a.dest in self.shown], groups, prefix)

    def add_arguments(self, actions: Iterable[argparse.Action]) -> None:
        super().add_arguments([a for a in actions if a.dest in self.shown])


class _HelpAll(argparse.Action):
    """--help-all: the command's whole help (every option), then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, epilog: str | None, **kw: Any):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)
        self.epilog = epilog

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = self.epilog
        parser.print_help()
        parser.exit()


def add_group(
    sub: Any,
    name: str,
    parents: Sequence[argparse.ArgumentParser] = (),
    *,
    help: str,
    examples: str = "",
) -> Any:
    """A command with sub-commands of its own (`builds list`, `runs get`, ...).

    `parents` (the global options, with suppressed defaults) let them also stand between the
    group and its sub-command: `asyncclient builds --json list p_1`.
    """
    parser = sub.add_parser(
        name,
        parents=list(parents),
        help=help,
        description=help,
        epilog=("examples:\n" + examples) if examples else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
    group.required = True
    return group


def check_id(value: str, kind: str, argument: str | None = None) -> str:
    """`value` if it is an id of `kind` ("project", "build", "test", "run", "endpoint").

    The library's own check (asyncclient._core._checks.check_id), so the command refuses exactly
    what the session would; `argument` names the flag or argument in the message (default the
    positional's name, such as RUN_ID). A refusal is a ValidationError: exit 2, nothing sent.
    """
    from asyncclient._core._checks import check_id as protocol_check_id

    return protocol_check_id(kind, value, argument or f"{kind.upper()}_ID")


def resolve_handler(spec: str) -> Handler:
    module, _, name = spec.partition(":")
    handler: Handler = getattr(importlib.import_module(module), name)
    return handler


def run_handler(args: argparse.Namespace) -> int:
    """Run the command's coroutine; map what escapes to a one-line error and an exit code.

    The first Ctrl-C (or SIGTERM) cancels the command, which cleans up (stops runs, keeps the
    upload journal) and ends with 130 (143); a second one exits at once, after printing what
    the cleanup left undone (Output.note_on_forced_exit). A command whose normal end is a
    signal (`serve`: its parser sets `ends_on_signal`) ends with 0 instead.
    """
    from asyncclient.cli._options import Globals, read
    from asyncclient.errors import ValidationError

    given = read(Globals, args)
    out = Output(json_mode=given.json, quiet=given.quiet)

    try:
        level = asked_level(args)
    except ValidationError as exc:  # the one-line error, exit 2
        print(block(f"error: {exc}"), file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    log_handler = setup_logging(given.verbose, quiet=given.quiet, level=level)
    try:
        return _run_handler(args, out)
    finally:
        remove_logging(log_handler)


def _run_handler(args: argparse.Namespace, out: Output) -> int:
    handler = resolve_handler(args.handler)
    interrupted = False
    exit_code = EXIT_INTERRUPTED
    ends_on_signal = read(Globals, args).ends_on_signal

    async def main() -> int:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            nonlocal interrupted, exit_code
            if interrupted:
                _exit_now(exit_code, out.forced_exit_notes())
            interrupted = True
            if ends_on_signal:
                # Its banner's way to stop it: not an error.
                exit_code = EXIT_OK
                line = "" if out.stderr_is_terminal else None
            else:
                # SIGTERM (a cancelled CI job) cleans up like Ctrl-C.
                interrupt = signum in INTERRUPTS
                exit_code = EXIT_INTERRUPTED if interrupt else 128 + signum
                name = "interrupted" if interrupt else "terminated"
                line = f"\n{name}: cleaning up (Ctrl-C again to exit at once)"
            # Said from the loop: a buffered stream refuses reentrant writes.
            loop.call_soon_threadsafe(_say_and_cancel, line, task)

        # Only the main thread may set signal handlers.
        if threading.current_thread() is not threading.main_thread():
            return await handler(args, out)
        previous = {sig: signal.signal(sig, on_signal) for sig in handled_signals()}
        try:
            with woken_by_signals(loop):
                return await handler(args, out)
        finally:
            for sig, old_handler in previous.items():
                signal.signal(sig, old_handler)

    try:
        return asyncio.run(main())
    except (asyncio.CancelledError, KeyboardInterrupt):
        return exit_code
    except Exception as exc:
        if is_broken_pipe(exc):
            return quiet_broken_pipe()
        message, code = describe_error(exc, key_source=api_key_source(args))
        if interrupted:
            return exit_code
        out.error(message)
        return code


def _say_and_cancel(line: str | None, task: asyncio.Task[Any]) -> None:
    if line is not None:
        print(block(line), file=sys.stderr, flush=True)
    task.cancel()


def _exit_now(code: int, notes: Sequence[str]) -> None:
    """Exit the process at once (a second Ctrl-C), after writing `notes` to stderr.

    os.write, not print: this runs in a signal handler, which may have interrupted a print
    to the same stream, and a buffered stream refuses a reentrant write.
    """
    if notes:
        with contextlib.suppress(OSError):
            # A new line first: the terminal echoed ^C.
            os.write(2, ("\n" + "\n".join(notes) + "\n").encode("utf-8", "replace"))
    os._exit(code)


def is_broken_pipe(exc: BaseException) -> bool:
    """True for a BrokenPipeError, alone or inside an exception group (a TaskGroup's)."""
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(BrokenPipeError) is not None
    return False


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (`asyncclient runs list | head -1`): exit quietly.

    As the Python docs advise (signal module, "Note on SIGPIPE"): stdout is pointed at devnull
    so that the interpreter's final flush of what is still buffered cannot fail again, and the
    exit code is 141 (128 + SIGPIPE), what a shell shows for a writer ended by SIGPIPE.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass  # stdout is no file descriptor: nothing to redirect
    return EXIT_BROKEN_PIPE
