"""Runs: their states (a function of the clock), how they start, list, stop, and their files.

No HTTP here: `_runs_http` parses each request and calls the `RunStore` (through `Backend`).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Sequence

from asyncclient.testing import _files
from asyncclient.testing._auth import ApiKey
from asyncclient.testing._builds import BuildStore
from asyncclient.testing._errors import (
    ServiceError,
    Skip,
    invalid,
    invalid_state,
    lookup_error,
    not_found,
    show,
)
from asyncclient.testing._records import (
    FINAL_STATUSES,
    Build,
    BuildRef,
    Project,
    Run,
    Test,
)
from asyncclient.testing._seed import SeedTest
from asyncclient.testing._state import SharedState

__all__ = ["RunStore", "Skip"]


def _unit_interval(text: str) -> float:
    """A number in [0, 1) that depends only on `text`."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest()) / 2**32


class RunStore:
    """Every run of the service, by id and in order, and the rules of starting and stopping them."""

    def __init__(self, state: SharedState, builds: BuildStore) -> None:
        self._state = state
        self._builds = builds
        self.runs: dict[str, Run] = {}
        self._on_devices: list[Run] = []  # with device slots: the runs not yet over
        self.order: list[Run] = []
        # FakeService.hold: test id -> its state and runs held.
        self.holds: dict[str, str] = {}
        self.held_runs: list[Run] = []

    def get(self, key: ApiKey, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None or run.project_id not in key.projects:
            raise lookup_error("run", "j_", run_id, run is not None)
        return run

    def run_test(
        self,
        key: ApiKey,
        test_id: str,
        mode: str,
        build_id: str | None,
        draw: str | None = None,
    ) -> Run:
        """`draw`: the start's idempotency key, when it had one (flakyRate draws from it)."""
        test = self._state.test(key, test_id)
        build = self._builds.get(key, build_id) if build_id is not None else None
        return self._start(test, mode, build, "test", draw)

    def run_project(
        self,
        key: ApiKey,
        project_id: str,
        mode: str,
        build_ids: Sequence[str],
        draw: str | None = None,
    ) -> tuple[list[Run], list[Skip]]:
        """Start every test of the project that can start; the rest are skipped with a reason.

        Raises 400 empty when the project has no tests, 402 not_started when none could start.
        """
        project = self._state.project(key, project_id)
        chosen: dict[tuple[str | None, str | None], Build] = {}
        for build_id in dict.fromkeys(build_ids):
            build = self._builds.get(key, build_id)
            if build.project_id != project.id:
                raise ServiceError(
                    400, "build_mismatch", f"build {build.id} belongs to another project"
                )
            if build.status != "ready":
                raise invalid_state(f"build {build.id} is {build.status}, not ready")
            app = (build.platform, build.app_id)
            if app in chosen:
                raise invalid("buildIds", f"two builds of {build.app_id} were named")
            chosen[app] = build
        started: list[Run] = []
        skipped: list[Skip] = []
        for test in project.tests:
            named = chosen.get((test.seed.target, test.seed.app_id))
            try:
                started.append(self._start(test, mode, named, "project", draw))
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

    def add_history(self, at: float) -> None:
        """The finished runs of the seed's history, each `days_ago` before `at`, oldest first
        (so that listings, newest first, put them after every run started since). They count
        against no plan and start no flaky streak: they happened before the service began."""
        entries = [
            (at - entry.days_ago * 86400.0, test, entry)
            for test in self._state.tests.values()
            for entry in test.seed.history
        ]
        entries.sort(key=lambda item: item[0])
        for created, test, entry in entries:
            seeded = test.seed
            build = None
            if entry.build is not None:
                known = self._builds.builds.get(entry.build)
                build = BuildRef(
                    id=entry.build,
                    app_id=seeded.app_id,
                    version=entry.version,
                    version_code=None,
                    platform=seeded.target,
                    sha256=known.sha256 if known is not None else None,
                )
            run = Run(
                id=self._state.new_id("j_", self.runs),
                seq=self._state.next_seq(),
                test=test,
                build=build,
                mode="auto",
                source="history",
                created_at=created,
                queued=1.0 if entry.queued_seconds is None else entry.queued_seconds,
                duration=entry.duration_seconds or seeded.duration_seconds,
                overage=False,
                clock=self._state.clock,
            )
            if entry.status == "cancelled":
                run.stopped_at = run.start_at
            else:
                run.outcome = entry.status
                run.said = (entry.headline, entry.reason)
            project = self._state.projects[seeded.project]
            self.runs[run.id] = run
            self.order.append(run)
            project.runs.append(run)
            test.runs.append(run)

    def create_runs(self, test_id: str, count: int, mode: str = "auto") -> list[Run]:
        """Many runs of one test at once, without a key (the benchmarks' bulk loader)."""
        test = self._state.tests.get(test_id)
        if test is None:
            raise not_found(f"no test {show(test_id)}")
        return [self._start(test, mode, None, "test") for _ in range(count)]

    def _start(
        self, test: Test, mode: str, build: Build | None, source: str, draw: str | None = None
    ) -> Run:
        project = self._state.projects[test.seed.project]
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
        return self._new_run(test, project, used_mode, ref, source, draw)

    def _learned(self, test: Test) -> str:
        if test.learned != "fresh" and test.passing_cold:
            now = self._state.now()
            later = []
            while test.passing_cold and test.passing_cold[0][0] <= now:
                _end, _seq, run = heapq.heappop(test.passing_cold)
                if run.stopped_at is None and run.finished_at(now) is None:
                    later.append((max(run.end_at, now + 1.0), run.seq, run))  # held
                elif run.stopped_at is None:
                    test.learned = "fresh"
                    test.passing_cold.clear()
                    later.clear()
            for entry in later:
                heapq.heappush(test.passing_cold, entry)
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
            build = self._builds.builds[seeded.pinned_build]
        if build is None:
            ready = [
                b
                for b in self._state.projects[seeded.project].builds
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
            raise invalid_state(f"build {build.id} is {build.status}, not ready")
        if (build.platform, build.app_id) != (seeded.target, seeded.app_id):
            raise ServiceError(
                400,
                "build_mismatch",
                f"build {build.id} is {build.app_id} ({build.platform}); {test.id} tests "
                f"{seeded.app_id} ({seeded.target})",
            )
        return BuildRef(
            build.id, build.app_id, build.version, build.version_code, build.platform, build.sha256
        )

    def _new_run(
        self,
        test: Test,
        project: Project,
        mode: str,
        build: BuildRef | None,
        source: str,
        draw: str | None = None,
    ) -> Run:
        seeded = test.seed
        run_id = self._state.new_id("j_", self.runs)
        spread = 1.0 + seeded.duration_jitter * (2.0 * _unit_interval(run_id) - 1.0)
        overage = project.counted_runs >= project.included_runs
        # flakyRuns: the first N runs after each project run fail.
        if source == "project":
            test.runs_since_suite = 0
        # flakyRate: drawn from the run id, or its key and test.
        basis = f"{draw}/{test.id}" if draw else run_id
        flaky = seeded.outcome == "passed" and (
            test.runs_since_suite < seeded.flaky_runs
            or (seeded.flaky_rate > 0 and _unit_interval(basis + "/flaky") < seeded.flaky_rate)
        )
        run = Run(
            id=run_id,
            seq=self._state.next_seq(),
            test=test,
            build=build,
            mode=mode,
            source=source,
            created_at=self._state.now(),
            queued=seeded.queued_seconds,
            duration=max(0.001, seeded.duration_seconds * spread),
            overage=overage,
            flaky_failure=flaky,
            broken=self._broken(project, seeded, build),
            clock=self._state.clock,
        )
        project.counted_runs += 1
        test.runs_since_suite += 1
        self.runs[run.id] = run
        self.order.append(run)
        project.runs.append(run)
        test.runs.append(run)
        for endpoint in project.endpoints:
            if endpoint.name in seeded.uses_endpoints:
                endpoint.uses.append(run)
        held = self.holds.get(test.id)
        if held is not None and run.hold(run.created_at, held):
            self.held_runs.append(run)
        if self._state.settings.device_slots is not None:
            self._on_devices.append(run)
            self._schedule(run.created_at)
        if mode == "cold" and seeded.outcome == "passed" and not flaky:
            heapq.heappush(test.passing_cold, (run.end_at, run.seq, run))
        return run

    def _broken(self, project: Project, seeded: SeedTest, build: BuildRef | None) -> bool:
        """Whether the run's build is the one the test broke at (seed: brokenFrom) or one of
        its app uploaded after it."""
        if build is None or seeded.broken_from is None:
            return False
        order = [b.id for b in project.builds if b.app_id == build.app_id]
        if build.id not in order or seeded.broken_from not in order:
            return build.id == seeded.broken_from
        return order.index(build.id) >= order.index(seeded.broken_from)

    def _schedule(self, now: float) -> None:
        """With device slots (ServiceSettings.device_slots): the runs waiting for a device
        start in the order they came, each as soon as one frees up and its own queue time
        has passed; reckoned again whenever a run starts or ends early (a stop). A held run
        keeps its device."""
        slots = self._state.settings.device_slots
        if slots is None:
            return
        busy: list[float] = []
        waiting: list[Run] = []
        going: list[Run] = []
        for run in self._on_devices:
            if run.stopped_at is not None:
                continue
            if run.held is not None:
                busy.append(float("inf"))
            elif run.start_at >= now:  # a run may start at this very moment: it waits its turn
                waiting.append(run)
            elif run.end_at > now:
                busy.append(run.end_at)
            else:
                continue  # over
            going.append(run)
        self._on_devices = going
        free = [now] * max(0, slots - len(busy)) + busy
        heapq.heapify(free)
        for run in sorted(waiting, key=lambda r: r.seq):
            duration = run.end_at - run.start_at
            run.start_at = max(run.earliest, heapq.heappop(free))
            run.end_at = run.start_at + duration
            heapq.heappush(free, run.end_at)

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
        now = self._state.now()
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
            test = self._state.tests.get(test_id)
            candidates = reversed(test.runs) if test is not None else ()
        elif project_id is not None:
            project = self._state.projects.get(project_id)
            candidates = reversed(project.runs) if project is not None else ()
        else:
            candidates = reversed(self.order)
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

    def hold(self, test_ids: Iterable[str], state: str) -> list[Run]:
        """Hold the tests' runs in `state`: those not past it now and every one started until
        `release`. Returns the runs held now."""
        now = self._state.now()
        held = []
        for test_id in test_ids:
            self.holds[test_id] = state
            test = self._state.tests.get(test_id)
            for run in test.runs if test is not None else ():
                if run.stopped_at is None and run.held is None and run.hold(now, state):
                    held.append(run)
        self.held_runs.extend(held)
        return held

    def release_run(self, run_id: str) -> bool:
        """Let one held run go on from now (its test stays held); False: it is not held."""
        run = next((r for r in self.held_runs if r.id == run_id), None)
        if run is None or run.stopped_at is not None:
            return False
        run.release(self._state.now())
        self.held_runs = [r for r in self.held_runs if r.held is not None]
        return True

    def release(self, test_ids: Iterable[str]) -> None:
        """End the tests' holds: their held runs go on from now."""
        now = self._state.now()
        released = set(test_ids)
        for test_id in released:
            self.holds.pop(test_id, None)
        for run in self.held_runs:
            if run.test.id in released and run.stopped_at is None:
                run.release(now)
        self.held_runs = [r for r in self.held_runs if r.held is not None]

    def find_run(self, run_id: str) -> Run | None:
        """A run by id regardless of key (the result page, which a browser opens without one)."""
        return self.runs.get(run_id)

    def stop_run(self, key: ApiKey, run_id: str) -> Run:
        run = self.get(key, run_id)
        now = self._state.now()
        status = run.status_at(now)
        if status in FINAL_STATUSES:
            raise invalid_state(
                f"run {run.id} is already final ({status}); only queued or "
                "running runs can be stopped"
            )
        run.stop(now)
        self._schedule(now)  # its device, if it had one, goes to the next run waiting
        # A stopped run is not counted toward the plan's included runs.
        self._state.projects[run.project_id].counted_runs -= 1
        return run

    def run_file(self, key: ApiKey, run_id: str, name: str) -> tuple[Run, _files.RunFile]:
        run = self.get(key, run_id)
        status = run.status_at(self._state.now())
        if status not in FINAL_STATUSES:
            raise not_found(f"run {run.id} is {status}; its files exist once it is final")
        if name not in run.file_names(status):
            raise not_found(f"run {run.id} has no file {show(name)}")
        found = _files.run_file(
            run.id, name, run.test.seed.screenshots, round(run.end_at - run.start_at, 3)
        )
        assert found is not None  # every name of file_names() can be made
        return run, found
