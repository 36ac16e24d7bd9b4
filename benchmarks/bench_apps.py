"""Reading an apk's app id, version and minimum SDK (what the pre-flight does for every apk of
a batch, and the emulator for every upload it checks) as the manifest grows: asyncclient's
quick reading of <manifest>, <uses-sdk> and <application> against apkInspector decoding the
whole manifest (the baseline, the way apps.py read every manifest before), side by side.

    .venv/bin/python benchmarks/bench_apps.py [--rounds 5] [--calls 200]

Each figure is the CPU time of one inspect_app() call (open the zip, read and inflate the
manifest, decode it, list the native libraries), the median of --rounds rounds of --calls calls,
the two readers in turns. Target: the quick reading of a manifest of 400 activities at most 3x
its figure with none (flat in the manifest's size).
"""

import argparse
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from asyncclient import apps
from asyncclient.apps._axml import UnusualManifest
from asyncclient.testing.builders import build_apk

SIZES = (0, 100, 400)


def _full(data: bytes) -> Any:
    raise UnusualManifest  # apps.py then decodes the manifest with apkInspector


def _per_call(path: Path, calls: int, quick: bool) -> float:
    original = apps.quick_manifest
    if not quick:
        apps.quick_manifest = _full  # type: ignore[assignment]
    try:
        apps.inspect_app(path)  # warm: imports, caches
        began = time.process_time()
        for _ in range(calls):
            apps.inspect_app(path)
        return (time.process_time() - began) / calls
    finally:
        apps.quick_manifest = original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-apps-") as folder:
        paths = {n: build_apk(Path(folder) / f"app{n}.apk", activities=n) for n in SIZES}
        figures: dict[tuple[int, bool], list[float]] = {}
        for round_no in range(args.rounds):
            for quick in (True, False) if round_no % 2 == 0 else (False, True):
                for n in SIZES:
                    figures.setdefault((n, quick), []).append(
                        _per_call(paths[n], args.calls, quick)
                    )
        print(f"bench_apps: inspect_app() CPU per call, median of {args.rounds} rounds")
        print(f"  {'activities':>10}{'manifest':>11}{'apkInspector':>14}{'quick':>10}{'ratio':>8}")
        medians = {key: statistics.median(values) for key, values in figures.items()}
        for n in SIZES:
            size = len(zipfile.ZipFile(paths[n]).read("AndroidManifest.xml"))
            full, quick = medians[(n, False)] * 1e6, medians[(n, True)] * 1e6
            print(
                f"  {n:>10}{size / 1024:>9.1f} KB{full:>11.0f} us{quick:>7.0f} us"
                f"{full / quick:>7.1f}x"
            )
    growth = medians[(SIZES[-1], True)] / medians[(SIZES[0], True)]
    ok = growth <= 3.0
    print(
        f"  quick reading, {SIZES[-1]} activities against none: {growth:.2f}x "
        f"(target <= 3x): {'PASS' if ok else 'MISS'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
