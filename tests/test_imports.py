"""The package's import graph has no circles, lazy imports inside functions included (only
`if TYPE_CHECKING:` imports are exempt), and each module's docstring says what it is for."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "asyncclient"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for other in node.orelse:
                yield from _imports(other)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def _resolve(importer: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:
        package = (
            importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
        )
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        yield candidate if candidate in MODULES else base


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for node in _imports(tree):
            for target in _resolve(name, node):
                while target and target not in MODULES:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circles() -> None:
    cycle = find_cycle(edges())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_walker_sees_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_says_its_concern(name: str) -> None:
    text = MODULES[name].read_text()
    doc = ast.get_docstring(ast.parse(text))
    assert doc, f"{name} has no docstring"
    # A module of more than about 400 lines says in its docstring why it stays one module.
    if len(text.splitlines()) > 420:
        assert "Over 400 lines" in doc or "over 400 lines" in doc, f"{name}: say why it is long"


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        node = todo.pop()
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_tool_server_stands_beside_the_cli_not_on_it() -> None:
    # Split by resource, each module small enough to read; the wording both share lives below
    # both (asyncclient._wording), so nothing of the server reaches asyncclient.cli.
    graph = edges()
    server = sorted(name for name in MODULES if name.startswith("asyncclient.mcp_server"))
    assert {
        "asyncclient.mcp_server._builds",
        "asyncclient.mcp_server._runs",
        "asyncclient.mcp_server._endpoints",
        "asyncclient.mcp_server._files",
    } <= set(server)
    for name in server:
        assert len(MODULES[name].read_text().splitlines()) <= 600, name
        reached = _reachable(graph, name)
        assert not {m for m in reached if m.startswith("asyncclient.cli")}, name
    assert "asyncclient._wording" in _reachable(graph, "asyncclient.mcp_server")
    assert "asyncclient._wording" in _reachable(graph, "asyncclient.cli._common")
