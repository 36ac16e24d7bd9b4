"""The job's history read (the ETA, reuse, new tests, the trend) in bounded memory: a service
whose listing of each of 200 tests answers 25 runs with 1 MB titles (25 MB a listing, under
the 32 MiB answer cap) keeps a `run --wait` job's peak memory under 300 MiB, read from the
kernel (ru_maxrss); a listing over the cap is that test's history not read, said in one line."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from measure_support import run_measured

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is Linux's"),
]

TESTS = 200
KEY = "history-key-5d1"


SERVER = Path(__file__).parents[1] / "heavy_history_server.py"


@attrs.define
class Heavy:
    url: str
    process: subprocess.Popen[str]

    @property
    def listings(self) -> int:
        with urllib.request.urlopen(f"{self.url}/count") as answer:
            return int(answer.read())


@contextlib.contextmanager
def heavy(title_bytes: int, tests: int = TESTS) -> Iterator[Heavy]:
    """The service in a process of its own (its answers are large: building them would
    otherwise weigh on the test's own process and loop)."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), str(title_bytes), str(tests)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield Heavy(url, process)
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def _env(service: Heavy, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ASYNCCLIENT_BASE_URL": service.url,
        "ASYNCCLIENT_API_KEY": KEY,
        "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
    }


JOB = ["run", "project", "p_1", "--wait", "--json", "--interval", "0.05", "--reuse-passed", "7",
       "--new-test-runs", "2"]  # fmt: skip


def test_a_jobs_history_read_stays_in_bounded_memory(tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    with heavy(1 << 20) as service:
        done = run_measured([*JOB, "--html", str(html)], _env(service, tmp_path), tmp_path)
        listings = service.listings
    print(f"200 tests x 25 runs, 1 MB titles: peak RSS {done.peak_rss_mib:.0f} MiB")  # -s
    assert done.code == 0, done.stderr[-3000:]
    assert listings == TESTS  # each test's history read once
    assert len(json.loads(done.stdout)) == TESTS
    assert html.is_file()
    assert done.peak_rss_mib < 300, done.peak_rss_mib


def test_a_listing_over_the_answer_cap_is_history_not_read(tmp_path: Path) -> None:
    with heavy(2 << 20, tests=10) as service:  # 50 MB a listing: over the 32 MiB cap
        done = run_measured(JOB, _env(service, tmp_path), tmp_path)
    assert done.code == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "history" in line]
    assert len(said) == 1, said
    assert "the history of 10 tests could not be read" in said[0], said
    assert "larger than the limit of 33,554,432 bytes" in said[0], said
    assert "Traceback" not in done.stderr
