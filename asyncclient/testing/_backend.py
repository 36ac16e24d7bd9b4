"""All state of one emulated service (moto's "backend"): one method per operation, no HTTP.

A facade: each method hands the operation to its resource's store (`_builds`, `_runs`,
`_endpoints`), which holds the rules; the handlers and the tests call it here.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

from asyncclient.testing import _files
from asyncclient.testing._auth import ApiKey, authenticate, require_edit
from asyncclient.testing._build_files import PartWriter
from asyncclient.testing._builds import Build, BuildStore
from asyncclient.testing._clock import Clock
from asyncclient.testing._endpoints import Endpoint, EndpointStore
from asyncclient.testing._idempotency import AnswerStore
from asyncclient.testing._runs import Run, RunStore, Skip
from asyncclient.testing._seed import Seed
from asyncclient.testing._state import ServiceSettings, SharedState

__all__ = ["Backend"]


class Backend:
    """All state of one emulated service. Build it in a thread: seeding writes real app files."""

    def __init__(
        self, seed: Seed, *, clock: Clock, settings: ServiceSettings, data_dir: Path
    ) -> None:
        state = SharedState(seed, clock=clock, settings=settings, data_dir=data_dir)
        self.state = state
        self.seed = seed
        self.clock = clock
        self.settings = settings
        self.data_dir = data_dir
        self.keys = state.keys
        self.projects = state.projects
        self.tests = state.tests
        self.build_store = BuildStore(state)
        self.run_store = RunStore(state, self.build_store)
        self.endpoint_store = EndpointStore(state)
        self.answers = AnswerStore(state)
        # The stores' own tables, shared (not copied): what tests and the stats read.
        self.builds: dict[str, Build] = self.build_store.builds
        self.runs: dict[str, Run] = self.run_store.runs
        self.run_order: list[Run] = self.run_store.order
        self.endpoints: dict[str, Endpoint] = self.endpoint_store.endpoints
        seeded_at = clock.now() - 3600.0
        self.build_store.add_seeded(seed.builds, seeded_at)
        self.endpoint_store.add_seeded(seed.endpoints, seeded_at)

    def now(self) -> float:
        return self.clock.now()

    def authenticate(self, authorization: str | None) -> ApiKey:
        """The key of an `Authorization: Bearer <key>` header, or 401."""
        return authenticate(self.keys, authorization)

    @staticmethod
    def require_edit(key: ApiKey, what: str) -> None:
        """403 unless the key can also create and edit tests."""
        require_edit(key, what)

    async def aclose(self) -> None:
        """Stop the background hashers (the service is stopping)."""
        await self.build_store.aclose()

    # --- builds -----------------------------------------------------------------------------

    def list_builds(self, key: ApiKey, project_id: str) -> list[Build]:
        return self.build_store.list_builds(key, project_id)

    def get_build(self, key: ApiKey, build_id: str) -> Build:
        return self.build_store.get(key, build_id)

    def start_upload(
        self, key: ApiKey, project_id: str, file_name: str, size: int, label: str | None
    ) -> Build:
        return self.build_store.start_upload(key, project_id, file_name, size, label)

    def part_target(self, key: ApiKey, build_id: str, part_number: str) -> tuple[Build, int, int]:
        return self.build_store.part_target(key, build_id, part_number)

    def claim_part(self, build: Build, number: int) -> PartWriter | None:
        return self.build_store.claim_part(build, number)

    def release_part(self, build: Build, number: int, writer: PartWriter) -> None:
        self.build_store.release_part(build, number, writer)

    async def commit_part(
        self, build: Build, number: int, received: Path | PartWriter, etag: str
    ) -> None:
        await self.build_store.commit_part(build, number, received, etag)

    async def complete_upload(
        self, key: ApiKey, build_id: str, parts: Sequence[tuple[int, str]]
    ) -> Build:
        return await self.build_store.complete_upload(key, build_id, parts)

    async def delete_build(self, key: ApiKey, build_id: str) -> None:
        await self.build_store.delete_build(key, build_id)

    # --- runs -------------------------------------------------------------------------------

    def run_test(self, key: ApiKey, test_id: str, mode: str, build_id: str | None) -> Run:
        return self.run_store.run_test(key, test_id, mode, build_id)

    def run_project(
        self, key: ApiKey, project_id: str, mode: str, build_ids: Sequence[str]
    ) -> tuple[list[Run], list[Skip]]:
        return self.run_store.run_project(key, project_id, mode, build_ids)

    def create_runs(self, test_id: str, count: int, mode: str = "auto") -> list[Run]:
        """Many runs of one test at once, without a key (the benchmarks' bulk loader)."""
        return self.run_store.create_runs(test_id, count, mode)

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
        return self.run_store.list_runs(
            key, ids=ids, test_id=test_id, project_id=project_id, status=status, limit=limit
        )

    def get_run(self, key: ApiKey, run_id: str) -> Run:
        return self.run_store.get(key, run_id)

    def find_run(self, run_id: str) -> Run | None:
        """A run by id regardless of key (the result page, which a browser opens without one)."""
        return self.run_store.find_run(run_id)

    def stop_run(self, key: ApiKey, run_id: str) -> Run:
        return self.run_store.stop_run(key, run_id)

    def run_file(self, key: ApiKey, run_id: str, name: str) -> tuple[Run, _files.RunFile]:
        return self.run_store.run_file(key, run_id, name)

    # --- endpoints --------------------------------------------------------------------------

    def list_endpoints(self, key: ApiKey, project_id: str) -> list[Endpoint]:
        return self.endpoint_store.list_endpoints(key, project_id)

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
        return self.endpoint_store.add_endpoint(
            key,
            project_id,
            name=name,
            description=description,
            method=method,
            url=url,
            headers=headers,
            body_template=body_template,
        )

    def delete_endpoint(self, key: ApiKey, endpoint_id: str) -> None:
        self.endpoint_store.delete_endpoint(key, endpoint_id)
