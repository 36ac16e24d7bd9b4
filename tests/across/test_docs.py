"""The documentation site: every public name has a docstring; `mkdocs build --strict` passes
and its reference lists every public name, every AsyncSession method and every command and
option of the CLI; the guides' Python blocks run against the emulator; Chromium renders the
front page and the AsyncSession reference.

Building the site needs the `docs` extra (part of the `test` extra): in CI a missing mkdocs or
Chromium is a failure, elsewhere a skip.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import http.server
import inspect
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docs_support import runnable_pages

import asyncclient
import asyncclient.testing
from asyncclient.testing import FakeService, demo_seed_data
from asyncclient.testing.builders import build_apk, build_app_dir

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _need(tool: str, found: str | None) -> str:
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is missing: .ci/run installs it")
        pytest.skip(f"{tool} is not installed")
    return found


# --- docstrings ------------------------------------------------------------------------------


def _public(module: Any) -> Iterator[tuple[str, Any]]:
    for name in module.__all__:
        if not name.startswith("__"):
            yield f"{module.__name__}.{name}", getattr(module, name)


def _undocumented() -> list[str]:
    missing: list[str] = []
    for qualified, obj in [*_public(asyncclient), *_public(asyncclient.testing)]:
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(qualified)
        if not inspect.isclass(obj):
            continue
        for name, member in vars(obj).items():
            if name.startswith("_"):
                continue
            func = member.__func__ if isinstance(member, classmethod | staticmethod) else member
            if isinstance(func, property) or inspect.isfunction(func):
                doc = func.__doc__
            else:
                continue
            if not (doc or "").strip():
                missing.append(f"{qualified}.{name}")
    return missing


def test_every_public_name_and_method_has_a_docstring() -> None:
    assert _undocumented() == []


# --- the site --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mkdocs = _need("mkdocs", shutil.which("mkdocs", path=str(Path(sys.executable).parent)))
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return out


def test_the_reference_lists_every_public_name_and_session_method(site: Path) -> None:
    pages = "".join(p.read_text() for p in (site / "reference").rglob("index.html"))
    ids = set(re.findall(r'id="(asyncclient[\w.]+)"', pages))
    shown = {i.rsplit(".", 1)[-1] for i in ids}
    missing = [
        name
        for name in [*asyncclient.__all__, *asyncclient.testing.__all__]
        if not name.startswith("__") and name not in shown
    ]
    assert missing == []
    session = (site / "reference" / "session" / "index.html").read_text()
    for name, member in vars(asyncclient.AsyncSession).items():
        if not name.startswith("_") and callable(getattr(member, "__func__", member)):
            assert f'id="asyncclient.AsyncSession.{name}"' in session, name


def test_the_reference_lists_every_command_and_option(site: Path) -> None:
    from asyncclient.cli import build_parser

    page = (site / "reference" / "cli-options" / "index.html").read_text()

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert f"{path} {name}" in page, f"{path} {name}"
                    walk(sub, f"{path} {name}")
            elif action.option_strings and action.help != argparse.SUPPRESS:
                for option in action.option_strings:
                    assert option in page, f"{path}: {option}"

    walk(build_parser(), "asyncclient")


def _chromium() -> str:
    return _need("Chromium", shutil.which("chromium") or shutil.which("chromium-browser"))


@pytest.mark.parametrize(
    ("page", "headings"),
    [
        ("index.html", ["asyncclient", "Set up", "A first upload and run"]),
        ("reference/session/index.html", ["AsyncSession", "upload_build", "wait_for_runs"]),
    ],
)
def test_the_site_renders_in_chromium(
    site: Path, tmp_path: Path, page: str, headings: list[str]
) -> None:
    browser = _chromium()
    base = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
    ]  # fmt: skip
    url = (site / page).as_uri()
    dom = subprocess.run(
        [*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False
    )
    assert dom.returncode == 0, dom.stderr
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    for heading in headings:
        assert heading in text, heading
    shot = tmp_path / "page.png"
    taken = subprocess.run(
        [*base, "--window-size=1200,900", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert taken.returncode == 0, taken.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- the CLI reference's examples, run -------------------------------------------------------


def _docs_seed() -> dict[str, Any]:
    """The demo seed, plus the projects the CLI reference names (p_123, p_456) with tests."""
    seed = demo_seed_data()
    seed["projects"] += [{"id": "p_123", "plan": "paid"}, {"id": "p_456", "plan": "paid"}]
    for key in seed["keys"]:
        key["projects"] += ["p_123", "p_456"]
    seed["tests"] += [
        {"id": "t_app", "project": "p_123", "target": "android", "appId": "com.example.shop",
         "durationSeconds": 5, "queuedSeconds": 0},
        {"id": "t_web", "project": "p_123", "target": "web", "url": "https://shop.example",
         "durationSeconds": 5, "queuedSeconds": 0},
    ]  # fmt: skip
    return seed


@contextlib.contextmanager
def _emulator() -> Iterator[FakeService]:
    """The emulator on a loop of its own, for commands run in a subprocess."""
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        async with FakeService(_docs_seed(), speed=1000.0) as svc:
            holder.update(svc=svc, stop=stop, loop=asyncio.get_running_loop())
            started.set()
            await stop.wait()

    thread = threading.Thread(target=lambda: asyncio.run(serve()))
    thread.start()
    started.wait(60)
    try:
        yield holder["svc"]
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(60)


def _operations() -> list[tuple[str, Any]]:
    return [
        (name, member)
        for name, member in vars(asyncclient.AsyncSession).items()
        if not name.startswith("_")
        and name != "close"  # closing raises nothing of its own
        and (inspect.iscoroutinefunction(inspect.unwrap(member)) or name == "watch_runs")
    ]


@pytest.mark.parametrize(("name", "member"), _operations(), ids=[n for n, _ in _operations()])
def test_every_session_operation_says_what_it_takes_returns_and_raises(
    name: str, member: Any
) -> None:
    """Google style, as mkdocstrings renders it into tables: Args (one entry per parameter),
    Returns (unless None), and Raises naming the local error; the service's refusal and the
    network's failure, the same for every operation, are said once, in the class (below)."""
    doc = inspect.getdoc(member) or ""
    sections: dict[str, str] = {}
    current = ""
    for line in doc.splitlines():
        if re.fullmatch(r"[A-Z]\w+:", line):
            current = line[:-1]
            sections[current] = ""
        elif current and (line.startswith(" ") or not line):
            sections[current] += line + "\n"
        else:
            current = ""
    parameters = [p for p in inspect.signature(member).parameters if p != "self"]
    for parameter in parameters:
        assert re.search(rf"^\s+\**{parameter}:", sections.get("Args", ""), re.M), parameter
    if inspect.signature(member).return_annotation not in (None, "None"):
        assert "Returns" in sections, name
    raises = sections.get("Raises", "")
    assert "ValidationError" in raises
    assert "ApiError: The service refused" not in raises  # the class says it
    assert "TransportError: The service could not be reached" not in raises


