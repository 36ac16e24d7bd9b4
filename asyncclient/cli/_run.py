"""`asyncclient run test`, `run project` and `watch`: their options, the checks of those options
before any request, and the start of runs. Following the runs and reporting them for CI is
asyncclient.cli._follow.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient.cli._common import (
    EXIT_NOT_PASSED,
    EXIT_OK,
    CommandError,
    add_command,
    add_global_options,
    add_group,
    open_session,
)
from asyncclient.cli._fleet import add_fleet_options, ended_before_start, governed, shared_views
from asyncclient.cli._follow import follow
from asyncclient.cli._follow_options import (
    add_follow_options,
    add_spending_options,
    check_follow_options,
    ids_from_text,
)
from asyncclient.cli._options import Connection, read
from asyncclient.cli._output import Output, to_json
from asyncclient.cli._telemetry import job_telemetry
from asyncclient.spend.reuse import Started

if TYPE_CHECKING:
    from asyncclient.fleet import FleetJob
    from asyncclient.models import ProjectRunStart

# What a person types; the rest of the options live in --help-all and the profiles.
_TYPED = ("wait", "timeout", "retry_failed", "junit", "ctrf", "html", "allure_results", "profile")
_TEST_EXAMPLES = """\
  asyncclient run test t_login                         # prints the run id
  asyncclient run test t_login --build ab_42 --mode cold --wait --junit report.xml
  asyncclient run test t_login --wait --timeout 900 --json > run.json
  asyncclient run test t_login --wait --retry-failed 2 --html report.html
"""
_PROJECT_EXAMPLES = """\
  asyncclient run project p_123                        # prints one run id per line
  asyncclient run project p_123 --build ab_android --build ab_ios --wait --junit report.xml
  asyncclient run project p_123 --wait --retry-failed 2 --profile ci --html report.html
"""
_WATCH_EXAMPLES = """\
  asyncclient watch j_1 j_2 j_3
  asyncclient run project p_123 | xargs asyncclient watch --junit report.xml
  asyncclient watch j_1 --timeout 600 --stop-on-timeout
  asyncclient run project p_123 | asyncclient watch - --retry-failed 1 --html report.html
  asyncclient watch - --junit report.xml < runs.txt      # a later job collects the results
"""
_EXIT_CODES = """
exit codes:
  0    {ok}
  1    {not_passed}
  2    bad input (nothing sent)
  3    the service refused (including 402 not_started and 400 empty: no test started)
  4    the service could not be reached
  5    a local file could not be written (disk full, permissions, read-only)
  130  interrupted (Ctrl-C)
  141  the reader of stdout went away (`| head`)"""
_NOT_PASSED = "a run did not pass, or --timeout hit"
_TEST_DESCRIPTION = """\
Start a run of one test. Without --wait print the run id; with --wait follow the
run until it is final, then print its verdict, headline, failed requirements and
link (and write the reports asked for). Ctrl-C during --wait stops the run.
""" + _EXIT_CODES.format(ok="the run started; with --wait: it passed", not_passed=_NOT_PASSED)
_PROJECT_DESCRIPTION = """\
Start a run of every test of a project. Without --wait print the run ids, one per
line (skipped tests on stderr); with --wait follow them until final, then report: a
test the service skipped (did not start) fails the command unless --allow-skipped.
Ctrl-C during --wait stops the runs still going.
""" + _EXIT_CODES.format(
    ok="the runs started; with --wait: every test started and every run passed",
    not_passed=_NOT_PASSED + ", or with --wait: a test was skipped (unless"
    "\n       --allow-skipped) or none started",
)
_WATCH_DESCRIPTION = """\
Follow runs until every one is final, then print each verdict and exit 0 when all
passed. Ctrl-C stops watching; with --stop-on-interrupt it stops the runs too.
""" + _EXIT_CODES.format(ok="every run passed", not_passed=_NOT_PASSED)


@attrs.frozen(kw_only=True)
class RunTestOptions:
    """`run test`'s own options (the shared ones are Globals, Connection and Follow)."""

    test_id: str
    mode: str | None = None
    build: str | None = None
    idempotency_key: str | None = None
    wait: bool = False


@attrs.frozen(kw_only=True)
class RunProjectOptions:
    """`run project`'s own options."""

    project_id: str
    mode: str | None = None
    build: list[str] | None = None
    idempotency_key: str | None = None
    wait: bool = False


