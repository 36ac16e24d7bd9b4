"""`asyncclient demo`: the whole job, end to end, against the embedded emulator.

Starts the emulator on a free loopback port, builds a sample .apk, uploads it, runs project
p_demo, follows the runs live, prints the verdicts, reads which tests flake across jobs from the
project's history, downloads a screenshot, writes the HTML report, and says what next.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

import attrs

from asyncclient.cli._common import EXIT_OK, CommandError, add_command
from asyncclient.cli._options import read
from asyncclient.cli._output import Output

_EXAMPLES = """\
  asyncclient demo
  asyncclient demo --speed 120 --output ./demo-files
  asyncclient demo --dialect flat        # the same tour against a service that answers otherwise
  asyncclient demo --tls                 # the same tour over HTTPS, trusting a throwaway CA
"""

_NEXT_STEPS = """\
What to run next, against a real service:
  export ASYNCCLIENT_BASE_URL=https://your-service.example.com
  export ASYNCCLIENT_API_KEY=...                       # a key of your project
  BUILD=$(asyncclient upload p_YOURPROJECT app.apk --label "$(git rev-parse --short HEAD)")
  asyncclient run project p_YOURPROJECT --build "$BUILD" --wait --retry-failed 2 \\
      --junit report.xml --html report.html --download-failed evidence/
  asyncclient runs list --project p_YOURPROJECT --status failed
  asyncclient flaky p_YOURPROJECT                    # which tests flake across jobs
  asyncclient failures p_YOURPROJECT                 # the failures grouped by cause
Or keep playing locally: `asyncclient serve`, then point the commands above at it."""


@attrs.frozen(kw_only=True)
class DemoOptions:
    """`demo`'s options; the parser's defaults are these."""

    speed: float = 30.0
    dialect: str = "asyncclient"
    tls: bool = False
    output: str | None = None


_DEFAULT: Final = DemoOptions()


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "demo",
        parents,
        handler="asyncclient.cli._demo:demo",
        help="a tour of the main job against the embedded emulator",
        description="Upload a sample build, run project p_demo, follow the runs live, print the "
        "verdicts and download a screenshot, all against an emulator started in-process on "
        "127.0.0.1. Needs no account and no network.",
        examples=_EXAMPLES,
        uses_service=False,
    )
    p.add_argument(
        "--speed",
        type=float,
        default=_DEFAULT.speed,
        help="emulator seconds per wall second (default %(default)g: the tour takes about 5 s)",
    )
    p.add_argument(
        "--dialect",
        metavar="NAME",
        default=_DEFAULT.dialect,
        help="how the emulator fills what the API spec leaves open: asyncclient (default), "
        "flat or enveloped; the client reads each the same",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="run the tour over HTTPS: the emulator gets a certificate from a throwaway CA, "
        "and the client trusts that CA (as --ca-file would)",
    )
    p.add_argument(
        "--output",
        metavar="DIR",
        help="keep the sample build and the screenshot in DIR (default: a new temporary "
        "folder that keeps only the screenshot: the ~25 MB build is removed once uploaded)",
    )


async def demo(args: argparse.Namespace, out: Output) -> int:
    opts = read(DemoOptions, args)
    if opts.speed <= 0:
        raise CommandError(f"--speed {opts.speed} must be above 0 (1 is real time)")
    from asyncclient import AsyncSession
    from asyncclient.testing import FakeService, ServiceSettings, get_dialect

    try:
        dialect = get_dialect(opts.dialect)
    except ValueError as exc:
        raise CommandError(str(exc)) from None

    keep_all = opts.output is not None
    folder = (
        Path(opts.output)
        if opts.output is not None
        else Path(tempfile.mkdtemp(prefix="asyncclient-"))
    )
    folder.mkdir(parents=True, exist_ok=True)
    apk = folder / "shop.apk"
    screenshot: Path | None = None
    report: Path | None = None
    # Small parts: several in flight at once.
    settings = ServiceSettings(part_bytes=4 << 20)
    try:
        async with FakeService(
            speed=opts.speed, settings=settings, dialect=dialect, tls=opts.tls
        ) as service:
            out.info(
                f"Emulator of the Test-Run Service on {service.url} (demo seed, x{opts.speed:g}, "
                f"dialect {dialect.name})."
            )
            if service.ca_file is not None:
                out.info(f"TLS: its certificate comes from a throwaway CA, {service.ca_file}")
            async with AsyncSession(
                api_key=service.run_key,
                base_url=service.url,
                ca_file=service.ca_file,
                # The emulator is local: no proxy.
                proxy="direct",
            ) as session:
                build_id = await _upload(session, service.project_id, apk, out)
                if not keep_all:
                    apk.unlink()  # uploaded: the ~25 MB sample has served its purpose
                tests = await _run_project(session, service.project_id, build_id, out)
                result = await _follow(session, tests, out)
                await _flakiness(session, service.project_id, out)
                shot = await _download_screenshot(session, result, folder, out)
                screenshot = shot[1]
                report = _write_report(result, folder, shot, out)
    finally:
        if not keep_all:
            # Without --output only the screenshot stays.
            apk.unlink(missing_ok=True)
            # With --quiet nobody is told: keep nothing.
            if screenshot is None or out.quiet:
                shutil.rmtree(folder, ignore_errors=True)
    if screenshot is not None and not keep_all:
        out.info(f"   kept: {screenshot} (the sample build was removed once uploaded)")
    if report is not None and not out.quiet:
        out.info(f"   open it in a browser: {report.absolute().as_uri()}")
    out.info("")
    out.info(_NEXT_STEPS)
    return EXIT_OK


async def _upload(session: Any, project_id: str, apk: Path, out: Output) -> str:
    from asyncclient.cli._upload_progress import display_for
    from asyncclient.testing.builders import build_apk

    def make_apk() -> int:  # 24 MiB, in a thread: the emulator serves here
        path = build_apk(
            apk,
            package="com.example.shop",
            version_name="2.4.0",
            version_code=240,
            label="Shop",
            filler_bytes=24 << 20,
        )
        return path.stat().st_size

    size = await asyncio.to_thread(make_apk)
    out.info(f"\n1. Upload a build: {apk} ({size >> 20} MiB, 4 parts in flight)")
    with display_for(out, [apk]) as display:
        uploads = await session.upload_builds(
            [apk], project_id=project_id, progress=_per_file(display)
        )
        result = uploads[0]
        display.finished(result)
    if result.error is not None:
        raise result.error
    build = result.build
    assert build is not None  # a result without an error carries its build
    out.info(
        f"   {build.id}: {build.app_id} {build.version} ({build.platform}), {build.status}, "
        f"sha256 {'verified' if result.verified else 'not reported'}"
    )
    return str(build.id)


def _per_file(display: Any) -> Any:
    progress = display.progress_for(0)
    if progress is None:  # --quiet: nothing to draw
        return None

    def report(path: Path, done: int, total: int) -> None:
        progress(done, total)

    return report


async def _run_project(session: Any, project_id: str, build_id: str, out: Output) -> dict[str, str]:
    """Start the project's runs; returns the test id of each run started, in start order."""
    out.info(f"\n2. Run every test of {project_id} on that build")
    started = await session.run_project(project_id, build_id=build_id)
    for run in started.started:
        out.info(f"   started {run.run_id} for {run.test_id} ({run.mode})")
    for skipped in started.skipped:
        out.info(f"   skipped {skipped.test_id}: {skipped.reason}")
    return {run.run_id: run.test_id for run in started.started}


