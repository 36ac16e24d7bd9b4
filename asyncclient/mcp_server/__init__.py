"""The Model Context Protocol server behind `asyncclient mcp`: the service's tools for agents,
plus upload_build, wait_for_runs and download_run_file, all on one AsyncSession. Needs the `mcp`
extra; it imports nothing of `asyncclient.cli` (ARCHITECTURE.md maps its modules)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncclient.mcp_server._base import ServerOptions
    from asyncclient.mcp_server._budget import LIST_BUDGET, MIN_BUDGET, WAIT_BUDGET
    from asyncclient.mcp_server._server import (
        DESTRUCTIVE_TOOLS,
        READ_TOOLS,
        TOOLS,
        TOOLSETS,
        WRITE_TOOLS,
        create_server,
        select_tools,
        serve_http,
        serve_stdio,
    )

# Lazy (PEP 562): a missing extra is said in one line.
_LAZY = {
    "ServerOptions": "asyncclient.mcp_server._base",
    "LIST_BUDGET": "asyncclient.mcp_server._budget",
    "MIN_BUDGET": "asyncclient.mcp_server._budget",
    "WAIT_BUDGET": "asyncclient.mcp_server._budget",
    **dict.fromkeys(
        ("DESTRUCTIVE_TOOLS", "READ_TOOLS", "TOOLS", "TOOLSETS", "WRITE_TOOLS",
         "create_server", "select_tools", "serve_http", "serve_stdio"),
        "asyncclient.mcp_server._server",
    ),
}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "DESTRUCTIVE_TOOLS",
    "LIST_BUDGET",
    "MIN_BUDGET",
    "READ_TOOLS",
    "TOOLS",
    "TOOLSETS",
    "WAIT_BUDGET",
    "WRITE_TOOLS",
    "ServerOptions",
    "create_server",
    "select_tools",
    "serve_http",
    "serve_stdio",
]
