"""The emulator's blocking file work: hashing a region of a build file (mapped where it can be,
read where it cannot), whatever its offset and length."""

import hashlib
import mmap
import os
from pathlib import Path
from typing import Any

import pytest

from asyncclient.testing import _build_files
from asyncclient.testing._build_files import hash_region

SIZE = 3_000_000


@pytest.fixture
def build_file(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "build.apk"
    data = os.urandom(SIZE)
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "read"])
@pytest.mark.parametrize(
    ("offset", "length"),
    [(0, SIZE), (1, 10), (mmap.ALLOCATIONGRANULARITY - 1, 5000), (65537, 2_000_000),
     (SIZE - 1, 1), (100, 0)],
)  # fmt: skip
def test_a_region_hashes_as_its_bytes_do(
    build_file: tuple[Path, bytes],
    monkeypatch: pytest.MonkeyPatch,
    mapped: bool,
    offset: int,
    length: int,
) -> None:
    path, data = build_file
    maps: list[int] = []
    real = _build_files._hash_mapped

    def counted(*args: Any) -> Any:
        digest = real(*args)
        maps.append(1)  # reached only when the region was mapped and hashed
        return digest

    monkeypatch.setattr(_build_files, "_hash_mapped", counted)
    if not mapped:
        monkeypatch.setattr(_build_files.mmap, "mmap", _refuses)
    digest = hash_region(path, offset, length, hashlib.sha256())
    assert digest.digest() == hashlib.sha256(data[offset : offset + length]).digest()
    assert maps == ([1] if mapped else [])


def _refuses(*args: object, **kwargs: object) -> None:
    raise OSError("no map here")


def test_a_region_past_the_end_is_an_error_in_words(build_file: tuple[Path, bytes]) -> None:
    path, _ = build_file
    with pytest.raises(OSError, match="ended 4000 bytes early"):
        hash_region(path, SIZE - 1000, 5000, hashlib.sha256())
