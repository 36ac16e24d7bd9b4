"""Benchmark: what an install holds. The core (`pip install .`, the library alone) beside its
baseline, the one install asyncclient was before the extras (`pip install '.[cli,tls]'`: the
same packages), and the command's (`.[cli]`): distributions, megabytes and the import time.

    .venv/bin/python benchmarks/bench_install.py [--runs 9]

Each install is a fresh virtual environment of this Python in a temporary folder (pip reads
its cache and the package index). Distributions are `pip list`'s, pip and setuptools
included; the size is site-packages less a bare environment's (pip and setuptools); the import
time is `python -X importtime`'s, the sum of the top-level imports of the statement (the
interpreter's own start-up left out), the median of --runs, the installs measured in turns.
Exits 1 if a target is missed: the core holds no cryptography, rich, Pygments, Jinja2 or
tomlkit, and at most 20 distributions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALLS = {"core": ".", "baseline": ".[cli,tls]", "cli": ".[cli]"}
STATEMENTS = ("import asyncclient", "from asyncclient import AsyncSession")
NOT_IN_CORE = {"cryptography", "rich", "pygments", "jinja2", "tomlkit"}
_STARTUP = {"site", "encodings", "codecs", "io", "abc", "_abc", "time", "zipimport"}


def make(folder: Path, spec: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", spec],
        check=True, cwd=ROOT, capture_output=True,
    )  # fmt: skip
    return python


def site_megabytes(python: Path) -> float:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                               check=True).stdout.strip())  # fmt: skip
    return sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) / 1e6


def distributions(python: Path) -> list[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sorted(line.split("==")[0].lower() for line in out.split())


def import_ms(python: Path, statement: str) -> float:
    err = subprocess.run(
        [str(python), "-X", "importtime", "-c", statement],
        capture_output=True, text=True, check=True, cwd=tempfile.gettempdir(),
    ).stderr  # fmt: skip
    total = 0
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or "cumulative" in line:
            continue
        name = parts[2]
        if name[1:2] != " " and name.strip() not in _STARTUP:  # a top-level import
            total += int(parts[1])
    return total / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        base = Path(name)
        bare = site_megabytes(make(base / "bare", "pip"))
        pythons = {key: make(base / key, spec) for key, spec in INSTALLS.items()}
        times: dict[tuple[str, str], list[float]] = {}
        order = list(pythons.items())
        for run in range(args.runs):
            # Each install first in turn: no one of them always meets the caches cold.
            shift = run % len(order)
            for key, python in order[shift:] + order[:shift]:
                for statement in STATEMENTS:
                    times.setdefault((key, statement), []).append(import_ms(python, statement))
        rows = []
        for key, python in pythons.items():
            names = distributions(python)
            rows.append((key, INSTALLS[key], names, site_megabytes(python) - bare))
    labels = ("import asyncclient", "AsyncSession")  # the two statements, in short
    print(f"{'install':9} {'pip install':13} {'dists':>5} {'MB':>5} "
          f"{labels[0]:>19} {labels[1]:>13}")  # fmt: skip
    for key, spec, names, megabytes in rows:
        first, second = (statistics.median(times[(key, s)]) for s in STATEMENTS)
        print(f"{key:9} {spec!r:13} {len(names):>5} {megabytes:>5.1f} "
              f"{first:>16.1f} ms {second:>10.1f} ms")  # fmt: skip
    core = next(names for key, _, names, _ in rows if key == "core")
    baseline = next(names for key, _, names, _ in rows if key == "baseline")
    print(f"core/baseline distributions: {len(core)}/{len(baseline)}")
    print("in the baseline, not the core:")
    print(f"  {' '.join(sorted(set(baseline) - set(core)))}")
    wrong = NOT_IN_CORE & set(core)
    if wrong or len(core) > 20:
        print(f"target missed: {sorted(wrong)} in the core, {len(core)} distributions")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