def test_the_errors_every_operation_raises_are_said_once_in_the_class() -> None:
    doc = inspect.getdoc(asyncclient.AsyncSession) or ""
    said = doc.split("Args:")[0]
    assert "Every operation raises `ApiError` when the service refuses" in said
    assert "`TransportError` when the service could not be reached" in said


def test_signature_defaults_are_the_values_the_code_uses() -> None:
    """The reference shows literal defaults (4, not DEFAULT_CONCURRENCY): they must stay the
    values the modules name."""
    from asyncclient import upload, watch

    session = asyncclient.AsyncSession
    default = {
        (method, name): parameter.default
        for method in ("upload_build", "upload_builds", "watch_runs", "wait_for_runs")
        for name, parameter in inspect.signature(getattr(session, method)).parameters.items()
    }
    # None: the number is found while uploading, from DEFAULT_CONCURRENCY.
    assert default["upload_build", "concurrency"] is None
    assert default["upload_builds", "max_parts_in_flight"] is None
    assert upload.Adaptive().start == 2  # two parts may fill a link
    for method in ("watch_runs", "wait_for_runs"):
        assert default[method, "interval"] == watch.DEFAULT_INTERVAL
        assert default[method, "max_interval"] == watch.DEFAULT_MAX_INTERVAL
    watcher = inspect.signature(watch.RunWatcher).parameters
    assert watcher["concurrency"].default == watch.DEFAULT_CONCURRENCY
    # The command and the tool server show and use the same values, from one definition.
    from asyncclient.cli import _download, _follow
    from asyncclient.cli import _upload as upload_command
    from asyncclient.mcp_server import ServerOptions
    from asyncclient.mcp_server import _launch as _mcp
    from asyncclient.upload import _values as upload_values

    assert _follow.DEFAULT_INTERVAL == watch.DEFAULT_INTERVAL
    assert _follow.DEFAULT_MAX_INTERVAL == watch.DEFAULT_MAX_INTERVAL
    assert _mcp.DEFAULT_POLL_INTERVAL == ServerOptions().poll_interval == watch.DEFAULT_INTERVAL
    assert upload_command._MAX_PARTS_IN_FLIGHT == upload_values.DEFAULT_MAX_PARTS_IN_FLIGHT
    assert _download.DEFAULT_CONCURRENCY == 4
    assert "_flags" not in inspect.signature(session).parameters