async def _follow(session: Any, tests: dict[str, str], out: Output) -> Any:
    """Follow the runs, re-running once each test that did not pass; returns the SuiteResult."""
    from asyncclient._reports.model import suite_report
    from asyncclient._reports.text import summary_lines
    from asyncclient.cli._progress import Progress
    from asyncclient.suite import wait_with_retries

    run_ids = list(tests)
    out.info(
        f"\n3. Follow {len(run_ids)} runs (one request per sweep for all of them); a test that "
        "does not pass is run once more (--retry-failed 1)"
    )
    with Progress(out, run_ids, tests) as progress:
        result = await wait_with_retries(
            session,
            run_ids,
            retry_failed=1,
            interval=0.25,
            max_interval=1.0,
            on_run=progress.update,
            on_rerun=progress.add_attempts,
        )
    out.info(
        "\n4. Verdicts (t_checkout fails on purpose: see its failed requirement; t_onboarding "
        "is flaky: its first run fails, its re-run passes)"
    )
    for line in summary_lines(suite_report(result, name="p_demo")):
        out.info(f"   {line}")
    return result


async def _download_screenshot(
    session: Any, result: Any, folder: Path, out: Output
) -> tuple[str, Path]:
    runs = list(result.final_runs)
    with_files = [run for run in runs if run.screenshot_refs]
    if not with_files:
        raise CommandError("no run produced a screenshot; the emulator seed looks wrong", 1)
    run = next((r for r in with_files if not r.passed), with_files[0])
    path = await session.download_run_file(run.id, run.screenshot_refs[0], folder)
    out.info(f"\n6. Downloaded a screenshot of {run.id} ({run.test_id}): {path}")
    return run.id, Path(path)


async def _flakiness(session: Any, project_id: str, out: Output) -> None:
    """Which tests flake across jobs: the seed's two weeks of history, and this suite."""
    report = await session.flakiness(project_id)
    out.info(
        f"\n5. Which tests flake across jobs: {project_id}'s runs of the last 14 days, this "
        "suite's included (asyncclient flaky)"
    )
    width = max((len(test.test_id) for test in report.tests), default=0)
    for test in report.tests:
        out.info(
            f"   {test.test_id.ljust(width)}  {test.state:<6}  flaky on {test.flaky_builds} of "
            f"{test.builds} builds  {test.strip}"
        )
    out.info(
        "   broken: failed on each of its last 3 builds (a regression: fix it); flaky: passed "
        "and failed on one build (quarantine it: asyncclient flaky --write-quarantine FILE)"
    )


def _write_report(result: Any, folder: Path, shot: tuple[str, Path], out: Output) -> Path:
    """The HTML report of the suite, with the downloaded screenshot as its evidence."""
    from asyncclient._reports.html import write_html
    from asyncclient._reports.model import suite_report

    run_id, screenshot = shot
    evidence = {run_id: [screenshot.name]}
    path = write_html(
        folder / "report.html",
        suite_report(result, name="p_demo"),
        evidence=evidence,
        evidence_dir=folder,
    )
    out.info(f"\n7. Wrote the HTML report: {path}")
    return path
