"""How the tool server starts, whoever starts it (`asyncclient mcp`, `python -m
asyncclient.mcp_server`): its options and their variables, their checks (each refusal one
LaunchError line), the tools chosen, and serving on an open session. Loads no SDK until it
serves, so the command's --help works without the mcp extra.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from asyncclient._core import _defaults as defaults
from asyncclient._core._checks import switch

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "EXCLUDE_ENV",
    "HTTP_TOKEN_ENV",
    "LIST_BUDGET_DEFAULT",
    "MIN_RESULT_CHARS",
    "MIN_TOKEN_CHARS",
    "READ_ONLY_ENV",
    "TOOLSETS_ENV",
    "TOOLS_ENV",
    "LaunchError",
    "McpOptions",
    "add_arguments",
    "choose_tools",
    "is_loopback",
    "options_of",
    "parse_http",
    "serve",
]

DEFAULT_POLL_INTERVAL = defaults.INTERVAL
TOOLSETS_ENV = "ASYNCCLIENT_MCP_TOOLSETS"
TOOLS_ENV = "ASYNCCLIENT_MCP_TOOLS"
EXCLUDE_ENV = "ASYNCCLIENT_MCP_EXCLUDE_TOOLS"
READ_ONLY_ENV = "ASYNCCLIENT_MCP_READ_ONLY"
# The server's defaults, so --help needs no SDK (tested).
LIST_BUDGET_DEFAULT = 16_000
MIN_RESULT_CHARS = 2_000
_LOOPBACK_NAMES = frozenset({"localhost"})


class LaunchError(ValueError):
    """An option or variable the server cannot start with: one line naming the fix."""


@attrs.frozen(kw_only=True)
class McpOptions:
    """The server's own options (the API key and -v are its starter's)."""

    http: str | None = None
    http_token: str | None = attrs.field(default=None, repr=False)
    toolsets: list[str] | None = None
    tools: list[str] | None = None
    exclude_tools: list[str] | None = None
    read_only: bool | None = None
    result_chars: int | None = None
    download_dir: str = "."
    poll_interval: float  # the parser gives it (DEFAULT_POLL_INTERVAL)


def options_of(args: argparse.Namespace) -> McpOptions:
    """The server's options, read off a line add_arguments parsed (the one place that reads it
    for `python -m asyncclient.mcp_server`; the command reads its record as every command does)."""
    given = vars(args)
    return McpOptions(**{field.name: given[field.name] for field in attrs.fields(McpOptions)})


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The server's options, on the parser of whoever starts it."""
    p.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST defaults to "
        "127.0.0.1; PORT 0 picks a free one). Anyone who can reach the address acts with the "
        "API key: off loopback a token is required (--http-token)",
    )
    p.add_argument(
        "--http-token",
        metavar="TOKEN",
        help="with --http: every request must carry Authorization: Bearer TOKEN, else 401 "
        f"(default ${HTTP_TOKEN_ENV}; prefer the variable: flags show in ps). Required when "
        "HOST is not loopback",
    )
    p.add_argument(
        "--toolsets",
        metavar="NAME,...",
        action="append",
        help="offer the tools of these toolsets: builds, runs, endpoints, files, or all "
        f"(default: every tool; env {TOOLSETS_ENV})",
    )
    p.add_argument(
        "--tools",
        metavar="NAME,...",
        action="append",
        help=f"offer these tools, besides those of --toolsets (env {TOOLS_ENV})",
    )
    p.add_argument(
        "--exclude-tools",
        metavar="NAME,...",
        action="append",
        help=f"never offer these tools (env {EXCLUDE_ENV})",
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        default=None,
        help="offer only the tools that change nothing on the service (list, get, "
        "wait_for_runs, flaky_tests, download_run_file); wins over --toolsets and --tools "
        f"(env {READ_ONLY_ENV}=1)",
    )
    p.add_argument(
        "--result-chars",
        metavar="N",
        type=int,
        help="the most characters of one tool result: lists come in pages and long results "
        f"are cut to fit, saying what they left out (default {LIST_BUDGET_DEFAULT:,}; "
        "wait_for_runs and run_project get twice as many)",
    )
    p.add_argument(
        "--download-dir",
        metavar="DIR",
        default=".",
        help="the folder download_run_file saves into; it never writes outside it "
        "(default: the current folder)",
    )
    p.add_argument(
        "--poll-interval",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_POLL_INTERVAL,
        help="seconds between the polls of wait_for_runs; they slow down while nothing "
        f"changes (default {DEFAULT_POLL_INTERVAL:g})",
    )


HTTP_TOKEN_ENV = "ASYNCCLIENT_MCP_HTTP_TOKEN"
MIN_TOKEN_CHARS = 16


def parse_http(value: str) -> tuple[str, int]:
    """`8765`, `:8765`, `HOST:8765` or `[::1]:8765` as (host, port); the host defaults to
    127.0.0.1."""
    text = value.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip()
    if host.startswith("[") and host.endswith("]") and _is_ip(host[1:-1]):
        host = host[1:-1]
    elif ":" in host or "[" in host:
        raise LaunchError(f"--http {value}: write an IPv6 host in brackets, as [::1]:8765")
    try:
        port = int(port_text)
    except ValueError:
        raise LaunchError(
            f"--http {value}: give [HOST:]PORT, such as 8765 or 127.0.0.1:8765"
        ) from None
    if not 0 <= port <= 65535:
        raise LaunchError(f"--http {value}: the port must be from 0 to 65535")
    return host or "127.0.0.1", port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _download_dir(value: str) -> Path:
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise LaunchError(f"--download-dir {value} is not a folder: create it or name another")
    return folder


