"""The whole CI loop as one step, for the GitHub Action (`action.yml`) and the GitLab CI template:
upload, run the project, wait, re-run what failed, download the evidence, write the reports and
hand the numbers on (`python -m asyncclient.ci github|gitlab`); the exit code is `asyncclient
run`'s own. Its outputs, idempotency key and what it hands on: docs/guides/ci/."""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from asyncclient._core._checks import derived_key, is_id, switch
from asyncclient._values._bounds import digits
from asyncclient.failures import CATEGORIES_FILE

__all__ = ["Settings", "main", "run"]

EXIT_BAD_INPUT: Final = 2


class SettingError(ValueError):
    """A setting of the step that cannot be used: its message names it and the fix."""


@attrs.frozen
class Settings:
    """What the step does, from the action's inputs or the template's variables."""

    project: str
    apps: tuple[str, ...] = ()
    label: str = ""
    mode: str = ""
    retry_failed: int = 0
    retry_strategy: str = ""  # rounds, at-once or hedge ("": the command's default, rounds)
    retry_budget: str = ""  # minutes, checked by the command
    max_failures: int = 0  # 0: no fail-fast
    junit: str = ""
    ctrf: str = ""
    allure_results: str = ""
    html: str = ""
    download_failed: str = ""
    quarantine: str = ""
    timeout: str = ""
    profile: str = ""
    fail_on_flaky: bool = False
    rerun_known: bool = False  # re-run an app failure known on the same build (--rerun-known)
    baseline: str = ""  # a build or auto (--baseline)
    pre_existing: str = ""  # fail, pass or warn; "": fail
    reuse_passed: str = ""  # days, checked by the command
    new_test_runs: int = 0
    new_test_warn: bool = False
    key_prefix: str = ""  # the CI run and attempt, for the idempotency key
    job_index: str = ""  # the matrix leg (GitHub: ${{ strategy.job-index }}, given as an input)
    names: Mapping[str, str] = attrs.field(factory=dict)  # how each setting is named there


@attrs.frozen
class Tally:
    """The outcome of a suite, counted per test: each test is passed (on its first attempt),
    flaky (passed on a re-run), quarantined (did not pass, excused by the quarantine file) or
    failed (did not pass, or never ended)."""

    passed: int = 0
    flaky: int = 0
    failed: int = 0
    quarantined: int = 0
    reused: int = 0  # of the passed: reused from a pass on an identical build
    run_ids: tuple[str, ...] = ()
    device_seconds: float = 0.0  # every run of the job, re-runs included


# --- settings -------------------------------------------------------------------------------------


def _flag(value: str, name: str) -> bool:
    on = switch(value)
    if on is None:
        raise SettingError(f"{name} is {value!r}: give true or false")
    return on


def _count(value: str, name: str, what: str) -> int:
    """A whole number, 0 when empty; `what` says which in the message."""
    text = value.strip() or "0"
    if not digits(text):
        raise SettingError(f"{name} is {value!r}: give a whole number of {what}")
    return int(text)


def _days(value: str, name: str) -> str:
    """A number of days above 0 as written, empty when empty (the command checks its range)."""
    text = value.strip()
    try:
        days = float(text) if text else None
    except ValueError:
        days = None
        text = text or "?"
    if text and (days is None or not math.isfinite(days) or days <= 0):
        raise SettingError(f"{name} is {value!r}: give a number of days above 0, or leave it empty")
    return text


def _strategy(value: str, name: str) -> str:
    text = value.strip()
    if text and text not in ("rounds", "at-once", "hedge"):
        raise SettingError(f"{name} is {value[:40]!r}: give rounds, at-once or hedge")
    return text


def _minutes(value: str, name: str) -> str:
    """A number of minutes above 0 as written, empty when empty."""
    text = value.strip()
    try:
        minutes = float(text) if text else None
    except ValueError:
        minutes = None
        text = text or "?"
    if text and (minutes is None or not math.isfinite(minutes) or minutes <= 0):
        raise SettingError(
            f"{name} is {value[:40]!r}: give the minutes of device time re-runs may take "
            "(above 0), or leave it empty"
        )
    return text


def _key_part(value: str, name: str) -> str:
    text = value.strip()
    if text and not _KEY_PART.fullmatch(text):
        raise SettingError(
            f"{name} is {text[:80]!r}: use at most 120 letters, digits and . _ - : characters"
        )
    return text


