"""The values the service returns, as frozen attrs classes with snake_case fields.
Wire names and formats are not here: asyncclient._core._converter maps JSON to these classes."""

import enum
from datetime import datetime
from typing import Any, Final

import attrs

from asyncclient._values import _bounds, _lenient
from asyncclient._values._lenient import Requirement

__all__ = [
    "FINAL_STATUSES",
    "Build",
    "BuildList",
    "Endpoint",
    "ProjectRunStart",
    "Requirement",
    "Run",
    "RunStart",
    "RunStatus",
    "SkippedTest",
    "StartedRun",
    "UploadStart",
    "UploadedPart",
]


class RunStatus(enum.StrEnum):
    """The run statuses the service documents; a status it adds later is kept as a plain str."""

    QUEUED = "queued"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    BLOCKED = "blocked"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"
    CANCELLED = "cancelled"


FINAL_STATUSES: Final = frozenset(
    {
        RunStatus.PASSED,
        RunStatus.FAILED,
        RunStatus.BLOCKED,
        RunStatus.INCONCLUSIVE,
        RunStatus.ERROR,
        RunStatus.CANCELLED,
    }
)
"""The statuses after which a run changes no more (when the service sends no `final`)."""


@attrs.frozen(slots=False)
class Build:
    """An uploaded app build. project_id and sha256 are only in the single view (get_build).

    The API spec leaves the types of most build fields open. status is the service's value as
    sent: a str such as "ready" from this service (see the README), but any JSON value is kept
    as it came rather than refused. abis is a tuple of str (a comma-separated string is split);
    warnings keeps each item as sent (str from this service, objects kept as dicts).

    Attributes:
        id: The build id (`ab_...`).
        status: `uploading`, `processing`, `ready` or `rejected`, as the service sent it.
        file_name: The file's name as uploaded.
        size: Its size in bytes.
        platform: `android` or `ios`.
        app_id: The package name or bundle id the service read from the build.
        app_name: The app's name.
        version: The version name (`1.2.0`).
        version_code: The version code or build number.
        min_os: The minimum OS the build declares.
        abis: The ABIs (Android) or architectures (iOS) it holds.
        warnings: What the service noticed but did not refuse.
        label: Your label, if one was given.
        created_at: When the upload started.
        ready_at: When the service finished checking it.
        project_id: Its project (single view only).
        sha256: The file's sha256 as the service computed it (single view only).
    """

    id: str
    status: Any = ""
    file_name: str | None = None
    size: int | None = None
    platform: str | None = None
    app_id: str | None = None
    app_name: str | None = None
    version: str | None = None
    version_code: str | None = None
    min_os: str | None = None
    abis: tuple[str, ...] = ()
    warnings: tuple[Any, ...] = ()
    label: str | None = None
    created_at: datetime | None = None
    ready_at: datetime | None = None
    project_id: str | None = None
    sha256: str | None = None

    @property
    def status_kind(self) -> str:
        """What the status means, whatever word the service uses: uploading, checking, ready,
        rejected (`processing`, `READY`, `failed`, ... are read), else the word in lower case."""
        return _lenient.build_status_kind(self.status)

    @property
    def is_ready(self) -> bool:
        """Whether the build can be run: its status means ready, in the service's own word."""
        return self.status_kind == "ready"

    @property
    def warning_texts(self) -> tuple[str, ...]:
        """Each warning as text, whether sent as a string or as an object."""
        return tuple(_lenient.warning_text(w) for w in self.warnings)


@attrs.frozen
class BuildList:
    """list_builds: the builds (newest first), the largest size allowed, and the part size.

    Attributes:
        builds: The project's builds, newest first.
        max_bytes: The largest build the project may upload, in bytes.
        part_bytes: The size of each upload part, in bytes.
    """

    builds: tuple[Build, ...]
    max_bytes: int
    part_bytes: int


@attrs.frozen
class UploadStart:
    """start_upload: the new build's id, the part size and how many parts to send.

    Attributes:
        id: The new build's id (`ab_...`).
        part_bytes: How many bytes each part holds (the last one may hold fewer).
        parts: How many parts to send.
    """

    id: str
    part_bytes: int
    parts: int


