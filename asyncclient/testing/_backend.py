"""The emulator's state and domain rules (moto's "backend"): keys, projects, builds, runs.

No HTTP here: the handlers in `_app` parse a request, call one method per operation and serialise.
"""

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import os
import shutil
import threading
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from asyncclient.apps import AppError, DeviceProfile, Problem, check_compatibility, inspect_app
from asyncclient.testing import _files
from asyncclient.testing._clock import Clock
from asyncclient.testing._seed import (
    Seed,
    SeedBuild,
    SeedRequirement,
    SeedTest,
    materialize_build,
)

__all__ = [
    "FINAL_STATUSES",
    "RUN_STATUSES",
    "ApiKey",
    "Backend",
    "Build",
    "BuildRejected",
    "Endpoint",
    "PartWriter",
    "Project",
    "Run",
    "ServiceError",
    "ServiceSettings",
    "Skip",
    "StoredAnswer",
    "Test",
]

RUN_STATUSES = (
    "queued",
    "running",
    "passed",
    "failed",
    "blocked",
    "inconclusive",
    "error",
    "cancelled",
)
FINAL_STATUSES = frozenset({"passed", "failed", "blocked", "inconclusive", "error", "cancelled"})
MODES = ("auto", "cold", "warm")
_MiB = 1 << 20


def _show(value: str) -> str:
    """An id from a request, shortened for a message."""
    return value if len(value) <= 80 else value[:77] + "..."


