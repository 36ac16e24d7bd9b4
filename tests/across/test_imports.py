"""The package's import graph has no circles, lazy imports inside functions and type-only ones
(`if TYPE_CHECKING:`) included; the layers are folders and a lower layer never imports a higher
one; no module imports a private name of another; each module's docstring says what it is for,
none has over 600 lines of code, and ARCHITECTURE.md names every one."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "asyncclient"


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


def _imports(tree: ast.AST, *, types: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if not types and isinstance(node, ast.If) and _is_type_checking(node):
            for other in node.orelse:
                yield from _imports(other)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node, types=types)


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


def edges(*, types: bool = False) -> dict[str, set[str]]:
    """Who imports whom, lazy imports inside functions included; with `types`, imports made
    only for type checkers too. No arrow is left out."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for node in _imports(tree, types=types):
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


# The layers, lowest first (ARCHITECTURE.md draws them). A module may import its own layer and
# the ones below, never one above: lazy imports inside functions and type-only ones included.
LAYERS = (
    # values: the public records and the error tree, app files, and the readers they use
    ("asyncclient._version", "asyncclient.errors", "asyncclient.models", "asyncclient.apps",
     "asyncclient._values"),
    # the rules without I/O: the operations, the checks, the wire, the retry policy, decoding
    ("asyncclient._core",),
    # this machine: files, locks, limits, bodies read from disk
    ("asyncclient._local",),
    # the workflows the session hands work to, and the configuration files
    ("asyncclient.upload", "asyncclient.watch", "asyncclient.flakiness", "asyncclient.config",
     "asyncclient.eta", "asyncclient.failures"),
    # reaching the service: the transport, the network, downloads, AsyncSession
    ("asyncclient._client",),
    # the CI loop's policies: re-runs, the quarantine, the loop of the action and the template,
    # the fleet's ledger
    ("asyncclient.reruns", "asyncclient.quarantine", "asyncclient.ci", "asyncclient.spend",
     "asyncclient.fleet"),
    # what a finished suite reads like, and the loop that follows one to it
    ("asyncclient._reports", "asyncclient.suite"),
    # the integrations: the command, the tool server, the emulator, the package's front
    ("asyncclient.cli", "asyncclient.mcp_server", "asyncclient.testing", "asyncclient.__main__",
     "asyncclient"),
)  # fmt: skip


def layer_of(module: str) -> int:
    """The layer of a module: that of the longest prefix LAYERS names."""
    best, found = -1, None
    for rank, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), rank
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


TOP_LEVEL_LIMIT = 12


def test_the_layers_are_folders_and_few_modules_sit_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, top
    for package in ("_values", "_core", "_local", "_client"):
        doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
        assert doc is not None
        assert "May import" in doc, f"asyncclient.{package} must say what it may import"


def test_the_rules_layer_runs_nothing() -> None:
    """`_core` holds rules without I/O: none of its modules imports asyncio, aiohttp, a socket
    or a thread (a batch of tasks belongs to `_local`, a request to `_client`)."""
    running = {"asyncio", "aiohttp", "socket", "threading", "aiofiles", "subprocess"}
    found = [
        f"{name} imports {imported}"
        for name, path in MODULES.items()
        if name.startswith("asyncclient._core.")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for imported in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        if imported.split(".")[0] in running
    ]
    assert found == []


def test_a_lower_layer_never_imports_a_higher_one() -> None:
    wrong = [
        f"{importer} (layer {layer_of(importer)}) imports {imported} (layer {layer_of(imported)})"
        for importer, targets in edges(types=True).items()
        for imported in targets
        if layer_of(imported) > layer_of(importer)
    ]
    assert wrong == []


def test_the_layer_test_sees_a_wrong_import() -> None:
    assert layer_of("asyncclient._core._wire") < layer_of("asyncclient._client._session")
    assert layer_of("asyncclient.cli._run") == len(LAYERS) - 1


