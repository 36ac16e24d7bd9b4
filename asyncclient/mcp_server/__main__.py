"""`python -m asyncclient.mcp_server`: the tool server on its own, started here: the options of
`asyncclient mcp`, the API key, address, trust and proxy from the environment (as an MCP
client's configuration gives them), no command line behind it."""

import argparse
import asyncio
import logging
import sys

from asyncclient._core._extras import require
from asyncclient._core._wording import describe_error
from asyncclient.errors import MissingExtraError
from asyncclient.mcp_server._launch import LaunchError, add_arguments, options_of, serve

_KEY_SOURCE = "ASYNCCLIENT_API_KEY"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m asyncclient.mcp_server",
        description="Serve the Test-Run Service's tools to AI agents over the Model Context "
        "Protocol (stdio, or streamable HTTP with --http): the server of `asyncclient mcp`, "
        "on its own. The API key and address come from ASYNCCLIENT_API_KEY and "
        "ASYNCCLIENT_BASE_URL (trust and proxy from ASYNCCLIENT_CA_FILE, HTTPS_PROXY, ...); "
        "the key never appears in a tool's answer.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log each request on standard error"
    )
    add_arguments(parser)
    return parser


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # standard output is the protocol's (stdio)


async def _serve(parsed: argparse.Namespace) -> None:
    import os

    from asyncclient import AsyncSession

    opts = options_of(parsed)
    async with AsyncSession() as session:
        key = os.environ.get(_KEY_SOURCE, "")
        await serve(session, opts, api_key=key, key_source=_KEY_SOURCE, info=_say, always=_say)


def main(argv: list[str] | None = None) -> int:
    parsed = _parser().parse_args(argv)
    try:
        require("the MCP server (python -m asyncclient.mcp_server)", "mcp")
    except MissingExtraError as exc:
        _say(f"error: {exc}")
        return 2
    if parsed.verbose:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
        logging.getLogger("asyncclient").setLevel(logging.DEBUG)
    try:
        asyncio.run(_serve(parsed))
    except KeyboardInterrupt:
        return 130
    except LaunchError as exc:
        _say(f"error: {exc}")
        return 2
    except Exception as exc:
        message, code = describe_error(exc, key_source=_KEY_SOURCE)
        _say(f"error: {message}")
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
