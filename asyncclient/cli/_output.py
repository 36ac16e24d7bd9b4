"""How a command writes: data to stdout (tables, key/value views, JSON), notes and errors to
stderr, and the formats people read (sizes, rates, times) and --json writes.

Kept free of aiohttp and rich imports at module level so that parsing arguments stays quick.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TextIO

from asyncclient._core._untrusted import block, cell, guard, json_text
from asyncclient._core._wording import format_size, to_json

__all__ = [
    "RATE_MIN_BYTES",
    "RATE_MIN_SECONDS",
    "Output",
    "format_rate",
    "format_size",
    "format_time",
    "to_json",
]


def _takes_unicode(stream: TextIO) -> bool:
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return encoding in ("utf8", "utf8sig", "utf16", "utf32")


class Output:
    """Where a command writes: data to stdout (tables or JSON), everything else to stderr.

    Every line goes through the one sanitiser (asyncclient._core._untrusted): the service's text in
    it (titles, reasons, messages) shows its control characters as escapes, never starts a
    new line and never starts a CI workflow command; JSON keeps the text as sent, escaped.
    """

    def __init__(
        self,
        *,
        json_mode: bool = False,
        quiet: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self._exit_notes: list[Callable[[], Sequence[str]]] = []

    @contextlib.contextmanager
    def note_on_forced_exit(self, note: Callable[[], Sequence[str]]) -> Iterator[None]:
        """While in this block, a second Ctrl-C (which exits at once, skipping the cleanup)
        first prints the lines `note()` returns: what the cleanup leaves undone."""
        self._exit_notes.append(note)
        try:
            yield
        finally:
            self._exit_notes.remove(note)

    def forced_exit_notes(self) -> list[str]:
        """The lines to print before exiting at once (see note_on_forced_exit)."""
        return [line for note in self._exit_notes for line in note()]

    @property
    def stdout_is_terminal(self) -> bool:
        return _isatty(self.stdout)

    @property
    def stderr_is_terminal(self) -> bool:
        return _isatty(self.stderr)

    def data(self, text: str) -> None:
        """A line of the command's result, on stdout."""
        print(block(text), file=self.stdout, flush=True)

    def json(self, value: Any) -> None:
        """`value` as JSON on stdout: as UTF-8 text where stdout takes it, else with every
        other character escaped (`\\u65e5`), so it is valid JSON that keeps every character
        on any encoding (a Windows runner's cp1252 log)."""
        unicode = _takes_unicode(self.stdout)
        dumped = json.dumps(value, indent=2, ensure_ascii=not unicode)
        print(json_text(dumped), file=self.stdout, flush=True)

    def info(self, text: str) -> None:
        """Progress and notes for people, on stderr; silent with --quiet."""
        if not self.quiet:
            print(block(text), file=self.stderr, flush=True)

    def always(self, text: str) -> None:
        """A line on stderr that belongs to the answer, shown even with --quiet."""
        print(block(text), file=self.stderr, flush=True)

    def error(self, text: str) -> None:
        print(block(f"error: {text}"), file=self.stderr, flush=True)

    def warning(self, text: str) -> None:
        """Something the user should act on that does not stop the command; shown even with
        --quiet."""
        print(block(f"warning: {text}"), file=self.stderr, flush=True)

    def table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        *,
        title: str | None = None,
        flexible: int | None = None,
    ) -> None:
        """A rich table on a terminal; aligned plain text when piped. `flexible`: on a
        terminal each row stays one line, the cells of that column cut with "…" to fit, the
        others whole."""
        cells = [["" if v is None else cell(v) for v in row] for row in rows]
        if self.stdout_is_terminal:
            from rich.table import Table
            from rich.text import Text

            table = Table(*columns, title=title, header_style="bold")
            if flexible is not None:
                import shutil

                room = shutil.get_terminal_size().columns - 3 * len(columns) - 1  # the borders
                for n, column in enumerate(table.columns):
                    column.no_wrap, column.overflow = True, "ellipsis"
                    if n != flexible:
                        widest = max((len(row[n]) for row in cells), default=0)
                        column.min_width = max(len(columns[n]), widest)
                        room -= column.min_width
                table.columns[flexible].max_width = max(len(columns[flexible]), room)
            for row in cells:
                # Text, not str: "[x]" is data, not markup.
                table.add_row(*(Text(v) for v in row))
            _print_rich(self.stdout, table)
            return
        widths = [len(c) for c in columns]
        for row in cells:
            widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]
        for row in [list(columns), *cells]:
            self.data("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())

    def fields(self, pairs: Sequence[tuple[str, Any]], *, title: str | None = None) -> None:
        """A key/value view (`builds get`, `runs get`); a value may span several lines.

        Pairs whose value is None are left out; a rich grid on a terminal, aligned text when piped.
        """
        items = [(key, block(str(value))) for key, value in pairs if value is not None]
        if self.stdout_is_terminal:
            from rich.table import Table
            from rich.text import Text

            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold", no_wrap=True)
            grid.add_column()
            for key, value in items:
                grid.add_row(Text(key), Text(value))
            if title:
                _print_rich(self.stdout, Text(title, style="bold"))
            _print_rich(self.stdout, grid)
            return
        if title:
            self.data(title)
        width = max((len(key) for key, _ in items), default=0)
        for key, value in items:
            lines = value.splitlines() or [""]
            self.data(f"{key.ljust(width)}  {lines[0]}".rstrip())
            for rest in lines[1:]:
                self.data(f"{' ' * width}  {rest}".rstrip())


def _print_rich(stream: TextIO, renderable: Any) -> None:
    """Draw with rich, then guard each line drawn (asyncclient._core._untrusted.guard): rich wraps
    a long value, and the wrapped part must not start a line a CI reads as a command."""
    from rich.console import Console

    console = Console(file=stream)
    with console.capture() as captured:
        console.print(renderable)
    drawn = captured.get()
    stream.write("\n".join(guard(line) for line in drawn.split("\n")))
    stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# A rate needs enough bytes and time to mean anything.
RATE_MIN_BYTES = 1 << 20
RATE_MIN_SECONDS = 0.02


def format_rate(nbytes: float, seconds: float | None, speed: float | None = None) -> str:
    """A transfer rate for people (`84.2 MB/s`, `512 kB/s`), or "" when `nbytes` moved in
    `seconds` are too few or too quick for a rate to mean anything. `speed` (bytes/s), when
    given, is shown instead of the average nbytes / seconds."""
    if seconds is None or nbytes < RATE_MIN_BYTES or seconds < RATE_MIN_SECONDS:
        return ""
    rate = nbytes / seconds if speed is None else speed
    if not rate > 0:
        return ""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6)):
        if rate >= scale:
            return f"{rate / scale:.1f} {unit}"
    if rate >= 1e3:
        return f"{rate / 1e3:.0f} kB/s"
    return f"{rate:.0f} B/s"


def format_time(value: object) -> str:
    """A timestamp (datetime or ISO 8601 text) as `2026-11-21 05:00:00` UTC; other text as is."""
    from datetime import UTC, datetime

    if value is None:
        return ""
    moment = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(moment, datetime):
        return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")
