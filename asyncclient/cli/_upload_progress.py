"""Upload progress on stderr for `asyncclient upload`: on a terminal an overall bar and rich
bars (bytes, rate, time left) for the files in flight, as many as fit; a line per file and per
quarter of a big one otherwise (a CI log); nothing with --quiet; and the line that says a file
is done.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncclient.cli._output import Output, format_rate, format_size

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from asyncclient.upload import Adaptive, UploadResult


# Files this big get quarter lines in plain output.
QUARTERS_FROM = 64 << 20


class Display:
    """Where upload progress goes: the base shows nothing (--quiet)."""

    def __init__(self, out: Output, files: list[Path], tuner: Adaptive | None = None) -> None:
        self.out = out
        self.files = files
        self.tuner = tuner

    def in_flight(self) -> str:
        """ ", 12 parts in flight" while the number is found as the upload goes; "" if fixed."""
        tuner = self.tuner
        return "" if tuner is None else f", {tuner.current} parts in flight"

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        return None

    def progress_for(self, index: int) -> Any:
        return None

    def waiting_for(self, index: int) -> Any:
        """The on_wait callback of file `index`: another process uploads the same file."""

        def waiting(pid: int | None) -> None:
            self.waiting(index, waiting_line(self.files[index], pid))

        return waiting

    def waiting(self, index: int, line: str) -> None:
        return None

    def finished(self, result: UploadResult) -> None:
        return None


class Lines(Display):
    """Not a terminal (a CI log): a line when a file starts, one at each quarter of a file of
    QUARTERS_FROM bytes or more (so a long upload shows it is moving), and one when it ends."""

    def __init__(self, out: Output, files: list[Path], tuner: Adaptive | None = None) -> None:
        super().__init__(out, files, tuner)
        self._started: dict[int, tuple[float, int]] = {}
        self._quarter: dict[int, int] = {}

    def progress_for(self, index: int) -> Any:
        def report(done: int, total: int) -> None:
            name = os.fspath(self.files[index])
            if index in self._started:
                quarter = 4 * done // total if total >= QUARTERS_FROM else 0
                # Retried parts wind progress back: report only a new high.
                if 0 < quarter < 4 and quarter > self._quarter.get(index, 0):
                    self._quarter[index] = quarter
                    began, _ = self._started[index]
                    self.out.info(
                        f"  {name}: {quarter * 25}% ({format_size(done)} of "
                        f"{format_size(total)}, {time.perf_counter() - began:.0f} s"
                        f"{self.in_flight()})"
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

    def waiting(self, index: int, line: str) -> None:
        self.out.info(line)

    def finished(self, result: UploadResult) -> None:
        if result.build is None or not result.ok:
            return  # errors are reported once, at the end
        self.out.info(done_line(result))
        for note in _notes(result):
            self.out.info(f"  {note}")


class Bars(Display):
    """A terminal: one overall bar (bytes, rate, time left; files done of all, failures) and a
    bar for each file in flight, as many as fit the terminal (`rows`); a file that has no row
    yet takes the first one freed. Each file's line when done is printed above the bars while
    the files are few enough to read them (PRINT_EACH_UP_TO); past that, one summary at the end.
    What one refresh draws is bounded by the rows, not by the number of files."""

    PRINT_EACH_UP_TO = 20
    MAX_FILE_ROWS = 10

    def __init__(
        self,
        out: Output,
        files: list[Path],
        tuner: Adaptive | None = None,
        *,
        height: int | None = None,
    ) -> None:
        super().__init__(out, files, tuner)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
        )

        console = Console(file=out.stderr)
        height = height or console.size.height
        # Room for the overall bar, printed lines and the prompt.
        self.rows = max(1, min(self.MAX_FILE_ROWS, height - 4))
        self._progress: Progress = _timed_progress()(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            DownloadColumn(binary_units=True),
            _rate_column(),
            TimeRemainingColumn(),
            console=console,
        )
        self._print_each = len(files) <= self.PRINT_EACH_UP_TO
        self._sizes = [_size(path) for path in files]
        self._done_bytes = [0] * len(files)
        self._bytes_total = sum(self._sizes)
        self._bytes_done = 0
        self._finished = 0
        self._failed = 0
        self._sent = 0
        self._started = time.perf_counter()
        self._overall: TaskID | None = None
        if len(files) > 1:
            self._overall = self._progress.add_task(
                self._overall_text(), total=self._bytes_total or None
            )
        self._tasks: dict[int, TaskID] = {}
        self._index = {path: index for index, path in enumerate(files)}
        self._closed = False

    def _overall_text(self) -> str:
        text = f"{self._finished} of {len(self.files)} files"
        text = f"{text}, {self._failed} failed" if self._failed else text
        return text + self.in_flight()

    def __enter__(self) -> Display:
        self._progress.start()
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._progress.stop()
        if not self._print_each and self._finished:
            from rich.text import Text

            elapsed = time.perf_counter() - self._started
            rate = format_rate(self._sent, elapsed)
            ok = self._finished - self._failed
            line = f"uploaded {ok} of {len(self.files)} files, {format_size(self._sent)}"
            line += f" in {elapsed:.1f} s" + (f", {rate}" if rate else "")
            if self._failed:
                line += f"; {self._failed} failed (see below)"
            self._progress.console.print(Text(line))

    def progress_for(self, index: int) -> Any:
        def report(done: int, total: int) -> None:
            progress = self._progress
            if self._overall is not None:
                # A zipped folder's size is known only now.
                self._bytes_total += total - self._sizes[index]
                self._sizes[index] = total
                self._bytes_done += done - self._done_bytes[index]  # winds back on a retry
                self._done_bytes[index] = done
                progress.update(
                    self._overall,
                    completed=self._bytes_done,
                    total=self._bytes_total or None,
                    description=self._overall_text(),
                )
            # One file: its row says parts in flight.
            name = self.files[index].name + ("" if self._overall else self.in_flight())
            row = self._tasks.get(index)
            if row is not None:
                progress.update(row, completed=done, description=name)
            elif len(self._tasks) < self.rows:
                self._tasks[index] = progress.add_task(name, total=total, completed=done)

        return report

    def waiting(self, index: int, line: str) -> None:
        row = self._tasks.get(index)
        if row is not None:
            self._progress.update(row, description=line)
        elif len(self._tasks) < self.rows:
            self._tasks[index] = self._progress.add_task(line, total=self._sizes[index])
        else:
            from rich.text import Text

            self._progress.console.print(Text(line))

    def finished(self, result: UploadResult) -> None:
        index = self._index.get(result.path, -1)
        row = self._tasks.pop(index, None)
        if row is not None:
            self._progress.remove_task(row)
        self._finished += 1
        ok = result.build is not None and result.ok
        if ok:
            self._sent += result.bytes_sent
        else:
            self._failed += 1  # printed with the other errors at the end
        if self._overall is not None:
            self._progress.update(self._overall, description=self._overall_text())
        if not ok:
            return
        from rich.text import Text

        console = self._progress.console
        if self._print_each:
            console.print(Text(done_line(result)))
        for note in _notes(result):  # shown however many files
            shown = f"  {note}" if self._print_each else f"{os.fspath(result.path)}: {note}"
            console.print(Text(shown))


def _timed_progress() -> type[Progress]:
    from rich.progress import Progress

    class TimedProgress(Progress):
        """rich's Progress redraws everything on each add_task (and reset): with 200 files
        that was 200 extra frames, 14 KiB each. Here only its timer draws (10 a second), and
        stop(), which draws the last frame itself."""

        def refresh(self) -> None:
            return None

    return TimedProgress


def _size(path: Path) -> int:
    """The file's size for the overall bar; a folder (zipped on the fly) counts once reported."""
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


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


def display_for(out: Output, files: list[Path], tuner: Adaptive | None = None) -> Display:
    if out.quiet:
        return Display(out, files, tuner)
    if out.stderr_is_terminal:
        return Bars(out, files, tuner)
    return Lines(out, files, tuner)


def waiting_line(path: Path, pid: int | None) -> str:
    who = f" (pid {pid})" if pid else ""
    return f"waiting for another upload of {path.name}{who}"


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
    if result.joined:
        return f"{name}: uploaded by another process as {build.id} ({app}); not sent again"
    rate = format_rate(result.bytes_sent, result.elapsed)
    rate = f", {rate}" if rate else ""
    if result.parts_sent > 1 and result.parts_in_flight:
        rate += f", {result.parts_in_flight} parts in flight"
    resumed = ""
    if result.parts_kept is not None:
        kept, total = result.parts_kept
        resumed = (
            f" (resumed: {kept} of {total} parts kept)"
            if kept
            else f" ({kept} of {total} parts kept: starting over)"
        )
    elif result.resumed:
        resumed = " (resumed)"  # completed by the earlier run: only its answer was lost
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
