"""Exit codes and the one-line error of every command (and of the MCP server's tools): what
an exception that escaped means for the user, and the fix to say with it."""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

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

EXIT_OK = 0
EXIT_NOT_PASSED = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_UNREACHABLE = 4
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


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


def _needs_edit_key(method: str, url: str) -> bool:
    """Whether the request was one of the operations that need an edit key (the API spec:
    Delete a build, Add an endpoint, Delete an endpoint)."""

    path = urlsplit(url).path.rstrip("/")
    return method == "DELETE" or (method == "POST" and path.endswith("/endpoints"))


def describe_error(exc: BaseException, *, key_source: str | None = None) -> tuple[str, int]:
    """The one-line message and exit code for an exception a command let escape.

    key_source: where the API key came from (api_key_source), named in a 401's advice.
    """
    from asyncclient import errors

    if isinstance(exc, CommandError):
        return str(exc), exc.exit_code
    if isinstance(exc, errors.ValidationError):
        return str(exc), EXIT_BAD_INPUT
    if isinstance(exc, errors.UnauthenticatedError):
        if key_source == "--api-key":
            advice = "check the key given with --api-key"
        elif key_source:
            advice = f"check the key in {key_source}"
        else:
            advice = "check the key in --api-key or ASYNCCLIENT_API_KEY"
        return f"{exc}; {advice}", EXIT_REFUSED
    if isinstance(exc, errors.PermissionDeniedError):
        if _needs_edit_key(exc.method, exc.url):
            advice = (
                "use a key that can also create and edit tests (--api-key or ASYNCCLIENT_API_KEY)"
            )
        else:
            # Some services answer 403 for an id of a project the key does not belong to.
            advice = "check the id, and that it belongs to one of this key's projects"
        return f"{exc}; {advice}", EXIT_REFUSED
    if isinstance(exc, errors.BuildRejectedError):
        lines = [str(exc)] + [f"  cannot run: {p.message}" for p in exc.problems]
        return "\n".join(lines), EXIT_REFUSED
    if isinstance(exc, errors.NotStartedError):
        lines = [str(exc)] + [f"  skipped {s.test_id}: {s.reason}" for s in exc.skipped]
        return "\n".join(lines), EXIT_REFUSED
    if isinstance(exc, errors.RedirectError):
        line = f"{exc.status} {errors.reason_phrase(exc.status)}: "
        if exc.location is None:
            return line + "a redirect without a Location; check --base-url", EXIT_REFUSED
        line += f"a redirect to {exc.location}, not followed (the API key goes nowhere else)"
        if exc.suggested_base_url:
            line += f"; if that is the service, use --base-url {exc.suggested_base_url}"
        return line, EXIT_REFUSED
    if isinstance(exc, errors.ApiError):
        return str(exc), EXIT_REFUSED
    if isinstance(exc, errors.TransportError) and exc.kind:
        # A network failure that names its own fix (certificate, proxy, TLS).
        return str(exc), EXIT_UNREACHABLE
    if isinstance(exc, errors.TransportError):
        return (
            f"{exc}; check --base-url or ASYNCCLIENT_BASE_URL and that the service is up",
            EXIT_UNREACHABLE,
        )
    if isinstance(exc, errors.AsyncClientError):
        return str(exc), EXIT_REFUSED
    if isinstance(exc, OSError) and exc.strerror:
        # A local file problem (a folder that cannot be created, a full disk, ...).
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}", EXIT_BAD_INPUT
    raise exc
