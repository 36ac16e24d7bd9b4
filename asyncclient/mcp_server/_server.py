"""The server: which tools it offers (toolsets, single tools, read-only), their annotations, and
the stdio and streamable HTTP transports."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
from collections.abc import Callable, Iterable
from typing import Any, Final

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from asyncclient._client._session import AsyncSession
from asyncclient._core._suggest import did_you_mean
from asyncclient._version import __version__
from asyncclient.errors import ValidationError
from asyncclient.mcp_server import _builds, _endpoints, _files, _runs
from asyncclient.mcp_server._base import ServerOptions, ToolKit
from asyncclient.mcp_server._catalogue import CATALOGUE, tools_of

__all__ = [
    "DESTRUCTIVE_TOOLS",
    "READ_TOOLS",
    "TOOLS",
    "TOOLSETS",
    "WRITE_TOOLS",
    "create_server",
    "select_tools",
    "serve_http",
    "serve_stdio",
]

TOOLSETS: Final = {
    toolset: tools_of(toolset) for toolset in ("builds", "runs", "endpoints", "files")
}
"""The tools by resource; `--toolsets` picks among them ("all" is every one)."""
_KITS: Final[dict[str, type[ToolKit]]] = {
    "builds": _builds.BuildTools,
    "runs": _runs.RunTools,
    "endpoints": _endpoints.EndpointTools,
    "files": _files.FileTools,
}
# Every list here comes from the catalogue.
TOOLS: Final = tuple(CATALOGUE)
"""Every tool, in the order of the spec's operations (the server's own where they fit)."""
READ_TOOLS: Final = tuple(name for name, tool in CATALOGUE.items() if tool.reads)
"""Tools that change nothing on the service (download_run_file writes only into the server's
download folder); the only ones `--read-only` offers."""
WRITE_TOOLS: Final = tuple(name for name in TOOLS if name not in READ_TOOLS)
DESTRUCTIVE_TOOLS: Final = frozenset(name for name, tool in CATALOGUE.items() if tool.destructive)

_INSTRUCTIONS = """\
Tools of the Test-Run Service, which runs automated tests against apps and reports a verdict per \
run. Ids carry their kind: p_ project, ab_ build, t_ test, j_ run, ep_ endpoint. The usual job: \
upload_build (an .apk or .app.zip on this machine) -> run_project (or run_test) with that build \
-> wait_for_runs with the started run ids -> read each run's verdict and failed requirements \
with their reasons -> get_run or download_run_file for details. Errors say what to fix. Results \
are kept short: lists come in pages, and leftOut says what a result left out and how to ask for \
it."""


