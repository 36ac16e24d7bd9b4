"""Allure's own command line (npm's allure-commandline, on Java) rendering a results folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ALLURE = Path(__file__).resolve().parents[1] / ".ci" / ".node" / "node_modules" / ".bin" / "allure"


def allure_command() -> Path:
    if not (ALLURE.exists() and shutil.which("java")):
        if os.environ.get("CI"):
            pytest.fail("Allure's command line or Java is missing: .ci/run installs both")
        pytest.skip("Java and `npm install --prefix .ci/.node allure-commandline` are needed")
    return ALLURE


def generate(results_dir: Path, report_dir: Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(allure_command()), "generate", str(results_dir), "-o", str(report_dir), "--clean"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    widgets = report_dir / "widgets"
    return {
        name: json.loads((widgets / f"{name}.json").read_text())
        for name in ("summary", "history-trend", "categories")
    }
