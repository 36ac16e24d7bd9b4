"""What every resource of the emulator shares: settings, the clock, ids, keys, projects, tests.

`SharedState` is built from the seed; the stores of `_builds`, `_runs` and `_endpoints` read it.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from asyncclient.apps import DeviceProfile
from asyncclient.testing._auth import ApiKey
from asyncclient.testing._clock import Clock
from asyncclient.testing._errors import lookup_error
from asyncclient.testing._records import MiB, Project, Test
from asyncclient.testing._seed import Seed

__all__ = ["ServiceSettings", "SharedState"]


def _positive(_instance: Any, attribute: Any, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _slots(_instance: Any, attribute: Any, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attribute.name} must be a whole number of devices, got {value!r}")


@attrs.frozen(kw_only=True)
class ServiceSettings:
    """Limits and device capabilities of the emulated service.

    Attributes:
        part_bytes: The size of each upload part the service asks for.
        max_bytes: The largest build accepted.
        devices: What the devices run (`apps.DeviceProfile`).
        idempotency_ttl: Seconds an idempotency key is remembered.
        device_slots: How many runs run at once (a device plan); the others wait in the
            order they came. None: every run starts after its queue time.
        ready_accepts_parts: Accept parts for a build that is already ready (the lenient
            reading) instead of refusing them with 409.
    """

    part_bytes: int = attrs.field(default=8 * MiB, validator=_positive)
    max_bytes: int = attrs.field(default=4 << 30, validator=_positive)
    devices: DeviceProfile = attrs.field(factory=DeviceProfile)
    idempotency_ttl: float = attrs.field(default=86400.0, validator=_positive)
    device_slots: int | None = attrs.field(default=None, validator=_slots)
    ready_accepts_parts: bool = False
    """The lenient reading of a ready build (the spec leaves it open): its parts are still
    answered with their etag (and discarded), as complete is answered with the build again.
    False, the strict reading: a part for a ready build is refused with 409 invalid_state."""


class SharedState:
    """The seed's keys, projects and tests, with the clock, the settings and the id sequence."""

    def __init__(
        self, seed: Seed, *, clock: Clock, settings: ServiceSettings, data_dir: Path
    ) -> None:
        self.seed = seed
        self.clock = clock
        self.settings = settings
        self.data_dir = data_dir
        # One sequence numbers runs and makes new ids of every kind.
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

    def now(self) -> float:
        return self.clock.now()

    def next_seq(self) -> int:
        return next(self._seq)

    def new_id(self, prefix: str, taken: Mapping[str, Any]) -> str:
        while True:
            seq = self.next_seq()
            ident = prefix + hashlib.blake2b(f"{prefix}{seq}".encode(), digest_size=6).hexdigest()
            if ident not in taken:
                return ident

    def project(self, key: ApiKey, project_id: str) -> Project:
        project = self.projects.get(project_id)
        if project is None or project.id not in key.projects:
            raise lookup_error("project", "p_", project_id, project is not None)
        return project

    def test(self, key: ApiKey, test_id: str) -> Test:
        test = self.tests.get(test_id)
        if test is None or test.seed.project not in key.projects:
            raise lookup_error("test", "t_", test_id, test is not None)
        return test
