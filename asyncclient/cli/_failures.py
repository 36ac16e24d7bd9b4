"""`asyncclient failures PROJECT`: a project's failures over a window grouped by cause, across
tests and jobs (asyncclient.failures): what hit most runs, tests and builds first, each in its
category, new today or old, with a recent run to open."""

from __future__ import annotations

import argparse
import shutil
from typing import TYPE_CHECKING, Any

from asyncclient.cli._common import EXIT_OK, add_command, open_session
from asyncclient.cli._flaky import add_history_options, history_options
from asyncclient.cli._output import Output

if TYPE_CHECKING:
    from asyncclient.failures import FailureReport

_EXAMPLES = """\
  asyncclient failures p_123                         # the last 14 days, the widest cause first
  asyncclient failures p_123 --days 2 --categories failure-categories.toml
  asyncclient failures p_123 --json | jq -r '.clusters[] | select(.new) | .signature'
"""

_SHOWN = 20  # causes in the table (--json gives all the report keeps)
_EXAMPLE_CHARS = 60  # of an example headline (--json: up to 500)
_LINK = 120  # characters of its link (a result page's address is far shorter)
_LINK_COLUMNS = 160  # narrower: the run's id (a link whole, or none), fewer columns


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "failures",
        parents,
        handler="asyncclient.cli._failures:failures",
        help="a project's failures grouped by cause, across tests and jobs",
        description="Read a project's failed runs (the same bounded listings as `flaky`) and "
        "group them by signature: the status, headline, error and failed checks with ids, "
        "numbers, times, quoted values and URLs made general. Ranked by the runs, tests and "
        "builds each cause hit; each in its failure category (--categories), new today or old, "
        "with a recent run. Stopped runs are not counted.",
        examples=_EXAMPLES,
    )
    add_history_options(p, "each cause is named by the first category it matches")


async def failures(args: argparse.Namespace, out: Output) -> int:
    project_id, tests, days, categories = history_options(args)
    async with open_session(args) as session:
        report = await session.failure_clusters(
            project_id, days, tests=tests or None, categories=categories
        )
    if out.json_mode:
        out.json(report.to_json())
    else:
        _table(out, report)
    return EXIT_OK


def _table(out: Output, report: FailureReport) -> None:
    from asyncclient._core._untrusted import clip
    from asyncclient.cli._output import format_time
    from asyncclient.failures import MAX_CLUSTERS

    shown = report.clusters[:_SHOWN]
    narrow = out.stdout_is_terminal and shutil.get_terminal_size().columns < _LINK_COLUMNS
    rows = [
        [
            str(found.count),
            str(len(found.tests)),
            str(len(found.builds)),
            f"{found.category.name} ({found.category.kind})",
            "new" if report.is_new(found) else (format_time(found.first) if found.first else ""),
            clip(found.example.headline_text or found.status, _EXAMPLE_CHARS),
            found.example.id if narrow else clip(found.example.link or found.example.id, _LINK),
        ]
        for found in shown
    ]
    columns = ["RUNS", "TESTS", "BUILDS", "CATEGORY", "SINCE", "EXAMPLE", "RECENT RUN"]
    if narrow:  # builds and since: in --json, or a wider terminal
        keep = (0, 1, 3, 5, 6)
        columns = [columns[n] for n in keep]
        rows = [[row[n] for n in keep] for row in rows]
    out.table(columns, rows, flexible=columns.index("EXAMPLE"))
    if not shown:
        out.info(f"no failed runs of {report.project_id} in the last {report.days:g} days")
        return
    more = len(report.clusters) - len(shown) + report.more
    rest = f" ({more} more; --json lists the widest {MAX_CLUSTERS})" if more else ""
    infra = sum(f.count for f in report.clusters if f.category.kind == "infrastructure")
    causes = len(report.clusters) + report.more
    out.info(
        f"{report.failures} failed runs over {report.days:g} days in {causes} causes{rest}; "
        f"{infra} of them the infrastructure's"
    )
