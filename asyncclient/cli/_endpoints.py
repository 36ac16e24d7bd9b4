"""`asyncclient endpoints list | add | delete`: the tester endpoints of a project.

Input is checked before sending by the library's own checks; header values are never echoed.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import attrs

from asyncclient._core._checks import (
    ENDPOINT_DESCRIPTION_MAX,
    ENDPOINT_HEADERS_MAX,
    ENDPOINT_METHODS,
    ENDPOINT_NAME_MAX,
)
from asyncclient.cli._common import (
    EXIT_OK,
    CommandError,
    add_command,
    add_group,
    check_id,
    open_session,
)
from asyncclient.cli._options import read
from asyncclient.cli._output import Output, format_time, to_json

# An HTTP header name (RFC 9110 token).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

_GROUP_EXAMPLES = """\
  asyncclient endpoints list p_123
  asyncclient endpoints add p_123 --name create_voucher --description "..." \\
      --url https://shop.example.com/test/vouchers --header "Authorization: Bearer $TOKEN"
  asyncclient endpoints delete ep_9
"""

_LIST_EXAMPLES = """\
  asyncclient endpoints list p_123
  asyncclient endpoints list p_123 --json | jq -r '.endpoints[] | "\\(.id) \\(.name)"'
"""

_ADD_EXAMPLES = """\
  asyncclient endpoints add p_123 --name create_voucher \\
      --description "Creates a 10% voucher; call it before checkout when a voucher is needed" \\
      --url https://shop.example.com/test/vouchers \\
      --header "Authorization: Bearer $SHOP_TEST_TOKEN" --header "X-Env: staging" \\
      --body-template '{"percent": {{percent}}}'
  asyncclient endpoints add p_123 --name reset_user --description "Resets the test user" \\
      --url https://shop.example.com/test/reset --method DELETE --json
Header values are sent once, stored encrypted, and never shown again (not even here).
Needs a key that can also create and edit tests; using endpoints in runs needs a paid plan.
"""

_DELETE_EXAMPLES = """\
  asyncclient endpoints delete ep_9                  # needs a key that can edit tests
"""


@attrs.frozen(kw_only=True)
class ListEndpointsOptions:
    """`endpoints list`'s options."""

    project_id: str


@attrs.frozen(kw_only=True)
class AddEndpointOptions:
    """`endpoints add`'s options."""

    project_id: str
    name: str
    description: str
    url: str
    method: str = "POST"
    headers: list[str] = attrs.field(factory=list)
    body_template: str | None = None


@attrs.frozen(kw_only=True)
class DeleteEndpointOptions:
    """`endpoints delete`'s options."""

    endpoint_id: str


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = add_group(
        sub,
        "endpoints",
        parents,
        help="list, add and delete tester endpoints (calls into your systems)",
        examples=_GROUP_EXAMPLES,
    )
    p = add_command(
        group,
        "list",
        parents,
        handler="asyncclient.cli._endpoints:list_endpoints",
        help="list the tester endpoints of a project (headers are never returned)",
        examples=_LIST_EXAMPLES,
    )
    p.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    p = add_command(
        group,
        "add",
        parents,
        handler="asyncclient.cli._endpoints:add_endpoint",
        help="register a call the tester may make into your system",
        description="Register a tester endpoint: a call into your own system that the automated "
        "tester may make during a run. The tester sees only its name, its description and what "
        "the call returned. Prints the new endpoint id.",
        examples=_ADD_EXAMPLES,
    )
    p.add_argument("project_id", metavar="PROJECT_ID", help="the project (p_...)")
    p.add_argument(
        "--name",
        required=True,
        help=f"short name such as create_voucher (1 to {ENDPOINT_NAME_MAX} chars)",
    )
    p.add_argument(
        "--description",
        required=True,
        metavar="TEXT",
        help=f"what it does and when to use it (1 to {ENDPOINT_DESCRIPTION_MAX} chars)",
    )
    p.add_argument("--url", required=True, help="the https:// address to call")
    p.add_argument(
        "--method",
        default="POST",
        help=f"{', '.join(sorted(ENDPOINT_METHODS))} (default %(default)s)",
        metavar="M",
    )
    p.add_argument(
        "--header",
        dest="headers",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help=f"a request header, repeatable (up to {ENDPOINT_HEADERS_MAX}); the value is never "
        "shown",
    )
    p.add_argument(
        "--body-template",
        metavar="T",
        help="request body text; {{param}} placeholders are filled in by the tester",
    )
    p = add_command(
        group,
        "delete",
        parents,
        handler="asyncclient.cli._endpoints:delete_endpoint",
        help="delete a tester endpoint (needs a key that can also create and edit tests)",
        examples=_DELETE_EXAMPLES,
    )
    p.add_argument("endpoint_id", metavar="ENDPOINT_ID", help="the endpoint (ep_...)")


