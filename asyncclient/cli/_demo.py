"""`asyncclient demo`: the commands a user types, each printed first, run in this process
against the embedded emulator (upload, a hedged job with a baseline and every report beside
the same suite in rounds, `failures`, `flaky`); one closing line a step says what it showed.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import attrs

from asyncclient.cli._common import EXIT_OK, CommandError, add_command
from asyncclient.cli._options import Globals, read
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

    speed: float = 60.0
    dialect: str = "asyncclient"
    tls: bool = False
    output: str | None = None
    keep_serving: bool = False


_DEFAULT: Final = DemoOptions()


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "demo",
        parents,
        handler="asyncclient.cli._demo:demo",
        help="a tour of the main job against the embedded emulator",
        description="Upload a sample build, run project p_demo with hedged copies of its "
        "flaky test, main's build as the baseline and every report (HTML, JUnit, CTRF, "
        "Allure), beside the same suite re-run in rounds, then group the failures by cause and "
        "find the flaky tests: the commands you would type, each printed first, against an "
        "emulator started in-process on 127.0.0.1. Needs no account and no network.",
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
        "--keep-serving",
        action="store_true",
        help="keep the emulator up after the tour, so the report's run links open (Ctrl-C "
        "stops it)",
    )
    p.add_argument(
        "--output",
        metavar="DIR",
        help="write the sample build, the reports and the evidence to DIR (default: a new "
        "temporary folder, which keeps the reports: the ~25 MB build is removed once uploaded)",
    )


async def demo(args: argparse.Namespace, out: Output) -> int:
    opts = read(DemoOptions, args)
    if not 0 < opts.speed <= 10_000:
        raise CommandError(f"--speed {opts.speed} must be above 0, at most 10000 (1: real time)")
    from asyncclient.testing import FakeService, ServiceSettings, get_dialect
    from asyncclient.testing._demo_seed import tour_seed

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
    done = False
    # Small parts: several in flight at once.
    settings = ServiceSettings(part_bytes=4 << 20)
    try:
        async with FakeService(
            tour_seed(), speed=opts.speed, settings=settings, dialect=dialect, tls=opts.tls
        ) as service:
            out.info(
                f"Emulator of the Test-Run Service on {service.url} (demo seed, x{opts.speed:g}: "
                f"a run's device minute passes in {60 / opts.speed:.1g} s on your clock; "
                f"dialect {dialect.name})."
            )
            if service.ca_file is not None:
                out.info(f"TLS: its certificate comes from a throwaway CA, {service.ca_file}")
            tour = _Tour(service, folder, out)
            await tour.run(apk)
            if not keep_all:
                apk.unlink(missing_ok=True)  # uploaded: the sample is done
            tour.recap(opts.keep_serving)
            done = True
            if not out.quiet:
                report = (folder / "report.html").absolute().as_uri()
                out.info(f"\nOpen the report in a browser: {report}")
            out.info("")
            out.info(_NEXT_STEPS)
            if opts.keep_serving:
                await _serve_until_stopped(service, out)
    finally:
        if not keep_all:
            apk.unlink(missing_ok=True)
            if not done or out.quiet:  # reports nobody was told of
                shutil.rmtree(folder, ignore_errors=True)
    return EXIT_OK


async def _serve_until_stopped(service: Any, out: Output) -> None:
    out.info(
        f"\nThe emulator stays up on {service.url} so the report's links open: Ctrl-C stops it."
    )
    # Ctrl-C cancels it: exit 130, as any command.
    await asyncio.Event().wait()


@attrs.define
class _Step:
    """One step of the tour: what it showed, and the command that does it on your project."""

    showed: str
    command: str


class _Tour:
    """The tour's steps, each the command a user would type, run in this process against the
    emulator, with the command line printed before it."""

    def __init__(self, service: Any, folder: Path, out: Output) -> None:
        self._service = service
        self._folder = folder
        self._out = out
        self._steps: list[_Step] = []
        # The emulator is local: no proxy, whatever the environment says.
        self._connection = [
            "--base-url", service.url, "--api-key", service.run_key, "--proxy", "direct",
        ]  # fmt: skip
        if service.ca_file is not None:
            self._connection += ["--ca-file", str(service.ca_file)]

    async def run(self, apk: Path) -> None:
        project = self._service.project_id
        build = await self._upload(project, apk)
        await self._jobs(project, build)
        await self._command(
            ["failures", project],
            "\n4. The failures of the last 14 days grouped by cause: an outage is one cause",
            _Step(
                "an outage is one cause; app failures apart",
                "asyncclient failures PROJECT",
            ),
        )
        await self._command(
            ["flaky", project],
            "\n5. Which tests flake across jobs",
            _Step(
                "flaky, broken and stable tests from the history",
                "asyncclient flaky PROJECT --write-quarantine quarantine.toml",
            ),
        )

    async def _command(
        self, argv: list[str], title: str, step: _Step | None, out: Output | None = None
    ) -> tuple[int, float]:
        """Run `asyncclient ARGV` here (the connection given as flags, not shown); returns its
        exit code and its wall-clock seconds."""
        from asyncclient.cli import build_parser
        from asyncclient.cli._common import resolve_handler

        # --quiet: warnings too, the tour's own.
        shown = out or (_silent() if self._out.quiet else self._out)
        if title:
            self._out.info(title)
            self._out.info(f"$ asyncclient {shlex.join(argv)}")
        args = build_parser().parse_args([*argv, *self._connection])
        args.argv = argv
        began = time.monotonic()
        code = await resolve_handler(read(Globals, args).handler)(args, shown)
        if step is not None:
            self._steps.append(step)
        return code, time.monotonic() - began

    async def _upload(self, project: str, apk: Path) -> str:
        from asyncclient.testing.builders import build_apk

        made = await asyncio.to_thread(
            build_apk,
            apk,
            package="com.example.shop",
            version_name="2.4.0",
            version_code=240,
            label="Shop",
            filler_bytes=24 << 20,
        )
        label = f"ref=feature/voucher commit={_COMMIT}"
        argv = ["upload", project, str(apk), "--label", label, "--json"]
        printed = io.StringIO()  # read, not shown
        quiet = Output(
            json_mode=True,
            quiet=self._out.quiet,
            stdout=printed,
            stderr=io.StringIO() if self._out.quiet else None,
        )
        code, _ = await self._command(
            argv,
            f"\n1. Upload a build ({made.stat().st_size >> 20} MiB, in parts in parallel, "
            "checked by sha256), labelled with its branch and commit as uploads in CI are",
            _Step("parts in parallel, sha256 checked", "asyncclient upload PROJECT app.apk"),
            quiet,
        )
        if code:
            raise CommandError("the sample build's upload failed; see above", code)
        build = json.loads(printed.getvalue())["builds"][0]
        self._out.info(f"   {build['id']}: {build['appId']} {build['version']}, {build['status']}")
        return str(build["id"])

    async def _jobs(self, project: str, build: str) -> None:
        """The job with hedged copies and every report, and beside it the same suite with
        re-runs in rounds, quiet: their wall-clock and device time side by side."""
        folder = self._folder
        job = [
            "run", "project", project, "--build", build, "--wait", "--retry-failed", "2",
            "--interval", "0.2", "--baseline", "auto", "--pre-existing", "warn",
        ]  # fmt: skip
        hedge = [
            *job, "--retry-strategy", "hedge",
            "--junit", str(folder / "junit.xml"), "--ctrf", str(folder / "ctrf.json"),
            "--allure-results", str(folder / "allure-results"),
            "--html", str(folder / "report.html"),
            "--download-failed", str(folder / "evidence"),
            "--events", str(folder / "events.jsonl"),
        ]  # fmt: skip
        rounds = [
            *job, "--retry-strategy", "rounds",
            "--events", str(folder / "rounds-events.jsonl"), "--quiet",
        ]  # fmt: skip
        (code, hedge_s), (_, rounds_s) = await asyncio.gather(
            self._command(
                hedge,
                "\n2. Run the project's tests and follow them: history read first (the ETA, "
                "known breakage), a known-flaky test hedged with copies at once, each failure "
                "run on main's build too (pre-existing or not), every report written",
                _Step(
                    "ETA, hedged copies, causes, pre-existing, JUnit/CTRF/Allure/HTML",
                    "asyncclient run project PROJECT --build BUILD --wait --retry-failed 2 "
                    "--retry-strategy hedge --baseline auto --junit junit.xml --html report.html",
                ),
            ),
            self._command(rounds, "", None, _silent()),
        )
        out = self._out
        if code == 0:
            out.info("   (exit code 0: its one failure fails on main too; --pre-existing warn)")
        else:
            out.info(f"   (exit code {code})")
        out.info(
            "\n3. Hedged copies beside re-runs in rounds: the same suite on the same build, "
            "run at the same time, quietly"
        )
        out.info(f"$ asyncclient {shlex.join(rounds)}")
        rows = [
            ("hedge", hedge_s, _cost(folder / "events.jsonl")),
            ("rounds", rounds_s, _cost(folder / "rounds-events.jsonl")),
        ]
        out.info(f"   {'strategy':<9} {'your clock':>10}  {'at x1':>12}  device time")
        for name, wall, cost in rows:
            out.info(
                f"   {name:<9} {wall:>9.1f}s  {_minutes(wall * self._service.clock.rate):>12}  "
                f"{_minutes(cost)}"
            )
        self._steps.append(
            _Step(
                "hedged copies beside rounds: the wall-clock and device time of each",
                "--retry-strategy hedge (or rounds, at-once)",
            )
        )
        out.info(
            f"   in {folder}: report.html, junit.xml, ctrf.json, allure-results/ and evidence/ "
            "(screenshots and videos of the runs that did not pass)"
        )

    def recap(self, keep_serving: bool) -> None:
        out = self._out
        out.info("\nWhat each step showed, and how to do it on your project:")
        for n, step in enumerate(self._steps, 1):
            out.info(f"   {n}. {step.showed}: {step.command}")
        if not keep_serving:
            out.info(
                "The report's run links point at this emulator, which stops with the demo: "
                "`asyncclient demo --keep-serving` keeps it up until Ctrl-C."
            )


_COMMIT: Final = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"


def _cost(events: Path) -> float:
    """The device seconds a job's `job_finished` event says it took (0 when it says none)."""
    for line in reversed(events.read_text(encoding="utf-8").splitlines()):
        event = json.loads(line)
        if event.get("event") == "job_finished":
            return float(event.get("deviceSeconds") or 0.0)
    return 0.0


def _silent() -> Output:
    """Where the job beside the shown one writes: nowhere (its events file says the rest)."""
    return Output(json_mode=False, quiet=True, stdout=io.StringIO(), stderr=io.StringIO())


def _minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60:02d} s"
