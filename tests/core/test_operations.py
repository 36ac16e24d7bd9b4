"""The operation table is the one home of each operation's facts: the spec's tools, the
session's methods and the emulator's routes all agree with it."""

from __future__ import annotations

import pytest
from spec_support import _shape, spec_operations

from asyncclient import AsyncSession
from asyncclient._core._operations import API_PREFIX, OPERATIONS, op
from asyncclient.testing import OPERATIONS as FAULTABLE
from asyncclient.testing import FakeService


def test_the_table_is_the_specs_operations_and_tools() -> None:
    """Every operation of the spec is a row (its method, path, heading and tool), and every
    row is one of the spec's: nothing hand-written to update when the spec grows."""
    spec = spec_operations()
    table = {
        (row.method, _shape(API_PREFIX + row.path)): (row.title, row.name if row.tool else None)
        for row in OPERATIONS.values()
    }
    assert table == spec


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_the_session_has_a_method_per_operation(name: str) -> None:
    assert callable(getattr(AsyncSession, name))


def test_paths_fill_in_their_ids() -> None:
    assert op("upload_part").path_for(build_id="ab_1", part_number="3") == "/builds/ab_1/parts/3"
    assert (
        op("download_run_file").path_for(run_id="j_1", file="a/b.png") == "/runs/j_1/files/a/b.png"
    )
    assert op("add_endpoint").retry_safe is False
    with pytest.raises(KeyError, match="known: list_builds"):
        op("no_such_operation")


async def test_the_emulators_routes_are_the_table() -> None:
    assert set(FAULTABLE) == set(OPERATIONS)
    async with FakeService(clock="manual") as svc:
        app = svc._runner.app  # type: ignore[union-attr]
        routes = {
            route.name: (route.method, route.resource.canonical)
            for route in app.router.routes()
            if route.name in OPERATIONS
        }
    assert routes == {
        name: (operation.method, API_PREFIX + operation.path.replace("{file:.+}", "{file}"))
        for name, operation in OPERATIONS.items()
    }


def test_the_tool_lists_come_from_the_operation_table() -> None:
    """Each of the spec's tools is its operation's row: its toolset the operation's resource,
    read-only exactly when it is a GET, destructive when the row says so; the server's own
    tools are rows of the catalogue. No list is kept by hand."""
    pytest.importorskip("mcp")
    from asyncclient.mcp_server._catalogue import CATALOGUE
    from asyncclient.mcp_server._server import DESTRUCTIVE_TOOLS, READ_TOOLS, TOOLS, TOOLSETS

    spec = [name for name, operation in OPERATIONS.items() if operation.tool]
    assert [name for name in TOOLS if name in spec] == spec  # in the spec's order
    for name in spec:
        operation, tool = OPERATIONS[name], CATALOGUE[name]
        assert tool.toolset == operation.resource
        assert (name in READ_TOOLS) == (operation.method == "GET")
        assert (name in DESTRUCTIVE_TOOLS) == operation.destructive
    assert set(TOOLS) - set(spec) == {"upload_build", "wait_for_runs", "flaky_tests",
                                       "failure_clusters", "fleet_status", "verify_fix",
                                       "bisect", "exonerate", "download_run_file"}  # fmt: skip
    assert sorted(n for names in TOOLSETS.values() for n in names) == sorted(TOOLS)
