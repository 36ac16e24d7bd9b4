"""Allure results of a job (asyncclient._reports.allure), read back as Allure reads them and
rendered by Allure's own command line (`allure generate`, the npm package `.ci/run` installs,
on Java): the counts the job reported, the retries, the categories, a trend across two jobs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
from allure_support import generate
from report_support import run as timed_run

from asyncclient._reports import allure as _allure
from asyncclient._reports import model as _model
from asyncclient.models import Run
from asyncclient.reruns import Attempts, SuitePolicy, SuiteResult
from asyncclient.spend import Reuse

SHA = "a" * 64


def run(run_id: str, test_id: str, status: str, *, at: float = 0, **fields: Any) -> Run:
    """A final run of 60 s (tests/reports/test_model.py's) in project p_shop, build ab_1."""
    return timed_run(
        run_id, test_id, status, at=at, project_id="p_shop", build_id="ab_1", mode="auto", **fields
    )


def job(at: float = 0) -> SuiteResult:
    """A passed, a flaky, a failed (twice), a quarantined and a reused test."""
    reuse = Reuse("t_reused", "j_r", "j_old", None, "ab_0", SHA, None, 20.0)
    return SuiteResult(
        (
            Attempts("t_ok", (run("j_1", "t_ok", "passed", at=at),)),
            Attempts(
                "t_flaky",
                (
                    run("j_2", "t_flaky", "failed", at=at, headline="Login button missing"),
                    run("j_3", "t_flaky", "passed", at=at + 70),
                ),
            ),
            Attempts(
                "t_failed",
                (
                    run("j_4", "t_failed", "failed", at=at, headline="Checkout total wrong"),
                    run("j_5", "t_failed", "failed", at=at + 70, headline="Checkout total wrong"),
                ),
            ),
            Attempts("t_quarantined", (run("j_6", "t_quarantined", "error", at=at),)),
            Attempts("t_reused", (run("j_r", "t_reused", "cancelled", at=at),), reused=reuse),
        ),
        SuitePolicy(quarantined={"t_quarantined": "crashes on the old emulator"}),
    )


def results(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*-result.json"))]


def test_a_result_per_run_the_runs_of_a_test_sharing_its_history_id(tmp_path: Path) -> None:
    report = _model.suite_report(job(), name="p_shop")
    _allure.write_allure_results(tmp_path, report)
    found = results(tmp_path)
    by_test: dict[str, list[dict[str, Any]]] = {}
    for result in found:
        by_test.setdefault(result["fullName"].split(".", 1)[1], []).append(result)
    assert {name: len(runs) for name, runs in by_test.items()} == {
        "t_ok": 1, "t_flaky": 2, "t_failed": 2, "t_quarantined": 1, "t_reused": 1,
    }  # fmt: skip
    for test_id, runs in by_test.items():
        assert {r["historyId"] for r in runs} == {_allure.history_id(test_id)}
    # The verdict is the run that started last: what Allure shows as the test's result.
    flaky = sorted(by_test["t_flaky"], key=lambda r: r["start"])
    assert [r["status"] for r in flaky] == ["failed", "passed"]
    assert flaky[-1]["statusDetails"] == {"flaky": True}
    assert flaky[0]["statusDetails"]["message"] == "Login button missing"
    quarantined = by_test["t_quarantined"][0]
    assert quarantined["status"] == "broken"  # an error keeps its status
    assert quarantined["statusDetails"]["muted"] is True
    assert {"name": "tag", "value": "quarantined"} in quarantined["labels"]
    reused = by_test["t_reused"][0]
    assert reused["status"] == "passed"
    assert {"name": "tag", "value": "reused"} in reused["labels"]
    ok = by_test["t_ok"][0]
    assert {"name": "suite", "value": "p_shop"} in ok["labels"]
    assert "parentSuite" not in {label["name"] for label in ok["labels"]}  # the suite itself
    assert ok["parameters"] == [
        {"name": "build", "value": "ab_1"},
        {"name": "mode", "value": "auto"},
    ]
    assert ok["links"] == [{"name": "run", "url": "https://svc.example/runs/j_1", "type": "link"}]
    # The same in every job: the test id's, whatever else changed.
    assert _allure.history_id("t_ok") == hashlib.md5(b"asyncclient:t_ok").hexdigest()


def test_the_services_text_is_one_safe_bounded_line_and_only_web_links_are_kept(
    tmp_path: Path,
) -> None:
    hostile = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\n::error::pwned " + "x" * 5000
    bad = attrs.evolve(run("j_9", "t_bad", "failed", headline=hostile), link="javascript:x")
    report = _model.suite_report(SuiteResult((Attempts("t_bad", (bad,)),)), name="p\u202eshop")
    _allure.write_allure_results(tmp_path, report)
    text = next(tmp_path.glob("*-result.json")).read_text()
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\u202e" not in text
    result = json.loads(text)
    message = result["statusDetails"]["message"]
    assert "\n" not in message
    assert len(message) == _allure.FIELD_LIMIT
    assert message.endswith("\u2026")
    assert result["links"] == []
    properties = (tmp_path / "environment.properties").read_text()
    # The sanitiser shows the override as text (`\u202e`), its backslash escaped as Java reads.
    assert properties.isascii()
    assert "suite=p\\\\u202eshop" in properties


def test_categories_from_the_causes_then_allures_defaults(tmp_path: Path) -> None:
    report = _model.suite_report(job(), name="p_shop")
    assert report.causes  # the job's failures grouped by cause
    _allure.write_allure_results(tmp_path, report)
    categories = json.loads((tmp_path / "categories.json").read_text())
    assert categories[-2:] == [
        {"name": "Product defects", "matchedStatuses": ["failed"]},
        {"name": "Test defects", "matchedStatuses": ["broken"]},
    ]
    ours = categories[:-2]
    assert any("\\QCheckout total wrong\\E" in c["messageRegex"] for c in ours)
    # Each named for its cause's category, then what it said: never "failed: ...".
    assert all(not c["name"].startswith("failed:") for c in ours)
    assert all(c["name"].split(": ", 1)[0] for c in ours)
    assert _allure._quoted("a\\Eb") == "\\Qa\\E\\\\E\\Qb\\E"


def test_a_long_category_name_is_cut_after_a_whole_word() -> None:
    said = "app or test: " + "The checkout total stays wrong " * 10
    cut = _allure._whole_words(said, 60)
    assert len(cut) <= 60
    assert cut.endswith("…")
    assert said.startswith(cut[:-1])
    assert said[len(cut) - 1] == " "  # the cut fell between words
    assert _allure._whole_words("short", 60) == "short"


def test_the_executor_is_the_ci_run(tmp_path: Path) -> None:
    github = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "acme/shop",
        "GITHUB_RUN_ID": "77",
        "GITHUB_RUN_NUMBER": "12",
        "GITHUB_WORKFLOW": "CI",
    }
    assert _allure.executor(github) == {
        "name": "GitHub Actions",
        "type": "github",
        "url": "https://github.com",
        "buildName": "CI #12",
        "buildUrl": "https://github.com/acme/shop/actions/runs/77",
        "buildOrder": 12,
    }
    gitlab = {
        "GITLAB_CI": "true",
        "CI_SERVER_URL": "https://gitlab.example",
        "CI_JOB_NAME": "devices",
        "CI_PIPELINE_IID": "5",
        "CI_JOB_URL": "javascript:alert(1)",
        "CI_PIPELINE_URL": "https://gitlab.example/acme/shop/-/pipelines/9",
    }
    assert _allure.executor(gitlab) == {
        "name": "GitLab CI",
        "type": "gitlab",
        "url": "https://gitlab.example",
        "buildName": "devices #5",
        "buildUrl": "https://gitlab.example/acme/shop/-/pipelines/9",
        "buildOrder": 5,
    }
    assert _allure.executor({})["name"] == "asyncclient"
    # A number past a Java long (Allure's build order) is left out, not written.
    assert "buildOrder" not in _allure.executor({**github, "GITHUB_RUN_NUMBER": "9" * 30})


def test_a_runs_link_is_one_line_with_its_controls_shown(tmp_path: Path) -> None:
    linked = attrs.evolve(run("j_1", "t_ok", "passed"), link="https://svc.example/a\n\x1b[2Jb")
    _allure.write_allure_results(tmp_path, _model.runs_report([linked]))
    (result,) = results(tmp_path)
    assert result["links"] == [
        {"name": "run", "url": "https://svc.example/a \\x1b[2Jb", "type": "link"}
    ]


def test_evidence_is_linked_into_the_folder_not_copied(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    (evidence / "j_4").mkdir(parents=True)
    video = evidence / "j_4" / "video.mp4"
    video.write_bytes(b"\x00video")
    report = _model.suite_report(job(), name="p_shop")
    folder = tmp_path / "allure-results"
    _allure.write_allure_results(
        folder, report, evidence={"j_4": ["j_4/video.mp4"]}, evidence_dir=evidence
    )
    attached = [a for r in results(folder) for a in r["attachments"]]
    assert [(a["name"], a["type"]) for a in attached] == [("video.mp4", "video/mp4")]
    linked = folder / attached[0]["source"]
    assert linked.read_bytes() == b"\x00video"
    assert os.path.samefile(linked, video)  # the same file, not a copy


def test_allures_own_command_line_renders_the_counts_the_job_reported(tmp_path: Path) -> None:
    report = _model.suite_report(job(), name="p_shop")
    first = tmp_path / "job1"
    _allure.write_allure_results(first, report)
    shown = generate(first, tmp_path / "report1")
    statistic = shown["summary"]["statistic"]
    # t_ok, t_flaky and t_reused passed; t_failed failed; t_quarantined is broken (muted).
    assert (statistic["passed"], statistic["failed"], statistic["broken"]) == (3, 1, 1)
    assert statistic["total"] == len(report.tests)
    names = {item["name"] for item in shown["categories"]["items"]}
    ours = {c["name"] for c in json.loads((first / "categories.json").read_text())[:-2]}
    assert ours <= names | {"Product defects", "Test defects"}
    assert ours & names
    # The next job, given the first report's history/, shows a trend of two points.
    second = tmp_path / "job2"
    _allure.write_allure_results(second, _model.suite_report(job(at=3600), name="p_shop"))
    shutil.copytree(tmp_path / "report1" / "history", second / "history")
    trend = generate(second, tmp_path / "report2")["history-trend"]
    assert len(trend) == 2
    assert [point["data"]["passed"] for point in trend] == [3, 3]


def test_without_links_the_evidence_is_copied_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where neither a hard nor a symbolic link may be made (another file system, a Windows
    user without the symlink right), the file is copied, and the results still written."""

    def refused(*args: Any, **kwargs: Any) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", refused)
    monkeypatch.setattr(os, "symlink", refused)
    evidence = tmp_path / "evidence" / "j_4"
    evidence.mkdir(parents=True)
    (evidence / "01.png").write_bytes(b"\x89PNG")
    folder = tmp_path / "allure-results"
    _allure.write_allure_results(
        folder,
        _model.suite_report(job(), name="p_shop"),
        evidence={"j_4": ["j_4/01.png"]},
        evidence_dir=tmp_path / "evidence",
    )
    (attached,) = [a for r in results(folder) for a in r["attachments"]]
    copied = folder / attached["source"]
    assert copied.read_bytes() == b"\x89PNG"
    assert not copied.is_symlink()
    assert not os.path.samefile(copied, evidence / "01.png")
