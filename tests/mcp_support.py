"""Driving `asyncclient mcp` as an MCP client does: the command as a real subprocess over
stdio, the mcp SDK's own ClientSession, and every answer kept to check for secrets."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent, Tool

from asyncclient.testing import FakeService

__all__ = ["Calls", "Progress", "by_name", "env_for", "stdio_server", "text_of"]


def env_for(service: FakeService, key: str, tmp_path: Path) -> dict[str, str]:
    env = {
        "ASYNCCLIENT_BASE_URL": service.url,
        "ASYNCCLIENT_API_KEY": key,
        "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
    }
    # The server's trust and proxy, as an agent's configuration would give them.
    for name in ("ASYNCCLIENT_CA_FILE", "HTTPS_PROXY"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


@asynccontextmanager
async def stdio_server(
    service: FakeService, key: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[ClientSession, Path]]:
    """`asyncclient mcp ARGS` over stdio (with `env` besides the service's), initialized;
    yields the session and its stderr file."""
    errlog = tmp_path / f"stderr-{len(list(tmp_path.glob('stderr-*')))}.txt"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "asyncclient", "mcp", "--poll-interval", "0.1", *args],
        env={**env_for(service, key, tmp_path), **(env or {})},
        cwd=tmp_path,
    )
    with errlog.open("w") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            yield client, errlog


class Calls:
    """Every tool answer seen, to check afterwards that no secret is in any of them."""

    def __init__(self, client: ClientSession) -> None:
        self.client = client
        self.texts: list[str] = []

    async def call(self, name: str, arguments: dict[str, Any], **kw: Any) -> CallToolResult:
        result = await self.client.call_tool(name, arguments, **kw)
        self.texts.append(result.model_dump_json())
        return result

    async def ok(self, name: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
        result = await self.call(name, arguments, **kw)
        assert not result.is_error, f"{name}: {text_of(result)}"
        assert result.structured_content is not None
        # The text block carries the same JSON, for clients that read only text.
        assert json.loads(text_of(result)) == result.structured_content
        return result.structured_content

    async def error(self, name: str, arguments: dict[str, Any]) -> str:
        result = await self.call(name, arguments)
        assert result.is_error, f"{name} should have failed: {text_of(result)}"
        return text_of(result)


def text_of(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {tool.name: tool for tool in tools}


class Progress:
    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []
        self.first = asyncio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))
        self.first.set()
