"""`asyncclient download RUN_ID [FILE]`: one file of a finished run, or its video and screenshots.

Several files at once (bounded); the session resumes partial files and renames only complete ones.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient._core import _defaults as defaults
from asyncclient._core._wording import RunFile, file_path, run_files
from asyncclient.cli._common import (
    EXIT_OK,
    EXIT_REFUSED,
    CommandError,
    add_command,
    api_key_source,
    check_id,
    describe_error,
    open_session,
)
from asyncclient.cli._options import read
from asyncclient.cli._output import Output
from asyncclient.errors import LocalFileError

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import Run

DEFAULT_CONCURRENCY = defaults.DOWNLOAD_CONCURRENCY
MAX_CONCURRENCY = 32

_EXAMPLES = """\
  asyncclient download j_789                         # video and screenshots into ./j_789/
  asyncclient download j_789 -o artifacts/ --concurrency 8
  asyncclient download j_789 screenshots/01.png      # one file into ./01.png
  asyncclient download j_789 video.mp4 -o run.mp4
  asyncclient download j_789 "$(asyncclient runs get j_789 --json | jq -r .run.video)"
"""


@attrs.frozen(kw_only=True)
class DownloadOptions:
    """`download`'s options."""

    run_id: str
    file: str | None = None
    output: str | None = None
    concurrency: int  # the parser gives it (DEFAULT_CONCURRENCY)


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "download",
        parents,
        handler="asyncclient.cli._download:download",
        help="download a run's video and screenshots, or one of its files",
        description="Download the files of a finished run: with FILE that one file, without it "
        "the video and every screenshot into a folder, several at once. Partial files are "
        "resumed when the command is run again, and a file appears under its name only once it "
        "is complete; each saved path is printed on stdout.",
        examples=_EXAMPLES,
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the run (j_...); it must be final")
    p.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        help="one file: a path such as screenshots/01.png or video.mp4, or its full link",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="with FILE: the file to write, or a folder for it (default: its name, here); "
        "without FILE: the folder (default: ./RUN_ID/)",
    )
    p.add_argument(
        "--concurrency",
        metavar="N",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"files downloaded at once (1 to {MAX_CONCURRENCY}; default {DEFAULT_CONCURRENCY})",
    )


async def download(args: argparse.Namespace, out: Output) -> int:
    opts = read(DownloadOptions, args)
    run_id = check_id(opts.run_id, "run")
    if not 1 <= opts.concurrency <= MAX_CONCURRENCY:
        raise CommandError(
            f"--concurrency {opts.concurrency} is out of range: give 1 to {MAX_CONCURRENCY}"
        )
    wanted = None if opts.file is None else file_path(opts.file, run_id)
    key_source = api_key_source(args)
    folder = Path(opts.output or run_id)
    if wanted is None:
        _check_folder(folder)
    async with open_session(args) as session:
        run = await session.get_run(run_id)
        if not run.is_final:
            raise CommandError(
                f"run {run_id} is {run.status}, not final yet: its files exist once it ends; "
                f"wait for it (asyncclient watch {run_id}) and download again",
                EXIT_REFUSED,
            )
        files = run_files(run)
        if wanted is not None:
            assert opts.file is not None  # what `wanted` was made of
            _check_wanted(run, files, wanted)
            destination = _file_destination(opts.output, wanted)
            _make_parent(destination)
            # The session parses the text as given.
            path = await session.download_run_file(run_id, opts.file.strip(), destination)
            saved = [(wanted, path)]
            if not out.json_mode:
                out.data(str(path))
        else:
            saved = await _download_all(
                session, out, run, files, folder, opts.concurrency, key_source=key_source
            )
    if out.json_mode:
        out.json(
            {
                "runId": run_id,
                "files": [
                    {"file": rel, "path": str(path), "size": _size(path)} for rel, path in saved
                ],
            }
        )
    return EXIT_OK


def _check_wanted(run: Run, files: list[RunFile], wanted: str) -> None:
    if any(f.path is None for f in files):
        return  # the service writes links another way: let it judge the path
    known = [f.path for f in files if f.path is not None]
    if wanted in known:
        return
    if not known:
        raise CommandError(f"run {run.id} has no files", EXIT_REFUSED)
    raise CommandError(
        f"run {run.id} has no file {wanted}: its files are {', '.join(known)}", EXIT_REFUSED
    )


def _file_destination(output: str | None, rel: str) -> Path:
    """Where one file goes: -o as a file, into -o as a folder, or by its name into the cwd."""
    name = PurePosixPath(rel).name
    if output is None:
        return Path(name)
    target = Path(output)
    if output.endswith(("/", "\\")) or target.is_dir():
        return target / name
    return target


def _check_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"-o {folder} is a file: give a folder for the run's files")


def _size(path: Path) -> int:
    return path.stat().st_size


def _make_parent(destination: Path) -> None:
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalFileError.of(
            exc, f"cannot create the folder {destination.parent}", "choose another -o"
        ) from exc


async def _download_all(
    session: AsyncSession,
    out: Output,
    run: Run,
    files: list[RunFile],
    folder: Path,
    concurrency: int,
    *,
    key_source: str | None = None,
) -> list[tuple[str, Path]]:
    """Every file of the run into `folder`, at most `concurrency` at once.

    One failing file does not stop the others; the failures are reported together at the end.
    """
    odd = [f.link for f in files if f.path is None]
    if odd:
        raise CommandError(
            f"run {run.id} has a file link of an unexpected form ({odd[0]}): "
            "download such files one by one, giving the link as FILE",
            EXIT_REFUSED,
        )
    jobs = [
        (f.path, f.link, folder.joinpath(*f.path.split("/"))) for f in files if f.path is not None
    ]
    if not jobs:
        out.info(f"run {run.id} has no video or screenshots")
        return []
    for f in files:
        if f.renamed_from is not None:
            out.info(f"{f.renamed_from} is saved as {f.path} (a name every platform can store)")
    for _, _, destination in jobs:
        _make_parent(destination)
    semaphore = asyncio.Semaphore(concurrency)
    saved: dict[str, Path] = {}
    failures: list[tuple[str, Exception]] = []

    async def fetch(rel: str, link: str, destination: Path) -> None:
        async with semaphore:
            try:
                saved[rel] = await session.download_run_file(run.id, link, destination)
            except Exception as exc:  # reported below, after the other files had their turn
                failures.append((rel, exc))
                return
        if not out.json_mode:
            out.data(str(saved[rel]))

    async with asyncio.TaskGroup() as group:
        for rel, link, destination in jobs:
            group.create_task(fetch(rel, link, destination))
    if failures:
        codes = []
        for rel, exc in failures:
            message, code = describe_error(exc, key_source=key_source)
            codes.append(code)
            out.error(f"could not download {rel}: {message}")
        raise CommandError(
            f"{len(failures)} of {len(jobs)} files of run {run.id} were not downloaded; "
            "run the same command again to fetch them (partial files resume)",
            codes[0],
        )
    out.info(f"saved {len(jobs)} files of run {run.id} in {folder}")
    return [(rel, saved[rel]) for rel, _, _ in jobs]
