"""Every operation of the API, declared once: name, method, path, tool, capability, id kinds.

The session builds its requests from this table, the emulator its routes, and the emulator's
fault conditions name operations by it; adding an operation starts with one row here.
No I/O and no imports from the package: a leaf.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal

import attrs

__all__ = ["API_PREFIX", "OPERATIONS", "Operation", "op"]

API_PREFIX: Final = "/api/v1"

Capability = Literal["any", "run", "edit"]

_PARAM = re.compile(r"\{(\w+)(?::[^}]*)?\}")


@attrs.frozen
class Operation:
    """One operation of the spec.

    name: the tool name where the spec gives one, else the name used for the REST-only one;
    path: below API_PREFIX, with `{param}` placeholders (an aiohttp pattern may follow a colon,
    as in `{file:.+}`); tool: whether the spec offers it as a tool; capability: the least key
    capability it needs; ids: (path parameter, id kind) pairs; idempotency_key: whether it
    accepts an Idempotency-Key header; retry_safe: whether repeating it is harmless.
    """

    name: str
    method: str
    path: str
    tool: bool = True
    capability: Capability = "any"
    ids: tuple[tuple[str, str], ...] = ()
    idempotency_key: bool = False
    retry_safe: bool = True

    @property
    def route(self) -> str:
        """The full route pattern (aiohttp syntax), API_PREFIX included."""
        return API_PREFIX + self.path

    def path_for(self, **params: str) -> str:
        """The path below API_PREFIX with each placeholder replaced by its (quoted) value."""
        return _PARAM.sub(lambda match: params[match.group(1)], self.path)


_TABLE: Final = (
    Operation("list_builds", "GET", "/projects/{project_id}/builds",
              ids=(("project_id", "project"),)),
    Operation("get_build", "GET", "/builds/{build_id}", ids=(("build_id", "build"),)),
    Operation("start_upload", "POST", "/projects/{project_id}/builds", tool=False,
              capability="run", ids=(("project_id", "project"),)),
    Operation("upload_part", "PUT", "/builds/{build_id}/parts/{part_number}", tool=False,
              capability="run", ids=(("build_id", "build"),)),
    Operation("complete_upload", "POST", "/builds/{build_id}/complete", tool=False,
              capability="run", ids=(("build_id", "build"),)),
    Operation("delete_build", "DELETE", "/builds/{build_id}", capability="edit",
              ids=(("build_id", "build"),)),
    Operation("run_test", "POST", "/tests/{test_id}/run", capability="run",
              ids=(("test_id", "test"),), idempotency_key=True),
    Operation("run_project", "POST", "/projects/{project_id}/run", capability="run",
              ids=(("project_id", "project"),), idempotency_key=True),
    Operation("list_runs", "GET", "/runs"),
    Operation("get_run", "GET", "/runs/{run_id}", ids=(("run_id", "run"),)),
    Operation("stop_run", "POST", "/runs/{run_id}/stop", capability="run",
              ids=(("run_id", "run"),)),
    Operation("download_run_file", "GET", "/runs/{run_id}/files/{file:.+}", tool=False,
              ids=(("run_id", "run"),)),
    Operation("list_endpoints", "GET", "/projects/{project_id}/endpoints",
              ids=(("project_id", "project"),)),
    Operation("add_endpoint", "POST", "/projects/{project_id}/endpoints", capability="edit",
              ids=(("project_id", "project"),), retry_safe=False),
    Operation("delete_endpoint", "DELETE", "/endpoints/{endpoint_id}", capability="edit",
              ids=(("endpoint_id", "endpoint"),)),
)  # fmt: skip

#: The operations by name, in the spec's order.
OPERATIONS: Final[Mapping[str, Operation]] = {operation.name: operation for operation in _TABLE}


def op(name: str) -> Operation:
    """The operation of this name (KeyError names the known ones)."""
    try:
        return OPERATIONS[name]
    except KeyError:
        raise KeyError(f"no operation {name!r}; known: {', '.join(OPERATIONS)}") from None
