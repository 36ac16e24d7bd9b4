"""`asyncclient mcp`: serve the service's tools to agents over the Model Context Protocol.

The server and how it starts live in asyncclient.mcp_server (its options and checks in
`_launch`, which loads no SDK); this module opens the command's session and hands it over.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from asyncclient.cli._common import EXIT_OK, CommandError, add_command, api_key_source, open_session
from asyncclient.cli._options import Connection, Globals, read
from asyncclient.cli._output import Output
from asyncclient.mcp_server._launch import LaunchError, McpOptions, add_arguments, serve

INSTALL_HINT = (
    "asyncclient mcp needs the MCP SDK, which is not installed: pip install 'asyncclient[mcp]'"
)

_EXAMPLES = """\
  asyncclient mcp                                   # stdio: what an MCP client starts
  asyncclient mcp --read-only                       # only the tools that change nothing
  asyncclient mcp --toolsets builds,runs            # only these groups of tools
  asyncclient mcp --tools wait_for_runs,get_run     # only these tools
  asyncclient mcp --toolsets all --exclude-tools delete_build,delete_endpoint
  asyncclient mcp --download-dir ~/run-files        # where download_run_file may write
  asyncclient mcp --http 8765                       # streamable HTTP on 127.0.0.1:8765/mcp

an MCP client's configuration (ASYNCCLIENT_API_KEY stays in the server's environment):
  {"mcpServers": {"test-runs": {"command": "asyncclient",
   "args": ["mcp", "--toolsets", "builds,runs,files"],
   "env": {"ASYNCCLIENT_BASE_URL": "https://service.example.com", "ASYNCCLIENT_API_KEY": "..."}}}}

toolsets: builds (list_builds, get_build, upload_build, delete_build), runs (run_test,
run_project, list_runs, get_run, stop_run, wait_for_runs), endpoints (list_endpoints,
add_endpoint, delete_endpoint), files (download_run_file); all is every tool.
"""


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "mcp",
        parents,
        handler="asyncclient.cli._mcp:mcp",
        help="serve the service's tools to agents (Model Context Protocol)",
        description="Serve the service's tools to AI agents over the Model Context Protocol: "
        "one tool per operation of the service, plus upload_build, wait_for_runs and "
        "download_run_file. Speaks stdio by default (an MCP client starts the command); "
        "--http serves the streamable HTTP transport instead. The API key comes from "
        "--api-key or ASYNCCLIENT_API_KEY and never appears in a tool's answer. "
        "Needs the mcp extra: pip install 'asyncclient[mcp]'.",
        examples=_EXAMPLES,
    )
    add_arguments(p)


def _load_server_module() -> Any:
    """asyncclient.mcp_server, or a CommandError with the install hint when the SDK (or a
    package it needs) is missing."""
    try:
        from asyncclient import mcp_server
        from asyncclient.mcp_server import _server  # noqa: F401 - loads the SDK now
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing == "asyncclient":
            raise
        detail = f" (no module named {exc.name!r})" if exc.name else ""
        raise CommandError(INSTALL_HINT + detail) from None
    return mcp_server


async def mcp(args: argparse.Namespace, out: Output) -> int:
    request_log = logging.getLogger("asyncclient")
    propagates = request_log.propagate
    if read(Globals, args).verbose:
        # Each line once: the request log has its handler.
        request_log.propagate = False
    try:
        return await _serve(args, out)
    finally:
        request_log.propagate = propagates


async def _serve(args: argparse.Namespace, out: Output) -> int:
    opts = read(McpOptions, args)
    _load_server_module()
    async with open_session(args) as session:
        api_key = read(Connection, args).api_key or os.environ.get("ASYNCCLIENT_API_KEY", "")
        try:
            await serve(
                session,
                opts,
                api_key=api_key,
                key_source=api_key_source(args),
                info=out.info,
                always=out.always,
            )
        except LaunchError as exc:
            raise CommandError(str(exc)) from None
    return EXIT_OK