def test_the_session_page_shows_a_parameter_table(site: Path) -> None:
    page = (site / "reference" / "session" / "index.html").read_text()
    text = re.sub(r"<[^>]+>", " ", page)
    assert "DEFAULT_" not in text
    assert "_flags" not in text
    table = page.split("Parameters:", 1)[1].split("</table>", 1)[0]
    cells = [
        re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", table, re.S)
    ]
    for name, value in (("retry_deadline", "None"), ("pool_timeout", "None"), ("timeout", "30.0")):
        row = cells.index(name)
        assert cells[row + 3] == value, (name, cells[row : row + 4])
    assert (
        'id="asyncclient.watch.WatchOptions"'
        in (site / "reference" / "uploads-and-runs" / "index.html").read_text()
    )


def test_the_upload_shell_examples_run(tmp_path: Path) -> None:
    """The "Upload and inspect builds" commands of the CLI reference, as a user types them."""
    text = (DOCS / "reference" / "cli.md").read_text()
    block = text.split("## Upload and inspect builds", 1)[1].split("```sh\n", 1)[1]
    script = block.split("```", 1)[0]
    _need("jq", shutil.which("jq"))
    build_apk(tmp_path / "app-release.apk")
    (tmp_path / "android").mkdir()
    build_apk(tmp_path / "android" / "app.apk", version_code=2)
    (tmp_path / "ios" / "Build").mkdir(parents=True)
    build_app_dir(tmp_path / "ios" / "Build" / "Shop.app")
    (tmp_path / "dist").mkdir()
    for number in (1, 2):
        build_apk(tmp_path / "dist" / f"flavour{number}.apk", version_code=10 + number)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCCLIENT_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with _emulator() as svc:
        env.update(
            ASYNCCLIENT_BASE_URL=svc.url,
            ASYNCCLIENT_API_KEY=svc.run_key,
            ASYNCCLIENT_STATE_DIR=str(tmp_path / "state"),
            GIT_SHA="a1b2c3d",
        )
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script + '\necho "BUILD=$BUILD"\n'],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        builds = svc.backend.builds
    assert ran.returncode == 0, ran.stderr
    # android/app.apk and ios/Build/Shop.app, then the two dist/*.apk through jq.
    ids = re.findall(r"^ab_\w+$", ran.stdout, re.M)
    assert len(ids) == 4
    assert all(builds[i].status == "ready" for i in ids)
    assert re.search(r"^BUILD=ab_\w+$", ran.stdout, re.M)
    assert "app id" in ran.stdout  # inspect's fields