class ServiceError(Exception):
    """An answer other than success: status, code, message and extra fields of the error body.

    kind names the condition where the API spec leaves the status and code open (no_key,
    bad_key, capability, missing, foreign, malformed_id, pinned, plan, invalid, not_started,
    rate_limited, unavailable, internal, no_route): a dialect may answer those its own way.
    skipped: the tests not started, for not_started and empty.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        kind: str | None = None,
        skipped: "Sequence[Skip] | None" = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})
        self.kind = kind
        self.skipped = None if skipped is None else list(skipped)


def invalid(field: str, message: str) -> ServiceError:
    return ServiceError(400, "invalid_request", message, extra={"field": field}, kind="invalid")


def _not_found(message: str, kind: str = "missing") -> ServiceError:
    return ServiceError(404, "not_found", message, kind=kind)


def _lookup_error(what: str, prefix: str, ident: str, exists: bool) -> ServiceError:
    """404 for an id the key cannot see: marked malformed (no such prefix), foreign (another
    project's) or missing, for the dialects that answer those differently."""
    kind = "foreign" if exists else "missing" if ident.startswith(prefix) else "malformed_id"
    return _not_found(f"no {what} {_show(ident)} in your projects", kind)


def _invalid_state(message: str) -> ServiceError:
    return ServiceError(409, "invalid_state", message)


class BuildRejected(ServiceError):
    """422 build_rejected; the handler adds the checked build to the body."""

    def __init__(self, build: "Build") -> None:
        kinds = ", ".join(p.kind for p in build.problems)
        super().__init__(
            422,
            "build_rejected",
            f"the devices cannot run {build.file_name} ({kinds})",
            extra={"problems": [p.to_json() for p in build.problems]},
            kind="rejected",
        )
        self.build = build


def _positive(_instance: Any, attribute: Any, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen(kw_only=True)
class ServiceSettings:
    """Limits and device capabilities of the emulated service."""

    part_bytes: int = attrs.field(default=8 * _MiB, validator=_positive)
    max_bytes: int = attrs.field(default=4 << 30, validator=_positive)
    devices: DeviceProfile = attrs.field(factory=DeviceProfile)
    idempotency_ttl: float = attrs.field(default=86400.0, validator=_positive)


@attrs.define(eq=False)
class ApiKey:
    token: str = attrs.field(repr=False)
    capability: str  # "run" | "edit"
    projects: frozenset[str]


@attrs.define(eq=False)
class Project:
    id: str
    name: str
    plan: str
    included_runs: int
    counted_runs: int = 0
    tests: list["Test"] = attrs.Factory(list)
    builds: list["Build"] = attrs.Factory(list)
    endpoints: list["Endpoint"] = attrs.Factory(list)
    runs: list["Run"] = attrs.Factory(list)


@attrs.define(eq=False)
class Test:
    seed: SeedTest
    learned: str  # "fresh" | "stale" | "none"
    # (end time, seq, run) of cold runs that will pass: the first to finish makes the path fresh.
    passing_cold: list[tuple[float, int, "Run"]] = attrs.Factory(list)
    runs: list["Run"] = attrs.Factory(list)

    @property
    def id(self) -> str:
        return self.seed.id


@attrs.define(eq=False)
class Build:
    id: str
    project_id: str
    file_name: str
    size: int
    label: str | None
    created_at: float
    directory: Path
    part_bytes: int
    parts: int
    status: str = "uploading"  # "uploading" | "ready" | "rejected"
    platform: str | None = None
    app_id: str | None = None
    app_name: str | None = None
    version: str | None = None
    version_code: str | None = None
    min_os: str | None = None
    abis: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    sha256: str | None = None
    ready_at: float | None = None
    uploaded: dict[int, tuple[str, int]] = attrs.Factory(dict)  # part -> (etag, length)
    completing: bool = False
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    # Held while a received part is copied into its place in the build file.
    place_lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    # The whole file's sha256, computed part by part as soon as a prefix of parts is in place:
    # prefix[i] is the digest of parts 1..i (so a part sent again restarts the hash from it).
    prefix: list[Any] = attrs.Factory(lambda: [hashlib.sha256()])
    hash_generation: int = 0  # bumped when a part the hasher may be reading is replaced
    hasher: "asyncio.Task[None] | None" = None
    # Parts being received straight into their place (sent for the first time), and the part
    # commit_part is copying into its place (0: none).
    writers: dict[int, "PartWriter"] = attrs.Factory(dict)
    placing: int = 0
    # Taken by every thread writing into the build file. The kernel serialises writes to one
    # file anyway (ext4 holds the inode lock for each), but its waiters spin on the CPU: with 8
    # parts arriving at once that spinning cost a sixth of the emulator's CPU. These sleep.
    file_lock: threading.Lock = attrs.Factory(threading.Lock)

    def part_length(self, number: int) -> int:
        if number < self.parts:
            return self.part_bytes
        return self.size - (self.parts - 1) * self.part_bytes

    def part_offset(self, number: int) -> int:
        return (number - 1) * self.part_bytes

    @property
    def path(self) -> Path:
        return self.directory / self.file_name


@attrs.frozen
class BuildRef:
    """What a run keeps of its build: it survives the build's deletion."""

    id: str
    app_id: str | None
    version: str | None
    version_code: str | None
    platform: str | None


class Run:
    """One run. Its status is a function of the clock: no task moves it along."""

    __slots__ = (
        "build",
        "created_at",
        "end_at",
        "id",
        "mode",
        "overage",
        "project_id",
        "seq",
        "source",
        "start_at",
        "stopped_at",
        "test",
    )

    def __init__(
        self,
        *,
        id: str,
        seq: int,
        test: Test,
        build: BuildRef | None,
        mode: str,
        source: str,
        created_at: float,
        queued: float,
        duration: float,
        overage: bool,
    ) -> None:
        self.id = id
        self.seq = seq
        self.test = test
        self.project_id = test.seed.project
        self.build = build
        self.mode = mode
        self.source = source
        self.created_at = created_at
        self.start_at = created_at + queued
        self.end_at = self.start_at + duration
        self.stopped_at: float | None = None
        self.overage = overage

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.test.seed.id} {self.mode}>"

    def status_at(self, now: float) -> str:
        if self.stopped_at is not None:
            return "cancelled"
        if now < self.start_at:
            return "queued"
        if now < self.end_at:
            return "running"
        return self.test.seed.outcome

    def started_at(self, now: float) -> float | None:
        if self.stopped_at is not None:
            return self.start_at if self.stopped_at >= self.start_at else None
        return self.start_at if now >= self.start_at else None

    def finished_at(self, now: float) -> float | None:
        if self.stopped_at is not None:
            return self.stopped_at
        return self.end_at if now >= self.end_at else None

    @property
    def platform(self) -> str:
        return self.test.seed.target

    def requirements(self, status: str) -> list[SeedRequirement]:
        """Each check with its result and reason, once final ([] before)."""
        if status not in FINAL_STATUSES:
            return []
        seeded = list(self.test.seed.requirements) or [_default_requirement(self.test.seed)]
        if status == "cancelled":
            return [SeedRequirement(r.title, "skipped", "The run was stopped.") for r in seeded]
        return seeded

    def file_names(self, status: str) -> list[str]:
        """The run's files: once final, except when it was stopped."""
        if status not in FINAL_STATUSES or status == "cancelled":
            return []
        return _files.file_names(self.test.seed.screenshots)


def _default_requirement(test: SeedTest) -> SeedRequirement:
    result = {"passed": "passed", "failed": "failed"}.get(test.outcome, "skipped")
    reason = {
        "passed": "The goal was reached.",
        "failed": "The goal was not reached.",
        "blocked": "The app blocked the tester before this check.",
        "inconclusive": "The tester could not tell whether the goal was reached.",
        "error": "The run ended in an error before this check.",
    }[test.outcome]
    return SeedRequirement(test.title, result, reason)


@attrs.define(eq=False)
class Endpoint:
    id: str
    project_id: str
    name: str
    description: str
    method: str
    url: str
    headers: dict[str, str] = attrs.field(repr=False)  # write-only: never returned or logged
    body_template: str | None = attrs.field(repr=False)
    created_at: float
    uses: list[Run] = attrs.Factory(list)

    def last_used_at(self, now: float) -> float | None:
        """When a run last called it: half-way through a run that got that far, not stopped."""
        latest: float | None = None
        for run in self.uses:
            used = (run.start_at + run.end_at) / 2
            if used <= now and (run.stopped_at is None or run.stopped_at > used):
                latest = used if latest is None else max(latest, used)
        return latest


@attrs.frozen
class Skip:
    test_id: str
    code: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"testId": self.test_id, "reason": self.reason, "code": self.code}


