"""Every operation of the API, declared once: name, title, method, path, tool, capability.

The session builds its requests from this table, the emulator its routes, and the emulator's
fault conditions name operations by it; adding an operation starts with one row here.
No I/O and no imports from the package: a leaf.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Final, Literal

import attrs

__all__ = ["API_PREFIX", "OPERATIONS", "Operation", "op"]

API_PREFIX: Final = "/api/v1"

Capability = Literal["any", "run", "edit"]
Resource = Literal["builds", "runs", "endpoints"]

_PARAM = re.compile(r"\{(\w+)(?::[^}]*)?\}")


@functools.cache
def _template(path: str) -> str:
    """The path as a str.format template: `{file:.+}` (aiohttp's route syntax) as `{file}`."""
    return _PARAM.sub(lambda match: "{" + match.group(1) + "}", path)


@attrs.frozen
class Operation:
    """One operation of the spec.

    Attributes:
        name: The tool name where the spec gives one, else the name of the REST-only one.
        title: The spec's heading of it, which the emulator's refusals name.
        method: The HTTP method.
        path: Below API_PREFIX, with `{param}` placeholders (an aiohttp pattern may follow a
            colon, as in `{file:.+}`).
        tool: Whether the spec offers it as a tool.
        capability: The least key capability it needs; the emulator refuses a run-only key
            an "edit" operation from this field alone.
        retry_safe: Whether repeating it is harmless (the session retries only those).
        resource: The spec's section it belongs to: builds, runs or (tester) endpoints.
        destructive: Whether it takes something away (a build, an endpoint, a run's chance
            to finish): an agent's client asks before such a tool.
        streams: Whether its body or its answer streams (a part, a file): timed by idle time
            (no data moving), not by a total.
    """

    name: str
    title: str
    method: str
    path: str
    tool: bool = True
    capability: Capability = "any"
    retry_safe: bool = True
    resource: Resource = "runs"
    destructive: bool = False
    streams: bool = False

    @property
    def reads(self) -> bool:
        """Whether it changes nothing on the service (a GET)."""
        return self.method == "GET"

    @property
    def route(self) -> str:
        """The full route pattern (aiohttp syntax), API_PREFIX included."""
        return API_PREFIX + self.path

    def path_for(self, **params: str) -> str:
        """The path below API_PREFIX with each placeholder replaced by its (quoted) value."""
        return _template(self.path).format_map(params)


_TABLE: Final = (
    Operation("list_builds", "List builds", "GET", "/projects/{project_id}/builds",
              resource="builds"),
    Operation("get_build", "Get a build", "GET", "/builds/{build_id}", resource="builds"),
    Operation("start_upload", "Start a build upload", "POST", "/projects/{project_id}/builds",
              tool=False, capability="run", resource="builds"),
    Operation("upload_part", "Upload a build part", "PUT",
              "/builds/{build_id}/parts/{part_number}",
              tool=False, capability="run", resource="builds", streams=True),
    Operation("complete_upload", "Complete a build upload", "POST", "/builds/{build_id}/complete",
              tool=False, capability="run", resource="builds"),
    Operation("delete_build", "Delete a build", "DELETE", "/builds/{build_id}",
              capability="edit", resource="builds", destructive=True),
    Operation("run_test", "Run a test", "POST", "/tests/{test_id}/run",
              capability="run"),
    Operation("run_project", "Run a project", "POST", "/projects/{project_id}/run",
              capability="run"),
    Operation("list_runs", "List runs", "GET", "/runs"),
    Operation("get_run", "Get a run", "GET", "/runs/{run_id}"),
    Operation("stop_run", "Stop a run", "POST", "/runs/{run_id}/stop",
              capability="run", destructive=True),
    Operation("download_run_file", "Download a run file", "GET", "/runs/{run_id}/files/{file:.+}",
              tool=False, streams=True),
    Operation("list_endpoints", "List endpoints", "GET", "/projects/{project_id}/endpoints",
              resource="endpoints"),
    Operation("add_endpoint", "Add an endpoint", "POST", "/projects/{project_id}/endpoints",
              capability="edit", retry_safe=False, resource="endpoints"),
    Operation("delete_endpoint", "Delete an endpoint", "DELETE", "/endpoints/{endpoint_id}",
              capability="edit", resource="endpoints", destructive=True),
)  # fmt: skip

#: The operations by name, in the spec's order.
OPERATIONS: Final[Mapping[str, Operation]] = {operation.name: operation for operation in _TABLE}


def op(name: str) -> Operation:
    """The operation of this name (KeyError names the known ones)."""
    try:
        return OPERATIONS[name]
    except KeyError:
        raise KeyError(f"no operation {name!r}; known: {', '.join(OPERATIONS)}") from None
