"""`asyncclient builds list | get | delete`: the app builds of a project.

Tables for people, JSON with --json (see _common.JSON_OUTPUT); delete needs an edit key.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import attrs

from asyncclient.cli._common import EXIT_OK, add_command, add_group, check_id, open_session
from asyncclient.cli._options import read
from asyncclient.cli._output import Output, format_size, format_time, to_json

if TYPE_CHECKING:
    from asyncclient.models import Build

_GROUP_EXAMPLES = """\
  asyncclient builds list p_123
  asyncclient builds get ab_456 --json
  asyncclient builds delete ab_456                   # needs a key that can edit tests
"""

_LIST_EXAMPLES = """\
  asyncclient builds list p_123                      # newest first
  asyncclient builds list p_123 --json | jq -r '.builds[] | select(.status == "ready") | .id'
"""

_GET_EXAMPLES = """\
  asyncclient builds get ab_456
  asyncclient builds get ab_456 --json | jq -r .build.sha256
"""

_DELETE_EXAMPLES = """\
  asyncclient builds delete ab_456
  ASYNCCLIENT_API_KEY=$EDIT_KEY asyncclient builds delete ab_456 --json
"""


@attrs.frozen(kw_only=True)
class ListBuildsOptions:
    """`builds list`'s options."""

    project_id: str


@attrs.frozen(kw_only=True)
class BuildOptions:
    """`builds get` and `builds delete`'s options."""

    build_id: str


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = add_group(
        sub, "builds", parents, help="list, show and delete app builds", examples=_GROUP_EXAMPLES
    )
    p = add_command(
        group,
        "list",
        parents,
        handler="asyncclient.cli._builds:list_builds",
        help="list the builds of a project, newest first",
        examples=_LIST_EXAMPLES,
    )
    p.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    p = add_command(
        group,
        "get",
        parents,
        handler="asyncclient.cli._builds:get_build",
        help="show one build: app id, version, checks, checksum",
        examples=_GET_EXAMPLES,
    )
    p.add_argument("build_id", metavar="BUILD_ID", help="the build (ab_...)")
    p = add_command(
        group,
        "delete",
        parents,
        handler="asyncclient.cli._builds:delete_build",
        help="delete a build (needs a key that can also create and edit tests)",
        description="Delete a build. Runs that used it keep their results; a build that a test "
        "pins cannot be deleted. Needs a key that can also create and edit tests.",
        examples=_DELETE_EXAMPLES,
    )
    p.add_argument("build_id", metavar="BUILD_ID", help="the build (ab_...)")


async def list_builds(args: argparse.Namespace, out: Output) -> int:
    opts = read(ListBuildsOptions, args)
    project_id = check_id(opts.project_id, "project")
    async with open_session(args) as session:
        result = await session.list_builds(project_id)
    if out.json_mode:
        out.json(to_json(result))
        return EXIT_OK
    out.table(
        ["ID", "STATUS", "APP ID", "VERSION", "PLATFORM", "SIZE", "LABEL", "CREATED"],
        [
            [
                b.id,
                b.status,
                b.app_id,
                _version(b),
                b.platform,
                format_size(b.size),
                b.label,
                format_time(b.created_at),
            ]
            for b in result.builds
        ],
    )
    if not result.builds:
        out.info(f"project {project_id} has no builds yet: asyncclient upload {project_id} APP")
    return EXIT_OK


async def get_build(args: argparse.Namespace, out: Output) -> int:
    opts = read(BuildOptions, args)
    build_id = check_id(opts.build_id, "build")
    async with open_session(args) as session:
        build = await session.get_build(build_id)
    if out.json_mode:
        out.json({"build": to_json(build)})
        return EXIT_OK
    size = None if build.size is None else f"{format_size(build.size)} ({build.size} bytes)"
    out.fields(
        [
            ("id", build.id),
            ("project", build.project_id),
            ("status", build.status),
            ("file", build.file_name),
            ("size", size),
            ("platform", build.platform),
            ("app id", build.app_id),
            ("app name", build.app_name),
            ("version", _version(build) or None),
            ("min os", build.min_os),
            ("abis", ", ".join(build.abis) or None),
            ("warnings", "\n".join(build.warning_texts) or None),
            ("sha256", build.sha256),
            ("label", build.label),
            ("created", format_time(build.created_at) or None),
            ("ready", format_time(build.ready_at) or None),
        ]
    )
    return EXIT_OK


async def delete_build(args: argparse.Namespace, out: Output) -> int:
    opts = read(BuildOptions, args)
    build_id = check_id(opts.build_id, "build")
    async with open_session(args) as session:
        await session.delete_build(build_id)
    if out.json_mode:
        out.json({"id": build_id, "ok": True})
    else:
        out.data(build_id)
    out.info(f"deleted build {build_id}")
    return EXIT_OK


def _version(build: Build) -> str:
    """`1.4.0 (140)`: the version and, when known, the version code."""
    if build.version and build.version_code:
        return f"{build.version} ({build.version_code})"
    return build.version or build.version_code or ""
