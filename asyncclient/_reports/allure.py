"""Allure 2 results of a suite (`--allure-results DIR`): a result per run, a test's runs under
one historyId (the last its result, the others its retries), quarantined tests muted,
`categories.json` from the failure causes, `executor.json`, `environment.properties`. The
service's text through the sanitiser, cut to FIELD_LIMIT; the evidence linked, not copied.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from asyncclient._core._untrusted import clip, json_text, line
from asyncclient._local._files import write_atomically
from asyncclient._reports.model import Attempt, SuiteReport, TestReport
from asyncclient._version import __version__

__all__ = ["FIELD_LIMIT", "allure_results", "executor", "history_id", "write_allure_results"]

FIELD_LIMIT: Final = 2000
"""The longest message, trace, label, parameter or link (in characters) written; longer ones
are cut, ending in an ellipsis."""

# The report model's outcome of a run, in Allure's words.
_STATUS: Final = {
    "passed": "passed",
    "failed": "failed",
    "error": "broken",
    "cancelled": "skipped",
    "not_final": "unknown",
}
# Allure's defaults, after ours.
_DEFAULT_CATEGORIES: Final = (
    {"name": "Product defects", "matchedStatuses": ["failed"]},
    {"name": "Test defects", "matchedStatuses": ["broken"]},
)


def _text(value: object, limit: int = FIELD_LIMIT) -> str:
    return clip(line(value), limit)


def _whole_words(value: object, limit: int) -> str:
    """`value` on one line, at most `limit` characters, cut after a whole word (with "…")."""
    text = line(value)
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def history_id(test_id: str) -> str:
    """The test's id in Allure's history: the same in every job that runs the test."""
    return hashlib.md5(f"asyncclient:{test_id}".encode(), usedforsecurity=False).hexdigest()


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else round(moment.timestamp() * 1000)


def _message(attempt: Attempt) -> str:
    return _text(attempt.message)


def _final_message(test: TestReport) -> str:
    message = _message(test.final)
    if test.fail_fast:
        return _text(f"stopped by fail-fast (--max-failures); {message}")
    return message


def _times(attempt: Attempt, now: int) -> tuple[int, int]:
    run = attempt.run
    start = _ms(run.started_at) or _ms(run.created_at) or now
    stop = _ms(run.finished_at) or max(start, now)
    return start, max(start, stop)


def _attachments(
    attempt: Attempt,
    saved: Mapping[str, Sequence[str]],
    base: Path | None,
    directory: Path,
    linked: dict[str, str],
) -> list[dict[str, str]]:
    """The attempt's downloaded files, each linked into `directory` once (`linked`: path ->
    the name given there)."""
    found = []
    for relative in saved.get(attempt.id, ()):
        path = (base or Path()) / relative
        if not path.is_file():
            continue
        name = linked.get(str(path))
        if name is None:
            name = f"{uuid.uuid4()}-attachment{path.suffix[:16]}"
            _link(path, directory / name)
            linked[str(path)] = name
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        found.append({"name": _text(path.name, 200), "source": name, "type": kind})
    return found


def _link(source: Path, target: Path) -> None:
    """`target` names `source`: a hard link, else a symbolic one (another file system), else
    (neither allowed, as for a Windows user without the symlink right) a copy."""
    try:
        os.link(source, target)
        return
    except OSError:
        pass
    try:
        os.symlink(source.resolve(), target)
    except OSError:
        shutil.copyfile(source, target)


def _result(
    test: TestReport,
    attempt: Attempt,
    suite: str,
    times: tuple[int, int],
    attachments: list[dict[str, str]],
) -> dict[str, Any]:
    final = attempt is test.final
    run = attempt.run
    status = _STATUS.get(attempt.outcome, "unknown")
    details: dict[str, Any] = {}
    if status != "passed":
        details["message"] = _final_message(test) if final else _message(attempt)
        trace = "\n".join(_text(check.line, 500) for check in attempt.checks)
        if trace:
            details["trace"] = clip(trace, FIELD_LIMIT)
    if final and test.quarantine is not None:
        details["muted"] = True
    if final and test.flaky:
        details["flaky"] = True
    labels = [
        {"name": "suite", "value": _text(suite, 200)},
        {"name": "framework", "value": "asyncclient"},
    ]
    if run.project_id and run.project_id != suite:  # `run test` and `watch`: under the project
        labels.append({"name": "parentSuite", "value": _text(run.project_id, 200)})
    if run.mode:
        labels.append({"name": "tag", "value": f"mode:{_text(run.mode, 100)}"})
    if test.quarantine is not None:
        labels.append({"name": "tag", "value": "quarantined"})
    if attempt.reused is not None:
        labels.append({"name": "tag", "value": "reused"})
    if final and test.cause is not None:
        labels.append({"name": "tag", "value": f"cause:{_text(test.cause.label, 200)}"})
    if final and test.pre_existing:
        labels.append({"name": "tag", "value": "pre-existing"})
    parameters = [
        {"name": "build", "value": _text(run.build_id or "", 200)},
        {"name": "mode", "value": _text(run.mode or "", 100)},
    ]
    result: dict[str, Any] = {
        "uuid": str(uuid.uuid4()),
        "historyId": history_id(test.test_id),
        "testCaseId": history_id(test.test_id),
        "fullName": _text(f"{suite}.{test.test_id}", 400),
        "name": _text(test.title or test.test_id, 400),
        "status": status,
        "statusDetails": details,
        "stage": "finished",
        "start": times[0],
        "stop": times[1],
        "labels": labels,
        "parameters": parameters,
        "links": [],
        "attachments": attachments,
        "steps": [],
    }
    if attempt.safe_link:
        result["links"].append({"name": "run", "url": _text(attempt.safe_link), "type": "link"})
    if test.quarantine is not None and final:
        result["description"] = _text(f"quarantined: {test.quarantine}")
    elif test.baseline and final:
        said = "pre-existing: " if test.pre_existing else "baseline: "
        result["description"] = _text(said + test.baseline)
    return result


def _quoted(text: str) -> str:
    """`text` as a Java regex that matches it alone (quoted, an E-quote inside kept)."""
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E"


def _categories(report: SuiteReport, finals: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each failure cause of the job (its category, then what its failures said) as a category
    matching its failures' messages (quoted for Java's regex), then Allure's defaults."""
    found: dict[str, set[str]] = {}
    for cause in report.causes:
        messages = {finals[test_id] for test_id in cause.tests if test_id in finals}
        if messages:
            said = cause.example.headline or cause.example.status
            name = _whole_words(f"{cause.category_name or cause.label}: {said}", 200)
            found.setdefault(name, set()).update(messages)
    categories: list[dict[str, Any]] = [
        {
            "name": name,
            "matchedStatuses": ["failed", "broken"],
            "messageRegex": "|".join(_quoted(message) for message in sorted(found[name])),
        }
        for name in sorted(found)
    ]
    return [*categories, *_DEFAULT_CATEGORIES]


