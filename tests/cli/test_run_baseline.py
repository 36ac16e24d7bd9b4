"""`run project --baseline` against the emulator where 3 of 5 failing tests fail on main's
build too (testing.baseline_seed): those 3 are pre-existing in every report (the summary,
the step summary, HTML, JUnit, CTRF, Allure, --json, the events), --pre-existing sets the
exit code, bad input is refused before any request, and an upload in CI labels its build."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncclient.testing import FakeService, baseline_seed
from asyncclient.testing.builders import build_apk

RunCli = Callable[..., Awaitable[Any]]
BEFORE = {"t_checkout", "t_profile", "t_orders"}
NEW = {"t_coupon", "t_wishlist"}


@pytest.fixture
async def shop() -> AsyncIterator[FakeService]:
    async with FakeService(baseline_seed(), speed=6000) as service:
        yield service


@pytest.fixture
def env(shop: FakeService) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": shop.url, "ASYNCCLIENT_API_KEY": "shop-run-key"}


JOB = ("run", "project", "p_shop", "--wait", "--retry-failed", "1", "--interval", "0.02")


async def test_pre_existing_failures_are_named_in_every_report(
    run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    out = {name: tmp_path / name for name in ("r.xml", "r.ctrf.json", "r.html", "e.jsonl", "s.md")}
    allure = tmp_path / "allure"
    result = await run_cli(
        "--json", *JOB, "--build", "ab_shop_change", "--baseline", "auto",
        "--junit", str(out["r.xml"]), "--ctrf", str(out["r.ctrf.json"]),
        "--html", str(out["r.html"]), "--events", str(out["e.jsonl"]),
        "--allure-results", str(allure),
        env={**env, "GITHUB_STEP_SUMMARY": str(out["s.md"])},
    )  # fmt: skip
    assert result.code == 1, result.stderr  # --pre-existing fail: nothing hidden
    assert "baseline ab_shop_main: the newest ready build" in result.stderr
    tests = {entry["testId"]: entry for entry in result.json()}
    assert {t for t, e in tests.items() if e.get("preExisting")} == BEFORE
    assert {t for t, e in tests.items() if e.get("preExisting") is False} == NEW
    assert "passes on the baseline" in tests["t_coupon"]["baseline"]
    # JUnit: a property per test that ran on the baseline.
    props = {
        p.attrib["name"]: p.attrib["value"]
        for p in ET.parse(out["r.xml"]).getroot().iter("property")
    }
    flagged = {name.split(".")[0] for name, value in props.items() if name.endswith(".preExisting")}
    assert len(flagged) == 5
    assert sum(value == "true" for n, value in props.items() if n.endswith(".preExisting")) == 3
    # CTRF, Allure, HTML, the step summary, the events.
    ctrf = json.loads(out["r.ctrf.json"].read_text())["results"]["tests"]
    assert {t["testId"] for t in ctrf if t["extra"].get("preExisting")} == BEFORE
    tagged = set()
    for found in allure.glob("*-result.json"):
        data = json.loads(found.read_text())
        if {"name": "tag", "value": "pre-existing"} in data["labels"]:
            tagged.add(data["fullName"].rsplit(".", 1)[-1])
    assert tagged == BEFORE
    assert out["r.html"].read_text().count("<strong>pre-existing</strong>") == 3
    assert out["s.md"].read_text().count("**pre-existing**") == 3
    events = [json.loads(line) for line in out["e.jsonl"].read_text().splitlines()]
    judged = {e["testId"]: e["state"] for e in events if e["event"] == "baseline_judged"}
    assert judged == {**dict.fromkeys(BEFORE, "pre-existing"), **dict.fromkeys(NEW, "new")}
    finished = next(e for e in events if e["event"] == "job_finished")
    assert finished["counts"]["pre_existing"] == 3


@pytest.mark.parametrize(("mode", "code"), [("fail", 1), ("pass", 0), ("warn", 0)])
async def test_the_exit_code_follows_pre_existing(
    run_cli: RunCli, env: dict[str, str], mode: str, code: int
) -> None:
    """Main's build against the change's: each of its 3 failures fails there too."""
    result = await run_cli(
        *JOB, "--build", "ab_shop_main", "--baseline", "ab_shop_change", "--pre-existing", mode,
        env=env,
    )  # fmt: skip
    assert result.code == code, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "7 tests: 4 passed, 3 failed after 2 attempts (3 pre-existing: they fail on the "
        "baseline too)"
    )
    warned = [line for line in result.stderr.splitlines() if "(--pre-existing warn)" in line]
    assert len(warned) == (3 if mode == "warn" else 0)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("--baseline", "j_123"), "is not a build id"),
        (("--pre-existing", "pass"), "--pre-existing needs --baseline"),
        (("--baseline", "auto", "--baseline-ref", "my branch"), "is not a branch name"),
        (("--baseline", "auto", "--baseline-ref", "main\x1b[2J"), "is not a branch name"),
    ],
)
async def test_bad_input_is_refused_before_any_request(
    shop: FakeService, run_cli: RunCli, env: dict[str, str], argv: tuple[str, ...], said: str
) -> None:
    shop.reset_requests()
    result = await run_cli(*JOB, *argv, env=env)
    assert result.code == 2
    assert said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert shop.requests_for("run_project") == []


async def test_an_upload_in_ci_labels_its_build_for_auto(
    shop: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=300)
    ci = {
        "GITHUB_ACTIONS": "true", "GITHUB_REF_NAME": "main",
        "GITHUB_SHA": "4f1c2a9e0b7d3c5a8e6f1b2d4c6a8e0f2b4d6c8a",
    }  # fmt: skip
    env = {**env, "ASYNCCLIENT_API_KEY": "shop-edit-key", **ci}
    uploaded = await run_cli("upload", "p_shop", str(apk), "--quiet", env=env)
    assert uploaded.code == 0, uploaded.stderr
    got = await run_cli("--json", "builds", "get", uploaded.stdout.strip(), env=env)
    assert (
        got.json()["build"]["label"] == "ref=main commit=4f1c2a9e0b7d3c5a8e6f1b2d4c6a8e0f2b4d6c8a"
    )
    other = build_apk(tmp_path / "other.apk", package="com.example.shop", version_code=301)
    given = await run_cli("upload", "p_shop", str(other), "--label", "mine", "--quiet", env=env)
    assert given.code == 0, given.stderr
    got = await run_cli("--json", "builds", "get", given.stdout.strip(), env=env)
    assert got.json()["build"]["label"] == "mine"  # --label keeps working
