"""Builds: their state and the rules of an upload (start, parts, complete), listing, deletion.

No HTTP here: `_builds_http` parses each request and calls the `BuildStore` (through `Backend`).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from asyncclient._values._bounds import digits
from asyncclient.apps import Problem
from asyncclient.testing._auth import ApiKey
from asyncclient.testing._build_files import (
    PartWriter,
    check_app,
    hash_region,
    place,
    sha256_file,
)
from asyncclient.testing._errors import (
    ServiceError,
    invalid,
    invalid_state,
    lookup_error,
    not_found,
    show,
)
from asyncclient.testing._records import Build
from asyncclient.testing._seed import SeedBuild, materialize_build
from asyncclient.testing._state import SharedState

__all__ = ["BuildRejected", "BuildStore"]


class BuildRejected(ServiceError):
    """422 build_rejected; the handler adds the checked build to the body."""

    def __init__(self, build: Build) -> None:
        kinds = ", ".join(p.kind for p in build.problems)
        super().__init__(
            422,
            "build_rejected",
            f"the devices cannot run {build.file_name} ({kinds})",
            extra={"problems": [p.to_json() for p in build.problems]},
            kind="rejected",
        )
        self.build = build


class BuildStore:
    """Every build of the service, by id, and the rules of uploading, listing and deleting them."""

    def __init__(self, state: SharedState) -> None:
        self._state = state
        self.builds: dict[str, Build] = {}
        (state.data_dir / "builds").mkdir(parents=True, exist_ok=True)

    def add_seeded(self, seeded: Iterable[SeedBuild], at: float) -> None:
        """Write, inspect and add the seed's builds. Blocking."""
        for seeded_build in seeded:
            self._seed_build(seeded_build.id, seeded_build.project, seeded_build, at)

    def _seed_build(self, build_id: str, project_id: str, seeded: SeedBuild, at: float) -> None:
        directory = self._state.data_dir / "builds" / build_id
        path, file_name = materialize_build(seeded, directory)
        size = path.stat().st_size
        build = Build(
            id=build_id,
            project_id=project_id,
            file_name=file_name,
            size=size,
            label=seeded.label,
            created_at=at,
            clock=self._state.clock,
            directory=directory,
            part_bytes=self._state.settings.part_bytes,
            parts=max(1, -(-size // self._state.settings.part_bytes)),
        )
        fields, problems, warnings = check_app(path, file_name, self._state.settings.devices)
        self._finish_build(build, sha256_file(path), fields, problems, warnings, at)
        self.builds[build.id] = build
        self._state.projects[project_id].builds.append(build)

    def get(self, key: ApiKey, build_id: str) -> Build:
        build = self.builds.get(build_id)
        if build is None or build.project_id not in key.projects:
            raise lookup_error("build", "ab_", build_id, build is not None)
        return build

    def list_builds(self, key: ApiKey, project_id: str) -> list[Build]:
        """The project's builds, newest first."""
        return self._state.project(key, project_id).builds[::-1]

    def start_upload(
        self, key: ApiKey, project_id: str, file_name: str, size: int, label: str | None
    ) -> Build:
        project = self._state.project(key, project_id)
        lower = file_name.lower()
        if not (lower.endswith(".apk") or lower.endswith(".app.zip")) or len(lower) <= 4:
            raise invalid("fileName", "fileName must be an .apk name or end in .app.zip")
        if "/" in file_name or "\\" in file_name or file_name.startswith("."):
            raise invalid("fileName", "fileName must be a plain file name, not a path")
        if size > self._state.settings.max_bytes:
            raise ServiceError(
                400,
                "too_large",
                f"size {size} is over the limit of {self._state.settings.max_bytes} bytes",
                extra={"maxBytes": self._state.settings.max_bytes},
            )
        build_id = self._state.new_id("ab_", self.builds)
        directory = self._state.data_dir / "builds" / build_id
        directory.mkdir()
        part_bytes = self._state.settings.part_bytes
        build = Build(
            id=build_id,
            project_id=project.id,
            file_name=file_name,
            size=size,
            label=label,
            created_at=self._state.now(),
            clock=self._state.clock,
            directory=directory,
            part_bytes=part_bytes,
            parts=-(-size // part_bytes),
        )
        self.builds[build.id] = build
        project.builds.append(build)
        return build

    def part_target(self, key: ApiKey, build_id: str, part_number: str) -> tuple[Build, int, int]:
        """(build, part number, the exact length the part must have), before its body is read."""
        build = self.get(key, build_id)
        if not (build.status == "ready" and self._state.settings.ready_accepts_parts):
            self._check_accepts_parts(build)
        if not digits(part_number) or not 1 <= int(part_number) <= build.parts:
            raise ServiceError(
                400,
                "invalid_part",
                f"part number must be 1 to {build.parts} for this upload, got {show(part_number)}",
            )
        number = int(part_number)
        return build, number, build.part_length(number)

    @staticmethod
    def _check_accepts_parts(build: Build) -> None:
        if build.status != "uploading":
            raise invalid_state(f"build {build.id} is {build.status}; start a new upload")
        if build.completing:
            raise invalid_state(f"build {build.id} is being completed; start a new upload")

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
                    raise not_found(f"build {build.id} was deleted during the upload")
                self._check_accepts_parts(build)
            except ServiceError:
                received.unlink(missing_ok=True)  # noqa: ASYNC240 - a metadata operation
                raise
            # The region changes: it no longer counts; hashes restart.
            build.placing = number
            build.uploaded.pop(number, None)
            if len(build.prefix) > number - 1:
                del build.prefix[number:]
                build.hash_generation += 1
            length = build.part_length(number)
            try:
                await asyncio.to_thread(
                    place, received, build.path, build.part_offset(number), length,
                    build.file_lock, build.writers.get(number),
                )  # fmt: skip
            except FileNotFoundError:
                received.unlink(missing_ok=True)  # noqa: ASYNC240 - a metadata operation
                raise not_found(f"build {build.id} was deleted during the upload") from None
            except OSError as exc:
                received.unlink(missing_ok=True)  # noqa: ASYNC240 - a metadata operation
                raise ServiceError(500, "internal", f"cannot store the part: {exc}") from exc
            finally:
                build.placing = 0
            if self.builds.get(build.id) is not build:
                raise not_found(f"build {build.id} was deleted during the upload")
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
            raise not_found(f"build {build.id} was deleted during the upload")
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
                    hash_region, build.path, build.part_offset(number), build.uploaded[number][1],
                    state,
                )  # fmt: skip
            except OSError:
                return  # deleted; complete hashes what is left
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
                hash_region, build.path, build.part_offset(number), build.part_length(number),
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
        build = self.get(key, build_id)
        async with build.lock:
            if build.status == "ready":
                return build
            if build.status == "rejected":
                raise BuildRejected(build)
            self._check_part_list(build, parts)
            build.completing = True
            try:
                # A part being copied finishes first, maybe replacing one.
                async with build.place_lock:
                    self._check_part_list(build, parts)
                try:
                    sha256 = await self._whole_sha256(build)
                except OSError as exc:
                    raise ServiceError(500, "internal", f"cannot hash the build: {exc}") from exc
                fields, problems, warnings = await asyncio.to_thread(
                    check_app, build.path, build.file_name, self._state.settings.devices
                )
            finally:
                build.completing = False
            self._finish_build(build, sha256, fields, problems, warnings, self._state.now())
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
        build = self.get(key, build_id)
        pinning = [t.id for t in self._state.tests.values() if t.seed.pinned_build == build.id]
        if pinning:
            raise ServiceError(
                409,
                "build_pinned",
                f"build {build.id} is pinned by {', '.join(pinning)}; unpin it first",
                extra={"tests": pinning},
                kind="pinned",
            )
        if build.completing:
            raise invalid_state(f"build {build.id} is being completed; try again")
        del self.builds[build.id]
        self._state.projects[build.project_id].builds.remove(build)
        if build.hasher is not None:
            build.hasher.cancel()
        await asyncio.to_thread(shutil.rmtree, build.directory, True)
