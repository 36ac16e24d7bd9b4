"""Every tool the server offers, one table: the spec's tools from their operations' rows
(_core._operations: resource, reads, destructive) and the server's own tools (upload_build,
wait_for_runs, download_run_file, flaky_tests, failure_clusters, verify_fix, bisect,
exonerate, fleet_status);
the tool lists, toolsets and annotations are read from it alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from asyncclient._core._operations import OPERATIONS, Operation

__all__ = ["CATALOGUE", "Tool", "tools_of"]


@attrs.frozen
class Tool:
    """One tool.

    Attributes:
        name: Its name (an operation's, for the spec's tools).
        toolset: builds, runs, endpoints or files: what `--toolsets` picks.
        reads: It changes nothing on the service (the only tools `--read-only` offers).
        destructive: It takes something away (its client asks first).
        idempotent: Called again with the same arguments, it changes nothing more.
        writes_here: It writes on this machine (the server's download folder), so it is not
            announced as read-only although it changes nothing on the service.
    """

    name: str
    toolset: str
    reads: bool
    destructive: bool = False
    idempotent: bool = False
    writes_here: bool = False


def _of(operation: Operation) -> Tool:
    # A deletion or stop done twice is a no-op.
    return Tool(
        operation.name,
        operation.resource,
        operation.reads,
        operation.destructive,
        idempotent=operation.destructive,
    )


# Our own tools, each after the operation it follows.
_OWN: Final = (
    ("get_build", Tool("upload_build", "builds", reads=False, idempotent=True)),
    ("stop_run", Tool("wait_for_runs", "runs", reads=True)),
    ("wait_for_runs", Tool("flaky_tests", "runs", reads=True)),
    ("flaky_tests", Tool("download_run_file", "files", reads=True, idempotent=True,
                         writes_here=True)),
    ("flaky_tests", Tool("verify_fix", "runs", reads=False)),
    ("verify_fix", Tool("bisect", "runs", reads=False)),
    ("bisect", Tool("exonerate", "runs", reads=False)),
    ("flaky_tests", Tool("failure_clusters", "runs", reads=True)),
    ("failure_clusters", Tool("fleet_status", "runs", reads=True)),
)  # fmt: skip


def _catalogue() -> dict[str, Tool]:
    tools = [_of(operation) for operation in OPERATIONS.values() if operation.tool]
    for after, tool in _OWN:
        at = next(i for i, t in enumerate(tools) if t.name == after)
        tools.insert(at + 1, tool)
    return {tool.name: tool for tool in tools}


CATALOGUE: Final[Mapping[str, Tool]] = _catalogue()
"""Every tool by name, in the order the server lists them."""


def tools_of(toolset: str) -> tuple[str, ...]:
    """The names of a toolset's tools, in the catalogue's order."""
    return tuple(name for name, tool in CATALOGUE.items() if tool.toolset == toolset)
