"""Upload progress on stderr for `asyncclient upload`: rich bars (bytes, rate, time left) on a
terminal, a line per file and per quarter of a big one otherwise (a CI log), nothing with
--quiet; and the line that says a file is done.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncclient.cli._output import Output, format_rate, format_size

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from asyncclient.upload import UploadResult


# Files this big get a progress line at each quarter in plain (non-terminal) output.
QUARTERS_FROM = 64 << 20


class Display:
    """Where upload progress goes: the base shows nothing (--quiet)."""

    def __init__(self, out: Output, files: list[Path]) -> None:
        self.out = out
        self.files = files

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        return None

    def progress_for(self, index: int) -> Any:
        return None

    def finished(self, result: UploadResult) -> None:
        return None


class Lines(Display):
    """Not a terminal (a CI log): a line when a file starts, one at each quarter of a file of
    QUARTERS_FROM bytes or more (so a long upload shows it is moving), and one when it ends."""

    def __init__(self, out: Output, files: list[Path]) -> None:
        super().__init__(out, files)
        self._started: dict[int, tuple[float, int]] = {}
        self._quarter: dict[int, int] = {}

    def progress_for(self, index: int) -> Any:
        def report(done: int, total: int) -> None:
            name = os.fspath(self.files[index])
            if index in self._started:
                quarter = 4 * done // total if total >= QUARTERS_FROM else 0
                # Progress winds back on a retried part: only a new high is reported.
                if 0 < quarter < 4 and quarter > self._quarter.get(index, 0):
                    self._quarter[index] = quarter
                    began, _ = self._started[index]
                    self.out.info(
                        f"  {name}: {quarter * 25}% ({format_size(done)} of "
                        f"{format_size(total)}, {time.perf_counter() - began:.0f} s)"
                    )
                return
            self._started[index] = (time.perf_counter(), done)
            self._quarter[index] = 4 * done // total if total else 0
            if done >= total:
                return
            if done:
                self.out.info(
                    f"resuming {name}: {format_size(done)} of {format_size(total)} already sent"
                )
            else:
                self.out.info(f"uploading {name} ({format_size(total)})")

        return report

    def finished(self, result: UploadResult) -> None:
        if result.build is None or not result.ok:
            return  # errors are reported once, at the end
        self.out.info(done_line(result))
        for note in _notes(result):
            self.out.info(f"  {note}")


class Bars(Display):
    """A terminal: a rich progress bar per file (bytes, rate, time left) on stderr."""

    def __init__(self, out: Output, files: list[Path]) -> None:
        super().__init__(out, files)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._progress: Progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            DownloadColumn(binary_units=True),
            _rate_column(),
            TimeRemainingColumn(),
            console=Console(file=out.stderr),
        )
        self._tasks: dict[int, TaskID] = {}
        self._closed = False

    def __enter__(self) -> Display:
        self._progress.start()
        return self

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._progress.stop()

    def progress_for(self, index: int) -> Any:
        def report(done: int, total: int) -> None:
            task = self._tasks.get(index)
            if task is None:
                name = self.files[index].name
                self._tasks[index] = self._progress.add_task(name, total=total, completed=done)
            else:
                self._progress.update(task, completed=done)

        return report

    def finished(self, result: UploadResult) -> None:
        if result.build is None or not result.ok:
            task = self._tasks.get(self.files.index(result.path))
            if task is not None:  # the reason is printed with the other errors at the end
                self._progress.update(task, description=f"{result.path.name} (failed)")
            return
        from rich.text import Text

        console = self._progress.console
        console.print(Text(done_line(result)))
        for note in _notes(result):
            console.print(Text(f"  {note}"))


def _rate_column() -> Any:
    """A bar's rate, shown only once it means something (format_rate): rich's own column
    shows "?" until it has a speed, and a tiny file's rate is noise."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            rate = format_rate(task.completed, task.elapsed, speed) if speed else ""
            return Text(rate, style="progress.data.speed")

    return RateColumn()


def display_for(out: Output, files: list[Path]) -> Display:
    if out.quiet:
        return Display(out, files)
    if out.stderr_is_terminal:
        return Bars(out, files)
    return Lines(out, files)


def done_line(result: UploadResult) -> str:
    build = result.build
    assert build is not None
    name = os.fspath(result.path)
    app = " ".join(
        part
        for part in (
            build.app_id,
            build.version,
            f"({build.version_code})" if build.version_code else None,
        )
        if part
    )
    if result.skipped:
        return f"{name}: already uploaded as {build.id} ({app}); not sent again"
    rate = format_rate(result.bytes_sent, result.elapsed)
    rate = f", {rate}" if rate else ""
    resumed = " (resumed)" if result.resumed else ""
    return (
        f"uploaded {name} -> {build.id}{resumed}: {app}, {format_size(build.size)} "
        f"in {result.elapsed:.1f} s{rate}"
    )


def _notes(result: UploadResult) -> list[str]:
    build = result.build
    assert build is not None
    notes = [f"warning: {warning}" for warning in build.warning_texts]
    if not result.verified:
        notes.append("note: the service reported no sha256, so the upload could not be verified")
    return notes