_KEY_PART: Final = re.compile(r"[A-Za-z0-9._:\-]{1,120}")


def _pre_existing(value: str, name: str) -> str:
    value = value.strip()
    if value and value not in ("fail", "pass", "warn"):
        raise SettingError(f"{name} is {value!r}: give fail, pass or warn (or leave it empty)")
    return value


def _settings(
    get: Callable[[str], str], names: Mapping[str, str], key_prefix: str, label: str
) -> Settings:
    project = get("project").strip()
    if not project:
        raise SettingError(f"{names['project']} is not set: give the project's id (p_...)")
    own_key = _key_part(get("idempotency-key"), names["idempotency-key"])
    job_index = _key_part(get("job-index"), names["job-index"])
    if own_key:
        key_prefix = own_key
    elif job_index:
        key_prefix = f"{key_prefix}-leg{job_index}"
    apps = tuple(line.strip() for line in get("apps").splitlines() if line.strip())
    return Settings(
        project=project,
        apps=apps,
        label=get("label").strip() or label,
        mode=get("mode").strip(),
        retry_failed=_count(get("retry-failed"), names["retry-failed"], "re-runs (0 to 10)"),
        retry_strategy=_strategy(get("retry-strategy"), names["retry-strategy"]),
        retry_budget=_minutes(get("retry-budget"), names["retry-budget"]),
        max_failures=_count(get("max-failures"), names["max-failures"], "tests (1 or more)"),
        junit=get("junit").strip(),
        ctrf=get("ctrf").strip(),
        allure_results=get("allure-results").strip(),
        html=get("html").strip(),
        download_failed=get("download-failed").strip(),
        quarantine=get("quarantine").strip(),
        timeout=get("timeout").strip(),
        profile=get("profile").strip(),
        fail_on_flaky=_flag(get("fail-on-flaky"), names["fail-on-flaky"]),
        rerun_known=_flag(get("rerun-known"), names["rerun-known"]),
        baseline=get("baseline").strip(),
        pre_existing=_pre_existing(get("pre-existing"), names["pre-existing"]),
        reuse_passed=_days(get("reuse-passed"), names["reuse-passed"]),
        new_test_runs=_count(get("new-test-runs"), names["new-test-runs"], "repeats (0 to 20)"),
        new_test_warn=_flag(get("new-test-warn"), names["new-test-warn"]),
        key_prefix=key_prefix,
        job_index=job_index,
        names=names,
    )


SETTINGS: Final = (
    "project",
    "apps",
    "label",
    "mode",
    "retry-failed",
    "retry-strategy",
    "retry-budget",
    "max-failures",
    "junit",
    "ctrf",
    "allure-results",
    "html",
    "download-failed",
    "quarantine",
    "timeout",
    "profile",
    "fail-on-flaky",
    "rerun-known",
    "baseline",
    "pre-existing",
    "reuse-passed",
    "new-test-runs",
    "new-test-warn",
    "job-index",
    "idempotency-key",
)


def github_settings(environ: Mapping[str, str]) -> Settings:
    """The action's inputs, as action.yml hands them to this step (INPUT_<NAME>, upper case,
    dashes as underscores: INPUT_RETRY_FAILED)."""
    names = {name: f"the input {name}" for name in SETTINGS}

    def get(name: str) -> str:
        return environ.get("INPUT_" + name.upper().replace("-", "_"), "")

    attempt = environ.get("GITHUB_RUN_ATTEMPT", "1")
    prefix = f"gh-{environ.get('GITHUB_RUN_ID', 'local')}-{attempt}-{environ.get('GITHUB_JOB', '')}"
    return _settings(get, names, prefix, _label(environ, "GITHUB_SHA"))


def gitlab_settings(environ: Mapping[str, str]) -> Settings:
    """The template's variables: ASYNCCLIENT_<NAME> (ASYNCCLIENT_RETRY_FAILED, ...)."""
    names = {name: "ASYNCCLIENT_" + name.upper().replace("-", "_") for name in SETTINGS}

    def get(name: str) -> str:
        return environ.get(names[name], "")

    prefix = f"gl-{environ.get('CI_PIPELINE_ID', 'local')}-{environ.get('CI_JOB_ID', '')}"
    return _settings(get, names, prefix, _label(environ, "CI_COMMIT_SHA"))


