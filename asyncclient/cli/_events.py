"""`--events FILE` (`-`: standard output): what happens while runs are followed, as JSON Lines
written as it happens, each line an object with `event` and `time`; fields are only ever
added (docs/reference/events.md is the schema). The service's text goes in only as JSON
values, with what a terminal acts on written as escapes.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from asyncclient._core._untrusted import json_text

if TYPE_CHECKING:
    from asyncclient._reports.model import SuiteReport
    from asyncclient.suite import SuiteEvent

__all__ = ["NO_EVENTS", "Events"]


class Events:
    """The stream of one command, or none (every call then does nothing): the suite loop's
    events (asyncclient.suite) rendered as lines, then the command's `job_finished`."""

    def __init__(self, stream: IO[str] | None, *, owned: bool = False) -> None:
        self._stream = stream
        self._owned = owned

    @classmethod
    def open(cls, target: str | None) -> Events:
        """The stream `--events` names: `-` for standard output, else a file (made new, its
        folder made as needed; an existing file is replaced)."""
        if not target:
            return NO_EVENTS
        if target == "-":
            return cls(sys.stdout)
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(path.open("w", encoding="utf-8"), owned=True)

    def close(self) -> None:
        if self._owned and self._stream is not None:
            self._stream.close()
        self._stream = None

    def emit(self, event: str, **fields: Any) -> None:
        """One line, flushed at once (a reader tails it)."""
        if self._stream is None:
            return
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        line = json_text(json.dumps({"event": event, "time": now, **fields}, ensure_ascii=False))
        self._stream.write(line + "\n")
        self._stream.flush()

    def write(self, event: SuiteEvent) -> None:
        """One event of the suite loop, as its line."""
        self.emit(event.event, **event.fields())

    def interrupted(self) -> None:
        """The last line of a command cancelled (Ctrl-C, SIGTERM): its exit code is the
        signal's, decided after this line."""
        self.emit("job_finished", exitCode=None, passed=False, interrupted=True)

    def finished(self, report: SuiteReport, exit_code: int) -> None:
        from asyncclient.suite._events import JobFinished

        # The loop's counts; passed is the exit code's.
        fields = {**JobFinished(report).fields(), "passed": exit_code == 0}
        self.emit(
            "job_finished",
            exitCode=exit_code,
            **fields,
            causes=[cause.fields() for cause in report.causes],
            **({"traceId": report.trace_id} if report.trace_id else {}),
        )


NO_EVENTS = Events(None)
