from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_support import RedisServer, redis_server


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A real Redis server of this test's own (tests/redis_support.py)."""
    with redis_server(tmp_path) as server:
        yield server