def private_names_imported() -> list[str]:
    """`from M import _name` across modules, where `_name` is not a module of its own: a
    private name stays in its file, or becomes a public name of its (private) module."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            if not node.module.startswith("asyncclient"):
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and f"{node.module}.{alias.name}" not in MODULES:
                    found.append(f"{name}: {node.module}.{alias.name}")
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    assert private_names_imported() == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


DOCUMENTED = {"os._exit"}  # public API despite the underscore (the library reference says so)


def foreign_private_names(source: str) -> list[str]:
    """Each private name of another package the source takes: imported (`import re._parser`,
    `from re import _constants`, `from opentelemetry.metrics._internal import X`), or read off
    a module it imported (`trace._TRACER_PROVIDER`, `getattr(metrics, "_internal")`)."""
    found = []
    modules: set[str] = set()  # local names bound to another package's modules
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "asyncclient":
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    found.append(f"{node.lineno} import {alias.name}")
                modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            root = node.module.split(".")[0]
            if root in ("asyncclient", "__future__"):
                continue
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno} from {node.module}")
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno} from {node.module} import {alias.name}")
                modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and f"{node.value.id}.{node.attr}" not in DOCUMENTED
        ):
            found.append(f"{node.lineno} {node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in modules
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            found.append(f"{node.lineno} {node.func.id}({node.args[0].id}, {node.args[1].value!r})")
    return sorted(set(found), key=lambda item: int(item.split()[0]))


def test_no_module_takes_a_private_name_of_another_package() -> None:
    """Another package's private names change without notice: public API, or our own code."""
    found = [
        f"{name}:{where}"
        for name, path in MODULES.items()
        for where in foreign_private_names(path.read_text())
    ]
    assert found == []


def test_the_private_name_check_sees_each_way_of_taking_one() -> None:
    source = (
        "from re import _constants as sre\n"
        "from re import _parser\n"
        "import opentelemetry.util._once\n"
        "from opentelemetry.metrics._internal import X\n"
        "from opentelemetry import metrics, trace\n"
        "a = trace._TRACER_PROVIDER\n"
        "b = getattr(metrics, '_internal')\n"
        "c = trace.get_tracer_provider()\n"
        "from asyncclient._core import _wire\n"
    )
    found = [item.split()[0] for item in foreign_private_names(source)]
    assert found == ["1", "2", "3", "4", "6", "7"]
    assert foreign_private_names("import os\nos._exit(0)\n") == []  # documented, public


def test_no_import_circles() -> None:
    cycle = find_cycle(edges())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_no_circles_of_type_only_imports() -> None:
    """Not even for the type checker: records that hold each other live in one module (the
    emulator's, in testing/_records.py)."""
    cycle = find_cycle(edges(types=True))
    assert cycle is None, "import circle (type-only imports included): " + " -> ".join(cycle or [])


def room_of(module: str) -> str:
    """The room a module stands in: its package below asyncclient (a folder), else itself."""
    return ".".join(module.split(".")[:2])


def room_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        for target in targets:
            if room_of(importer) != room_of(target):
                rooms.setdefault(room_of(importer), set()).add(room_of(target))
    return rooms


def test_no_two_rooms_import_each_other() -> None:
    """No circle of folders and top-level modules either (what farm-studio draws as an arrow
    that runs back up): a package does not straddle another, type-only imports included."""
    cycle = find_cycle(room_edges(edges(types=True)))
    assert cycle is None, "rooms in a circle: " + " -> ".join(cycle or [])


def test_the_room_check_sees_two_packages_through_their_modules() -> None:
    graph = {"asyncclient.a._x": {"asyncclient.b._y"}, "asyncclient.b._z": {"asyncclient.a._w"}}
    assert find_cycle(room_edges(graph)) == ["asyncclient.a", "asyncclient.b", "asyncclient.a"]


def code_lines(path: Path) -> int:
    """Lines that hold code: not blank, not only a comment, not inside a docstring."""
    source = path.read_text()
    tree = ast.parse(source)
    docs: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in skip or token.type == tokenize.ENDMARKER:
            continue
        lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docs)
    return len(lines)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_has_over_600_lines_of_code(name: str) -> None:
    assert code_lines(MODULES[name]) <= 600, f"{name}: split it by what it holds"