@attrs.frozen(kw_only=True)
class WatchOptions:
    """`watch`'s own options."""

    run_ids: list[str]
    stop_on_interrupt: bool = False


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    # Here --timeout bounds the whole wait.
    waiting = argparse.ArgumentParser(add_help=False)
    add_global_options(waiting, suppress=True, timeout_alias=False)
    parents = [waiting]
    run = add_group(
        sub,
        "run",
        parents,
        help="start a test or every test of a project",
        examples=_TEST_EXAMPLES.splitlines(keepends=True)[1] + _PROJECT_EXAMPLES,
    )

    test = add_command(
        run,
        "test",
        parents,
        handler="asyncclient.cli._run:run_test",
        help="start a run of one test",
        description=_TEST_DESCRIPTION,
        examples=_TEST_EXAMPLES,
        brief=("test_id", "build", *_TYPED),
    )
    test.add_argument("test_id", metavar="TEST_ID", help="the test to run (t_...)")
    _add_mode(test)
    test.add_argument(
        "--build", metavar="BUILD_ID", help="run this build (ab_...); default: the newest ready one"
    )
    _add_idempotency_key(test)
    add_follow_options(test, wait_flag=True)
    add_spending_options(test)
    add_fleet_options(test)

    project = add_command(
        run,
        "project",
        parents,
        handler="asyncclient.cli._run:run_project",
        help="start a run of every test of a project (a suite)",
        description=_PROJECT_DESCRIPTION,
        examples=_PROJECT_EXAMPLES,
        brief=("project_id", "build", *_TYPED),
    )
    project.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    _add_mode(project)
    project.add_argument(
        "--build",
        metavar="BUILD_ID",
        action="append",
        help="a build to run (ab_...); repeat it for several apps: each app test runs the "
        "build of its own app",
    )
    _add_idempotency_key(project)
    add_follow_options(project, wait_flag=True).add_argument(
        "--allow-skipped",
        action="store_true",
        help="with --wait, exit 0 even when the service skipped some tests (did not start "
        "them), provided every run that started passed; without it a skipped test exits 1",
    )
    add_spending_options(project)
    add_fleet_options(project)

    watch = add_command(
        sub,
        "watch",
        parents,
        handler="asyncclient.cli._run:watch",
        help="follow runs until they are final and report",
        description=_WATCH_DESCRIPTION,
        examples=_WATCH_EXAMPLES,
        brief=("run_ids", *_TYPED),
    )
    watch.add_argument(
        "run_ids",
        nargs="+",
        metavar="RUN_ID",
        help="runs to follow (j_...); - reads them from standard input: one per line, or the "
        "--json output of asyncclient run",
    )
    add_follow_options(watch, wait_flag=False)
    watch.add_argument(
        "--stop-on-interrupt",
        action="store_true",
        help="on Ctrl-C stop the runs still going (run --wait always does, for its own runs); "
        "with a fleet ledger, the runs are held in it as this job's",
    )
    add_fleet_options(watch)


def _add_mode(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mode",
        choices=("auto", "cold", "warm"),
        help="auto (service default): replay the learned path when fresh; cold: explore anew; "
        "warm: only replay",
    )


def _add_idempotency_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a key that makes re-running this command safe: the same key starts nothing new "
        "(for example the CI job id)",
    )


def _check_ids(kind: str, values: Sequence[str], flag: str) -> list[str]:
    from asyncclient._core._checks import check_id

    return list(dict.fromkeys(check_id(kind, value, flag) for value in values))


# --- handlers ------------------------------------------------------------------------------------


async def run_test(args: argparse.Namespace, out: Output) -> int:
    opts = read(RunTestOptions, args)
    base_url = read(Connection, args).base_url
    _check_ids("test", [opts.test_id], "TEST_ID")
    if opts.build:
        _check_ids("build", [opts.build], "--build")
    options = check_follow_options(args, waiting=opts.wait, out=out)
    async with (
        job_telemetry(out, opts.test_id, waiting=opts.wait) as job,
        open_session(args) as session,
        _in_fleet(args, out, session, opts.wait, opts.build) as fleet,
    ):
        session = governed(session, fleet, out)
        async with ended_before_start(fleet):
            start = await session.run_test(
                opts.test_id,
                mode=opts.mode,
                build_id=opts.build,
                idempotency_key=opts.idempotency_key,
            )
        if not opts.wait:
            if out.json_mode:
                out.json(to_json(start))
            else:
                out.data(start.run_id)
            return EXIT_OK
        if fleet is not None:  # held before anything else can end this process
            fleet.hold([start.run_id])
            await fleet.flush()
        overage = "  (beyond the plan's included runs)" if start.overage else ""
        out.info(f"started {start.run_id}  {opts.test_id}  mode {start.mode or '?'}{overage}")
        async with shared_views(args, out, session, fleet) as watched:
            code = await follow(
                watched,
                [start.run_id],
                options,
                out,
                base_url=base_url,
                stop_on_cancel=True,
                report_name=opts.test_id,
                tests={start.run_id: opts.test_id},
                overage=[start.run_id] if start.overage is True else [],
                mode=opts.mode,
                build_id=opts.build,
                idempotency_key=opts.idempotency_key,
                starts=[Started(opts.test_id, start.run_id, opts.build, opts.mode)],
                fleet=fleet,
            )
        if job is not None:
            job.exit_code = code
        return code