# The measuring page: loads one page of the site in a 1280 px wide frame (same origin, so its
# layout can be read) and lists every code block wider than its box, or "none".
_MEASURE = """<!doctype html><html><body>
<iframe id="f" src="%s" style="width:1280px;height:900px;border:0"></iframe>
<pre id="out">waiting</pre>
<script>
document.getElementById("f").onload = function () {
  var doc = this.contentDocument, wide = [];
  doc.querySelectorAll("pre > code").forEach(function (code) {
    [code, code.parentElement].forEach(function (box) {  // whichever of the two scrolls
      if (box.scrollWidth > box.clientWidth + 1) {
        wide.push(box.scrollWidth + ">" + box.clientWidth + ": " + code.textContent.slice(0, 60));
      }
    });
  });
  doc.querySelector("h1") || wide.push("the page did not load");
  document.getElementById("out").textContent = "measured: " + (wide.join(" | ") || "none");
};
</script></body></html>"""


_PAGES_READ_FIRST = [
    "index.html",
    "troubleshooting/index.html",
    "platforms/index.html",
    *(f"guides/{p.stem}/index.html" for p in sorted((DOCS / "guides").glob("*.md"))),
]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def served_site(site: Path) -> Iterator[str]:
    """The built site over HTTP on loopback (a frame of file:// pages cannot be measured)."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("page", _PAGES_READ_FIRST)
def test_no_code_block_scrolls_sideways_at_1280_px(
    site: Path, served_site: str, tmp_path: Path, page: str
) -> None:
    """What a reader sees on a 1280 px screen: every line of every code block of getting
    started, the guides and the troubleshooting page within its box (a line that scrolls
    hides the very part that matters)."""
    browser = _chromium()
    measure = f"_measure-{page.replace('/', '-')}"
    (site / measure).write_text(_MEASURE % f"/{page}")
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,1000",
            "--virtual-time-budget=15000",
            "--dump-dom",
            f"{served_site}/{measure}",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr
    measured = re.search(r"measured: ([^<]*)", dom.stdout)
    assert measured is not None, dom.stdout[-2000:]
    assert measured[1] == "none"


def _public_callables() -> Iterator[tuple[str, Any]]:
    for qualified, obj in [*_public(asyncclient), *_public(asyncclient.testing)]:
        if inspect.isfunction(obj):
            yield qualified, obj
        elif inspect.isclass(obj):
            if not issubclass(obj, BaseException | str):
                yield qualified, obj
            for name, member in vars(obj).items():
                func = member.__func__ if isinstance(member, classmethod | staticmethod) else member
                if not name.startswith("_") and inspect.isfunction(func):
                    yield f"{qualified}.{name}", func


def test_every_public_callable_documents_its_parameters_in_google_style() -> None:
    """Args: (or, for a value class, Attributes:) naming every parameter: mkdocstrings makes
    them the reference's tables."""
    missing = []
    for qualified, obj in _public_callables():
        try:
            parameters = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
        except (TypeError, ValueError):
            continue
        doc = inspect.getdoc(obj) or ""
        section = "Attributes:" if "Attributes:" in doc else "Args:"
        listed = doc.split(section, 1)[1] if section in doc else ""
        for parameter in parameters:
            if not re.search(rf"^    \**{parameter}:", listed, re.M):
                missing.append(f"{qualified}: {parameter}")
    assert missing == []


def test_the_configuration_guide_names_every_key() -> None:
    """The list of keys in the configuration guide is the table the files are read by."""
    from asyncclient._core._config_keys import COMMAND_KEYS, GLOBAL_KEYS

    text = (DOCS / "guides" / "configuration.md").read_text()
    keys = {*GLOBAL_KEYS, *(key for table in COMMAND_KEYS.values() for key in table)}
    keys.discard("api_key")  # named apart: a key stays out of committed files
    missing = sorted(key for key in keys if f"`{key}`" not in text)
    assert missing == []


# --- the pages that list the operations by hand ------------------------------------------------