@attrs.frozen
class StoredAnswer:
    fingerprint: str
    status: int
    body: bytes = attrs.field(repr=False)
    expires: float
    content_type: str = "application/json"


def _unit_interval(text: str) -> float:
    """A number in [0, 1) that depends only on `text`."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest()) / 2**32


class PartWriter:
    """Writes a part sent for the first time straight into its place in the build file (no copy
    of the part is stored, so a body cut off leaves nothing behind that counts).

    A re-send of the part committed meanwhile supersedes it: from then on it writes nothing, and
    it is not recorded. `write` runs in a worker thread, the rest on the event loop.
    """

    def __init__(self, path: Path, offset: int, file_lock: threading.Lock) -> None:
        self._offset = offset
        self._file_lock = file_lock
        self._lock = threading.Lock()
        self._superseded = False
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)  # closed by close()

    @property
    def superseded(self) -> bool:
        return self._superseded

    def supersede(self) -> None:
        """Stop writing (waits for a write under way). Blocking."""
        with self._lock:
            self._superseded = True

    def write(self, chunk: bytes) -> None:
        """Write the next bytes of the part in place. Blocking."""
        view = memoryview(chunk)
        with self._lock, self._file_lock:
            while view and not self._superseded:
                done = os.pwrite(self._fd, view, self._offset)
                self._offset += done
                view = view[done:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _place(
    received: Path,
    dest: Path,
    offset: int,
    length: int,
    file_lock: threading.Lock,
    writer: PartWriter | None = None,
) -> None:
    """Copy the received part file into `dest` at `offset` (a kernel copy where the system has
    one), then remove it; `writer`, receiving the same part in place, stops first. Blocking."""
    if writer is not None:
        writer.supersede()
    src = os.open(received, os.O_RDONLY)
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with file_lock:
                done = 0
                if hasattr(os, "copy_file_range"):
                    with contextlib.suppress(OSError):  # not supported here: copy by hand below
                        while done < length:
                            moved = os.copy_file_range(src, out, length - done, done, offset + done)
                            if moved <= 0:
                                break
                            done += moved
                while done < length:
                    chunk = os.pread(src, min(_MiB, length - done), done)
                    if not chunk:
                        raise OSError(f"{received} ended {length - done} bytes early")
                    done += os.pwrite(out, chunk, offset + done)
        finally:
            os.close(out)
    finally:
        os.close(src)
    received.unlink()


def _hash_region(path: Path, offset: int, length: int, digest: Any) -> Any:
    """`digest` fed with `length` bytes of `path` from `offset`, in 1 MiB reads. Blocking."""
    buffer = bytearray(min(_MiB, length))
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as src:
        src.seek(offset)
        while length > 0:
            got = src.readinto(view[: min(len(buffer), length)])
            if not got:
                raise OSError(f"{path} ended {length} bytes early")
            digest.update(view[:got])
            length -= got
    return digest


def _check_app(
    path: Path, file_name: str, devices: DeviceProfile
) -> tuple[dict[str, Any], tuple[Problem, ...], tuple[str, ...]]:
    """Inspect and check an app file: (build fields, problems, warnings). Blocking."""
    try:
        info = inspect_app(path, file_name)
    except AppError as exc:
        return {}, (Problem.not_an_app(file_name, exc),), ()
    compatibility = check_compatibility(info, devices)
    fields = {
        "platform": info.platform,
        "app_id": info.app_id,
        "app_name": info.app_name,
        "version": info.version,
        "version_code": info.version_code,
        "min_os": info.min_os,
        "abis": tuple(info.abis),
    }
    return fields, tuple(compatibility.problems), tuple(compatibility.warnings)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(_MiB):
            digest.update(chunk)
    return digest.hexdigest()


class Backend:
    """All state of one emulated service. Build it in a thread: seeding writes real app files."""

    def __init__(
        self, seed: Seed, *, clock: Clock, settings: ServiceSettings, data_dir: Path
    ) -> None:
        self.clock = clock
        self.settings = settings
        self.data_dir = data_dir
        self.seed = seed
        self._seq = itertools.count(1)
        self.keys = {k.key: ApiKey(k.key, k.capability, frozenset(k.projects)) for k in seed.keys}
        self.projects = {
            p.id: Project(p.id, p.name, p.plan, p.included_runs) for p in seed.projects
        }
        self.tests: dict[str, Test] = {}
        for seeded in seed.tests:
            test = Test(seeded, seeded.learned_path)
            self.tests[test.id] = test
            self.projects[seeded.project].tests.append(test)
        self.builds: dict[str, Build] = {}
        self.runs: dict[str, Run] = {}
        self.run_order: list[Run] = []
        self.endpoints: dict[str, Endpoint] = {}
        self._answers: dict[tuple[str, str], StoredAnswer] = {}
        self._answer_locks: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}
        (data_dir / "builds").mkdir(parents=True, exist_ok=True)
        seeded_at = clock.now() - 3600.0
        for seeded_build in seed.builds:
            self._seed_build(seeded_build.id, seeded_build.project, seeded_build, seeded_at)
        for seeded_endpoint in seed.endpoints:
            endpoint = Endpoint(
                id=seeded_endpoint.id or self._new_id("ep_", self.endpoints),
                project_id=seeded_endpoint.project,
                name=seeded_endpoint.name,
                description=seeded_endpoint.description,
                method=seeded_endpoint.method,
                url=seeded_endpoint.url,
                headers=dict(seeded_endpoint.headers),
                body_template=seeded_endpoint.body_template,
                created_at=seeded_at,
            )
            self.endpoints[endpoint.id] = endpoint
            self.projects[endpoint.project_id].endpoints.append(endpoint)

    def _seed_build(self, build_id: str, project_id: str, seeded: SeedBuild, at: float) -> None:
        directory = self.data_dir / "builds" / build_id
        path, file_name = materialize_build(seeded, directory)
        size = path.stat().st_size
        build = Build(
            id=build_id,
            project_id=project_id,
            file_name=file_name,
            size=size,
            label=seeded.label,
            created_at=at,
            directory=directory,
            part_bytes=self.settings.part_bytes,
            parts=max(1, -(-size // self.settings.part_bytes)),
        )
        fields, problems, warnings = _check_app(path, file_name, self.settings.devices)
        self._finish_build(build, _sha256_file(path), fields, problems, warnings, at)
        self.builds[build.id] = build
        self.projects[project_id].builds.append(build)

    # --- helpers ----------------------------------------------------------------------------

    def now(self) -> float:
        return self.clock.now()

    def _new_id(self, prefix: str, taken: Mapping[str, Any]) -> str:
        while True:
            seq = next(self._seq)
            ident = prefix + hashlib.blake2b(f"{prefix}{seq}".encode(), digest_size=6).hexdigest()
            if ident not in taken:
                return ident

    def authenticate(self, authorization: str | None) -> ApiKey:
        """The key of an `Authorization: Bearer <key>` header, or 401."""
        if authorization is None:
            raise ServiceError(
                401,
                "unauthenticated",
                "send your API key as 'Authorization: Bearer <key>'",
                kind="no_key",
            )
        scheme, _, token = authorization.partition(" ")
        key = self.keys.get(token.strip()) if scheme.lower() == "bearer" else None
        if key is None:
            # Never echo the presented key: it may be a real secret sent to the wrong place.
            raise ServiceError(
                401, "unauthenticated", "the API key is not known to the service", kind="bad_key"
            )
        return key

    @staticmethod
    def require_edit(key: ApiKey, what: str) -> None:
        """403 unless the key can also create and edit tests."""
        if key.capability != "edit":
            raise ServiceError(
                403,
                "permission_denied",
                f"{what} needs a key that can also create and edit tests; this key can only "
                "run tests and read results",
                kind="capability",
            )

    def _project(self, key: ApiKey, project_id: str) -> Project:
        project = self.projects.get(project_id)
        if project is None or project.id not in key.projects:
            raise _lookup_error("project", "p_", project_id, project is not None)
        return project

    def _build(self, key: ApiKey, build_id: str) -> Build:
        build = self.builds.get(build_id)
        if build is None or build.project_id not in key.projects:
            raise _lookup_error("build", "ab_", build_id, build is not None)
        return build

    def _test(self, key: ApiKey, test_id: str) -> Test:
        test = self.tests.get(test_id)
        if test is None or test.seed.project not in key.projects:
            raise _lookup_error("test", "t_", test_id, test is not None)
        return test

    def _run(self, key: ApiKey, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None or run.project_id not in key.projects:
            raise _lookup_error("run", "j_", run_id, run is not None)
        return run

    # --- builds -----------------------------------------------------------------------------

    def list_builds(self, key: ApiKey, project_id: str) -> list[Build]:
        """The project's builds, newest first."""
        return self._project(key, project_id).builds[::-1]

    def get_build(self, key: ApiKey, build_id: str) -> Build:
        return self._build(key, build_id)

    def start_upload(
        self, key: ApiKey, project_id: str, file_name: str, size: int, label: str | None
    ) -> Build:
        project = self._project(key, project_id)
        lower = file_name.lower()
        if not (lower.endswith(".apk") or lower.endswith(".app.zip")) or len(lower) <= 4:
            raise invalid("fileName", "fileName must be an .apk name or end in .app.zip")
        if "/" in file_name or "\\" in file_name or file_name.startswith("."):
            raise invalid("fileName", "fileName must be a plain file name, not a path")
        if size > self.settings.max_bytes:
            raise ServiceError(
                400,
                "too_large",
                f"size {size} is over the limit of {self.settings.max_bytes} bytes",
                extra={"maxBytes": self.settings.max_bytes},
            )
        build_id = self._new_id("ab_", self.builds)
        directory = self.data_dir / "builds" / build_id
        directory.mkdir()
        part_bytes = self.settings.part_bytes
        build = Build(
            id=build_id,
            project_id=project.id,
            file_name=file_name,
            size=size,
            label=label,
            created_at=self.now(),
            directory=directory,
            part_bytes=part_bytes,
            parts=-(-size // part_bytes),
        )
        self.builds[build.id] = build
        project.builds.append(build)
        return build

    def part_target(self, key: ApiKey, build_id: str, part_number: str) -> tuple[Build, int, int]:
        """(build, part number, the exact length the part must have), before its body is read."""
        build = self._build(key, build_id)
        self._check_accepts_parts(build)
        if not part_number.isdigit() or not 1 <= int(part_number) <= build.parts:
            raise ServiceError(
                400,
                "invalid_part",
                f"part number must be 1 to {build.parts} for this upload, got {_show(part_number)}",
            )
        number = int(part_number)
        return build, number, build.part_length(number)

    @staticmethod
    def _check_accepts_parts(build: Build) -> None:
        if build.status != "uploading":
            raise _invalid_state(f"build {build.id} is {build.status}; start a new upload")
        if build.completing:
            raise _invalid_state(f"build {build.id} is being completed; start a new upload")

    async def commit_part(
        self, build: Build, number: int, received: Path | PartWriter, etag: str
    ) -> None:
        """Copy a fully received part into its place in the build file; it replaces an earlier
        copy of the part. A first copy received in place (claim_part, then release_part) is
        recorded where it is. The whole file's hash then moves on in the background."""
        if isinstance(received, PartWriter):
            self._record_in_place(build, number, received, etag)
            return
        async with build.place_lock:
            try:
                if self.builds.get(build.id) is not build:
                    raise _not_found(f"build {build.id} was deleted during the upload")
                self._check_accepts_parts(build)
            except ServiceError:
                received.unlink(missing_ok=True)  # noqa: ASYNC240 - a metadata operation
                raise
            # The part's region is about to change: it no longer counts, and a hash that
            # covered it (or is reading it now) starts again from it. A first copy of the part
            # being written in place stops and is not recorded.
            build.placing = number
            build.uploaded.pop(number, None)
            if len(build.prefix) > number - 1:
                del build.prefix[number:]
                build.hash_generation += 1
            length = build.part_length(number)
            try:
                await asyncio.to_thread(
                    _place, received, build.path, build.part_offset(number), length,
                    build.file_lock, build.writers.get(number),
                )  # fmt: skip
            except FileNotFoundError:
                received.unlink(missing_ok=True)  # noqa: ASYNC240 - a metadata operation
                raise _not_found(f"build {build.id} was deleted during the upload") from None
            except OSError as exc:
                received.unlink(missing_ok=True)  # noqa: ASYNC240 - a metadata operation
                raise ServiceError(500, "internal", f"cannot store the part: {exc}") from exc
            finally:
                build.placing = 0
            if self.builds.get(build.id) is not build:
                raise _not_found(f"build {build.id} was deleted during the upload")
            build.uploaded[number] = (etag, length)
            self._hash_ahead(build)

    @staticmethod
    def claim_part(build: Build, number: int) -> PartWriter | None:
        """A writer straight into the part's place when no copy of the part is stored, being
        received in place or being copied into place; None: receive it into a file for
        commit_part. Raises FileNotFoundError when the build's directory is gone."""
        if number in build.uploaded or number in build.writers or build.placing == number:
            return None
        writer = PartWriter(build.path, build.part_offset(number), build.file_lock)
        build.writers[number] = writer
        return writer

    @staticmethod
    def release_part(build: Build, number: int, writer: PartWriter) -> None:
        """The part `writer` received in place ended (complete or not): its region is free."""
        writer.close()
        if build.writers.get(number) is writer:
            del build.writers[number]

    def _record_in_place(self, build: Build, number: int, writer: PartWriter, etag: str) -> None:
        """Record a part fully received in place. A re-send committed meanwhile (or being
        committed) replaced it: it is then not recorded."""
        if self.builds.get(build.id) is not build:
            raise _not_found(f"build {build.id} was deleted during the upload")
        self._check_accepts_parts(build)
        if writer.superseded or build.placing == number or number in build.uploaded:
            return
        build.uploaded[number] = (etag, build.part_length(number))
        self._hash_ahead(build)

    def _hash_ahead(self, build: Build) -> None:
        """Make sure the background hasher runs if the next part to hash is in place."""
        idle = build.hasher is None or build.hasher.done()
        if idle and len(build.prefix) in build.uploaded:
            build.hasher = asyncio.get_running_loop().create_task(self._hash_parts(build))

    @staticmethod
    async def _hash_parts(build: Build) -> None:
        """Feed the whole-file hash with each part in order while the next one is in place:
        parts 1..k are hashed as soon as they are all there, so complete waits for the tail."""
        while (number := len(build.prefix)) in build.uploaded:
            generation = build.hash_generation
            state = build.prefix[-1].copy()
            try:
                digest = await asyncio.to_thread(
                    _hash_region, build.path, build.part_offset(number), build.uploaded[number][1],
                    state,
                )  # fmt: skip
            except OSError:
                return  # the build was deleted; complete (if any) hashes what is left itself
            if build.hash_generation == generation:
                build.prefix.append(digest)

    async def _whole_sha256(self, build: Build) -> str:
        """The sha256 of the whole build file once every part is in place."""
        while len(build.prefix) <= build.parts:
            hasher = build.hasher
            if hasher is not None and not hasher.done():
                await asyncio.shield(hasher)
                continue
            number = len(build.prefix)
            digest = await asyncio.to_thread(
                _hash_region, build.path, build.part_offset(number), build.part_length(number),
                build.prefix[-1].copy(),
            )  # fmt: skip
            build.prefix.append(digest)
        return str(build.prefix[build.parts].hexdigest())

    async def aclose(self) -> None:
        """Stop the background hashers (the service is stopping)."""
        hashers = [b.hasher for b in self.builds.values() if b.hasher is not None]
        for hasher in hashers:
            hasher.cancel()
        await asyncio.gather(*hashers, return_exceptions=True)

    async def complete_upload(
        self, key: ApiKey, build_id: str, parts: Sequence[tuple[int, str]]
    ) -> Build:
        """Finish the hash and check the build; a completed build is returned again as it was.

        The parts are already in their places in the build file and most of them hashed (see
        commit_part): complete hashes only the tail the background hasher has not reached."""
        build = self._build(key, build_id)
        async with build.lock:
            if build.status == "ready":
                return build
            if build.status == "rejected":
                raise BuildRejected(build)
            self._check_part_list(build, parts)
            build.completing = True
            try:
                # A part still being copied into place finishes first (later ones are refused),
                # and may have replaced a listed one.
                async with build.place_lock:
                    self._check_part_list(build, parts)
                try:
                    sha256 = await self._whole_sha256(build)
                except OSError as exc:
                    raise ServiceError(500, "internal", f"cannot hash the build: {exc}") from exc
                fields, problems, warnings = await asyncio.to_thread(
                    _check_app, build.path, build.file_name, self.settings.devices
                )
            finally:
                build.completing = False
            self._finish_build(build, sha256, fields, problems, warnings, self.now())
        if build.status == "rejected":
            raise BuildRejected(build)
        return build

    @staticmethod
    def _check_part_list(build: Build, parts: Sequence[tuple[int, str]]) -> None:
        def refuse(message: str) -> ServiceError:
            return ServiceError(400, "invalid_parts", message)

        seen: set[int] = set()
        for number, etag in parts:
            if number in seen:
                raise refuse(f"part {number} is listed twice")
            seen.add(number)
            if not 1 <= number <= build.parts:
                raise refuse(f"part {number} is outside 1..{build.parts}")
            uploaded = build.uploaded.get(number)
            if uploaded is None:
                raise refuse(f"part {number} has not been uploaded")
            if uploaded[0] != etag:
                raise refuse(f"the etag of part {number} is not the one returned for it")
        missing = [n for n in range(1, build.parts + 1) if n not in seen]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            raise refuse(f"the list lacks part(s) {shown} of {build.parts}")

    @staticmethod
    def _finish_build(
        build: Build,
        sha256: str,
        fields: Mapping[str, Any],
        problems: tuple[Problem, ...],
        warnings: tuple[str, ...],
        at: float,
    ) -> None:
        for name, value in fields.items():
            setattr(build, name, value)
        build.sha256 = sha256
        build.problems = problems
        build.warnings = warnings
        build.status = "rejected" if problems else "ready"
        build.ready_at = None if problems else at

    async def delete_build(self, key: ApiKey, build_id: str) -> None:
        self.require_edit(key, "Delete a build")
        build = self._build(key, build_id)
        pinning = [t.id for t in self.tests.values() if t.seed.pinned_build == build.id]
        if pinning:
            raise ServiceError(
                409,
                "build_pinned",
                f"build {build.id} is pinned by {', '.join(pinning)}; unpin it first",
                extra={"tests": pinning},
                kind="pinned",
            )
        if build.completing:
            raise _invalid_state(f"build {build.id} is being completed; try again")
        del self.builds[build.id]
        self.projects[build.project_id].builds.remove(build)
        if build.hasher is not None:
            build.hasher.cancel()
        await asyncio.to_thread(shutil.rmtree, build.directory, True)

    # --- runs -------------------------------------------------------------------------------

    def run_test(self, key: ApiKey, test_id: str, mode: str, build_id: str | None) -> Run:
        test = self._test(key, test_id)
        build = self._build(key, build_id) if build_id is not None else None
        return self._start(test, mode, build, "test")

    def run_project(
        self, key: ApiKey, project_id: str, mode: str, build_ids: Sequence[str]
    ) -> tuple[list[Run], list[Skip]]:
        """Start every test of the project that can start; the rest are skipped with a reason.

        Raises 400 empty when the project has no tests, 402 not_started when none could start.
        """
        project = self._project(key, project_id)
        chosen: dict[tuple[str | None, str | None], Build] = {}
        for build_id in dict.fromkeys(build_ids):
            build = self._build(key, build_id)
            if build.project_id != project.id:
                raise ServiceError(
                    400, "build_mismatch", f"build {build.id} belongs to another project"
                )
            if build.status != "ready":
                raise _invalid_state(f"build {build.id} is {build.status}, not ready")
            app = (build.platform, build.app_id)
            if app in chosen:
                raise invalid("buildIds", f"two builds of {build.app_id} were named")
            chosen[app] = build
        started: list[Run] = []
        skipped: list[Skip] = []
        for test in project.tests:
            named = chosen.get((test.seed.target, test.seed.app_id))
            try:
                started.append(self._start(test, mode, named, "project"))
            except ServiceError as exc:
                skipped.append(Skip(test.id, exc.code, exc.message))
        if not started:
            if not project.tests:
                raise ServiceError(
                    400,
                    "empty",
                    f"{project.id} has no tests to run",
                    kind="not_started",
                    skipped=skipped,
                )
            raise ServiceError(
                402,
                "not_started",
                f"no test of {project.id} could start",
                kind="not_started",
                skipped=skipped,
            )
        return started, skipped

    def create_runs(self, test_id: str, count: int, mode: str = "auto") -> list[Run]:
        """Many runs of one test at once, without a key (the benchmarks' bulk loader)."""
        test = self.tests.get(test_id)
        if test is None:
            raise _not_found(f"no test {_show(test_id)}")
        return [self._start(test, mode, None, "test") for _ in range(count)]

    def _start(self, test: Test, mode: str, build: Build | None, source: str) -> Run:
        project = self.projects[test.seed.project]
        if test.seed.uses_endpoints and project.plan != "paid":
            raise ServiceError(
                402,
                "paid_plan_required",
                f"{test.id} uses tester endpoints ({', '.join(test.seed.uses_endpoints)}), "
                f"which need a paid plan; {project.id} is on the {project.plan} plan",
                kind="plan",
            )
        used_mode = self._resolve_mode(test, mode)
        ref = self._pick_build(test, build)
        return self._new_run(test, project, used_mode, ref, source)

    def _learned(self, test: Test) -> str:
        if test.learned != "fresh" and test.passing_cold:
            now = self.now()
            while test.passing_cold and test.passing_cold[0][0] <= now:
                _end, _seq, run = heapq.heappop(test.passing_cold)
                if run.stopped_at is None:
                    test.learned = "fresh"
                    test.passing_cold.clear()
        return test.learned

    def _resolve_mode(self, test: Test, mode: str) -> str:
        learned = self._learned(test)
        if mode == "auto":
            return "warm" if learned == "fresh" else "cold"
        if mode == "warm" and learned == "none":
            raise ServiceError(
                409,
                "no_learned_path",
                f"{test.id} has no learned path yet; run it with mode cold or auto first",
            )
        return mode

    def _pick_build(self, test: Test, build: Build | None) -> BuildRef | None:
        seeded = test.seed
        if seeded.target == "web":
            if build is not None:
                raise ServiceError(
                    400, "build_mismatch", f"{test.id} is a web test; it runs without a build"
                )
            return None
        if build is None and seeded.pinned_build is not None:
            build = self.builds[seeded.pinned_build]
        if build is None:
            ready = [
                b
                for b in self.projects[seeded.project].builds
                if b.status == "ready" and b.platform == seeded.target and b.app_id == seeded.app_id
            ]
            if not ready:
                raise ServiceError(
                    409,
                    "no_build",
                    f"no ready {seeded.target} build of {seeded.app_id} in {seeded.project}; "
                    "upload one",
                )
            build = ready[-1]
        if build.project_id != seeded.project:
            raise ServiceError(
                400, "build_mismatch", f"build {build.id} belongs to another project than {test.id}"
            )
        if build.status != "ready":
            raise _invalid_state(f"build {build.id} is {build.status}, not ready")
        if (build.platform, build.app_id) != (seeded.target, seeded.app_id):
            raise ServiceError(
                400,
                "build_mismatch",
                f"build {build.id} is {build.app_id} ({build.platform}); {test.id} tests "
                f"{seeded.app_id} ({seeded.target})",
            )
        return BuildRef(build.id, build.app_id, build.version, build.version_code, build.platform)

    def _new_run(
        self, test: Test, project: Project, mode: str, build: BuildRef | None, source: str
    ) -> Run:
        seeded = test.seed
        run_id = self._new_id("j_", self.runs)
        spread = 1.0 + seeded.duration_jitter * (2.0 * _unit_interval(run_id) - 1.0)
        overage = project.counted_runs >= project.included_runs
        run = Run(
            id=run_id,
            seq=next(self._seq),
            test=test,
            build=build,
            mode=mode,
            source=source,
            created_at=self.now(),
            queued=seeded.queued_seconds,
            duration=max(0.001, seeded.duration_seconds * spread),
            overage=overage,
        )
        project.counted_runs += 1
        self.runs[run.id] = run
        self.run_order.append(run)
        project.runs.append(run)
        test.runs.append(run)
        for endpoint in project.endpoints:
            if endpoint.name in seeded.uses_endpoints:
                endpoint.uses.append(run)
        if mode == "cold" and seeded.outcome == "passed":
            heapq.heappush(test.passing_cold, (run.end_at, run.seq, run))
        return run

    def list_runs(
        self,
        key: ApiKey,
        *,
        ids: Sequence[str] | None = None,
        test_id: str | None = None,
        project_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[Run]:
        """Runs the key may see, newest first; unknown ids are left out."""
        now = self.now()
        projects = key.projects
        candidates: Iterable[Run]
        if ids is not None:
            found = [self.runs.get(i) for i in dict.fromkeys(ids)]
            candidates = sorted(
                (r for r in found if r is not None and r.project_id in projects),
                key=lambda r: r.seq,
                reverse=True,
            )
        elif test_id is not None:
            test = self.tests.get(test_id)
            candidates = reversed(test.runs) if test is not None else ()
        elif project_id is not None:
            project = self.projects.get(project_id)
            candidates = reversed(project.runs) if project is not None else ()
        else:
            candidates = reversed(self.run_order)
        selected: list[Run] = []
        for run in candidates:
            if run.project_id not in projects:
                continue
            if test_id is not None and run.test.seed.id != test_id:
                continue
            if project_id is not None and run.project_id != project_id:
                continue
            if status is not None and run.status_at(now) != status:
                continue
            selected.append(run)
            if len(selected) >= limit:
                break
        return selected

    def get_run(self, key: ApiKey, run_id: str) -> Run:
        return self._run(key, run_id)

    def find_run(self, run_id: str) -> Run | None:
        """A run by id regardless of key (the result page, which a browser opens without one)."""
        return self.runs.get(run_id)

    def stop_run(self, key: ApiKey, run_id: str) -> Run:
        run = self._run(key, run_id)
        now = self.now()
        status = run.status_at(now)
        if status in FINAL_STATUSES:
            raise _invalid_state(
                f"run {run.id} is already final ({status}); only queued or "
                "running runs can be stopped"
            )
        run.stopped_at = now
        # A stopped run is not counted toward the plan's included runs.
        self.projects[run.project_id].counted_runs -= 1
        return run

    def run_file(self, key: ApiKey, run_id: str, name: str) -> tuple[Run, _files.RunFile]:
        run = self._run(key, run_id)
        status = run.status_at(self.now())
        if status not in FINAL_STATUSES:
            raise _not_found(f"run {run.id} is {status}; its files exist once it is final")
        if name not in run.file_names(status):
            raise _not_found(f"run {run.id} has no file {_show(name)}")
        found = _files.run_file(
            run.id, name, run.test.seed.screenshots, round(run.end_at - run.start_at, 3)
        )
        assert found is not None  # every name of file_names() can be made
        return run, found

    # --- endpoints --------------------------------------------------------------------------

    def list_endpoints(self, key: ApiKey, project_id: str) -> list[Endpoint]:
        return list(self._project(key, project_id).endpoints)

    def add_endpoint(
        self,
        key: ApiKey,
        project_id: str,
        *,
        name: str,
        description: str,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body_template: str | None,
    ) -> Endpoint:
        self.require_edit(key, "Add an endpoint")
        project = self._project(key, project_id)
        if any(e.name == name for e in project.endpoints):
            raise ServiceError(
                409, "already_exists", f"{project.id} already has an endpoint named {name}"
            )
        endpoint = Endpoint(
            id=self._new_id("ep_", self.endpoints),
            project_id=project.id,
            name=name,
            description=description,
            method=method,
            url=url,
            headers=dict(headers),
            body_template=body_template,
            created_at=self.now(),
        )
        self.endpoints[endpoint.id] = endpoint
        project.endpoints.append(endpoint)
        return endpoint

    def delete_endpoint(self, key: ApiKey, endpoint_id: str) -> None:
        self.require_edit(key, "Delete an endpoint")
        endpoint = self.endpoints.get(endpoint_id)
        if endpoint is None or endpoint.project_id not in key.projects:
            raise _lookup_error("endpoint", "ep_", endpoint_id, endpoint is not None)
        del self.endpoints[endpoint.id]
        self.projects[endpoint.project_id].endpoints.remove(endpoint)

    # --- idempotency ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def idempotency_slot(self, key: ApiKey, idempotency_key: str) -> AsyncIterator[None]:
        """Serialises requests with one (API key, Idempotency-Key): only one does the work."""
        slot = (key.token, idempotency_key)
        entry = self._answer_locks.get(slot)
        if entry is None:
            entry = self._answer_locks[slot] = (asyncio.Lock(), [0])
        entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if entry[1][0] == 0:
                del self._answer_locks[slot]

    def recall(self, key: ApiKey, idempotency_key: str, fingerprint: str) -> StoredAnswer | None:
        """The stored answer for a retry, None for a first request, or 409 for another request."""
        slot = (key.token, idempotency_key)
        stored = self._answers.get(slot)
        if stored is None:
            return None
        if stored.expires <= self.now():
            del self._answers[slot]
            return None
        if stored.fingerprint != fingerprint:
            raise ServiceError(
                409,
                "idempotency_conflict",
                "this Idempotency-Key was used with a different request; use a new key",
            )
        return stored

    def remember(
        self,
        key: ApiKey,
        idempotency_key: str,
        fingerprint: str,
        status: int,
        body: bytes,
        content_type: str = "application/json",
    ) -> None:
        now = self.now()
        if len(self._answers) >= 10_000:
            self._answers = {s: a for s, a in self._answers.items() if a.expires > now}
        expires = now + self.settings.idempotency_ttl
        self._answers[(key.token, idempotency_key)] = StoredAnswer(
            fingerprint, status, body, expires, content_type
        )
