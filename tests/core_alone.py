"""The library with the core install alone (`pip install asyncclient`, no extra): run as
`python tests/core_alone.py [--core] [BASE_URL]`, it needs nothing but asyncclient and the standard
library, and exits 0 only when all of this held:

1. Every module of the library imports: the package but the command (`asyncclient.cli`) and
   the tool server (`asyncclient.mcp_server`), which are extras, and the pytest plugin (which
   pytest loads); a module that imports an extra's package at its top fails here.
2. Against BASE_URL (an `asyncclient serve` started elsewhere, key demo-run), else an emulator
   started here over plain HTTP: a build uploaded, the project run, its runs watched to the
   end in a batched sweep, failures re-run (asyncclient.reruns), a run's screenshot downloaded,
   the JUnit and CTRF reports written, the flakiness read; and every other operation of
   AsyncSession once (the edit ones with the key demo-edit).
3. With --core (no extra installed), each feature of an extra says which extra in an
   ImportError (MissingExtraError): the emulator's TLS, the HTML report, the quarantine
   writer; each names the `pip install 'asyncclient[...]'` that brings it.

.ci/run runs it in a fresh virtual environment made by `pip install .`; the suite runs it with
every extra's package blocked (tests/without_extras.py).
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import sys
import tempfile
from pathlib import Path

import asyncclient

# The command and the tool server come with extras; the pytest plugin with the user's pytest.
EXTRA_PARTS = (
    "asyncclient.cli",
    "asyncclient.mcp_server",
    "asyncclient.__main__",
    "asyncclient.testing.pytest_plugin",
)


def import_everything() -> int:
    """Import every module of the library; returns how many."""
    count = 0
    for module in pkgutil.walk_packages(asyncclient.__path__, "asyncclient."):
        if module.name.startswith(EXTRA_PARTS):
            continue
        importlib.import_module(module.name)
        count += 1
    return count


async def one_job(base_url: str | None, folder: Path) -> None:
    from asyncclient import AsyncSession, wait_with_retries
    from asyncclient._reports.ctrf import write_ctrf
    from asyncclient._reports.junit import write_junit
    from asyncclient._reports.model import suite_report
    from asyncclient.testing import FakeService
    from asyncclient.testing.builders import build_apk

    apk = build_apk(folder / "shop.apk")
    service = None
    if base_url is None:
        service = await FakeService(speed=1000.0).start()
        base_url = service.url
    try:
        async with AsyncSession("demo-run", base_url) as session:
            build = await session.upload_build("p_demo", apk, label="core-alone")
            started = await session.run_project("p_demo", build_id=build.id)
            ids = [run.run_id for run in started.started]
            result = await wait_with_retries(session, ids, retry_failed=1, interval=0.05)
            report = suite_report(result, name="p_demo")
            write_junit(folder / "junit.xml", report)
            write_ctrf(folder / "ctrf.json", report)
            shots = [run for run in result.final_runs if run.screenshot_refs]
            if shots:
                await session.download_run_file(
                    shots[0].id, shots[0].screenshot_refs[0], folder / "shot.png"
                )
            flaky = await session.flakiness("p_demo", 14)
            # The other operations, each once.
            assert (await session.get_build(build.id)).sha256 == build.sha256
            assert build.id in {b.id for b in (await session.list_builds("p_demo")).builds}
            one = await session.run_test("t_search")
            assert await session.stop_run(one.run_id) == "cancelled"
            assert (await session.get_run(one.run_id)).status_kind == "cancelled"
            assert await session.wait_for_runs([one.run_id], interval=0.05)
            assert await session.list_run_views([one.run_id])
        async with AsyncSession("demo-edit", base_url) as edit:
            endpoint = await edit.add_endpoint(
                "p_demo", "core_alone", "Checks the core install.", "https://example.com/hook"
            )
            assert endpoint in {e.id for e in await edit.list_endpoints("p_demo")}
            await edit.delete_endpoint(endpoint)
            other = build_apk(folder / "other.apk", version_code=2)
            (result_of_other,) = await edit.upload_builds([other], project_id="p_demo")
            assert result_of_other.build is not None
            await edit.delete_build(result_of_other.build.id)
    finally:
        if service is not None:
            await service.stop()
    print(f"uploaded {build.id} ({build.sha256}); {result.summary()}")
    written = sorted(p.name for p in folder.iterdir())
    print(f"flakiness: {len(flaky.tests)} tests read; files {written}")


async def extras_say_so(folder: Path) -> list[str]:
    """Each extra's feature, tried: the ImportError's message of each one missing."""
    from asyncclient.errors import MissingExtraError
    from asyncclient.quarantine import QuarantineEntry, until_from, write_quarantine
    from asyncclient.testing import FakeService

    said = []
    attempts = [
        ("tls", lambda: FakeService(tls=True).start()),
        ("html", lambda: _html(folder)),
        ("quarantine", lambda: _quarantine(folder, write_quarantine, QuarantineEntry, until_from)),
    ]
    for name, attempt in attempts:
        try:
            outcome = attempt()
            if asyncio.iscoroutine(outcome):
                service = await outcome
                await service.stop()
        except ImportError as exc:  # MissingExtraError is one
            if not isinstance(exc, MissingExtraError):
                raise
            said.append(f"{name}: {exc}")
    return said


async def _html(folder: Path) -> None:
    from asyncclient._reports.html import write_html
    from asyncclient._reports.model import runs_report

    write_html(folder / "report.html", runs_report([]))


def _quarantine(folder: Path, write, entry, until_from) -> None:  # type: ignore[no-untyped-def]
    import datetime

    write(folder / "q.toml", [entry("t_login", "flaky", until_from(datetime.date.today()))])


def main() -> int:
    args = sys.argv[1:]
    core = "--core" in args
    rest = [arg for arg in args if arg != "--core"]
    base_url = rest[0] if rest else None
    print(f"imported {import_everything()} modules of the library")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        asyncio.run(one_job(base_url, folder))
        said = asyncio.run(extras_say_so(folder))
    for line in said:
        print(line)
    if core:
        wanted = {
            "tls": "asyncclient[tls]",
            "html": "asyncclient[cli]",
            "quarantine": "asyncclient[cli]",
        }
        for name, extra in wanted.items():
            assert any(line.startswith(f"{name}: ") and f"pip install '{extra}'" in line
                       for line in said), (name, said)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
