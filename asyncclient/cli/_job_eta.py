"""The job's ETA while runs are followed (`run ... --wait`, `watch`): what each test's runs take,
read once from its history (asyncclient.eta, one listing per test, at most MAX_TESTS), the ETA
recomputed as runs change, shown in the progress (a line, or the live table's caption and its
`left` column), written to the event stream when it moves by more than a tenth, and a
`--timeout` it will not fit told once, as soon as that is known."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.cli._events import Events
    from asyncclient.cli._output import Output
    from asyncclient.eta import Expected, JobEta
    from asyncclient.models import Run

__all__ = ["EtaWatch", "Shown"]


class Shown(Protocol):
    """What the ETA needs of the live progress (cli._progress.Progress)."""

    @property
    def test_ids(self) -> set[str]: ...

    @property
    def modes(self) -> dict[str, str | None]: ...

    def expect(self, expected: Mapping[str, Expected]) -> None: ...

    def eta(self) -> JobEta | None: ...

    def tell_eta(self, eta: JobEta) -> None: ...


_EVERY: Final = 1.0  # seconds between two computations (each goes over the runs still going)
_MOVED: Final = 0.1  # a new ETA is told when it moved by more than this share


class EtaWatch:
    """One job's ETA. `deadline`: time.monotonic() of --timeout, if given."""

    def __init__(
        self,
        session: AsyncSession,
        progress: Shown,
        out: Output,
        events: Events,
        *,
        timeout: float | None,
        deadline: float | None,
        exclude: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._progress = progress
        self._out = out
        self._events = events
        self._timeout = timeout
        self._deadline = deadline
        self._exclude = set(exclude)
        self._clock = clock
        self._read = False
        self.history: dict[str, list[Run]] = {}  # each test's newest runs, once read
        self._told: JobEta | None = None
        self._at = -_EVERY
        self._warned = False

    async def update(self, *, force: bool = False) -> None:
        """After runs changed: read the history once (the tests known by then), then at most
        once a second the ETA, told when it moved."""
        now = self._clock()
        if not force and now - self._at < _EVERY:
            return
        self._at = now
        await self.read_history()
        eta = self._progress.eta()
        if eta is None or eta.p90 <= 0:
            return
        told = self._told
        if told is None or abs(eta.p50 - told.p50) > _MOVED * max(told.p50, 1.0):
            self._told = eta
            self._progress.tell_eta(eta)
            self._events.emit(
                "eta",
                seconds=round(eta.p50, 1),
                p90Seconds=round(eta.p90, 1),
                slowest=list(eta.slowest[:3]),
            )
        self._check_timeout(eta, now)

    async def read_history(self) -> dict[str, list[Run]]:
        """Each test's newest runs, read once (the tests known by then, at most
        asyncclient.eta.MAX_TESTS; a test whose listing failed is left out), and the
        expectations made of them; the job's other readers of the history (reuse, new tests)
        take it from here rather than read it again."""
        if self._read:
            return self.history
        self._read = True
        from asyncclient.eta import MAX_TESTS, expected_of, read_history

        tests = sorted(self._progress.test_ids)[:MAX_TESTS]
        unread: dict[str, str] = {}
        self.history = await read_history(
            self._session, tests, exclude=self._exclude, unread=unread
        )
        if unread:
            from asyncclient._core._untrusted import clip, line

            names = ", ".join(sorted(unread)[:3]) + (", ..." if len(unread) > 3 else "")
            count = f"{len(unread)} test{'' if len(unread) == 1 else 's'}"
            self._out.warning(
                f"the history of {count} could not be read ({names}): no ETA of their own, "
                f"no reuse, not taken as new; {clip(line(next(iter(unread.values()))), 300)}"
            )
        modes = self._progress.modes
        self._progress.expect(
            {test: expected_of(self.history.get(test, []), modes.get(test)) for test in tests}
        )
        return self.history

    def start_timeout(self, deadline: float | None) -> None:
        """The --timeout's deadline, set once the history is read (the read is not part of
        the runs' time)."""
        self._deadline = deadline

    def _check_timeout(self, eta: JobEta, now: float) -> None:
        if self._warned or self._deadline is None or self._timeout is None:
            return
        left = self._deadline - now
        if eta.p50 <= left:
            return
        self._warned = True
        from asyncclient._reports import format_duration

        slowest = ", ".join(eta.slowest[:3])
        self._out.warning(
            f"the runs are expected to need about {eta.span()} more, past --timeout "
            f"{self._timeout:g} s ({format_duration(max(left, 0.0)) or '0.0 s'} left); the "
            f"slowest: {slowest}"
        )