async def run_project(args: argparse.Namespace, out: Output) -> int:
    from asyncclient._reports import plain_text

    opts = read(RunProjectOptions, args)
    base_url = read(Connection, args).base_url
    _check_ids("project", [opts.project_id], "PROJECT_ID")
    builds = _check_ids("build", opts.build or [], "--build")
    options = check_follow_options(args, waiting=opts.wait, out=out)
    async with (
        job_telemetry(out, opts.project_id, project=opts.project_id, waiting=opts.wait) as job,
        open_session(args) as session,
        _in_fleet(args, out, session, opts.wait, builds[0] if builds else None) as fleet,
    ):
        session = governed(session, fleet, out)
        async with ended_before_start(fleet):
            result = await session.run_project(
                opts.project_id,
                mode=opts.mode,
                build_id=builds[0] if len(builds) == 1 else None,
                build_ids=builds if len(builds) > 1 else None,
                idempotency_key=opts.idempotency_key,
            )
        # Skipped tests are the answer: shown with --quiet.
        for skipped in result.skipped:
            out.always(
                f"skipped {skipped.test_id}: {plain_text(skipped.reason) or 'no reason given'}"
            )
        if not opts.wait:
            if out.json_mode:
                out.json(to_json(result))
            else:
                for started in result.started:
                    out.data(started.run_id)
            return EXIT_OK
        if fleet is not None:  # held before anything else can end this process
            fleet.hold(s.run_id for s in result.started)
            await fleet.flush()
        for started in result.started:
            out.info(f"started {started.run_id}  {started.test_id}  mode {started.mode or '?'}")
        async with shared_views(args, out, session, fleet) as watched:
            code = await follow(
                watched,
                [started.run_id for started in result.started],
                options,
                out,
                base_url=base_url,
                stop_on_cancel=True,
                report_name=opts.project_id,
                skipped=[(s.test_id, plain_text(s.reason)) for s in result.skipped],
                tests={started.run_id: started.test_id for started in result.started},
                mode=opts.mode,
                build_id=builds[0] if len(builds) == 1 else None,
                idempotency_key=opts.idempotency_key,
                starts=[
                    Started(s.test_id, s.run_id, s.build_id, opts.mode) for s in result.started
                ],
                fleet=fleet,
            )
        code = _project_verdict(code, result, opts.project_id, options.allow_skipped, out)
        if job is not None:
            job.exit_code = code
        return code


def _in_fleet(
    args: argparse.Namespace,
    out: Output,
    session: Any,
    following: bool,
    build: str | None = None,
) -> contextlib.AbstractAsyncContextManager[FleetJob | None]:
    """This job in the fleet's ledger while it follows runs it owns (asyncclient.cli._fleet);
    a start without --wait leaves its runs going on purpose, so it joins no ledger."""
    if not following:
        return contextlib.nullcontext()
    from asyncclient.cli._fleet import fleet_job

    return fleet_job(args, out, session, build)


def _project_verdict(
    code: int, result: ProjectRunStart, project_id: str, allow_skipped: bool, out: Output
) -> int:
    """The exit code of a followed project: its runs' (`code`), then whether every test
    started."""
    if code != EXIT_OK:
        return code
    # A suite that did not fully run never passes.
    if not result.started:
        out.error(f"no test of {project_id} started: nothing ran")
        return EXIT_NOT_PASSED
    if result.skipped and not allow_skipped:
        out.error(
            f"{len(result.skipped)} test(s) of {project_id} did not start (see above); "
            "pass --allow-skipped to accept that"
        )
        return EXIT_NOT_PASSED
    return EXIT_OK


async def watch(args: argparse.Namespace, out: Output) -> int:
    opts = read(WatchOptions, args)
    base_url = read(Connection, args).base_url
    given = list(opts.run_ids)
    if "-" in given:
        if given.count("-") > 1:
            raise CommandError("give - once: it reads every run id from standard input")
        at = given.index("-")
        given[at : at + 1] = ids_from_text(sys.stdin.read())
        if not given:
            raise CommandError(
                "no run id on standard input: pipe run ids (one per line) or the --json output "
                "of asyncclient run"
            )
    run_ids = _check_ids("run", given, "RUN_ID")
    options = check_follow_options(args, waiting=True, out=out)
    async with (
        job_telemetry(out, "asyncclient watch") as job,
        open_session(args) as session,
        _in_fleet(args, out, session, opts.stop_on_interrupt) as fleet,
    ):
        async with shared_views(args, out, session, fleet) as watched:
            code = await follow(
                watched,
                run_ids,
                options,
                out,
                base_url=base_url,
                stop_on_cancel=opts.stop_on_interrupt,
                report_name="asyncclient watch",
                fleet=fleet,
            )
        if job is not None:
            job.exit_code = code
        return code
