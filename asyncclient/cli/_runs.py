"""`asyncclient runs list | get | stop`: test runs, their verdicts and their files.

Tables for people, JSON with --json (_common.JSON_OUTPUT); filters are checked before sending.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient._core._checks import LIST_LIMIT_MAX
from asyncclient._core._suggest import did_you_mean
from asyncclient._values._lenient import run_status_kind, text
from asyncclient.cli._common import (
    EXIT_OK,
    CommandError,
    add_command,
    add_group,
    api_key_source,
    check_id,
    describe_error,
    open_session,
)
from asyncclient.cli._options import read
from asyncclient.cli._output import Output, format_time, to_json

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.models import Run

_GROUP_EXAMPLES = """\
  asyncclient runs list --project p_123 --status failed
  asyncclient runs get j_789
  asyncclient runs stop j_789
"""

_LIST_EXAMPLES = """\
  asyncclient runs list                              # the newest 50 runs the key can see
  asyncclient runs list --project p_123 --status failed --limit 10
  asyncclient runs list --test t_42 --json | jq -r '.runs[] | "\\(.id) \\(.status)"'
"""

_GET_EXAMPLES = """\
  asyncclient runs get j_789                         # verdict, failed checks with reasons, files
  asyncclient runs get j_789 --json | jq -r .run.verdict
"""

_STOP_EXAMPLES = """\
  asyncclient runs stop j_789                        # prints the new status: cancelled
  asyncclient runs stop j_1 j_2 j_3                  # several: one "RUN_ID STATUS" line each
"""
_STOP_CONCURRENCY = 8  # stops in flight at once, as the watcher sends them


@attrs.frozen(kw_only=True)
class ListRunsOptions:
    """`runs list`'s options."""

    project: str | None = None
    test: str | None = None
    status: str | None = None
    limit: int | None = None


@attrs.frozen(kw_only=True)
class GetRunOptions:
    """`runs get`'s options."""

    run_id: str


@attrs.frozen(kw_only=True)
class StopRunsOptions:
    """`runs stop`'s options."""

    run_ids: list[str]


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = add_group(
        sub, "runs", parents, help="list, show and stop test runs", examples=_GROUP_EXAMPLES
    )
    p = add_command(
        group,
        "list",
        parents,
        handler="asyncclient.cli._runs:list_runs",
        help="list runs, newest first",
        examples=_LIST_EXAMPLES,
    )
    p.add_argument("--project", metavar="ID", help="only runs of this project (p_...)")
    p.add_argument("--test", metavar="ID", help="only runs of this test (t_...)")
    p.add_argument(
        "--status",
        metavar="S",
        help="only runs with this status: queued, running, passed, failed, blocked, "
        "inconclusive, error or cancelled (other spellings such as canceled or stopped mean "
        "cancelled)",
    )
    p.add_argument(
        "--limit", metavar="N", type=int, help=f"at most N runs (1 to {LIST_LIMIT_MAX}; default 50)"
    )
    p = add_command(
        group,
        "get",
        parents,
        handler="asyncclient.cli._runs:get_run",
        help="show one run: verdict, headline, failed checks with reasons, captures, files",
        examples=_GET_EXAMPLES,
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the run (j_...)")
    p = add_command(
        group,
        "stop",
        parents,
        handler="asyncclient.cli._runs:stop_run",
        help="stop queued or running runs (a stopped run is not counted)",
        description="Stop queued or running runs (a stopped run is not counted). With one "
        "RUN_ID print its new status; with several, one line `RUN_ID STATUS` per run stopped "
        '(--json: {"runs": [{"id", "status"}]}); a run that cannot be stopped (already '
        "final, unknown) is an error line and does not keep the others from stopping.",
        examples=_STOP_EXAMPLES,
    )
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="the runs (j_...)")


async def list_runs(args: argparse.Namespace, out: Output) -> int:
    from asyncclient import _reports
    from asyncclient._core._checks import check_limit
    from asyncclient.errors import ValidationError
    from asyncclient.models import RunStatus

    opts = read(ListRunsOptions, args)
    project_id = None if opts.project is None else check_id(opts.project, "project", "--project")
    test_id = None if opts.test is None else check_id(opts.test, "test", "--test")
    status = None
    if opts.status is not None:
        # Other spellings filter by the spec's word.
        status = run_status_kind(opts.status.strip())
        known = [s.value for s in RunStatus]
        if status not in known:
            raise CommandError(
                f"--status {opts.status} is not a run status: use one of {', '.join(known)}"
                + did_you_mean(status, known)
            )
    if opts.limit is not None:
        try:
            check_limit(opts.limit)
        except ValidationError as exc:
            # Name the flag, not the keyword.
            raise CommandError(
                f"--limit {opts.limit} is out of range: give 1 to {LIST_LIMIT_MAX}"
            ) from exc
    async with open_session(args) as session:
        runs = await session.list_runs(
            test_id=test_id, project_id=project_id, status=status, limit=opts.limit
        )
    if out.json_mode:
        out.json({"runs": [to_json(run) for run in runs]})
        return EXIT_OK
    out.table(
        ["ID", "TEST", "TITLE", "STATUS", "MODE", "DURATION", "CREATED"],
        [
            [
                run.id,
                run.test_id,
                run.test_title,
                str(run.status),
                run.mode,
                _reports.format_duration(_reports.duration_seconds(run)),
                format_time(run.created_at),
            ]
            for run in runs
        ],
    )
    if not runs:
        out.info("no runs match")
    return EXIT_OK