def _label(environ: Mapping[str, str], commit: str) -> str:
    """The builds' label when none is set: `ref=BRANCH commit=SHA` (what `--baseline auto`
    reads), else the commit alone."""
    from asyncclient._core._ci_run import ci_run
    from asyncclient.failures.exonerate import ci_label

    run = ci_run(environ)
    return ci_label(run.ref, run.revision) or environ.get(commit, "")


# --- the loop -------------------------------------------------------------------------------------


def app_files(patterns: Sequence[str], name: str, cwd: Path) -> list[str]:
    """Each line a path or a glob (`**` included), relative to `cwd`; one that names no file
    is an error that says which."""
    files: list[str] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            found = sorted(glob.glob(pattern, root_dir=cwd, recursive=True))
            found = [f for f in found if (cwd / f).is_file()]
            if not found:
                raise SettingError(f"{name}: {pattern} matched no file (in {cwd})")
            files.extend(found)
        elif not (cwd / pattern).is_file():
            raise SettingError(f"{name}: {pattern} is not a file (in {cwd})")
        else:
            files.append(pattern)
    return list(dict.fromkeys(files))


def idempotency_key(settings: Settings, build_ids: Sequence[str], cwd: Path | None = None) -> str:
    """The CI run, attempt and leg, and a digest of everything that decides what is started
    (see the module doc)."""
    quarantine = ""
    if settings.quarantine:
        path = (cwd or Path.cwd()) / settings.quarantine
        try:
            quarantine = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            quarantine = "unreadable"  # the run command says why, in one line
    # The categories file where the job runs decides which failures re-run.
    categories = ""
    found = (cwd or Path.cwd()) / CATEGORIES_FILE
    if found.exists():
        try:
            categories = hashlib.sha256(found.read_bytes()).hexdigest()
        except OSError:
            categories = "unreadable"  # the run command says why, in one line
    what = json.dumps(
        {
            "project": settings.project,
            "builds": sorted(build_ids),
            "mode": settings.mode,
            "retryFailed": settings.retry_failed,
            "retryStrategy": settings.retry_strategy,
            "retryBudget": settings.retry_budget,
            "maxFailures": settings.max_failures,
            "quarantine": [settings.quarantine, quarantine],
            "timeout": settings.timeout,
            "profile": settings.profile,
            "failOnFlaky": settings.fail_on_flaky,
            "rerunKnown": settings.rerun_known,
            "categories": categories,
            "reusePassed": settings.reuse_passed,
            "newTestRuns": settings.new_test_runs,
            "newTestWarn": settings.new_test_warn,
        },
        sort_keys=True,
    )
    # The whole's digest first, for services keeping a prefix.
    return derived_key(settings.key_prefix, what, label=settings.key_prefix)


def run_arguments(
    settings: Settings, build_ids: Sequence[str], cwd: Path | None = None
) -> list[str]:
    """`asyncclient run project ...` for these settings."""
    argv = ["run", "project", settings.project, "--wait", "--json"]
    for build in build_ids:
        argv += ["--build", build]
    argv += ["--idempotency-key", idempotency_key(settings, build_ids, cwd)]
    options = (
        ("--mode", settings.mode),
        ("--junit", settings.junit),
        ("--ctrf", settings.ctrf),
        ("--allure-results", settings.allure_results),
        ("--html", settings.html),
        ("--download-failed", settings.download_failed),
        ("--quarantine", settings.quarantine),
        ("--profile", settings.profile),
    )
    argv += [part for flag, value in options if value for part in (flag, value)]
    if settings.retry_failed:
        argv += ["--retry-failed", str(settings.retry_failed)]
        if settings.retry_strategy:
            argv += ["--retry-strategy", settings.retry_strategy]
        if settings.retry_budget:
            argv += ["--retry-budget", settings.retry_budget]
        if settings.rerun_known:
            argv.append("--rerun-known")
    if settings.baseline:
        argv += ["--baseline", settings.baseline]
        if settings.pre_existing:
            argv += ["--pre-existing", settings.pre_existing]
    if settings.max_failures:
        argv += ["--max-failures", str(settings.max_failures)]
    if settings.timeout:
        # A CI job that gives up stops what it started.
        argv += ["--timeout", settings.timeout, "--stop-on-timeout"]
    if settings.fail_on_flaky:
        argv.append("--fail-on-flaky")
    if settings.reuse_passed:
        argv += ["--reuse-passed", settings.reuse_passed]
    if settings.new_test_runs:
        argv += ["--new-test-runs", str(settings.new_test_runs)]
        if settings.new_test_warn:
            argv.append("--new-test-warn")
    return argv


