"""Which CI run this is, from GitHub Actions' or GitLab CI's own variables, for Allure's
executor.json and a job's `cicd.*` and `vcs.*` attributes (`pipeline_attributes`). The CI's
variables are input like any other: each value one sanitised line, cut to a stated size; a link
kept only when it is http(s) without credentials, query or fragment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote, urlsplit

import attrs

from asyncclient._core._untrusted import clip, line

__all__ = ["VALUE_LIMIT", "CiRun", "ci_run", "pipeline_attributes"]

VALUE_LIMIT: Final = 200
"""The longest value kept of a CI variable (characters); a link may have twice as many."""

_URL: Final = re.compile(r"https?://[^\s@?#]+")
_PULL: Final = re.compile(r"refs/pull/(\d{1,12})/(?:merge|head)")


@attrs.frozen
class CiRun:
    """The CI run the command runs in; every field is empty when the CI does not say it."""

    system: str = ""  # "github", "gitlab", or "" (none known)
    title: str = ""  # the CI's name: "GitHub Actions", "GitLab CI"
    server: str = ""  # the CI's address
    pipeline: str = ""  # the workflow's or pipeline's name
    run_id: str = ""  # the pipeline run's id, unique within the CI
    run_number: str = ""  # its number within the pipeline (GitHub's run number, GitLab's iid)
    run_url: str = ""
    job: str = ""  # the job's (task's) name
    job_id: str = ""
    job_url: str = ""
    repository: str = ""  # owner/name, or the project's path
    repository_url: str = ""
    ref: str = ""  # the branch or tag the run is for
    ref_type: str = ""  # "branch" or "tag"
    revision: str = ""  # the commit
    change: str = ""  # the pull or merge request's number

    @property
    def build_order(self) -> int | None:
        """The run's number when it fits a Java long (Allure's buildOrder), else None."""
        number = self.run_number
        return int(number) if number.isdigit() and len(number) <= 15 else None


def _one(value: str, limit: int = VALUE_LIMIT) -> str:
    return clip(line(value), limit)


def _value(environ: Mapping[str, str], name: str, limit: int = VALUE_LIMIT) -> str:
    return clip(line(environ.get(name, "")), limit)


def _url(text: str) -> str:
    """`text` when it is a plain http(s) link (no credentials, query or fragment), else ""."""
    if not _URL.fullmatch(text):
        return ""
    try:
        return text if urlsplit(text).hostname else ""
    except ValueError:  # "http://[x]": no host Python can read
        return ""


def ci_run(environ: Mapping[str, str]) -> CiRun:
    """The CI run `environ` describes: GitHub Actions, GitLab CI, or CiRun() elsewhere."""

    def get(name: str, limit: int = VALUE_LIMIT) -> str:
        return _value(environ, name, limit)

    if environ.get("GITHUB_ACTIONS") == "true":
        server, repository, run_id = (
            _url(get("GITHUB_SERVER_URL")),
            get("GITHUB_REPOSITORY"),
            get("GITHUB_RUN_ID"),
        )
        base = f"{server}/{repository}" if server and repository else ""
        pull = _PULL.fullmatch(environ.get("GITHUB_REF", ""))
        head = get("GITHUB_HEAD_REF")  # set on pull requests: the branch it comes from
        return CiRun(
            system="github",
            title="GitHub Actions",
            server=server,
            pipeline=get("GITHUB_WORKFLOW"),
            run_id=run_id,
            run_number=get("GITHUB_RUN_NUMBER"),
            run_url=_url(f"{base}/actions/runs/{run_id}") if base and run_id else "",
            job=get("GITHUB_JOB"),
            repository=repository,
            repository_url=_url(base) if base else "",
            ref=head or get("GITHUB_REF_NAME"),
            ref_type="branch" if head else get("GITHUB_REF_TYPE"),
            revision=get("GITHUB_SHA"),
            change=pull.group(1) if pull else "",
        )
    if environ.get("GITLAB_CI") == "true":
        tag = get("CI_COMMIT_TAG")
        return CiRun(
            system="gitlab",
            title="GitLab CI",
            server=_url(get("CI_SERVER_URL")),
            pipeline=get("CI_PIPELINE_NAME") or get("CI_PROJECT_PATH"),
            run_id=get("CI_PIPELINE_ID"),
            run_number=get("CI_PIPELINE_IID"),
            run_url=_url(get("CI_PIPELINE_URL", 2 * VALUE_LIMIT)),
            job=get("CI_JOB_NAME"),
            job_id=get("CI_JOB_ID"),
            job_url=_url(get("CI_JOB_URL", 2 * VALUE_LIMIT)),
            repository=get("CI_PROJECT_PATH"),
            # CI_PROJECT_URL, never CI_REPOSITORY_URL: that one holds the job's token.
            repository_url=_url(get("CI_PROJECT_URL", 2 * VALUE_LIMIT)),
            ref=get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME") or get("CI_COMMIT_REF_NAME"),
            ref_type="tag" if tag else "branch",
            revision=get("CI_COMMIT_SHA"),
            change=get("CI_MERGE_REQUEST_IID"),
        )
    return CiRun()


def baseline_ref(environ: Mapping[str, str]) -> str:
    """The branch `--baseline auto` looks for: a pull or merge request's target, else
    GitLab's default branch, else `main`."""
    for name in (
        "GITHUB_BASE_REF",
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME",
        "CI_DEFAULT_BRANCH",
    ):
        found = _value(environ, name, 200)
        if found and not any(ch.isspace() for ch in found):
            return found
    return "main"


def pipeline_attributes(run: CiRun, environ: Mapping[str, str]) -> dict[str, str]:
    """The job span's `cicd.*` and `vcs.*` attributes: from the CI's variables on GitHub
    Actions and GitLab CI; elsewhere, those `OTEL_RESOURCE_ATTRIBUTES` names (the plain
    environment's way to say them)."""
    if not run.system:
        given: dict[str, str] = {}
        for pair in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")[:64]:
            key, sep, value = pair.partition("=")
            key = key.strip()
            if sep and key.startswith(("cicd.pipeline.", "vcs.")) and len(key) <= 64:
                text = unquote(value.strip())
                # Links as any CI's: http(s), no credentials or query.
                link = key.endswith("url.full")
                given[_one(key, 64)] = _url(_one(text, 2 * VALUE_LIMIT)) if link else _one(text)
        return {key: value for key, value in given.items() if value}
    found = {
        "cicd.pipeline.name": run.pipeline,
        "cicd.pipeline.run.id": run.run_id,
        "cicd.pipeline.run.url.full": run.run_url,
        "cicd.pipeline.task.name": run.job,
        "cicd.pipeline.task.run.id": run.job_id,
        "cicd.pipeline.task.run.url.full": run.job_url,
        "vcs.provider.name": run.system,
        "vcs.repository.name": run.repository,
        "vcs.repository.url.full": run.repository_url,
        "vcs.ref.head.name": run.ref,
        "vcs.ref.head.type": run.ref_type,
        "vcs.ref.head.revision": run.revision,
        "vcs.change.id": run.change,
    }
    return {key: value for key, value in found.items() if value}