def test_code_lines_leave_out_docstrings_and_comments(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Doc."""\n\n# a comment\nx = 1  # trailing\n\n\n'
        'def f():\n    """Doc\n    more."""\n    return x\n'
    )
    assert code_lines(sample) == 3


def mapped_modules(text: str) -> set[str]:
    """The files ARCHITECTURE.md's map names, as paths under asyncclient/: a line's first word
    ending `.py` is a file, ending `/` a folder holding the more indented lines below it."""
    block = text.split("## The map", 1)[1].split("```", 2)[1]
    found: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        word = line.split()[0]
        if not word.endswith((".py", "/")):
            continue  # a description carried onto the next line
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = "".join(folder for _, folder in folders) + word
        if word.endswith("/"):
            folders.append((indent, word))
        else:
            found.add(path.removeprefix("asyncclient/"))
    return found


def test_architecture_names_every_module() -> None:
    mapped = mapped_modules((PACKAGE.parent / "ARCHITECTURE.md").read_text())
    present = {str(path.relative_to(PACKAGE)) for path in MODULES.values()}
    assert present - mapped == set(), "ARCHITECTURE.md's map leaves these out"
    assert mapped - present == set(), "ARCHITECTURE.md's map names files that are gone"


def test_the_map_reader_follows_folders() -> None:
    text = "## The map\n```\nasyncclient/\n  a.py  x\n        more\n  b/\n    c.py\n  d.py\n```"
    assert mapped_modules(text) == {"a.py", "b/c.py", "d.py"}


def test_the_walker_sees_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_says_its_concern(name: str) -> None:
    """In a few words: every module's docstring, public or private, says what it is for in
    at most 5 lines (the rules, examples and bounds a user reads are on the reference pages
    and guides); a file is as long as its concern needs, with no paragraph defending its
    length, and measurements live in the docs."""
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text()))
    assert doc, f"{name} has no docstring"
    assert len(doc.splitlines()) <= 5, f"{name}: {len(doc.splitlines())} lines of docstring"
    assert "over 400 lines" not in doc.lower(), name


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
    # both (asyncclient._core._wording), so nothing of the server reaches asyncclient.cli.
    graph = edges()
    # Its __main__ too: it starts the server itself, nothing of the command line behind it.
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
    assert "asyncclient._core._wording" in _reachable(graph, "asyncclient.mcp_server._server")
    assert "asyncclient._core._wording" in _reachable(graph, "asyncclient.cli._common")


# --- ARCHITECTURE.md's "Where to go" holds in the code --------------------------------------


def _defining(name: str) -> set[str]:
    """The modules that define `name` at their top level (a def, a class or an assignment)."""
    found = set()
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            targets: list[ast.expr] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name == name:
                    found.add(module)
                continue
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.add(module)
    return found


def _names_used(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


@pytest.mark.parametrize(
    "name",
    [
        "RETRYABLE_STATUSES",
        "OUTAGE_STATUSES",
        "DEFAULT_RETRY_DEADLINE",
        "Retry",
        "RetryPolicy",
        "classify",
    ],
)
def test_the_retry_policy_is_one_module(name: str) -> None:
    assert _defining(name) == {"asyncclient._core._retry"}


def test_the_rules_wait_for_nothing() -> None:
    """_core holds values and rules: no module of it sleeps or runs backoff's loop; the
    retry loop that waits is the client's (asyncclient._client._retrying)."""
    waiting = [
        name
        for name in MODULES
        if name.startswith("asyncclient._core.")
        and re.search(r"(asyncio|time)\.sleep\(|backoff\.on_", MODULES[name].read_text())
    ]
    assert waiting == []
    assert _defining("retrying") == {"asyncclient._client._retrying"}


def test_the_transport_and_the_watcher_ask_the_same_classify() -> None:
    assert "classify" in _names_used("asyncclient._client._transport")
    assert "classify" in _names_used("asyncclient.watch")
    for module in ("asyncclient._client._transport", "asyncclient.watch"):
        text = MODULES[module].read_text()
        assert "RETRYABLE_STATUSES" not in text, module
        assert "OUTAGE_STATUSES" not in text, module


def test_the_transport_knows_no_part() -> None:
    assert "PartBody" not in MODULES["asyncclient._client._transport"].read_text()


def test_the_emulator_is_one_hop() -> None:
    tree = ast.parse(MODULES["asyncclient.testing._backend"].read_text())
    (backend,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Backend"]
    methods = {
        n.name for n in backend.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert methods == {"__init__", "now", "authenticate", "aclose"}  # no operation to forward
    # The edit capability is checked in one place, from the operation table's rows.
    callers = {m for m in MODULES if "require_edit(" in MODULES[m].read_text()}
    assert callers == {"asyncclient.testing._auth", "asyncclient.testing._http"}


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_each_operation_name_is_written_in_at_most_three_files_beside_its_row() -> None:
    # The session's method, the emulator's handler and, for a tool, the tool server's catalogue:
    # every other list (read-only, idempotent, destructive tools, the public names) derives
    # from the table's fields.
    from asyncclient._core._operations import OPERATIONS

    table = PACKAGE / "_core" / "_operations.py"
    literals = {path: _string_literals(path) for path in MODULES.values() if path != table}
    spread = {
        name: sorted(
            str(path.relative_to(PACKAGE)) for path, found in literals.items() if name in found
        )
        for name in OPERATIONS
    }
    assert {name: files for name, files in spread.items() if len(files) > 3} == {}
    assert all(files for files in spread.values()), spread  # the measure sees the names


def test_the_command_reads_its_options_from_typed_records() -> None:
    # No `getattr(args, name, default)`: a hidden contract between the parser and the code
    # past it (cli._options holds the records, each default written once).
    readers = [
        str(path.relative_to(PACKAGE))
        for path in MODULES.values()
        if "getattr(args" in path.read_text()
    ]
    assert readers == []


# Where the parsed line is read, each by its module: parsing and dispatch, the one reader of a
# record, and the configuration files written into the parsed line.
_OPTION_BUILDERS = {
    ("asyncclient.cli", "main"),
    ("asyncclient.cli._common", "_run_handler"),
    ("asyncclient.cli._options", "read"),
    ("asyncclient.cli._config", "apply_config"),
    ("asyncclient.cli._config", "_flag_values"),
    ("asyncclient.mcp_server._launch", "options_of"),
}


def namespace_reads(module: str, source: str) -> list[str]:
    """Each read of an argparse namespace outside _OPTION_BUILDERS: `x.NAME`, `getattr(x, ..)`,
    `vars(x)`, where x is a parameter annotated `Namespace` or is called args or namespace."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if (module, function.name) in _OPTION_BUILDERS:
            continue
        every = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
        names = {"args", "namespace"} | {
            arg.arg
            for arg in every
            if arg.annotation and "Namespace" in ast.unparse(arg.annotation)
        }
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in names
                and isinstance(node.ctx, ast.Load)
            ):
                found.append(f"{module}.{function.name}: {node.value.id}.{node.attr}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "vars", "hasattr")
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in names
            ):
                found.append(f"{module}.{function.name}: {node.func.id}({node.args[0].id})")
    return found


def test_no_command_reads_the_parsed_line_but_through_its_record() -> None:
    """Each command reads its options from a typed record built once (`read(Record, args)`);
    the namespace is read nowhere else in the command or the tool server, by any name."""
    found = [
        item
        for name, path in MODULES.items()
        if name.startswith(("asyncclient.cli", "asyncclient.mcp_server"))
        for item in namespace_reads(name, path.read_text())
    ]
    assert found == []


def test_the_namespace_check_sees_a_read_by_another_name_or_in_another_module() -> None:
    source = (
        "def handler(parsed: argparse.Namespace):\n    return parsed.wait\n"
        "def other(args):\n    return getattr(args, 'wait'), vars(args)\n"
        "def read(record, args):\n    return args.wait\n"
    )
    assert namespace_reads("asyncclient.cli._run", source) == [
        "asyncclient.cli._run.handler: parsed.wait",
        "asyncclient.cli._run.other: getattr(args)",
        "asyncclient.cli._run.other: vars(args)",
        "asyncclient.cli._run.read: args.wait",  # read() is the builder only in _options
    ]


def test_the_public_signatures_show_the_shared_defaults() -> None:
    # The public signatures keep their numbers as literals, for the reader of help() and the
    # API pages (which show a default as written); each is the one _core._defaults defines.
    import inspect

    from asyncclient import AsyncSession, RunWatcher
    from asyncclient._core import _defaults as defaults

    def default(function: object, name: str) -> object:
        return inspect.signature(function).parameters[name].default  # type: ignore[arg-type]

    assert default(AsyncSession, "timeout") == defaults.REQUEST_TIMEOUT
    assert default(AsyncSession, "max_retries") == defaults.MAX_RETRIES
    # None: found while uploading (asyncclient.upload.Adaptive), from ADAPTIVE_START.
    assert default(AsyncSession.upload_build, "concurrency") is None
    assert default(AsyncSession.upload_builds, "max_parts_in_flight") is None
    from asyncclient.upload import Adaptive

    assert Adaptive().start == defaults.ADAPTIVE_START
    for function in (AsyncSession.watch_runs, AsyncSession.wait_for_runs, RunWatcher):
        assert default(function, "interval") == defaults.INTERVAL
        assert default(function, "max_interval") == defaults.MAX_INTERVAL
    assert default(RunWatcher, "concurrency") == defaults.WATCH_CONCURRENCY


RETIRED_WORDS = {"told"}  # ARCHITECTURE.md, "Words": no part of any name
RETIRED_NAMES = {"Outcome", "result_outcome"}  # no whole name (outcome is a word of its own)


def name_parts(name: str) -> set[str]:
    """The words a name is built of, in lower case: `_told`, `toldOnce`, `WAS_TOLD` hold told."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ")
    return {part.lower() for part in spaced.split()}


def retired_names_in(source: str) -> list[str]:
    """Each name built on a retired word, in the code or as a string that is a name (slots,
    getattr), and each f-string field that reads one."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and (
            token.string in RETIRED_NAMES or name_parts(token.string) & RETIRED_WORDS
        ):
            found.append(f"{token.start[0]} {token.string}")
        elif token.type == tokenize.STRING:
            literal = token.string.strip("\"'")
            if literal.isidentifier() and name_parts(literal) & RETIRED_WORDS:
                found.append(f"{token.start[0]} {token.string} (a name in a string)")
            elif re.search(r"\{\w*told\b", token.string, re.IGNORECASE):
                found.append(f"{token.start[0]} (in an f-string)")
    return found


def test_the_retired_words_are_no_names_in_the_code() -> None:
    found = [
        f"{name}:{where}"
        for name, path in MODULES.items()
        for where in retired_names_in(path.read_text())
    ]
    assert found == []


def test_the_retired_word_check_sees_a_name_built_on_the_word() -> None:
    source = 'class A:\n    __slots__ = ("_told",)\n    def f(self):\n        self._told = True\n'
    assert retired_names_in(source) == [
        '2 "_told" (a name in a string)',
        "4 _told",
    ]
    assert retired_names_in("toldOnce = WAS_TOLD = 1\n") == ["1 toldOnce", "1 WAS_TOLD"]
    assert retired_names_in("outcome = TestOutcome = toddler = 1\n") == []


def test_the_command_holds_no_round_logic() -> None:
    """cli/ starts and stops a suite's runs only through the suite loop: the modules that follow
    a suite call no run_test, stop_run or watch_runs of their own, build no Reruns and no report
    model (the loop builds it once)."""
    follow = [PACKAGE / "cli" / "_follow.py", PACKAGE / "cli" / "_ci_reports.py"]
    for path in follow:
        calls = {
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
        }
        assert not calls & {"run_test", "stop_run", "watch_runs", "Reruns", "suite_report"}, path


TESTS = PACKAGE.parent / "tests"
ACROSS = "across"  # suites across the house: hostile services, properties, rules, processes


def module_named_by(test: Path) -> bool:
    """tests/<package>/test_<module>[_<aspect>].py names asyncclient/<package>/<module>; a
    folder or module may drop its leading underscore (tests/client is asyncclient/_client)."""
    folder = PACKAGE
    for part in test.relative_to(TESTS).parts[:-1]:
        folder = next((folder / n for n in (part, f"_{part}") if (folder / n).is_dir()), None)
        if folder is None:
            return False
    words = test.stem.removeprefix("test_").split("_")
    names = ["_".join(words[: i + 1]) for i in range(len(words))]
    return any(
        name == folder.name.lstrip("_")
        or any((folder / f).exists() for f in (f"{name}.py", f"_{name}.py", name, f"_{name}"))
        for name in names
    )


def misnamed_tests(root: Path = TESTS) -> list[str]:
    return sorted(
        str(test.relative_to(root))
        for test in root.rglob("test_*.py")
        if test.relative_to(root).parts[0] not in (ACROSS, "data") and not module_named_by(test)
    )


def test_each_test_module_is_named_for_a_module_or_is_cross_cutting() -> None:
    assert misnamed_tests() == []


def test_the_name_check_sees_a_test_named_for_no_module() -> None:
    assert module_named_by(TESTS / "client" / "test_failures.py")
    assert module_named_by(TESTS / "cli" / "test_run_reruns.py")  # cli/_run.py, its re-runs
    assert module_named_by(TESTS / "testing" / "test_testing.py")  # the package itself
    assert not module_named_by(TESTS / "test_hardening.py")
    assert not module_named_by(TESTS / "client" / "test_runs.py")
    assert not module_named_by(TESTS / "nowhere" / "test_session.py")


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in *_support.py: a test module imported twice would run its fixtures
    and module state twice."""
    importing = re.compile(r"^\s*(?:from|import) test_\w+", re.M)
    assert [str(t) for t in TESTS.rglob("*.py") if importing.search(t.read_text())] == []


PRAGMAS = ("# type:", "# noqa", "# fmt:", "# pragma", "#!")


def test_comments_say_why_in_a_line() -> None:
    """Words per comment within httpx's 6.6 and pytest's 7.9 (counted alike: each comment token,
    pragmas left out); a longer reason belongs in a docstring or the docs."""
    comments = words = 0
    for path in PACKAGE.rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        for token in tokens:
            text = token.string
            if token.type == tokenize.COMMENT and not text.startswith(PRAGMAS):
                comments += 1
                words += len(text.lstrip("#:").split())
    assert words / comments <= 8.0, f"{words / comments:.1f} words a comment"