def executor(environ: Mapping[str, str]) -> dict[str, Any]:
    """The CI run for executor.json: GitHub Actions, GitLab CI, else the machine."""
    from asyncclient._core._ci_run import ci_run

    run = ci_run(environ)
    if run.system == "github":
        name, build_url = f"{run.pipeline} #{run.run_number}", run.run_url
    elif run.system == "gitlab":
        name, build_url = f"{run.job} #{run.run_number}", run.job_url or run.run_url
    else:
        return {"name": "asyncclient", "type": "asyncclient", "buildName": "local"}
    found: dict[str, Any] = {
        "name": run.title,
        "type": run.system,
        "url": run.server,
        "buildName": name.strip(),
        "buildUrl": build_url,
        "buildOrder": run.build_order,  # a Java long, whatever the CI says
    }
    return {key: value for key, value in found.items() if value is not None and value != ""}


def _properties(values: Mapping[str, str]) -> str:
    """Java properties text: each key and value escaped as java.util.Properties reads them."""

    def escape(text: str, key: bool) -> str:
        out = []
        for index, char in enumerate(text):
            if char in "\\=:#!" or (char == " " and (key or index == 0)):
                out.append("\\" + char)
            elif ord(char) < 0x20 or ord(char) > 0x7E:
                out.append(f"\\u{ord(char):04x}")
            else:
                out.append(char)
        return "".join(out)

    return "".join(f"{escape(k, True)}={escape(v, False)}\n" for k, v in values.items())


def allure_results(
    report: SuiteReport,
    directory: Path,
    *,
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> dict[str, bytes]:
    """The files of the results folder (name -> bytes), the evidence linked into `directory`
    as it goes."""
    at = round((now or datetime.now(UTC)).timestamp() * 1000)
    base = Path(evidence_dir) if evidence_dir is not None else None
    saved = evidence or {}
    linked: dict[str, str] = {}
    files: dict[str, bytes] = {}
    finals: dict[str, str] = {}

    def add(result: dict[str, Any]) -> None:
        text = json_text(json.dumps(result, ensure_ascii=False))
        files[f"{result['uuid']}-result.json"] = text.encode("utf-8")

    for test in report.tests:
        counted = [a for a in test.attempts if not a.stopped or a is test.final]
        final_times = _times(test.final, at)
        for attempt in counted:
            start, stop = _times(attempt, at)
            if attempt is not test.final and start >= final_times[0]:
                # Allure takes the last-started run as the verdict.
                start = final_times[0] - 1
                stop = min(stop, final_times[1])
            attachments = _attachments(attempt, saved, base, directory, linked)
            add(_result(test, attempt, report.name, (start, max(start, stop)), attachments))
        if test.final.outcome != "passed":
            finals[test.test_id] = _final_message(test)
    for test_id, reason in report.skipped:
        add(
            {
                "uuid": str(uuid.uuid4()),
                "historyId": history_id(test_id),
                "testCaseId": history_id(test_id),
                "fullName": _text(f"{report.name}.{test_id}", 400),
                "name": _text(test_id, 400),
                "status": "skipped",
                "statusDetails": {"message": _text(reason or "not started")},
                "stage": "finished",
                "start": at,
                "stop": at,
                "labels": [
                    {"name": "suite", "value": _text(report.name, 200)},
                    {"name": "framework", "value": "asyncclient"},
                ],
            }
        )
    files["categories.json"] = json_text(
        json.dumps(_categories(report, finals), ensure_ascii=False, indent=2)
    ).encode("utf-8")
    files["executor.json"] = json.dumps(
        executor(os.environ if environ is None else environ), indent=2
    ).encode("utf-8")
    files["environment.properties"] = _properties(
        {
            "suite": _text(report.name, 200),
            "asyncclient": __version__,
            "outcome": "passed" if report.passed else "failed",
            "counts": _text(report.counts, 400),
        }
    ).encode("ascii")
    return files


def write_allure_results(
    directory: str | os.PathLike[str],
    report: SuiteReport,
    *,
    evidence: Mapping[str, Sequence[str]] | None = None,
    evidence_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write allure_results() into `directory` (made if missing), each file whole (a temp file
    renamed); files already there (earlier jobs' results, `history/`) are left as they are."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in allure_results(
        report, folder, evidence=evidence, evidence_dir=evidence_dir
    ).items():
        write_atomically(folder / name, data)
    return folder