@attrs.frozen
class UploadedPart:
    """One uploaded part and the etag the service gave it (listed again on completion).

    Attributes:
        part_number: The part's number, from 1.
        etag: The etag the service gave it, listed again on completion.
    """

    part_number: int
    etag: str


@attrs.frozen
class RunStart:
    """run_test: the new run, the mode actually used, whether it is beyond the plan, its page.

    overage is kept as the service sent it: a bool from this service (see the README); the API
    spec leaves its type open, so a number or an object is kept too.

    Attributes:
        run_id: The new run's id (`j_...`).
        mode: The mode actually used.
        overage: Whether the run is beyond the plan's included runs.
        link: The run's page on the service.
    """

    run_id: str
    mode: str | None = None
    overage: Any = None
    link: str | None = None


@attrs.frozen
class StartedRun:
    """One run started by run_project.

    Attributes:
        test_id: The test started.
        run_id: Its run (`j_...`).
        mode: The mode used.
        build_id: The build it runs on, if the service said.
        link: The run's page on the service.
    """

    test_id: str
    run_id: str
    mode: str | None = None
    build_id: str | None = None
    link: str | None = None


@attrs.frozen
class SkippedTest:
    """A test run_project could not start: why (reason) and the error code behind it, if sent.

    Attributes:
        test_id: The test that did not start.
        reason: Why, in the service's words.
        code: The error code behind it, if sent (`no_build`, `paid_plan_required`, ...).
    """

    test_id: str
    reason: Any = None
    code: str | None = None


@attrs.frozen
class ProjectRunStart:
    """run_project: the runs started and the tests skipped.

    Attributes:
        started: One `StartedRun` per test started.
        skipped: One `SkippedTest` per test that could not start, with the reason.
    """

    started: tuple[StartedRun, ...] = ()
    skipped: tuple[SkippedTest, ...] = ()