async def get_run(args: argparse.Namespace, out: Output) -> int:
    opts = read(GetRunOptions, args)
    run_id = check_id(opts.run_id, "run")
    async with open_session(args) as session:
        run = await session.get_run(run_id)
    if out.json_mode:
        from asyncclient._reports.model import read_attempt

        out.json({"run": {**to_json(run), "summary": read_attempt(run).fields()}})
        return EXIT_OK
    out.fields(run_fields(run))
    return EXIT_OK


async def stop_run(args: argparse.Namespace, out: Output) -> int:
    opts = read(StopRunsOptions, args)
    run_ids = list(dict.fromkeys(check_id(run_id, "run") for run_id in opts.run_ids))
    async with open_session(args) as session:
        if len(run_ids) == 1:
            (run_id,) = run_ids
            status = await session.stop_run(run_id)
            if out.json_mode:
                out.json({"id": run_id, "status": status})
            else:
                out.data(status)
            out.info(f"stopped run {run_id}: now {status}")
            return EXIT_OK
        results = await _stop_each(session, run_ids)
    worst = EXIT_OK
    stopped: list[dict[str, str]] = []
    for run_id, result in zip(run_ids, results, strict=True):
        if isinstance(result, BaseException):
            message, code = describe_error(result, key_source=api_key_source(args))
            out.error(f"{run_id}: {message}")
            worst = max(worst, code)
            continue
        stopped.append({"id": run_id, "status": result})
        if not out.json_mode:
            out.data(f"{run_id}  {result}")
    if out.json_mode:
        out.json({"runs": stopped})
    out.info(f"stopped {len(stopped)} of {len(run_ids)} run(s)")
    return worst


async def _stop_each(session: AsyncSession, run_ids: list[str]) -> list[str | BaseException]:
    """Stop every run, _STOP_CONCURRENCY at a time; the new status or the error of each."""
    from asyncclient.errors import AsyncClientError

    semaphore = asyncio.Semaphore(_STOP_CONCURRENCY)

    async def stop(run_id: str) -> str | BaseException:
        async with semaphore:
            try:
                return await session.stop_run(run_id)
            except AsyncClientError as exc:
                return exc

    return list(await asyncio.gather(*(stop(run_id) for run_id in run_ids)))


def run_fields(run: Run) -> list[tuple[str, Any]]:
    """The key/value view of a run; the verdict and results once it is final."""
    from asyncclient._core._wording import run_files
    from asyncclient._reports import duration_seconds, format_duration

    test = run.test_id
    if run.test_title:
        test = f"{run.test_title} ({run.test_id})" if run.test_id else run.test_title
    final = "yes" if run.is_final else "no (verdict, results and files come once it ends)"
    pairs: list[tuple[str, Any]] = [
        ("id", run.id),
        ("test", test),
        ("project", run.project_id),
        ("status", str(run.status)),
        ("final", final),
        ("mode", run.mode),
        ("source", _text(run.source)),
        ("platform", run.platform),
        ("build", _build_text(run.build) or run.used_build_id),
        ("created", format_time(run.created_at) or None),
        ("started", format_time(run.started_at) or None),
        ("finished", format_time(run.finished_at) or None),
        ("duration", format_duration(duration_seconds(run)) or None),
        ("verdict", run.verdict_text or None),
        ("headline", run.headline_text or None),
        ("error", _error_text(run)),
        ("requirements", _requirements_text(run)),
        ("captures", _captures_text(run)),
        ("files", "\n".join(f.path or f.link for f in run_files(run)) or None),
        ("link", run.link),
    ]
    return pairs


def _text(value: Any) -> str | None:
    """A JSON value the API leaves open, as one line of text (None stays None)."""
    return text(value) or None


def _build_text(build: Any) -> str | None:
    if not isinstance(build, dict):
        return _text(build)
    parts = [build.get("id"), build.get("appId"), build.get("version")]
    text = " ".join(str(p) for p in parts if p)
    if build.get("versionCode"):
        text += f" ({build['versionCode']})"
    return text or None


def _error_text(run: Run) -> str | None:
    return ": ".join(part for part in (run.error_code, run.error_message) if part) or None


def _requirements_text(run: Run) -> str | None:
    """A count per outcome, then each check that did not pass with its reason (read from any
    of the shapes services send, see asyncclient._values._lenient)."""
    checks = run.requirement_results
    if not checks:
        return None
    counts: dict[str, int] = {}
    lines = []
    for check in checks:
        counts[check.outcome] = counts.get(check.outcome, 0) + 1
        if check.outcome != "passed":
            result = check.outcome if check.outcome != "unknown" else check.result or "unknown"
            lines.append(f"{result} - {check.line()}")
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    return "\n".join([summary, *lines])


def _captures_text(run: Run) -> str | None:
    values = run.capture_values
    return "\n".join(f"{name} = {value}" for name, value in values.items()) or None