async def list_endpoints(args: argparse.Namespace, out: Output) -> int:
    opts = read(ListEndpointsOptions, args)
    project_id = check_id(opts.project_id, "project")
    async with open_session(args) as session:
        endpoints = await session.list_endpoints(project_id)
    if out.json_mode:
        out.json({"endpoints": [to_json(e) for e in endpoints]})
        return EXIT_OK
    out.table(
        ["ID", "NAME", "METHOD", "URL", "LAST USED"],
        [
            [e.id, e.name, e.method, e.url, format_time(e.last_used_at) or "never"]
            for e in endpoints
        ],
    )
    if not endpoints:
        out.info(f"project {project_id} has no tester endpoints")
    return EXIT_OK


async def add_endpoint(args: argparse.Namespace, out: Output) -> int:
    from asyncclient._core._checks import check_endpoint

    opts = read(AddEndpointOptions, args)
    project_id = check_id(opts.project_id, "project")
    name, description, url = opts.name, opts.description, opts.url.strip()
    method = opts.method.strip().upper()
    headers = parse_headers(opts.headers)
    # The session's check names fields, never echoes values.
    check_endpoint(name, description, url, method, headers or None, opts.body_template)
    async with open_session(args) as session:
        endpoint_id = await session.add_endpoint(
            project_id,
            name,
            description,
            url,
            method=method,
            headers=headers or None,
            body_template=opts.body_template,
        )
    if out.json_mode:
        out.json({"id": endpoint_id})
    else:
        out.data(endpoint_id)
    shown = f" with {len(headers)} header(s) (values not shown)" if headers else ""
    out.info(f"added endpoint {endpoint_id} ({name}, {method}){shown} to {project_id}")
    return EXIT_OK


async def delete_endpoint(args: argparse.Namespace, out: Output) -> int:
    opts = read(DeleteEndpointOptions, args)
    endpoint_id = check_id(opts.endpoint_id, "endpoint")
    async with open_session(args) as session:
        await session.delete_endpoint(endpoint_id)
    if out.json_mode:
        out.json({"id": endpoint_id, "ok": True})
    else:
        out.data(endpoint_id)
    out.info(f"deleted endpoint {endpoint_id}")
    return EXIT_OK


def parse_headers(values: list[str]) -> dict[str, str]:
    """`Name: value` arguments as a dict; refused with exit 2 when malformed.

    Messages name a header by its position (and by name once the name is known to be valid),
    never by its value: a value is usually a secret.
    """
    if len(values) > ENDPOINT_HEADERS_MAX:
        raise CommandError(
            f"{len(values)} --header options: an endpoint may carry at most {ENDPOINT_HEADERS_MAX}"
        )
    headers: dict[str, str] = {}
    seen: set[str] = set()
    for number, value in enumerate(values, start=1):
        name, colon, rest = value.partition(":")
        name = name.strip()
        if not colon:
            raise CommandError(f"--header number {number} has no colon: write it as 'Name: value'")
        if not _HEADER_NAME.fullmatch(name):
            raise CommandError(
                f"--header number {number} has no valid name before its colon: "
                "write it as 'Name: value' (letters, digits and -)"
            )
        if "\r" in rest or "\n" in rest:
            raise CommandError(f"--header {name} has a line break in its value: remove it")
        if name.lower() in seen:
            raise CommandError(f"--header {name} is given twice: give each header once")
        seen.add(name.lower())
        headers[name] = rest.strip()
    return headers
