"""`python -m asyncclient.mcp_server`: the same server as `asyncclient mcp`, with its options."""

import sys

from asyncclient._core._extras import require
from asyncclient.errors import MissingExtraError


def main() -> int:
    try:
        require("the MCP server (python -m asyncclient.mcp_server)", "mcp")
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    from asyncclient.cli import main as command

    return command(["mcp", *sys.argv[1:]])


sys.exit(main())