def tally(runs: Any) -> Tally:
    """Count the tests of `run project --wait --json`'s answer (one entry per test, its final
    run, with `flaky`, `quarantined` and the outcome in `summary`)."""
    counts = {"passed": 0, "flaky": 0, "failed": 0, "quarantined": 0, "reused": 0}
    ids: list[str] = []
    device = 0.0
    for run in runs if isinstance(runs, list) else []:
        if not isinstance(run, dict):
            continue
        cost = run.get("cost")
        seconds = cost.get("deviceSeconds") if isinstance(cost, dict) else None
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            device += max(0.0, float(seconds)) if math.isfinite(seconds) else 0.0
        run_id = run.get("id")
        ids.append(str(run_id) if is_id("run", run_id) else "")
        summary = run.get("summary")
        if not isinstance(summary, dict):
            summary = {}
        outcome = summary.get("outcome") or run.get("status")
        if outcome == "passed":
            counts["flaky" if run.get("flaky") else "passed"] += 1
            if isinstance(run.get("reused"), dict):
                counts["reused"] += 1
        elif run.get("quarantined"):
            counts["quarantined"] += 1
        else:
            counts["failed"] += 1
    return Tally(run_ids=tuple(i for i in ids if i), device_seconds=device, **counts)


Command = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _asyncclient(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """The asyncclient command of this Python; its stdout captured, its stderr the job's."""
    # -I: the checkout's asyncclient/ never runs in our place.
    return subprocess.run(
        [sys.executable, "-I", "-m", "asyncclient", *argv],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )


def run(
    settings: Settings, write: Callable[[Mapping[str, str]], None], command: Command = _asyncclient
) -> int:
    """The loop (see the module doc); `write` gets the outputs, also when the suite failed.
    Returns the exit code of the command that ended it."""
    cwd = Path.cwd()
    outputs = {
        "build-ids": "",
        "run-ids": "",
        "outcome": "failed",
        "passed": "0",
        "failed": "0",
        "flaky": "0",
        "quarantined": "0",
        "reused": "0",
        "device-minutes": "0.0",
        "junit": "",
        "ctrf": "",
        "allure-results": "",
        "html": "",
    }
    try:
        files = app_files(settings.apps, settings.names.get("apps", "apps"), cwd)
    except SettingError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        write(outputs)
        return EXIT_BAD_INPUT
    build_ids: list[str] = []
    if files:
        argv = ["upload", settings.project, *files]
        if settings.label:
            argv += ["--label", settings.label]
        if settings.profile:
            argv += ["--profile", settings.profile]
        uploaded = command(argv)
        # Only ids the API could have made reach the outputs.
        build_ids = [word for word in uploaded.stdout.split() if is_id("build", word)]
        outputs["build-ids"] = " ".join(build_ids)
        if uploaded.returncode != 0:
            write(outputs)
            return uploaded.returncode
    finished = command(run_arguments(settings, build_ids, cwd))
    try:
        answer = json.loads(finished.stdout) if finished.stdout.strip() else []
    except ValueError:
        answer = []
    counted = tally(answer)
    outputs.update(
        {
            "run-ids": " ".join(counted.run_ids),
            "outcome": "passed" if finished.returncode == 0 else "failed",
            "passed": str(counted.passed),
            "failed": str(counted.failed),
            "flaky": str(counted.flaky),
            "quarantined": str(counted.quarantined),
            "reused": str(counted.reused),
            "device-minutes": f"{counted.device_seconds / 60:.1f}",
            "junit": settings.junit if settings.junit and (cwd / settings.junit).is_file() else "",
            "ctrf": settings.ctrf if settings.ctrf and (cwd / settings.ctrf).is_file() else "",
            "allure-results": (
                settings.allure_results
                if settings.allure_results and (cwd / settings.allure_results).is_dir()
                else ""
            ),
            "html": settings.html if settings.html and (cwd / settings.html).is_file() else "",
        }
    )
    write(outputs)
    return finished.returncode


def github_output_text(outputs: Mapping[str, str], token: str | None = None) -> str:
    """The outputs in GitHub's multi-line form, `name<<DELIMITER`, value, `DELIMITER`, with a
    random delimiter that no value holds: a value with new lines cannot forge another output."""
    chunks = []
    for name, value in outputs.items():
        delimiter = f"ASYNCCLIENT_{token or secrets.token_hex(16)}"
        while delimiter in value:
            delimiter = f"ASYNCCLIENT_{secrets.token_hex(16)}"
        chunks.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
    return "".join(chunks)


def github_output(environ: Mapping[str, str]) -> Callable[[Mapping[str, str]], None]:
    """Appends the outputs to the file GITHUB_OUTPUT names (github_output_text)."""

    def write(outputs: Mapping[str, str]) -> None:
        path = environ.get("GITHUB_OUTPUT")
        if not path:
            return
        with open(path, "a", encoding="utf-8") as out:
            out.write(github_output_text(outputs))

    return write


DOTENV_LIMIT: Final = 5120
"""GitLab's default size limit of a dotenv report, in bytes; the file is kept under it."""
OUTPUTS_FILE: Final = "asyncclient-outputs.json"
_DOTENV_VALUE: Final = re.compile(r"[A-Za-z0-9_.\- ]*")


def gitlab_dotenv_text(outputs: Mapping[str, str], spill: Path | None = None) -> str:
    """The outputs as dotenv lines (`ASYNCCLIENT_BUILD_IDS=...`) under GitLab's limit: each
    value one line of id characters (anything else is left out), and the id lists that
    would pass the limit written to `spill` (JSON) instead, which ASYNCCLIENT_OUTPUTS_FILE
    names. The report paths stay out: ASYNCCLIENT_JUNIT and _HTML are the template's inputs,
    and a later job that extends it again must not get them changed by this one."""
    values = {
        f"ASYNCCLIENT_{name.upper().replace('-', '_')}": value
        for name, value in outputs.items()
        if name not in ("junit", "ctrf", "allure-results", "html")
        and _DOTENV_VALUE.fullmatch(value)
    }
    text = "".join(f"{key}={value}\n" for key, value in values.items())
    if len(text.encode()) <= DOTENV_LIMIT - 200 or spill is None:
        return text
    spilled = {
        k: v for k, v in values.items() if k in ("ASYNCCLIENT_BUILD_IDS", "ASYNCCLIENT_RUN_IDS")
    }
    data = json.dumps(
        {k.removeprefix("ASYNCCLIENT_").lower(): v.split() for k, v in spilled.items()}
    )
    spill.write_text(data + "\n", encoding="utf-8")
    kept = {k: v for k, v in values.items() if k not in spilled}
    kept["ASYNCCLIENT_OUTPUTS_FILE"] = spill.name
    return "".join(f"{key}={value}\n" for key, value in kept.items())


def gitlab_output(path: Path) -> Callable[[Mapping[str, str]], None]:
    """Writes the outputs as a dotenv file (gitlab_dotenv_text, for `reports: dotenv`)."""

    def write(outputs: Mapping[str, str]) -> None:
        text = gitlab_dotenv_text(outputs, path.with_name(OUTPUTS_FILE))
        partial = path.with_name(path.name + ".part")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)

    return write


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m asyncclient.ci github|gitlab`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in (["github"], ["gitlab"]):
        print("usage: python -m asyncclient.ci github|gitlab", file=sys.stderr)
        return EXIT_BAD_INPUT
    from asyncclient._core._extras import require
    from asyncclient.errors import MissingExtraError

    environ = os.environ
    try:
        # The step needs the cli extra: checked before sending.
        require("the CI step (python -m asyncclient.ci)", "cli")
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    try:
        if args == ["github"]:
            settings = github_settings(environ)
            write = github_output(environ)
        else:
            settings = gitlab_settings(environ)
            write = gitlab_output(Path(environ.get("ASYNCCLIENT_DOTENV", "asyncclient.env")))
    except SettingError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    return run(settings, write)


if __name__ == "__main__":
    sys.exit(main())