@attrs.frozen
class Run:
    """A test run, from get_run (full view) or list_runs (list view, fewer fields set).

    status is a RunStatus, or a plain str for a status this client does not know. Fields whose
    inner structure the API does not document (verdict, requirements, captures, build, ...)
    are kept as the JSON values the service sent.

    Attributes:
        id: The run id (`j_...`).
        status: A `RunStatus`, or the service's word for a status this client does not know.
        test_id: The test it runs.
        test_title: The test's title.
        mode: The mode it ran in (`auto`, `cold`, `warm`, or what the service says).
        final: Whether the service says the run is over, if it says so.
        source: What started it (a project run, a single run, ...).
        platform: `android`, `ios` or `web`.
        project_id: Its project.
        build_id: The build it ran on.
        url: Where the test started, for web tests.
        link: The run's page on the service.
        created_at: When it was started.
        started_at: When a device began it.
        finished_at: When it ended.
        duration_ms: How long it ran, in milliseconds.
        error: Why it could not run, for a run in `error`.
        verdict: The service's verdict, as sent.
        headline: One line saying how it went, as sent.
        requirements: Each requirement checked, with its result and reason, as sent.
        captures: Values the run captured, as sent.
        video: The video's path or link.
        screenshots: The screenshots' paths or links.
        build: The build it ran on, as sent (full view).
    """

    id: str
    status: RunStatus | str = ""
    test_id: str | None = None
    test_title: str | None = None
    mode: str | None = None
    final: bool | None = None
    source: Any = None
    platform: str | None = None
    project_id: str | None = None
    build_id: str | None = None
    url: str | None = None
    link: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    error: Any = None
    verdict: Any = None
    headline: Any = None
    requirements: Any = None
    captures: Any = None
    video: Any = None
    screenshots: Any = None
    build: Any = None

    @property
    def is_final(self) -> bool:
        """True once the run is final: the service's `final` flag when sent, else the status
        (read leniently: `canceled` or `stopped` is final; an unknown status is not)."""
        if self.final is not None:
            return self.final
        return self.status_kind in FINAL_STATUSES

    @property
    def status_kind(self) -> str:
        """The documented status the service's word means (`canceled`, `stopped` and
        `aborted` mean cancelled; `SUCCESS` passed), else the word itself in lower case."""
        if type(self.status) is RunStatus:
            return self.status.value
        return _lenient.run_status_kind(self.status)

    @property
    def passed(self) -> bool:
        """Whether the run passed (its status, read leniently)."""
        return self.status_kind == RunStatus.PASSED

    # Open-shaped fields, read leniently when asked (_values._lenient).

    @property
    def requirement_results(self) -> tuple[Requirement, ...]:
        """Each check with its outcome (passed, failed, skipped, unknown), name and reason."""
        return _lenient.requirements(self.requirements)

    @property
    def failed_requirements(self) -> tuple[Requirement, ...]:
        """The checks that failed, with their reasons, in the service's order."""
        return _lenient.failed_requirements(self.requirements)

    @property
    def capture_values(self) -> dict[str, str]:
        """The values read during the run, name -> text."""
        return _lenient.captures(self.captures)

    @property
    def verdict_text(self) -> str:
        """The verdict as one line of text, whatever shape the service gave it."""
        return _lenient.text_of(self.verdict)

    @property
    def headline_text(self) -> str:
        """The headline as one line of text, whatever shape the service gave it."""
        return _lenient.text_of(self.headline)

    @property
    def error_code(self) -> str:
        """The code of the run's error (a run that ended in error), or empty."""
        return _lenient.error_fields(self.error)[0]

    @property
    def error_message(self) -> str:
        """The message of the run's error, or empty."""
        return _lenient.error_fields(self.error)[1]

    @property
    def file_refs(self) -> tuple[str, ...]:
        """The video, then the screenshots: file paths or links, as the service gave them."""
        return _lenient.file_refs(self.video) + _lenient.file_refs(self.screenshots)

    @property
    def screenshot_refs(self) -> tuple[str, ...]:
        """The screenshots: file paths or links, as the service gave them."""
        return _lenient.file_refs(self.screenshots)

    @property
    def used_build_id(self) -> str | None:
        """The id of the build the run used, whether the service sent an id or an object."""
        return self.build_id or _lenient.build_id_of(self.build)

    @property
    def duration_seconds(self) -> float | None:
        """How long it ran: durationMs when sent, else finishedAt - startedAt; None if neither,
        or if it is negative or longer than a week (`_bounds.MAX_RUN_SECONDS`): unknown."""
        if self.duration_ms is not None:
            return _bounds.seconds(self.duration_ms / 1000.0)
        if self.started_at is not None and self.finished_at is not None:
            return _bounds.seconds((self.finished_at - self.started_at).total_seconds())
        return None

    @property
    def queue_seconds(self) -> float | None:
        """How long it waited before a device began it: startedAt - createdAt, else (no
        startedAt) finishedAt - duration - createdAt; None when its times do not say, or out of
        bounds. A few clock ticks below 0 (times rounded apart) read as 0."""
        if self.created_at is None:
            return None
        if self.started_at is not None:
            waited = (self.started_at - self.created_at).total_seconds()
        elif self.finished_at is not None and self.duration_seconds is not None:
            waited = (self.finished_at - self.created_at).total_seconds() - self.duration_seconds
        else:
            return None
        return _bounds.seconds(0.0 if -1.0 < waited < 0.0 else waited)

    @property
    def used_build_sha256(self) -> str | None:
        """The sha256 of the build the run used, when the service sent it with the build."""
        return _lenient.build_sha256_of(self.build)


@attrs.frozen
class Endpoint:
    """A tester endpoint. Its headers are write-only: the service never returns them.

    Attributes:
        id: The endpoint id (`ep_...`).
        name: Its name.
        description: What it does.
        method: The HTTP method it calls.
        url: The URL it calls.
        created_at: When it was added.
        last_used_at: When a run last called it.
    """

    id: str
    name: str = ""
    description: str = ""
    method: str = "POST"
    url: str = ""
    created_at: datetime | None = None
    last_used_at: datetime | None = None