def test_the_pages_that_list_operations_name_every_one() -> None:
    """The library guide's method table, the MCP guide's tool table and the emulator guide's
    operation names: a new operation fails here until each page says it."""
    from asyncclient import AsyncSession
    from asyncclient._core._operations import OPERATIONS
    from asyncclient.mcp_server import TOOLS

    methods = set(re.findall(r"^\| `(\w+)\(", (DOCS / "guides" / "library.md").read_text(), re.M))
    tools = re.findall(r"^\| `(\w+)` \|", (DOCS / "guides" / "mcp.md").read_text(), re.M)
    emulator = (DOCS / "guides" / "emulator.md").read_text()
    named = emulator[emulator.index("Operations are named after the tools") :].split("\n\n")[0]
    assert sorted(n for n in OPERATIONS if hasattr(AsyncSession, n) and n not in methods) == []
    assert tools == list(TOOLS)
    assert [n for n in OPERATIONS if f"`{n}`" not in named] == []


# What each guide shows of a file that tests run or other pages share, word for word.
_COPIED: dict[str, tuple[str, ...]] = {
    "ci-recipes": ("docs/snippets/try-it.md",),
    "other-ci": ("docs/snippets/try-it.md",),
    "configuration": ("docs/snippets/try-it.md",),
    "embedding": (
        "docs/snippets/try-it.md",
        "docs/examples/aiohttp_service.py",
        "docs/examples/suite_service.py",
        "docs/examples/asgi_service.py",
        "docs/examples/outage.py",
        "docs/examples/telemetry.py",
    ),
    "errors": ("docs/snippets/try-it.md",),
    "flaky-across-jobs": ("docs/snippets/try-it.md",),
    "flaky-and-reports": ("docs/snippets/try-it.md", "docs/snippets/bench-suite.md"),
    "following-runs": ("docs/snippets/try-it.md",),
    "library": ("docs/snippets/try-it.md",),
    "mcp": ("docs/snippets/try-it.md",),
    "see-the-fleet": ("docs/snippets/try-it.md", "docs/examples/otlp_receiver.py"),
    "spend-device-time": ("docs/snippets/try-it.md",),
    "time-and-cost": ("docs/snippets/try-it.md",),
    "uploading": ("docs/snippets/try-it.md",),
    "troubleshooting": ("docs/snippets/try-it.md",),
    "why-it-failed": (
        "docs/snippets/try-it.md",
        "docs/snippets/failure-signatures.md",
        "docs/snippets/bench-failures.md",
    ),
}


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: p.stem)
def test_a_guide_reads_on_the_repository_page_as_on_the_site(page: Path) -> None:
    """No include line where the steps should be (GitHub shows `--8<--` as it is): a guide
    holds its set-up steps and programs itself, and what it copies from a file that tests run
    or other pages share is that file word for word."""
    text = page.read_text()
    assert "--8<--" not in text
    for source in _COPIED.get(page.stem, ()):
        assert (DOCS.parent / source).read_text().rstrip("\n") in text, source


PUBLIC_MODULES = (
    "asyncclient", "asyncclient.testing", "asyncclient.errors", "asyncclient.models",
    "asyncclient.suite", "asyncclient.reruns", "asyncclient.failures", "asyncclient.flakiness",
    "asyncclient.eta", "asyncclient.watch", "asyncclient.upload", "asyncclient.spend",
    "asyncclient.fleet", "asyncclient.quarantine", "asyncclient.config", "asyncclient.ci",
    "asyncclient.apps", "asyncclient.mcp_server", "asyncclient.testing.dialects",
    "asyncclient.failures.bisect", "asyncclient.failures.exonerate", "asyncclient.spend.reuse",
    "asyncclient.spend.verify", "asyncclient.spend.arrival",
)  # fmt: skip


def test_the_architecture_counts_the_public_names_as_they_are() -> None:
    import importlib

    import asyncclient.errors

    front = len(asyncclient.__all__)
    names = set()
    for module in PUBLIC_MODULES:
        names.update(importlib.import_module(module).__all__)
    errors = [
        n
        for n in asyncclient.errors.__all__
        if isinstance(getattr(asyncclient.errors, n), type)
        and issubclass(getattr(asyncclient.errors, n), BaseException)
    ]
    text = " ".join((DOCS.parent / "ARCHITECTURE.md").read_text().split())
    assert f"has **{front} names**" in text
    assert f"**{len(names)} distinct names**" in text
    assert f"**{len(errors)} exception classes**" in text
