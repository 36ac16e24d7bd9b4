"""Hold: a test's runs kept queued or running until the test using the emulator lets them go."""

from collections.abc import Sequence

from asyncclient.testing._backend import Backend

__all__ = ["HOLD_STATES", "Hold"]

HOLD_STATES = ("queued", "running")


class Hold:
    """A hold of `FakeService.hold` (made by it): `release()` it, or use it as a context
    manager.

    Args:
        backend: The emulator's state (`FakeService.backend`).
        test_ids: The tests whose runs it holds.
        state: "queued" or "running": the state they stay in.
    """

    def __init__(self, backend: Backend, test_ids: Sequence[str], state: str) -> None:
        if state not in HOLD_STATES:
            raise ValueError(f"state must be 'queued' or 'running', got {state!r}")
        unknown = [t for t in test_ids if t not in backend.tests]
        if not test_ids or unknown:
            raise ValueError(f"hold needs the seed's test ids; unknown: {unknown or 'none given'}")
        self._store = backend.run_store
        self.test_ids = tuple(test_ids)
        self.state = state
        self._released = False
        self._store.hold(self.test_ids, state)

    @property
    def run_ids(self) -> list[str]:
        """The runs this hold keeps now, oldest first."""
        return [r.id for r in self._store.held_runs if r.test.id in self.test_ids]

    def release(self) -> None:
        """Let the held runs go on from now; later runs of the tests are not held. Idempotent."""
        if not self._released:
            self._released = True
            self._store.release(self.test_ids)

    def release_run(self, run_id: str) -> None:
        """Let one held run go on from now; the hold keeps the others (and later runs).

        Args:
            run_id: A run this hold keeps (see `run_ids`).

        Raises:
            ValueError: The hold does not keep that run.
        """
        if run_id not in self.run_ids or not self._store.release_run(run_id):
            raise ValueError(
                f"{run_id} is not held by this hold: {' '.join(self.run_ids) or 'none'}"
            )

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else self.state
        return f"<Hold {' '.join(self.test_ids)} {state}>"
