"""`--events FILE` (`-`: standard output): what happens while runs are followed, as JSON Lines,
written as it happens. A stable interface (docs/reference/events.md has the schema): every
line is one object with `"event"` and `"time"` (UTC, ISO 8601 with milliseconds); fields are
only ever added.

    run_started    runId, testId, attempt                      (each first run, at the start)
    rerun_started  runId, testId, attempt                      (each re-run, as it starts)
    repeat_started runId, testId, attempt                      (a new test's repeat)
    reused         runId, testId, earlierRunId, earlierLink, earlierBuildId, sha256,
                   finishedAt, savedSeconds                    (a run stopped for a pass)
    new_tests      tests, repeats                              (the tests seen first here)
    run_status     runId, testId, attempt, status              (a change of status only)
    run_finished   runId, testId, attempt, status, outcome, durationSeconds, queueSeconds
    eta            seconds, p90Seconds, slowest                (when it moves by a tenth)
    fail_fast      tests, stopped                              (--max-failures stopped runs)
    job_finished   exitCode, passed, counts, tests, deviceSeconds, rerunDeviceSeconds,
                   queueSeconds, runs, overageRuns             (the last line)

The service's text reaches the file only as JSON values, with what a terminal or a CI log acts
on written as escapes (the file is often tailed, or is standard output).
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
    from asyncclient.models import Run

__all__ = ["NO_EVENTS", "Events"]


class Events:
    """The stream of one command, or none (every call then does nothing)."""

    def __init__(self, stream: IO[str] | None, *, owned: bool = False) -> None:
        self._stream = stream
        self._owned = owned
        self._status: dict[str, object] = {}
        self._finished: set[str] = set()

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

    def started(self, run_id: str, test_id: str | None, attempt: int, *, kind: str = "run") -> None:
        """kind: run (a first run), rerun or repeat (a new test's)."""
        if self._stream is None:
            return
        self._status[run_id] = None
        self.emit(
            f"{kind}_started",
            runId=run_id,
            testId=test_id,
            attempt=attempt,
        )

    def changed(self, run: Run, attempt: int) -> None:
        """A run the watcher handed out: its status if it changed, and its end once."""
        if self._stream is None or run.id in self._finished:
            return
        status = str(run.status)
        if self._status.get(run.id) != status:
            self._status[run.id] = status
            self.emit(
                "run_status", runId=run.id, testId=run.test_id, attempt=attempt, status=status
            )
        if run.is_final:
            from asyncclient._reports.model import attempt as read

            told = read(run, attempt)
            self._finished.add(run.id)
            self.emit(
                "run_finished",
                runId=run.id,
                testId=run.test_id,
                attempt=attempt,
                status=status,
                outcome=told.outcome,
                durationSeconds=told.seconds,
                queueSeconds=told.queue_seconds,
            )

    def interrupted(self) -> None:
        """The last line of a command cancelled (Ctrl-C, SIGTERM): its exit code is the
        signal's, decided after this line."""
        self.emit("job_finished", exitCode=None, passed=False, interrupted=True)

    def finished(self, report: SuiteReport, exit_code: int) -> None:
        counts: dict[str, int] = {}
        for test in report.tests:
            counts[test.outcome] = counts.get(test.outcome, 0) + 1
        if report.skipped:
            counts["not_started"] = len(report.skipped)
        self.emit(
            "job_finished",
            exitCode=exit_code,
            passed=exit_code == 0,
            counts=counts,
            tests=len(report.tests) + len(report.skipped),
            **report.cost.fields(),
        )


NO_EVENTS = Events(None)
