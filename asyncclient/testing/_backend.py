"""All state of one emulated service (moto's "backend"), no HTTP: the shared state and one store
per resource (`build_store`, `run_store`, `endpoint_store`), each with one method per operation
and the rules of its resource. Handlers and tests call the stores directly (one hop, as moto's
`responses.py` calls its backend).
"""

from pathlib import Path

from asyncclient.testing._auth import ApiKey, authenticate
from asyncclient.testing._builds import BuildStore
from asyncclient.testing._clock import Clock
from asyncclient.testing._endpoints import EndpointStore
from asyncclient.testing._idempotency import AnswerStore
from asyncclient.testing._records import Build, Endpoint, Run
from asyncclient.testing._runs import RunStore
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
        # The stores' own tables, shared, for tests and stats.
        self.builds: dict[str, Build] = self.build_store.builds
        self.runs: dict[str, Run] = self.run_store.runs
        self.run_order: list[Run] = self.run_store.order
        self.endpoints: dict[str, Endpoint] = self.endpoint_store.endpoints
        seeded_at = clock.now() - 3600.0
        self.build_store.add_seeded(seed.builds, seeded_at)
        self.endpoint_store.add_seeded(seed.endpoints, seeded_at)
        self.run_store.add_history(clock.now())

    def now(self) -> float:
        return self.clock.now()

    def authenticate(self, authorization: str | None) -> ApiKey:
        """The key of an `Authorization: Bearer <key>` header, or 401."""
        return authenticate(self.keys, authorization)

    async def aclose(self) -> None:
        """Stop the background hashers (the service is stopping)."""
        await self.build_store.aclose()
