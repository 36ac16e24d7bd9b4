"""`asyncclient upload` (send app builds, print their ids) and `asyncclient inspect` (read one).

Data goes to stdout; progress to stderr through asyncclient.cli._upload_progress.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient._core import _defaults as defaults
from asyncclient.cli._common import (
    EXIT_OK,
    add_command,
    api_key_source,
    check_id,
    describe_error,
    open_session,
)
from asyncclient.cli._options import read
from asyncclient.cli._output import Output, format_size, to_json
from asyncclient.cli._upload_progress import display_for

if TYPE_CHECKING:
    from asyncclient.upload import Adaptive, LocalBuild, UploadResult

# The fixed budget's default, for --concurrency alone.
_MAX_PARTS_IN_FLIGHT = defaults.MAX_PARTS_IN_FLIGHT

_UPLOAD_EXAMPLES = """\
  BUILD=$(asyncclient upload p_123 app-debug.apk --label "$GIT_SHA")
  asyncclient upload p_123 android/app.apk ios/Build/Shop.app --skip-existing
  asyncclient upload p_123 dist/*.apk --json | jq -r '.builds[].id'
"""

_UPLOAD_DESCRIPTION = """\
Upload app builds to a project and print one build id per line (or JSON with --json).
FILE is an Android .apk, a zipped iOS Simulator .app (Name.app.zip) or the .app folder itself
(zipped on the fly). Each file is checked locally first: nothing is sent for a file that is
not an app. Parts go up in parallel, as many as the link rewards (from 4, up to 64: more
while throughput rises with them, fewer when it does not or the service asks to slow down;
--concurrency or --max-parts-in-flight fix the number). An interrupted upload (Ctrl-C, a
killed CI job) resumes where it stopped when the same command runs again. With several
files, one failing does not stop the others.

exit codes: 0 every file uploaded, 2 bad input (nothing sent for it), 3 the service refused
(a rejected build prints what the devices cannot run), 4 the service could not be reached,
130 interrupted (run the same command again to resume); with several files, the worst one"""

_INSPECT_EXAMPLES = """\
  asyncclient inspect app-debug.apk
  asyncclient inspect Build/Products/Debug-iphonesimulator/Shop.app --json
"""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


@attrs.frozen(kw_only=True)
class UploadOptions:
    """`upload`'s options."""

    project_id: str
    files: list[str]
    label: str | None = None
    concurrency: int | None = None
    max_parts_in_flight: int | None = None
    skip_existing: bool = False
    reuse_build: bool = False


@attrs.frozen(kw_only=True)
class InspectOptions:
    """`inspect`'s options."""

    file: str


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "upload",
        parents,
        handler="asyncclient.cli._upload:upload",
        help="upload app builds (.apk, .app.zip or .app folder); prints their build ids",
        description=_UPLOAD_DESCRIPTION,
        examples=_UPLOAD_EXAMPLES,
    )
    p.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    p.add_argument("files", metavar="FILE", nargs="+", help="the app files to upload")
    p.add_argument(
        "--label",
        help="a free label for every build, for example a commit; in CI without it: "
        "ref=BRANCH commit=SHA (what --baseline auto reads)",
    )
    p.add_argument(
        "--concurrency",
        type=_positive,
        default=None,
        metavar="N",
        help="parts of one file in flight at once, fixed (default: found while uploading)",
    )
    p.add_argument(
        "--max-parts-in-flight",
        type=_positive,
        default=None,
        metavar="N",
        help="parts in flight at once across all files, fixed (default: found while "
        f"uploading, 4 to 64; {_MAX_PARTS_IN_FLIGHT} when only --concurrency is given)",
    )
    p.add_argument(
        "--skip-existing",
        action="store_true",
        help="reuse a ready build of the project with the same name, size and sha256",
    )
    p.add_argument(
        "--reuse-build",
        action="store_true",
        help="with a fleet ledger (ASYNCCLIENT_FLEET): a file another job of the fleet is "
        "uploading to the project is waited for and its build reused, once it reads back as "
        "this file's and ready; without one, as --skip-existing",
    )
    i = add_command(
        sub,
        "inspect",
        parents,
        handler="asyncclient.cli._upload:inspect",
        help="read an app file locally: ids, versions, ABIs, sha256, whether the devices run it",
        description="Read what an upload's pre-flight reads from an app file (no request is "
        "made), and check it against the service's default devices.\n\nexit codes: 0 an app "
        "(even one the devices cannot run: see its problems), 2 not an app",
        examples=_INSPECT_EXAMPLES,
        uses_service=False,
    )
    i.add_argument("file", metavar="FILE", help="an .apk, an .app.zip or an .app folder")


# --- upload ---------------------------------------------------------------------------------------


async def upload(args: argparse.Namespace, out: Output) -> int:
    from asyncclient.upload import Adaptive, UploadItem, default_journal_dir

    opts = read(UploadOptions, args)
    project_id = check_id(opts.project_id, "project")
    files = [Path(name) for name in opts.files]
    fixed = opts.concurrency is not None or opts.max_parts_in_flight is not None
    tuner = None if fixed else Adaptive()
    display = display_for(out, files, tuner)
    label = opts.label if opts.label is not None else _ci_label()
    items = [
        UploadItem(path, label, display.progress_for(index), on_wait=display.waiting_for(index))
        for index, path in enumerate(files)
    ]
    async with open_session(args) as session:

        async def upload_many(chosen: list[UploadItem]) -> list[UploadResult]:
            return await session.upload_builds(
                chosen,
                project_id=project_id,
                max_parts_in_flight=tuner or opts.max_parts_in_flight,
                concurrency=opts.concurrency,
                skip_existing=opts.skip_existing or opts.reuse_build,
                on_result=display.finished,
            )

        with display:
            try:
                shared = None
                if opts.reuse_build:
                    from asyncclient.cli._fleet import upload_once

                    shared = await upload_once(
                        args, out, session, items, project_id, upload_many, display
                    )
                results = shared if shared is not None else await upload_many(items)
            except asyncio.CancelledError:
                display.close()
                out.error(
                    "interrupted: what was sent is kept in the upload journal "
                    f"({default_journal_dir()}); run the same command again to resume"
                )
                raise
    return _report(out, results, api_key_source(args), tuner)


def _ci_label() -> str | None:
    """In CI, with no --label: `ref=BRANCH commit=SHA`, which `--baseline auto` reads."""
    import os

    from asyncclient._core._ci_run import ci_run
    from asyncclient.failures.exonerate import ci_label

    run = ci_run(os.environ)
    return ci_label(run.ref, run.revision) if run.system else None


def _report(
    out: Output, results: list[UploadResult], key_source: str | None, tuner: Adaptive | None
) -> int:
    worst = EXIT_OK
    lines: list[dict[str, Any]] = []
    for result in results:
        shown = os.fspath(result.path)
        if result.build is not None and result.error is None:
            if not out.json_mode:
                out.data(result.build.id)
            lines.append(
                {
                    "file": shown,
                    "ok": True,
                    "buildId": result.build.id,
                    "skipped": result.skipped,
                    "joined": result.joined,
                    "resumed": result.resumed,
                    "verified": result.verified,
                    "sha256": result.sha256,
                    "partsInFlight": result.parts_in_flight,
                }
            )
            continue
        assert result.error is not None
        message, code = describe_error(result.error, key_source=key_source)
        worst = max(worst, code)
        if not message.startswith(shown):
            message = f"{shown}: {message}"
        out.error(message)
        entry: dict[str, Any] = {"file": shown, "ok": False, "error": message, "exitCode": code}
        problems = getattr(result.error, "problems", None)
        if problems:
            entry["problems"] = [problem.to_json() for problem in problems]
        lines.append(entry)
    if out.json_mode:
        out.json(
            {
                "builds": [to_json(r.build) for r in results if r.build is not None and r.ok],
                "results": lines,
                "partsInFlight": _in_flight(results, tuner),
            }
        )
    return worst


def _in_flight(results: list[UploadResult], tuner: Adaptive | None) -> dict[str, Any]:
    """What the call kept in flight: the number found (settled, the highest, the last measured
    throughput, the pushbacks that lowered it), or the fixed number."""
    if tuner is None:
        fixed = max((r.parts_in_flight for r in results), default=0)
        return {"adaptive": False, "settled": fixed, "peak": fixed}
    return {
        "adaptive": True,
        "settled": tuner.current,
        "peak": tuner.peak,
        "throughputBytesPerSecond": None if tuner.throughput is None else int(tuner.throughput),
        "changes": tuner.changes,
        "pushbacks": tuner.pushbacks,
    }


# --- inspect --------------------------------------------------------------------------------------


async def inspect(args: argparse.Namespace, out: Output) -> int:
    from asyncclient.apps import DeviceProfile, check_compatibility
    from asyncclient.upload import inspect_build_file

    opts = read(InspectOptions, args)
    local = await inspect_build_file(opts.file)
    compatibility = check_compatibility(local.info, DeviceProfile())
    if out.json_mode:
        out.json(_inspect_json(local, compatibility))
        return EXIT_OK
    info = local.info
    verdict = "the default devices can run it" if compatibility.ok else "the devices cannot run it"
    out.fields(
        [
            ("file", os.fspath(local.path)),
            ("uploaded as", local.file_name if local.file_name != local.path.name else None),
            ("platform", info.platform),
            ("app id", info.app_id),
            ("app name", info.app_name),
            ("version", info.version),
            ("version code", info.version_code),
            ("min os", info.min_os),
            ("abis" if info.platform == "android" else "archs", ", ".join(info.abis) or "none"),
            ("platforms", ", ".join(info.supported_platforms) or None),
            ("size", f"{format_size(local.size)} ({local.size} bytes)"),
            ("sha256", local.sha256),
            ("compatibility", verdict),
            ("problems", "\n".join(p.message for p in compatibility.problems) or None),
            ("warnings", "\n".join(compatibility.warnings) or None),
        ]
    )
    return EXIT_OK


def _inspect_json(local: LocalBuild, compatibility: Any) -> dict[str, Any]:
    info = local.info
    return {
        "file": os.fspath(local.path),
        "fileName": local.file_name,
        "size": local.size,
        "sha256": local.sha256,
        "platform": info.platform,
        "appId": info.app_id,
        "appName": info.app_name,
        "version": info.version,
        "versionCode": info.version_code,
        "minOs": info.min_os,
        "abis": list(info.abis),
        "supportedPlatforms": list(info.supported_platforms),
        "compatibility": {
            "ok": compatibility.ok,
            "problems": [problem.to_json() for problem in compatibility.problems],
            "warnings": list(compatibility.warnings),
        },
    }