def _names(values: Iterable[str]) -> list[str]:
    """Comma-separated lists, as given on the command line or in the environment."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def select_tools(
    *,
    toolsets: Iterable[str] = (),
    tools: Iterable[str] = (),
    exclude: Iterable[str] = (),
    read_only: bool = False,
    flags: tuple[str, str, str] = ("--toolsets", "--tools", "--exclude-tools"),
) -> tuple[str, ...]:
    """The tools to offer, in TOOLS order: those of `toolsets` and those named in `tools`
    (every tool when both are empty), less `exclude`; with read_only only READ_TOOLS, whatever
    was asked. Values may be comma-separated. An unknown name, or a choice that leaves no tool,
    is a ValidationError naming the flag (`flags`) and the valid names."""
    sets, singles, dropped = _names(toolsets), _names(tools), _names(exclude)
    for name in sets:
        if name != "all" and name not in TOOLSETS:
            raise ValidationError(
                f"{flags[0]} {name}: no such toolset{did_you_mean(name, [*TOOLSETS, 'all'])}; "
                f"the toolsets are {', '.join(TOOLSETS)} (or all)"
            )
    for flag, names in ((flags[1], singles), (flags[2], dropped)):
        for name in names:
            if name not in TOOLS:
                raise ValidationError(
                    f"{flag} {name}: no such tool{did_you_mean(name, TOOLS)}; "
                    f"the tools are {', '.join(TOOLS)}"
                )
    if sets or singles:
        wanted = set(singles)
        for name in sets:
            wanted.update(TOOLS if name == "all" else TOOLSETS[name])
    else:
        wanted = set(TOOLS)
    wanted -= set(dropped)
    if read_only:
        wanted &= set(READ_TOOLS)
    chosen = tuple(name for name in TOOLS if name in wanted)
    if not chosen:
        if read_only:
            raise ValidationError(
                "no tool is left to offer read-only (--read-only or ASYNCCLIENT_MCP_READ_ONLY), "
                f"which keeps only the tools that change nothing: choose among "
                f"{', '.join(READ_TOOLS)}"
            )
        raise ValidationError(f"no tool is left to offer: choose among {', '.join(TOOLS)}")
    return chosen


def create_server(session: AsyncSession, options: ServerOptions) -> MCPServer[Any]:
    """An MCPServer whose tools call `session`: options.tools (every tool when None), and with
    options.read_only only those of READ_TOOLS."""
    server: MCPServer[Any] = MCPServer(
        "asyncclient",
        title="Test-Run Service",
        instructions=_INSTRUCTIONS,
        version=__version__,
        # The SDK's INFO lines repeat what the client is told.
        log_level="WARNING",
    )
    offered = select_tools(tools=options.tools or (), read_only=options.read_only)
    kits = {toolset: kit(session, options) for toolset, kit in _KITS.items()}
    for name in offered:
        tool = CATALOGUE[name]
        fn = getattr(kits[tool.toolset], name)
        read_only = tool.reads and not tool.writes_here
        server.add_tool(
            fn,
            name=name,
            description=_describe(fn),
            annotations=ToolAnnotations(
                title=name.replace("_", " ").capitalize(),
                read_only_hint=read_only,
                destructive_hint=None if read_only else tool.destructive,
                idempotent_hint=None if read_only else tool.idempotent,
                open_world_hint=False,
            ),
        )
    return server


def _describe(fn: Callable[..., Any]) -> str:
    """A tool's description: its docstring as one paragraph per blank-line-separated block."""
    doc = fn.__doc__ or ""
    blocks = [" ".join(block.split()) for block in doc.strip().split("\n\n")]
    return "\n\n".join(block for block in blocks if block)


async def serve_stdio(server: MCPServer[Any]) -> None:
    await server.run_stdio_async()


class BearerToken:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer TOKEN`, else 401
    (compared in constant time, on digests so that not even the length leaks). The token is
    never logged or echoed."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._digest = hashlib.sha256(f"Bearer {token}".encode()).digest()

    def __repr__(self) -> str:
        return "<BearerToken ***>"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers", ()):
                if name.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(hashlib.sha256(given).digest(), self._digest):
                body = json.dumps(
                    {
                        "error": {
                            "code": "unauthenticated",
                            "message": "send the server's token as Authorization: Bearer TOKEN",
                        }
                    }
                ).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="asyncclient mcp"'),
                ]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def serve_http(
    server: MCPServer[Any],
    host: str,
    port: int,
    announce: Callable[[str], None],
    token: str | None = None,
) -> None:
    """Serve the streamable HTTP transport on host:port (0: a free port) until cancelled.

    The socket is bound here so that the address announced is the real one; on a loopback
    host the SDK also refuses requests whose Host or Origin is not loopback (DNS rebinding).
    token: every request must carry `Authorization: Bearer TOKEN` (else 401).
    """
    import uvicorn

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.create_server((host, port), family=family)
    try:
        bound = sock.getsockname()[1]
        app: Any = server.streamable_http_app(host=host)
        if token is not None:
            app = BearerToken(app, token)
        shown = f"[{host}]" if ":" in host else host
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        announce(f"MCP server on http://{shown}:{bound}/mcp (streamable HTTP)")
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
