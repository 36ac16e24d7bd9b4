"""The CI loop of `asyncclient run ... --wait` and `watch`: --retry-failed, --fail-on-flaky,
--download-failed, --html, and `watch -`, against the emulator at speed 1000 (a 30 s run takes
30 ms). The HTML report is rendered by headless Chromium (Debian's chromium, which .ci/run
installs; in CI a missing browser fails the test)."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncclient.testing import FakeService

RunCli = Callable[..., Awaitable[Any]]
KEY = "ci-run"
BUILD = "ab_b1"
FAST = ("--interval", "0.01")
SCRIPT = "<script>document.title='pwned'</script>"
Seed = Callable[..., dict[str, Any]]


def seed(rerun_seed: Seed, broken: bool = True) -> dict[str, Any]:
    """The re-run seed (tests/conftest.py) with titles and reasons a report must escape."""
    return rerun_seed(
        broken=broken,
        tests={
            "t_pass": {"title": "Log in", "queuedSeconds": 1},
            "t_flaky": {
                "title": "Search <b>bold</b>",
                "queuedSeconds": 1,
                "flakyReason": f"Lost the device {SCRIPT}",
            },
            "t_broken": {
                "title": "Voucher",
                "queuedSeconds": 1,
                "requirements": [
                    {"title": "Total drops", "result": "failed", "reason": "Stayed <i>42</i>."}
                ],
            },
        },
    )


@pytest.fixture
async def svc(rerun_seed: Seed) -> AsyncIterator[FakeService]:
    async with FakeService(seed(rerun_seed), speed=1000.0) as service:
        yield service


@pytest.fixture
def env(svc: FakeService, tmp_path: Path) -> dict[str, str]:
    return {
        "ASYNCCLIENT_BASE_URL": svc.url,
        "ASYNCCLIENT_API_KEY": KEY,
        "ASYNCCLIENT_STATE_DIR": str(tmp_path / "state"),
    }


def runs_of(svc: FakeService, test_id: str) -> list[Any]:
    return [run for run in svc.backend.runs.values() if run.test.id == test_id]


def junit_cases(path: Path) -> dict[str, ET.Element]:
    return {case.get("classname", ""): case for case in ET.parse(path).getroot().iter("testcase")}


async def test_the_whole_ci_loop(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    junit, html, evidence = tmp_path / "r.xml", tmp_path / "r.html", tmp_path / "ev"
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--mode", "cold", "--wait",
        "--retry-failed", "2", "--junit", str(junit), "--html", str(html),
        "--download-failed", str(evidence), *FAST, env=env,
    )  # fmt: skip

    assert result.code == 1, result.stderr
    # Only what did not pass was run again, each time with the build and mode of the first.
    counts = {t: len(runs_of(svc, t)) for t in ("t_pass", "t_flaky", "t_broken")}
    assert counts == {"t_pass": 1, "t_flaky": 2, "t_broken": 3}
    for test_id in counts:
        assert {(run.mode, run.build.id) for run in runs_of(svc, test_id)} == {("cold", BUILD)}
    lines = result.stdout.splitlines()
    assert lines[-1] == (
        "3 tests: 1 passed, 1 flaky (passed on attempt 2), 1 failed after 3 attempts"
    )
    assert any("flaky: passed on attempt 2" in line for line in lines)
    assert re.search(r"j_\w+  t_flaky  re-run \(attempt 2\)", result.stderr)

    # JUnit: one testcase per test, in Surefire's convention.
    cases = junit_cases(junit)
    assert sorted(cases) == ["t_broken", "t_flaky", "t_pass"]
    assert [child.tag for child in cases["t_pass"]] == ["system-out"]
    flaky = cases["t_flaky"]
    assert flaky.find("failure") is None
    assert len(flaky.findall("flakyFailure")) == 1
    assert SCRIPT in (flaky.find("flakyFailure/stackTrace").text or "")  # type: ignore[union-attr]
    broken = cases["t_broken"]
    assert broken.find("failure") is not None
    assert len(broken.findall("rerunFailure")) == 2
    suite = ET.parse(junit).getroot()
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("3", "1")

    # Evidence: exactly the runs that did not pass, laid out as `download` does.
    not_passed = sorted(
        run.id for t in ("t_flaky", "t_broken") for run in runs_of(svc, t)
        if run.status_at(svc.backend.now()) != "passed"
    )  # fmt: skip
    assert len(not_passed) == 4
    assert sorted(p.name for p in evidence.iterdir()) == not_passed
    for run_id in not_passed:
        files = sorted(
            p.relative_to(evidence / run_id).as_posix() for p in (evidence / run_id).rglob("*.*")
        )
        assert files == [
            "screenshots/01.png",
            "screenshots/02.png",
            "screenshots/03.png",
            "video.mp4",
        ]
    page = html.read_text()
    for run_id in not_passed:
        assert f'src="ev/{run_id}/screenshots/01.png"' in page  # relative: they move together
    assert SCRIPT not in page
    assert "&lt;script&gt;" in page
    assert "HTML report:" in result.stderr


async def test_a_suite_whose_only_failure_was_flaky_passes_and_says_so(
    run_cli: RunCli, tmp_path: Path, rerun_seed: Seed
) -> None:
    async with FakeService(seed(rerun_seed, broken=False), speed=1000.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}
        summary = tmp_path / "summary.md"
        result = await run_cli(
            "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1", *FAST,
            env={**env, "GITHUB_STEP_SUMMARY": str(summary)},
        )  # fmt: skip
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "2 tests: 1 passed, 1 flaky (passed on attempt 2)"
    markdown = summary.read_text()
    assert "#### Flaky tests (1): passed on a re-run" in markdown
    assert "passed on attempt 2" in markdown


async def test_fail_on_flaky_fails_the_job(run_cli: RunCli, rerun_seed: Seed) -> None:
    async with FakeService(seed(rerun_seed, broken=False), speed=1000.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}
        result = await run_cli(
            "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
            "--fail-on-flaky", *FAST, env=env,
        )  # fmt: skip
    assert result.code == 1, result.stderr


async def test_json_carries_the_attempts_of_each_test(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--json", *FAST, env=env,
    )  # fmt: skip
    assert result.code == 1, result.stderr
    runs = {run["testId"]: run for run in result.json()}
    assert sorted(runs) == ["t_broken", "t_flaky", "t_pass"]
    assert runs["t_flaky"]["flaky"] is True
    assert [a["status"] for a in runs["t_flaky"]["attempts"]] == ["failed", "passed"]
    assert [a["outcome"] for a in runs["t_broken"]["attempts"]] == ["failed", "failed"]
    assert runs["t_broken"]["attempts"][0]["failedRequirements"][0]["reason"] == "Stayed <i>42</i>."
    assert runs["t_pass"]["flaky"] is False
    assert len(runs["t_pass"]["attempts"]) == 1


async def test_watch_reads_run_ids_from_standard_input(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started = await run_cli("run", "project", "p_ci", "--build", BUILD, env=env)
    assert started.code == 0, started.stderr
    monkeypatch.setattr("sys.stdin", io.StringIO(started.stdout))
    result = await run_cli("watch", "-", "--retry-failed", "1", *FAST, env=env)
    assert result.code == 1, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "3 tests: 1 passed, 1 flaky (passed on attempt 2), 1 failed after 2 attempts"
    )
    # The --json of `run` works as well, and a later job can collect the results.
    as_json = await run_cli("run", "test", "t_pass", "--json", env=env)
    monkeypatch.setattr("sys.stdin", io.StringIO(as_json.stdout))
    result = await run_cli("watch", "-", *FAST, env=env)
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "1 run: 1 passed"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "test", "t_pass", "--wait", "--retry-failed", "11"], "--retry-failed 11 is out"),
        (["run", "test", "t_pass", "--wait", "--fail-on-flaky"], "--fail-on-flaky needs"),
        (["run", "test", "t_pass", "--html", "r.html"], "--html need --wait"),
        (["run", "test", "t_pass", "--wait", "--html", "/dev/null/r.html"], "not a directory"),
        (["watch", "-", "-"], "give - once"),
    ],
)  # fmt: skip
async def test_bad_options_are_refused_before_any_request(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], argv: list[str], message: str
) -> None:
    result = await run_cli(*argv, env=env)
    assert result.code == 2
    assert message in result.stderr
    assert svc.requests == []


# --- the report in a real browser -----------------------------------------------------------------


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return found


def browse(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'chromium'}", *extra, page.as_uri(),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.linux(reason="Debian's Chromium, which .ci/run installs")
async def test_the_html_report_renders_in_chromium(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    html = tmp_path / "report.html"
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "2",
        "--html", str(html), "--download-failed", str(tmp_path / "ev"), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 1, result.stderr

    dom = browse(html, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    text = dom.stdout
    for title in ("Log in", "Search &lt;b&gt;bold&lt;/b&gt;", "Voucher"):
        assert title in text
    assert "flaky: passed on attempt 2" in text
    assert "Lost the device &lt;script&gt;" in text  # shown as text ...
    assert "<script>" not in text  # ... never an element
    assert "pwned" not in re.findall(r"<title>(.*?)</title>", text)[0]
    assert text.count('class="test ') == 3
    assert re.search(r'<img src="ev/j_\w+/screenshots/01.png"', text)
    # The trend of each test with two runs or more (no earlier history here: this job's own
    # attempts, outlined): t_flaky's 2 and t_broken's 3, as Chromium built the SVG.
    assert text.count("<svg") == 2
    assert text.count('class="run failed this-job"') == 4
    assert text.count('class="run passed this-job"') == 1

    shot = tmp_path / "report.png"
    taken = browse(html, tmp_path, "--window-size=400,1200", f"--screenshot={shot}")
    assert taken.returncode == 0, taken.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000


# --- the quarantine ------------------------------------------------------------------------------

XSD = Path(__file__).resolve().parent.parent / "data" / "surefire-test-report.xsd"


def quarantine_file(tmp_path: Path, until: str = "2099-12-31") -> Path:
    path = tmp_path / "quarantine.toml"
    path.write_text(
        "# The voucher service is down on weekends.\n"
        f'[[quarantine]]\ntest = "t_broken"\nreason = "voucher service down"\nuntil = {until}\n'
    )
    return path


async def test_a_quarantined_failing_test_runs_and_is_rerun_but_does_not_fail_the_job(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    junit, html = tmp_path / "junit.xml", tmp_path / "report.html"
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "2",
        "--quarantine", str(quarantine_file(tmp_path)), "--junit", str(junit),
        "--html", str(html), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert len(runs_of(svc, "t_broken")) == 3  # run, then re-run twice: still quarantined
    assert (
        "quarantined t_broken did not pass (voucher service down): it does not fail the job"
        in result.stdout
    )
    # JUnit: a skipped testcase with its attempts told, and the whole file valid against
    # Maven Surefire's own schema.
    import xmlschema

    xmlschema.XMLSchema(XSD).validate(str(junit))
    case = junit_cases(junit)["t_broken"]
    skipped = case.find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "quarantined: voucher service down"
    assert case.find("failure") is None
    assert case.findall("rerunFailure") == []
    out = case.findtext("system-out") or ""
    assert "its attempts:" in out
    assert out.count(" failed") >= 3
    suite = ET.parse(junit).getroot()
    assert (suite.get("failures"), suite.get("skipped")) == ("0", "1")
    # The HTML report: a section of its own.
    page = html.read_text()
    assert 'id="quarantined"' in page
    assert "voucher service down" in page


async def test_json_marks_the_quarantined_test_and_tells_its_history(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    result = await run_cli(
        "--json", "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--quarantine", str(quarantine_file(tmp_path)), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    by_test = {entry["testId"]: entry for entry in result.json()}
    assert by_test["t_broken"]["quarantined"] is True
    assert by_test["t_pass"]["quarantined"] is False
    # No earlier runs of t_broken on this service: its failure now is all there is.
    assert by_test["t_broken"]["history"] == {"verdict": "no earlier runs"}
    assert "history" not in by_test["t_pass"]


async def test_fail_on_quarantined_counts_them_again(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--quarantine", str(quarantine_file(tmp_path)), "--fail-on-quarantined",
        "--junit", str(junit), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 1  # t_flaky passed on its re-run: t_broken alone fails the job
    assert "4 tests" not in result.stdout
    assert "1 flaky" in result.stdout
    assert "it fails the job (--fail-on-quarantined)" in result.stdout
    assert junit_cases(junit)["t_broken"].find("failure") is not None


async def test_an_expired_entry_is_not_honoured_and_a_warning_names_it(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    path = quarantine_file(tmp_path, until="2020-01-31")
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--quarantine", str(path), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 1  # t_flaky passed on its re-run: t_broken alone fails the job
    assert "1 flaky" in result.stdout
    assert "quarantined t_broken" not in result.stdout
    warning = (
        f"warning: the quarantine of t_broken ended on 2020-01-31 ({path}): it is not "
        "honoured; extend its until or remove it"
    )
    assert warning in result.stderr.splitlines()


async def test_the_quarantine_is_read_before_any_run_starts(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    bad = tmp_path / "q.toml"
    bad.write_text('[[quarantine]]\ntest = "t_broken"\nreason = "x"\nuntil = "soon"\n')
    result = await run_cli(
        "run", "project", "p_ci", "--wait", "--quarantine", str(bad), *FAST, env=env
    )
    assert result.code == 2
    assert "until must be a TOML date such as 2026-12-31" in result.stderr
    assert svc.requests == []
    needs = await run_cli("run", "project", "p_ci", "--fail-on-quarantined", env=env)
    assert needs.code == 2
    assert "--fail-on-quarantined need --wait" in needs.stderr


async def test_the_quarantine_from_the_configuration_file(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    quarantine_file(tmp_path)
    (tmp_path / "asyncclient.toml").write_text(
        '[run]\nquarantine = "quarantine.toml"\nretry_failed = 1\n'
    )
    monkeypatch.chdir(tmp_path)
    result = await run_cli("run", "project", "p_ci", "--build", BUILD, "--wait", *FAST, env=env)
    assert result.code == 0, result.stderr
    assert "it does not fail the job" in result.stdout


@pytest.mark.linux(reason="Debian's Chromium, which .ci/run installs")
async def test_the_quarantine_section_renders_in_chromium(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    html = tmp_path / "report.html"
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--quarantine", str(quarantine_file(tmp_path)), "--html", str(html), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    dom = browse(html, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    section = dom.stdout.split('<section class="quarantined" id="quarantined">', 1)[1]
    section = section.split("</section>", 1)[0]
    assert "Quarantined (1): their failures do not fail the job" in section
    assert "Voucher" in section
    assert "quarantined: voucher service down" in section
    assert 'class="count-quarantined"' in dom.stdout


async def test_quarantined_tests_that_passed_are_shown_as_such(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "quarantine.toml"
    path.write_text(
        '[[quarantine]]\ntest = "t_pass"\nreason = "was flaky"\nuntil = 2099-01-01\n\n'
        '[[quarantine]]\ntest = "t_flaky"\nreason = "device loss"\nuntil = 2099-01-01\n'
    )
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--quarantine", str(path), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 1  # t_broken is not quarantined
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("quarantined t_pass passed (was flaky): prove the fix before lifting")
        for line in lines
    )
    assert "quarantined t_flaky passed on attempt 2 (device loss): still flaky" in lines


async def test_ctrf_and_the_cost_of_the_job(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    """--ctrf writes a valid CTRF report; the device time is in the summary, --json (each
    test's cost, the job's their sum) and the step summary."""
    import json

    import jsonschema

    ctrf, summary = tmp_path / "reports" / "ctrf.json", tmp_path / "summary.md"
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--ctrf", str(ctrf), "--json", *FAST, env={**env, "GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip
    assert result.code == 1, result.stderr
    schema = json.loads(
        (Path(__file__).parent.parent / "data" / "ctrf-schema-0.0.json").read_text()
    )
    document = json.loads(ctrf.read_text())
    jsonschema.Draft7Validator(schema).validate(document)
    tests = {t["testId"]: t for t in document["results"]["tests"]}
    assert tests["t_flaky"]["flaky"] is True
    assert tests["t_broken"]["retries"] == 1
    assert "CTRF report:" in result.stderr
    # Every run the job started: 3 first runs and 2 re-runs, as the emulator timed them.
    ran = [run for t in ("t_pass", "t_flaky", "t_broken") for run in runs_of(svc, t)]
    assert len(ran) == 5
    device = sum(entry["cost"]["deviceSeconds"] for entry in result.json())
    reruns = sum(entry["cost"]["rerunDeviceSeconds"] for entry in result.json())
    assert device > reruns > 0
    assert document["results"]["summary"]["extra"]["deviceSeconds"] == pytest.approx(device)
    assert document["results"]["summary"]["extra"]["runs"] == 5
    assert re.search(r"^device time .* of it re-runs\), .* queued, 5 runs$", result.stderr, re.M)
    assert "Device time" in summary.read_text()


async def test_allure_results_of_the_job(
    svc: FakeService, run_cli: RunCli, env: dict[str, str], tmp_path: Path
) -> None:
    """--allure-results writes a result per run (re-runs as the test's retries), the
    categories, the executor and the environment; it needs --wait and a folder."""
    import json

    folder = tmp_path / "allure-results"
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
        "--allure-results", str(folder), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 1, result.stderr
    assert f"Allure results: {folder}" in result.stderr
    found = [json.loads(p.read_text()) for p in folder.glob("*-result.json")]
    ran = {run.id for t in ("t_pass", "t_flaky", "t_broken") for run in runs_of(svc, t)}
    assert len(found) == len(ran) == 5
    flaky = [r for r in found if r["fullName"] == "p_ci.t_flaky"]
    assert len({r["historyId"] for r in flaky}) == 1
    assert sorted(r["status"] for r in flaky) == ["failed", "passed"]
    assert {p.name for p in folder.iterdir() if not p.name.endswith("-result.json")} == {
        "categories.json",
        "executor.json",
        "environment.properties",
    }
    without = await run_cli("run", "project", "p_ci", "--allure-results", "a", env=env)
    assert without.code == 2
    assert "--allure-results need --wait" in without.stderr
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    refused = await run_cli(
        "run", "project", "p_ci", "--wait", "--allure-results", str(a_file), env=env
    )
    assert refused.code == 2
    assert f"--allure-results {a_file} is a file: give a folder" in refused.stderr


async def test_ctrf_needs_wait_and_a_file_name(run_cli: RunCli, tmp_path: Path) -> None:
    env = {"ASYNCCLIENT_BASE_URL": "http://127.0.0.1:9", "ASYNCCLIENT_API_KEY": KEY}
    without = await run_cli("run", "project", "p_ci", "--ctrf", "c.json", env=env)
    assert without.code == 2
    assert "--ctrf need --wait" in without.stderr
    folder = await run_cli("run", "project", "p_ci", "--wait", "--ctrf", str(tmp_path), env=env)
    assert folder.code == 2
    assert "is a directory" in folder.stderr


async def test_runs_beyond_the_plan_are_counted_in_the_cost(run_cli: RunCli) -> None:
    """A project whose included runs are used up: the start of `run test` and of its re-run say
    overage, and the job's cost counts both."""
    seed = {
        "projects": [{"id": "p_over", "name": "p_over", "plan": "paid", "includedRuns": 0}],
        "keys": [{"key": KEY, "capability": "run", "projects": ["p_over"]}],
        "tests": [
            {"id": "t_over", "project": "p_over", "target": "web", "url": "https://shop.example",
             "queuedSeconds": 1, "durationSeconds": 10, "outcome": "failed"},
        ],
    }  # fmt: skip
    async with FakeService(seed, speed=1000.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}
        result = await run_cli(
            "run", "test", "t_over", "--wait", "--retry-failed", "1", "--json", *FAST, env=env
        )  # fmt: skip
    assert result.code == 1, result.stderr
    (entry,) = result.json()
    assert entry["cost"]["runs"] == 2
    assert entry["cost"]["overageRuns"] == 2
    assert entry["cost"]["deviceSeconds"] == pytest.approx(20.0, abs=0.5)
    assert "2 beyond the plan's included runs" in result.stderr


def fail_fast_seed() -> dict[str, Any]:
    web = {"project": "p_ff", "target": "web", "url": "https://shop.example", "queuedSeconds": 1}
    return {
        "projects": [{"id": "p_ff", "name": "p_ff", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": KEY, "capability": "run", "projects": ["p_ff"]}],
        "tests": [
            {"id": "t_fails", **web, "durationSeconds": 5, "outcome": "failed",
             "headline": "The cart total was wrong."},
            {"id": "t_long1", **web, "durationSeconds": 60, "outcome": "passed"},
            {"id": "t_long2", **web, "durationSeconds": 60, "outcome": "passed"},
        ],
    }  # fmt: skip


async def test_max_failures_stops_the_runs_still_going(run_cli: RunCli, tmp_path: Path) -> None:
    """--max-failures 1: the failing test (5 s) stops the two 60 s tests at once (the emulator
    holds them running, so they cannot end first however slow the machine); exit 1; both told
    as stopped by fail-fast."""
    junit = tmp_path / "junit.xml"
    async with FakeService(fail_fast_seed(), speed=20.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}
        with svc.hold("t_long1", "t_long2", state="running"):
            result = await run_cli(
                "run", "project", "p_ff", "--wait", "--max-failures", "1", "--junit",
                str(junit), *FAST, env=env,
            )  # fmt: skip
        statuses = {
            run.test.id: run.status_at(svc.backend.now()) for run in svc.backend.runs.values()
        }
    assert result.code == 1, result.stderr
    assert statuses == {"t_fails": "failed", "t_long1": "cancelled", "t_long2": "cancelled"}
    assert re.search(
        r"fail-fast: 1 test\(s\) did not pass \(t_fails; --max-failures 1\): stopped the 2 "
        r"run\(s\) still going: j_\w+ j_\w+",
        result.stderr,
    )
    assert result.stdout.count("stopped by fail-fast (--max-failures)") == 2
    cases = junit_cases(junit)
    for test_id in ("t_long1", "t_long2"):
        skipped = cases[test_id].find("skipped")
        assert skipped is not None
        assert (skipped.get("message") or "").startswith("stopped by fail-fast (--max-failures)")


async def test_max_failures_counts_a_test_after_its_re_runs_and_never_a_quarantined_one(
    run_cli: RunCli, tmp_path: Path
) -> None:
    quarantine = tmp_path / "quarantine.toml"
    import datetime

    until = (datetime.date.today() + datetime.timedelta(days=20)).isoformat()
    quarantine.write_text(f'[[quarantine]]\ntest = "t_fails"\nreason = "known"\nuntil = {until}\n')
    async with FakeService(fail_fast_seed(), speed=60.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}
        result = await run_cli(
            "run", "project", "p_ff", "--wait", "--max-failures", "1", "--retry-failed", "1",
            "--quarantine", str(quarantine), "--json", *FAST, env=env,
        )  # fmt: skip
        runs = [
            (run.test.id, run.status_at(svc.backend.now())) for run in svc.backend.runs.values()
        ]
    # The quarantined failure was re-run and never counted: nothing was stopped.
    assert result.code == 0, result.stderr
    assert sorted(runs) == [
        ("t_fails", "failed"), ("t_fails", "failed"), ("t_long1", "passed"), ("t_long2", "passed"),
    ]  # fmt: skip
    assert "fail-fast" not in result.stderr
    assert all("stoppedBy" not in entry for entry in result.json())


async def test_max_failures_is_checked_before_any_request(run_cli: RunCli) -> None:
    env = {"ASYNCCLIENT_BASE_URL": "http://127.0.0.1:9", "ASYNCCLIENT_API_KEY": KEY}
    zero = await run_cli("run", "project", "p_ff", "--wait", "--max-failures", "0", env=env)
    assert zero.code == 2
    assert "--max-failures 0 is out of range: give 1 or more" in zero.stderr
    without = await run_cli("run", "project", "p_ff", "--max-failures", "2", env=env)
    assert without.code == 2
    assert "--max-failures need --wait" in without.stderr


async def test_the_event_stream_and_the_cost_of_five_runs_of_60_s(
    run_cli: RunCli, tmp_path: Path, rerun_seed: Seed
) -> None:
    """3 tests of 60 s, 2 re-runs (t_flaky's, t_broken's): 300 device seconds, 120 of them
    re-runs, in the events, --json and the summary; every run told as it started, changed and
    finished, the job's end last."""
    import json

    sixty = {"durationSeconds": 60, "queuedSeconds": 2}
    seed60 = rerun_seed(tests=dict.fromkeys(("t_pass", "t_flaky", "t_broken"), sixty))
    events = tmp_path / "events" / "job.jsonl"
    async with FakeService(seed60, speed=1000.0) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}
        result = await run_cli(
            "run", "project", "p_ci", "--build", BUILD, "--wait", "--retry-failed", "1",
            "--events", str(events), "--json", *FAST, env=env,
        )  # fmt: skip
    assert result.code == 1, result.stderr
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert all({"event", "time"} <= set(line) for line in lines)
    kinds = [line["event"] for line in lines]
    assert kinds[:3] == ["run_started"] * 3
    assert kinds.count("rerun_started") == 2
    assert kinds.count("run_finished") == 5
    assert kinds[-1] == "job_finished"
    first = {line["runId"] for line in lines if line["event"] == "run_started"}
    finished = [line for line in lines if line["event"] == "run_finished"]
    assert all(line["durationSeconds"] == 60.0 for line in finished)
    assert sorted(line["attempt"] for line in finished) == [1, 1, 1, 2, 2]
    for line in lines:  # a run's status is told when it changes, never twice in a row
        assert line["event"] != "run_status" or line["status"]
    statuses = [(line["runId"], line["status"]) for line in lines if line["event"] == "run_status"]
    assert len(statuses) == len(set(statuses))
    end = lines[-1]
    assert (end["exitCode"], end["passed"]) == (1, False)
    assert (end["deviceSeconds"], end["rerunDeviceSeconds"], end["runs"]) == (300.0, 120.0, 5)
    assert end["counts"] == {"passed": 1, "flaky": 1, "failed": 1}
    assert len(first) == 3
    entries = result.json()
    assert sum(e["cost"]["deviceSeconds"] for e in entries) == 300.0
    assert sum(e["cost"]["rerunDeviceSeconds"] for e in entries) == 120.0
    assert "device time 5 min 00 s (2 min 00 s of it re-runs)" in result.stderr


async def test_events_on_standard_output(
    svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    import json

    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--events", "-", *FAST, env=env
    )  # fmt: skip
    assert result.code == 1, result.stderr
    # Standard output is the stream, JSON Lines only: the summary went to stderr.
    told = [json.loads(line) for line in result.stdout.splitlines()]
    assert "3 tests:" not in result.stdout
    assert "3 runs: 1 passed, 2 failed" in result.stderr
    assert told[0]["event"] == "run_started"
    assert told[-1]["event"] == "job_finished"
    refused = await run_cli(
        "run", "project", "p_ci", "--wait", "--events", "-", "--json", env=env
    )  # fmt: skip
    assert refused.code == 2
    assert "--events - and --json both write to standard output" in refused.stderr


async def test_hedge_copies_a_known_flaky_test_and_stops_the_copies_once_it_passes(
    rerun_seed: Seed, run_cli: RunCli, tmp_path: Path
) -> None:
    """--retry-strategy hedge: t_flaky's history says 50 % per run, so its run gets two copies
    at the start (3 runs in all, 1 + --retry-failed 2); the three are held running until the
    first is let go: it passes, the copies are stopped, and every report says so."""
    import asyncio
    import json

    import xmlschema

    history = [
        {"daysAgo": 1 + i / 10, "status": "failed" if i % 2 else "passed", "build": BUILD}
        for i in range(10)
    ]
    events, junit = tmp_path / "events.jsonl", tmp_path / "r.xml"
    async with FakeService(
        rerun_seed(tests={"t_flaky": {"flakyRuns": 0, "history": history}}), speed=1000.0
    ) as svc:
        env = {"ASYNCCLIENT_BASE_URL": svc.url, "ASYNCCLIENT_API_KEY": KEY}
        hold = svc.hold("t_flaky", state="running")
        job = asyncio.create_task(
            run_cli(
                "run",
                "project",
                "p_ci",
                "--build",
                BUILD,
                "--wait",
                "--json",
                "--retry-failed",
                "2",
                "--retry-strategy",
                "hedge",
                "--events",
                str(events),
                "--junit",
                str(junit),
                *FAST,
                env=env,
            )
        )
        for _ in range(5000):  # until its two copies are held beside its run (not a timing)
            if len(hold.run_ids) == 3 or job.done():
                break
            await asyncio.sleep(0.005)
        first = hold.run_ids[0]
        hold.release_run(first)
        result = await job
        hold.release()
    assert result.code == 1, result.stderr  # t_broken fails
    entries = {entry["testId"]: entry for entry in json.loads(result.stdout)}
    flaky = entries["t_flaky"]
    assert flaky["id"] == first
    assert flaky["flaky"] is False
    assert flaky["summary"]["outcome"] == "passed"
    kinds = sorted((a["kind"], a["status"]) for a in flaky["attempts"])
    assert kinds == [("copy", "cancelled"), ("copy", "cancelled"), ("run", "passed")]
    assert flaky["cost"]["copyRuns"] == 2
    assert flaky["cost"]["stoppedRuns"] == 2
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    names = [line["event"] for line in lines]
    assert names.count("copy_started") == 2
    assert names.count("copies_stopped") == 1
    stopped = next(line for line in lines if line["event"] == "copies_stopped")
    assert stopped["passedRunId"] == first
    assert len(stopped["stopped"]) == 2
    finished = [line for line in lines if line["event"] == "run_finished"]
    assert sum(1 for line in finished if line.get("stoppedBy")) == 2
    assert "stopped 2 other run(s) of it, not counted" in result.stderr
    assert "copies: 2 runs" in result.stderr
    # A copy is no attempt of its own: copy 1 and copy 2, never "attempt 2/3".
    said = [line for line in result.stderr.splitlines() if "known-flaky" in line]
    assert [line.split("  ")[-1] for line in said] == [
        "copy 1 of a known-flaky test", "copy 2 of a known-flaky test",
    ]  # fmt: skip
    xmlschema.XMLSchema(
        Path(__file__).parent.parent / "data" / "surefire-test-report.xsd"
    ).validate(str(junit))
    case = junit_cases(junit)["t_flaky"]
    assert [child.tag for child in case] == ["system-out"]  # passed: no failure, no flake


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--retry-strategy", "hedge"), "--retry-strategy hedge needs --retry-failed N"),
        (("--retry-failed", "1", "--hedge-target", "0.9"), "--hedge-target needs --retry-strategy"),
        (
            ("--retry-failed", "1", "--retry-strategy", "hedge", "--hedge-target", "1.5"),
            "--hedge-target 1.5 is out of range",
        ),
        (("--retry-failed", "1", "--retry-budget", "0"), "--retry-budget 0 is out of range"),
        (("--retry-budget", "5"), "--retry-budget needs --retry-failed N"),
    ],
)
async def test_retry_options_that_do_not_fit_are_refused_before_any_request(
    argv: tuple[str, ...], says: str, svc: FakeService, run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli("run", "project", "p_ci", "--wait", *argv, env=env)
    assert result.code == 2
    assert says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert svc.requests == []


async def test_the_report_model_is_built_once_per_job(
    svc: FakeService,
    run_cli: RunCli,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every report of a job (summary, --json, JUnit, CTRF, HTML, events) renders one model."""
    import asyncclient._reports.model as model

    built: list[str] = []
    real = model.suite_report

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(kwargs.get("name", ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "suite_report", counting)
    result = await run_cli(
        "run", "project", "p_ci", "--build", BUILD, "--wait", "--json", "--retry-failed", "1",
        "--junit", str(tmp_path / "r.xml"), "--ctrf", str(tmp_path / "r.json"),
        "--events", str(tmp_path / "e.jsonl"), *FAST, env=env,
    )  # fmt: skip
    assert result.code == 1, result.stderr
    assert built == ["p_ci"]