def _listed(given: list[str] | None, env: str, flag: str) -> tuple[list[str], str]:
    """The names given with a flag (repeatable, comma-separated), else in its variable."""
    if given:
        return given, flag
    value = os.environ.get(env, "")
    return ([value] if value.strip() else []), env


def _read_only(given: bool | None) -> bool:
    if given:
        return True
    value = os.environ.get(READ_ONLY_ENV, "")
    read_only = switch(value)
    if read_only is None:
        raise LaunchError(f"{READ_ONLY_ENV}={value.strip().lower()!r}: give 1 (read-only) or 0")
    return read_only


def choose_tools(server_module: Any, opts: McpOptions) -> tuple[tuple[str, ...], bool]:
    """The tools to offer from --toolsets, --tools, --exclude-tools, --read-only and their
    variables, and whether read-only; an unknown name is a one-line error naming the valid ones."""
    toolsets, toolsets_from = _listed(opts.toolsets, TOOLSETS_ENV, "--toolsets")
    tools, tools_from = _listed(opts.tools, TOOLS_ENV, "--tools")
    exclude, exclude_from = _listed(opts.exclude_tools, EXCLUDE_ENV, "--exclude-tools")
    read_only = _read_only(opts.read_only)
    chosen = server_module.select_tools(
        toolsets=toolsets,
        tools=tools,
        exclude=exclude,
        read_only=read_only,
        flags=(toolsets_from, tools_from, exclude_from),
    )
    return chosen, read_only


def _result_chars(value: int | None) -> int:
    if value is None:
        return LIST_BUDGET_DEFAULT
    if value < MIN_RESULT_CHARS:
        raise LaunchError(
            f"--result-chars {value} is too small: give at least {MIN_RESULT_CHARS:,}"
        )
    return value


def _http_token(opts: McpOptions, http: tuple[str, int] | None) -> str | None:
    """The bearer token the HTTP transport requires: --http-token, else the variable; refused
    (before anything is served) when missing off loopback, blank, or given without --http."""
    token = opts.http_token if opts.http_token is not None else os.environ.get(HTTP_TOKEN_ENV)
    if token is not None:
        token = token.strip()
        if not token:
            raise LaunchError(f"the --http-token ({HTTP_TOKEN_ENV}) is empty: give a token")
        if len(token) < MIN_TOKEN_CHARS:
            raise LaunchError(
                f"the --http-token ({HTTP_TOKEN_ENV}) is too short: give at least "
                f"{MIN_TOKEN_CHARS} characters (python3 -c 'import secrets; "
                "print(secrets.token_urlsafe())')"
            )
    if http is None:
        if opts.http_token is not None:
            raise LaunchError("--http-token goes with --http (stdio needs no token)")
        return None
    host = http[0]
    if token is None and not is_loopback(host):
        raise LaunchError(
            f"--http {opts.http} is not loopback: anyone who can reach it would act with the "
            f"API key; set a token with --http-token or {HTTP_TOKEN_ENV} (clients send "
            "Authorization: Bearer TOKEN), or serve on 127.0.0.1"
        )
    return token


async def serve(
    session: Any,
    opts: McpOptions,
    *,
    api_key: str,
    key_source: str | None,
    info: Callable[[str], None],
    always: Callable[[str], None],
) -> None:
    """Check `opts` (LaunchError before anything is served), then serve the chosen tools on
    `session` over stdio, or streamable HTTP (`opts.http`), until the client goes."""
    import importlib

    # Loaded now: the SDK comes with it (the checks below need none of it).
    mcp_server: Any = importlib.import_module("asyncclient.mcp_server._server")
    http = None if opts.http is None else parse_http(opts.http)
    token = _http_token(opts, http)
    download_dir = _download_dir(opts.download_dir)
    if not opts.poll_interval > 0:
        raise LaunchError(f"--poll-interval {opts.poll_interval:g} must be above 0 seconds")
    tools, read_only = choose_tools(mcp_server, opts)
    result_chars = _result_chars(opts.result_chars)
    options = mcp_server.ServerOptions(
        download_dir=download_dir,
        read_only=read_only,
        tools=tools,
        poll_interval=opts.poll_interval,
        key_source=key_source,
        secrets=[api_key.strip(), *session.network.secrets, *([token] if token else [])],
        result_chars=result_chars,
        wait_result_chars=2 * result_chars,
    )
    server = mcp_server.create_server(session, options)
    count = f"{len(tools)} of {len(mcp_server.TOOLS)} tools"
    mode = "read-only, " if read_only else ""
    if http is None:
        info(f"asyncclient mcp: serving {count} of the Test-Run Service ({mode}stdio)")
        await mcp_server.serve_stdio(server)
        return
    host, port = http

    def announce(line: str) -> None:
        always(f"asyncclient mcp: {mode}{count}, {line}")  # with port 0, the only way to know

    await mcp_server.serve_http(server, host, port, announce, token)
