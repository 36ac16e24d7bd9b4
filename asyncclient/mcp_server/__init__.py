"""The Model Context Protocol server behind `asyncclient mcp`: the service's tools for agents,
plus upload_build, wait_for_runs and download_run_file, all on one AsyncSession.

Needs the `mcp` extra (`pip install 'asyncclient[mcp]'`); asyncclient.cli imports only
`_launch` (the server's options and how it starts, no SDK), so the base install never loads
the SDK. It imports nothing from `asyncclient.cli`, `__main__` included: the wording both share
is in `asyncclient._core._wording`.

One module per toolset (`_builds`, `_runs`, `_endpoints`, `_files`), each with its tools'
schemas and descriptions; `_base` holds what they share (argument types, the bounded and
scrubbed answer, progress), `_budget` the size rules every result keeps, `_wait` the shape of
wait_for_runs, `_server` the choice of tools and the transports, `_launch` the options and
the start (shared with `asyncclient mcp`).
"""

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
