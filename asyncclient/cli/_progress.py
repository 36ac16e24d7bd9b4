"""The live progress of runs being followed (`run --wait`, `watch`, the demo): a rich table on a
terminal, drawn at most a few times a second however many runs change, one plain line per
change otherwise; with the ETA (asyncclient.eta) in its caption and a `left` column."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from asyncclient.cli._output import Output

if TYPE_CHECKING:
    from types import TracebackType

    from asyncclient.eta import Expected, JobEta
    from asyncclient.models import Run

__all__ = ["Progress"]


class Progress:
    """Live progress on stderr: a rich table on a terminal, one plain line per change otherwise,
    nothing with --quiet or when stderr is not for people (JSON output still shows lines).

    The table is drawn at most REFRESH_PER_SECOND times a second, however many changes come in
    (one sweep over 10,000 runs may bring thousands at once): a change within that time is
    drawn by a timer on the running loop, or on exit. Only the rows that fit are built.
    `tests`: the test id of each run known from its start (`run`, `demo`); those runs show
    from the first frame with their test, as queued until a sweep says otherwise.
    `clock` (default time.monotonic) may be replaced by tests.
    """

    REFRESH_PER_SECOND: ClassVar[float] = 4.0

    _STYLES: ClassVar[dict[str, str]] = {
        "passed": "green",
        "failed": "red",
        "blocked": "red",
        "error": "bold red",
        "inconclusive": "yellow",
        "cancelled": "dim",
        "queued": "dim",
        "running": "cyan",
    }

    def __init__(
        self,
        out: Output,
        run_ids: Sequence[str],
        tests: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out = out
        self._order = list(run_ids)
        self._views: dict[str, Run] = {}
        if tests:
            from asyncclient.models import Run, RunStatus

            # Just started: queued, as the service says.
            self._views = {
                run_id: Run(id=run_id, status=RunStatus.QUEUED, test_id=tests[run_id])
                for run_id in self._order
                if run_id in tests
            }
        # Kept up to date: a frame costs only its rows.
        from asyncclient._reports import status_of

        self._status_of = status_of  # imported once here, not on each of 100,000 updates
        self._counts: Counter[str] = Counter(status_of(run) for run in self._views.values())
        self._going: dict[str, None] = dict.fromkeys(self._order)
        self._finished: deque[str] = deque(maxlen=64)
        self._live: Any = None
        self._console: Any = None
        self._use_live = out.stderr_is_terminal and not out.quiet
        self._clock = clock
        self._attempts: dict[str, int] = {}  # run id -> attempt, for re-runs (2, 3, ...)
        self._repeats: set[str] = set()  # the runs that repeat a new test (not re-runs)
        self._copies: dict[str, int] = {}  # a known-flaky test's copies: run -> 1, 2, ...
        self._copies_of: dict[str, int] = {}  # test -> copies started
        self._reused: set[str] = set()  # the runs stopped for an earlier pass (--reuse-passed)
        self._drawn_at = 0.0
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None
        self._expected: Mapping[str, Expected] | None = None  # per test id, for the ETA
        self._eta_text = ""
        self._wait_text = ""  # a start waiting for the fleet's device slot, its place

    def __enter__(self) -> Progress:
        if self._use_live:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self._out.stderr)
            self._live = Live(
                self._render(), console=self._console, auto_refresh=False, transient=False
            )
            self._live.__enter__()
            self._drawn_at = self._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._live is not None:
            if self._dirty:
                self._draw()  # the final state, whatever the throttle held back
            self._live.__exit__(exc_type, exc, tb)

    def add_attempts(self, started: Sequence[tuple[str, str, int]], *, kind: str = "rerun") -> None:
        """Re-runs, a new test's repeats (kind repeat) or a known-flaky test's copies (copy)
        just started: (test id, run id, attempt); shown queued from now on."""
        repeat = kind == "repeat"
        from asyncclient.models import Run, RunStatus

        for test_id, run_id, attempt in started:
            self._order.append(run_id)
            self._going[run_id] = None
            self._attempts[run_id] = attempt
            if repeat:
                self._repeats.add(run_id)
            if kind == "copy":  # a copy is no attempt of its own: copy 1, copy 2, ...
                copies = self._copies_of[test_id] = self._copies_of.get(test_id, 0) + 1
                self._copies[run_id] = copies
            run = Run(id=run_id, status=RunStatus.QUEUED, test_id=test_id)
            self._views[run_id] = run
            self._counts[self._status_of(run)] += 1
            if self._live is None:
                said = {"repeat": "repeat of a new test"}.get(kind, "re-run")
                if kind == "copy":
                    number = self._copies[run_id]
                    self._out.info(f"{run_id}  {test_id}  copy {number} of a known-flaky test")
                else:
                    self._out.info(f"{run_id}  {test_id}  {said} (attempt {attempt})")
        if self._live is not None:
            self._draw()

    def reused(self, run_ids: Iterable[str]) -> None:
        """Runs stopped because an earlier pass on an identical build stands for them: shown as
        reused once their stop took."""
        self._reused.update(run_ids)

    def _status_text(self, run: Run) -> str:
        if run.id in self._reused and run.status_kind == "cancelled":
            return "reused"
        return str(run.status)

    def _count_key(self, run: Run) -> str:
        """What the caption counts the run as: its status, or reused."""
        if run.id in self._reused and run.status_kind == "cancelled":
            return "reused"
        return self._status_of(run)

    def update(self, run: Run) -> None:
        status_of = self._count_key
        before = self._views.get(run.id)
        if before is not None:
            self._counts[status_of(before)] -= 1
        self._counts[status_of(run)] += 1
        self._views[run.id] = run
        if run.is_final and run.id in self._going:
            del self._going[run.id]
            self._finished.append(run.id)
        if self._live is None:
            attempt = self._attempts.get(run.id)
            shown = f"  (attempt {attempt})" if attempt else ""
            if run.id in self._repeats:
                shown = f"  (repeat, attempt {attempt})"
            if run.id in self._copies:
                shown = f"  (copy {self._copies[run.id]})"
            self._out.info(f"{run.id}  {run.test_id or '-'}  {self._status_text(run)}{shown}")
            return
        self._dirty = True
        wait = self._drawn_at + 1.0 / self.REFRESH_PER_SECOND - self._clock()
        if wait <= 0:
            self._draw()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop: the next change or exit draws it
            self._timer = loop.call_later(wait, self._on_timer)

    @property
    def test_ids(self) -> set[str]:
        """The tests of the runs seen (or known from their start)."""
        return {run.test_id for run in self._views.values() if run.test_id}

    @property
    def modes(self) -> dict[str, str | None]:
        return {run.test_id: run.mode for run in self._views.values() if run.test_id}

    @property
    def expected(self) -> Mapping[str, Expected] | None:
        """What each test's runs usually take, once read (the ETA's)."""
        return self._expected

    def expect(self, expected: Mapping[str, Expected]) -> None:
        """What each test's runs take (asyncclient.eta): the ETA and the `left` column."""
        self._expected = expected

    def eta(self) -> JobEta | None:
        """The job's ETA from the runs still going; None until expect() was told."""
        if self._expected is None:
            return None
        from asyncclient.eta import job_eta

        views = self._views
        return job_eta((views[i] for i in self._going if i in views), self._expected)

    def tell_eta(self, eta: JobEta) -> None:
        """Show the ETA: in the live table's caption, else a line."""
        self._eta_text = eta.text()
        if self._live is None:
            self._out.info(f"{self._eta_text} ({len(self._going)} run(s) still going)")
        else:
            self._draw()

    def tell_wait(self, text: str | None) -> None:
        """A start waiting its turn for the fleet's device slots (None: it went): in the live
        table's caption, else a line."""
        if self._live is None:
            if text:
                self._out.info(f"fleet: waiting for a device slot ({text})")
            return
        self._wait_text = text or ""
        self._draw()

    def _left(self, run: Run) -> str:
        if self._expected is None or run.is_final:
            return ""
        from asyncclient._reports import format_duration
        from asyncclient.eta import Expected, remaining

        p50, _ = remaining(run, self._expected.get(run.test_id or "", Expected()))
        return "~" + format_duration(p50)

    def _on_timer(self) -> None:
        self._timer = None
        if self._dirty and self._live is not None:
            self._draw()

    def _draw(self) -> None:
        self._dirty = False
        self._live.update(self._render(), refresh=True)
        self._drawn_at = self._clock()

    def _render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        from asyncclient._core._untrusted import cell
        from asyncclient._reports import counts_text, duration_seconds, format_duration

        views = self._views
        caption = counts_text(self._counts)
        unseen = len(self._order) - len(views)
        if unseen:
            caption += f" ({unseen} not seen yet)"
        if self._eta_text and self._going:  # none left going: nothing left to wait for
            caption += f"; {self._eta_text}"
        if self._wait_text:
            caption += f"; a start waits for a device slot: {self._wait_text}"
        columns = ["run", "test", "status", "duration"]
        if self._expected is not None:
            columns.append("left")
        if self._attempts:
            columns.insert(2, "attempt")
        table = Table(*columns, caption=caption)
        # Every run in the order it started while they fit (a row never moves); past the
        # height, those going first, then the latest finished.
        height = self._console.height if self._console is not None else 40
        room = max(5, height - 8)
        if len(self._order) <= room:
            shown = list(self._order)
        else:
            done = reversed(self._finished)
            shown = list(itertools.islice(itertools.chain(self._going, done), room))
        for run_id in shown:
            run = views.get(run_id)
            if run is None:
                cells = [Text(run_id), Text(""), Text("-", style="dim"), Text("")]
            else:
                # The service's words through the one sanitiser (asyncclient._core._untrusted).
                cells = [
                    Text(cell(run.id)),
                    Text(cell(run.test_id)),
                    Text(cell(self._status_text(run)), style=self._STYLES.get(run.status_kind, "")),
                    Text(format_duration(duration_seconds(run))),
                ]
            if self._attempts:
                copy = self._copies.get(run_id)
                said = f"copy {copy}" if copy else str(self._attempts.get(run_id, 1))
                cells.insert(2, Text(said))
            if self._expected is not None:
                cells.append(Text(self._left(run) if run is not None else "", style="dim"))
            table.add_row(*cells)
        if len(self._order) > len(shown):
            more: list[Any] = ["", Text(f"... {len(self._order) - len(shown)} more"), "", ""]
            more += [""] * ((1 if self._attempts else 0) + (1 if self._expected is not None else 0))
            table.add_row(*more)
        return table
