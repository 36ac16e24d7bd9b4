"""Exit codes and the one-line error of every command: the command's own refusals
(CommandError) here, the library's errors worded in asyncclient._wording, which the MCP tool
server shares."""

from __future__ import annotations

import argparse

from asyncclient import _wording
from asyncclient._wording import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_NOT_PASSED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_PASSED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "CommandError",
    "api_key_source",
    "describe_error",
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
    return "--api-key" if getattr(args, "api_key", None) else "ASYNCCLIENT_API_KEY"


def describe_error(exc: BaseException, *, key_source: str | None = None) -> tuple[str, int]:
    """The one-line message and exit code for an exception a command let escape.

    key_source: where the API key came from (api_key_source), named in a 401's advice.
    """
    if isinstance(exc, CommandError):
        return str(exc), exc.exit_code
    return _wording.describe_error(exc, key_source=key_source)
