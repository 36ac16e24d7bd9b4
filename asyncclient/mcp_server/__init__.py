"""The Model Context Protocol server behind `asyncclient mcp`: the service's tools for agents,
plus upload_build, wait_for_runs and download_run_file, all on one AsyncSession. Needs the `mcp`
extra; it imports nothing of `asyncclient.cli` (ARCHITECTURE.md maps its modules)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncclient.mcp_server._base import ServerOptions
    from asyncclient.mcp_server._server import TOOLS, create_server, serve_http, serve_stdio

# Lazy (PEP 562): a missing extra is said in one line.
_LAZY = {
    "ServerOptions": "asyncclient.mcp_server._base",
    **dict.fromkeys(
        ("TOOLS", "create_server", "serve_http", "serve_stdio"), "asyncclient.mcp_server._server"
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["TOOLS", "ServerOptions", "create_server", "serve_http", "serve_stdio"]
