"""The emulator's wire layer: how the service's state is written on the wire (a "dialect").
`Dialect` itself is the `asyncclient` dialect, the default; another overrides only the hooks
for the points it answers differently, and no handler builds a JSON body itself."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from asyncclient.testing._builds import BuildRejected
from asyncclient.testing._clock import Clock, to_iso
from asyncclient.testing._errors import ServiceError, Skip
from asyncclient.testing._records import FINAL_STATUSES

if TYPE_CHECKING:
    from asyncclient.testing._records import Build, BuildRef, Endpoint, Run

__all__ = ["Check", "Dialect", "WireAnswer"]

_JSON = "application/json"


@attrs.frozen
class WireAnswer:
    """An answer as it goes out: status, content type, body bytes and extra headers."""

    status: int
    content_type: str
    body: bytes
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Check:
    """One requirement of a final run as the service knows it (the dialect writes it)."""

    index: int
    title: str
    result: str  # passed | failed | skipped
    reason: str


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Dialect:
    """The `asyncclient` dialect. Subclass it and override the hooks that differ.

    name: what `--dialect`, `FakeService(dialect=...)` and the seed's "dialect" key take.
    statuses: (status, code) per ServiceError.kind for the cases the spec leaves silent
    (no_key, bad_key, capability, missing, foreign, malformed_id, pinned, plan, invalid, ...);
    a kind not listed keeps the backend's own status and code.
    run_statuses / build_statuses: the words written for the emulator's own statuses.
    """

    name: ClassVar[str] = "asyncclient"
    summary: ClassVar[str] = (
        "nested {error: {code, message, ...}} bodies, 401/403/404/409, ISO 8601 with Z, "
        "requirements as {id, title, result, reason}, captures as an object, stopped runs "
        "become cancelled"
    )
    statuses: ClassVar[Mapping[str, tuple[int, str]]] = {}
    run_statuses: ClassVar[Mapping[str, str]] = {}
    build_statuses: ClassVar[Mapping[str, str]] = {}

    def __repr__(self) -> str:
        return f"<Dialect {self.name}>"

    # --- scalars ------------------------------------------------------------------------------

    def timestamp(self, value: float | None) -> Any:
        """A time (service seconds) as this dialect writes it on the wire.

        Args:
            value: The value as the emulator holds it (None when there is none).

        Returns:
            What the dialect writes on the wire for it.
        """
        return None if value is None else to_iso(value)

    def number(self, field: str, value: Any) -> Any:
        """size, versionCode and minOs (the spec leaves all but size's type open).

        Args:
            field: Which field: `size`, `versionCode` or `minOs`.
            value: The value as the emulator holds it (None when there is none).

        Returns:
            What the dialect writes on the wire for it.
        """
        return value

    def abis(self, abis: Sequence[str]) -> Any:
        """A build's ABIs as this dialect writes them.

        Args:
            abis: The build's ABIs or architectures.

        Returns:
            What the dialect writes on the wire for it.
        """
        return list(abis)

    def warnings(self, warnings: Sequence[str]) -> Any:
        """A build's warnings as this dialect writes them.

        Args:
            warnings: The build's warnings.

        Returns:
            What the dialect writes on the wire for it.
        """
        return list(warnings)

    def run_status(self, status: str) -> str:
        """A run status as this dialect's word for it.

        Args:
            status: The emulator's status word (`passed`, `ready`, ...).

        Returns:
            What the dialect writes on the wire for it.
        """
        return self.run_statuses.get(status, status)

    def run_status_in(self, word: str) -> str:
        """The emulator's status for a status word of a request (`?status=`): the documented
        words, and this dialect's own word for a status.

        Args:
            word: The status word a request named (`?status=`).

        Returns:
            What the dialect writes on the wire for it.
        """
        for status, written in self.run_statuses.items():
            if written == word:
                return status
        return word

    def build_status(self, status: str) -> Any:
        """A build status as this dialect writes it.

        Args:
            status: The emulator's status word (`passed`, `ready`, ...).

        Returns:
            What the dialect writes on the wire for it.
        """
        return self.build_statuses.get(status, status)

    # --- builds -------------------------------------------------------------------------------

    def build_view(self, build: Build, *, single: bool) -> dict[str, Any]:
        """A build as the list view (single=False) or the single view writes it.

        Args:
            build: The build (its state in the emulator).
            single: True for the single view (Get a build), False for List builds.

        Returns:
            What the dialect writes on the wire for it.
        """
        view: dict[str, Any] = {"id": build.id}
        if single:
            view["projectId"] = build.project_id
        view.update(
            status=self.build_status(build.status),
            fileName=build.file_name,
            size=self.number("size", build.size),
            platform=build.platform,
            appId=build.app_id,
            appName=build.app_name,
            version=build.version,
            versionCode=self.number("versionCode", build.version_code),
            minOs=self.number("minOs", build.min_os),
            abis=self.abis(build.abis),
            warnings=self.warnings(build.warnings),
        )
        if single:
            view["sha256"] = build.sha256
        view.update(
            label=build.label,
            createdAt=self.timestamp(_wall(build.clock, build.created_at)),
            readyAt=self.timestamp(_wall(build.clock, build.ready_at)),
        )
        return view

    # --- runs ---------------------------------------------------------------------------------

    def headline_text(self, run: Run, status: str, failed: int, total: int) -> str:
        """The headline of a final run: the seed's, or one made from its checks.

        Args:
            run: The run (its state in the emulator).
            status: The emulator's status word (`passed`, `ready`, ...).
            failed: How many of its checks failed.
            total: How many checks it has.

        Returns:
            What the dialect writes on the wire for it.
        """
        seeded = run.test.seed
        if status == "cancelled":
            return "The run was stopped before it finished."
        if run.said[0] is not None:
            return run.said[0]
        if run.flaky_failure:
            if seeded.flaky_status == "failed":  # its check says why
                return seeded.flaky_reason
            return f"The run failed before its first check: {seeded.flaky_reason}"
        if seeded.headline and run.outcome in (None, seeded.outcome):
            return seeded.headline
        return {
            "passed": f"All {total} checks passed.",
            "failed": f"{failed} of {total} checks failed.",
            "blocked": "The tester was blocked before it could check everything.",
            "inconclusive": "The tester could not tell whether the test passed.",
            "error": "The run ended in an error.",
        }[status]

    def timing(self, run: Run, now: float) -> dict[str, Any]:
        """createdAt, startedAt, finishedAt and durationMs of a run at service time `now`: the
        times on the wall's clock (`Clock.span` of the run's clock), durationMs the device's.

        Args:
            run: The run (its state in the emulator).
            now: Service time, in seconds.

        Returns:
            What the dialect writes on the wire for it.
        """
        started = run.started_at(now)
        finished = run.finished_at(now)
        duration = (
            None if started is None or finished is None else round((finished - started) * 1000)
        )
        created: float | None = run.created_at
        if run.clock is not None:
            created, started, finished = run.clock.span(run.created_at, started, finished)
        return {
            "createdAt": self.timestamp(created),
            "startedAt": self.timestamp(started),
            "finishedAt": self.timestamp(finished),
            "durationMs": duration,
        }

    def requirements(self, checks: Sequence[Check]) -> Any:
        """A run's checks as this dialect writes them.

        Args:
            checks: The run's checks (`Check(index, title, result, reason)`).

        Returns:
            What the dialect writes on the wire for it.
        """
        return [
            {"id": f"r{c.index}", "title": c.title, "result": c.result, "reason": c.reason}
            for c in checks
        ]

    def captures(self, captures: Mapping[str, Any]) -> Any:
        """A run's captured values as this dialect writes them.

        Args:
            captures: The values the run captured, by name.

        Returns:
            What the dialect writes on the wire for it.
        """
        return dict(captures)

    def verdict(self, status: str, headline: str) -> Any:
        """A final run's verdict as this dialect writes it.

        Args:
            status: The emulator's status word (`passed`, `ready`, ...).
            headline: The run's headline text.

        Returns:
            What the dialect writes on the wire for it.
        """
        return self.run_status(status)

    def headline(self, text: str) -> Any:
        """A final run's headline as this dialect writes it.

        Args:
            text: The headline text.

        Returns:
            What the dialect writes on the wire for it.
        """
        return text

    def run_error(self, code: str, message: str) -> Any:
        """A run's error as this dialect writes it.

        Args:
            code: The error code.
            message: The error message.

        Returns:
            What the dialect writes on the wire for it.
        """
        return {"code": code, "message": message}

    def files(self, run_id: str, base: str, names: Sequence[str]) -> dict[str, Any]:
        """video and screenshots: here full links to the run-file operation.

        Args:
            run_id: The run's id.
            base: The service's base URL, for links.
            names: The run's file names (`video.mp4`, `screenshots/01.png`, ...).

        Returns:
            What the dialect writes on the wire for it.
        """
        file_base = f"{base}/api/v1/runs/{run_id}/files/"
        return {
            "video": file_base + names[0] if names else None,
            "screenshots": [file_base + name for name in names[1:]],
        }

    def run_build(self, build: BuildRef | None) -> dict[str, Any]:
        """The build a run used: here its id beside a summary object.

        Args:
            build: The build (its state in the emulator).

        Returns:
            What the dialect writes on the wire for it.
        """
        if build is None:
            return {"buildId": None, "build": None}
        return {
            "buildId": build.id,
            "build": {
                "id": build.id,
                "appId": build.app_id,
                "version": build.version,
                "versionCode": self.number("versionCode", build.version_code),
                "platform": build.platform,
                "sha256": build.sha256,
            },
        }

    def run_list_view(self, run: Run, status: str, now: float, base: str) -> dict[str, Any]:
        """A run as an element of List runs.

        Args:
            run: The run (its state in the emulator).
            status: The emulator's status word (`passed`, `ready`, ...).
            now: Service time, in seconds.
            base: The service's base URL, for links.

        Returns:
            What the dialect writes on the wire for it.
        """
        return {
            "id": run.id,
            "testId": run.test.seed.id,
            "testTitle": run.test.seed.title,
            "projectId": run.project_id,
            "status": self.run_status(status),
            "final": status in FINAL_STATUSES,
            "mode": run.mode,
            "source": run.source,
            "platform": run.platform,
            "buildId": None if run.build is None else run.build.id,
            **self.timing(run, now),
            "link": f"{base}/runs/{run.id}",
        }

    def run_full_view(self, run: Run, status: str, now: float, base: str) -> dict[str, Any]:
        """A run in the full view (Get a run, and List runs with ids).

        Args:
            run: The run (its state in the emulator).
            status: The emulator's status word (`passed`, `ready`, ...).
            now: Service time, in seconds.
            base: The service's base URL, for links.

        Returns:
            What the dialect writes on the wire for it.
        """
        seeded = run.test.seed
        final = status in FINAL_STATUSES
        checks = [
            Check(i, r.title, r.result, r.reason) for i, r in enumerate(run.requirements(status), 1)
        ]
        failed = sum(c.result == "failed" for c in checks)
        headline = self.headline_text(run, status, failed, len(checks)) if final else None
        error = None
        if status == "error":
            error = self.run_error("run_error", headline or "The run ended in an error.")
        return {
            "id": run.id,
            "testId": seeded.id,
            "testTitle": seeded.title,
            "projectId": run.project_id,
            "url": f"{base}/api/v1/runs/{run.id}",
            "link": f"{base}/runs/{run.id}",
            "mode": run.mode,
            "source": run.source,
            "platform": run.platform,
            "status": self.run_status(status),
            "final": final,
            **self.timing(run, now),
            "error": error,
            "verdict": self.verdict(status, headline or "") if final else None,
            "headline": self.headline(headline) if headline is not None else None,
            "requirements": self.requirements(checks),
            "captures": self.captures(seeded.captures if status != "cancelled" else {})
            if final
            else None,
            **self.files(run.id, base, run.file_names(status)),
            **self.run_build(run.build),
        }

    def run_started(self, run: Run, base: str) -> dict[str, Any]:
        """One item of run_project's started list (documented keys).

        Args:
            run: The run (its state in the emulator).
            base: The service's base URL, for links.

        Returns:
            What the dialect writes on the wire for it.
        """
        return {
            "testId": run.test.id,
            "runId": run.id,
            "mode": run.mode,
            "buildId": None if run.build is None else run.build.id,
            "link": f"{base}/runs/{run.id}",
        }

    def skipped(self, skip: Skip) -> dict[str, Any]:
        """One item of a skipped list: testId and reason (documented), the code beside.

        Args:
            skip: The test that was not started, with its code and reason.

        Returns:
            What the dialect writes on the wire for it.
        """
        return {"testId": skip.test_id, "reason": skip.reason, "code": skip.code}

    # --- endpoints ----------------------------------------------------------------------------

    def endpoint_view(self, endpoint: Endpoint, now: float) -> dict[str, Any]:
        """A tester endpoint as List endpoints writes it (never its headers).

        Args:
            endpoint: The tester endpoint.
            now: Service time, in seconds.

        Returns:
            What the dialect writes on the wire for it.
        """
        # snake_case, as the spec shows; no headers or bodyTemplate.
        return {
            "id": endpoint.id,
            "name": endpoint.name,
            "description": endpoint.description,
            "method": endpoint.method,
            "url": endpoint.url,
            "created_at": self.timestamp(_wall(endpoint.clock, endpoint.created_at)),
            "last_used_at": self.timestamp(_wall(endpoint.clock, endpoint.last_used_at(now))),
        }

    # --- errors -------------------------------------------------------------------------------

    def error_status(self, exc: ServiceError) -> tuple[int, str]:
        """The status and code this dialect answers for an error of the backend.

        Args:
            exc: The backend's error (`ServiceError`, with its `kind`).

        Returns:
            What the dialect writes on the wire for it.
        """
        if exc.kind is not None and exc.kind in self.statuses:
            return self.statuses[exc.kind]
        return exc.status, exc.code

    def error_details(self, exc: ServiceError) -> dict[str, Any]:
        """The extras of an error: the field, the pinning tests, the retry hint, and for
        build_rejected / not_started the problems and build, or the two lists.

        Args:
            exc: The backend's error (`ServiceError`, with its `kind`).

        Returns:
            What the dialect writes on the wire for it.
        """
        details = dict(exc.extra)
        if isinstance(exc, BuildRejected):
            details["problems"] = [p.to_json() for p in exc.build.problems]
            details["build"] = self.build_view(exc.build, single=True)
        if exc.skipped is not None:
            details["started"] = []
            details["skipped"] = [self.skipped(s) for s in exc.skipped]
        return details

    def error_body(
        self, status: int, code: str, message: str, details: Mapping[str, Any], exc: ServiceError
    ) -> Any:
        """The JSON value of an error body (or str for a text body, None for an empty one).

        Args:
            status: The emulator's status word (`passed`, `ready`, ...).
            code: The error code.
            message: The error message.
            details: The error's extras, from `error_details`.
            exc: The backend's error (`ServiceError`, with its `kind`).

        Returns:
            What the dialect writes on the wire for it.
        """
        return {"error": {"code": code, "message": message, **details}}

    def error_answer(self, exc: ServiceError) -> WireAnswer:
        """The status, headers and body of an error answer in this dialect.

        Args:
            exc: The backend's error (`ServiceError`, with its `kind`).

        Returns:
            What the dialect writes on the wire for it.
        """
        status, code = self.error_status(exc)
        body = self.error_body(status, code, exc.message, self.error_details(exc), exc)
        headers = dict(exc.headers)
        if status == 401:
            headers.setdefault("WWW-Authenticate", "Bearer")
        if body is None:
            return WireAnswer(status, "text/plain", b"", headers)
        if isinstance(body, str):
            kind = "text/html" if body.lstrip().startswith("<") else "text/plain"
            return WireAnswer(status, kind, body.encode(), headers)
        return WireAnswer(status, _JSON, dumps(body).encode(), headers)


def _wall(clock: Clock | None, ts: float | None) -> float | None:
    return ts if ts is None or clock is None else clock.wall(ts)
