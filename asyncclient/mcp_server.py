"""The Model Context Protocol server behind `asyncclient mcp`: the service's tools for agents,
plus upload_build, wait_for_runs and download_run_file, all on one AsyncSession.

Needs the `mcp` extra (`pip install 'asyncclient[mcp]'`); nothing else in asyncclient imports
this module, so the base install never loads the SDK.

Each tool is a thin wrapper over a session method: the library checks the arguments (its
one-line ValidationError messages), the input schemas only advertise the same rules, and every
failure comes back as a tool error whose text is the CLI's one-line message. The API key never
leaves the session: results and errors are scrubbed of it once more before they are sent.
Over 400 lines for one concern: fourteen tools, each with the schema, annotations and
description an agent reads, on one server class.
"""

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Final

import attrs
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, WithJsonSchema
from typing_extensions import TypedDict

from asyncclient import _protocol as proto
from asyncclient import _reports
from asyncclient._session import AsyncSession
from asyncclient._version import __version__
from asyncclient.cli._common import describe_error
from asyncclient.cli._output import format_size, to_json
from asyncclient.errors import ValidationError, WatchTimeoutError
from asyncclient.models import Run, RunStatus

__all__ = [
    "DESTRUCTIVE_TOOLS",
    "READ_TOOLS",
    "TOOLS",
    "WRITE_TOOLS",
    "ServerOptions",
    "create_server",
    "serve_http",
    "serve_stdio",
]

logger = logging.getLogger("asyncclient.mcp")

READ_TOOLS: Final = (
    "list_builds",
    "get_build",
    "list_runs",
    "get_run",
    "wait_for_runs",
    "download_run_file",
    "list_endpoints",
)
"""Tools that change nothing on the service (download_run_file writes only into the server's
download folder); the only ones `--read-only` exposes."""
WRITE_TOOLS: Final = (
    "upload_build",
    "delete_build",
    "run_test",
    "run_project",
    "stop_run",
    "add_endpoint",
    "delete_endpoint",
)
DESTRUCTIVE_TOOLS: Final = frozenset({"delete_build", "stop_run", "delete_endpoint"})
# Every tool, in the order of the spec's operations (the three extras where they fit).
TOOLS: Final = (
    "list_builds",
    "get_build",
    "upload_build",
    "delete_build",
    "run_test",
    "run_project",
    "list_runs",
    "get_run",
    "stop_run",
    "wait_for_runs",
    "download_run_file",
    "list_endpoints",
    "add_endpoint",
    "delete_endpoint",
)

# Calling these again with the same arguments changes nothing more (upload_build resumes or, with
# skip_existing, finds the same build; the deletes and the stop are no-ops the second time).
_IDEMPOTENT: Final = frozenset(
    {"delete_build", "stop_run", "delete_endpoint", "download_run_file", "upload_build"}
)

DEFAULT_WAIT_TIMEOUT: Final = 600.0
MAX_WAIT_TIMEOUT: Final = 3600.0
# Progress notifications are sent at most this often (seconds); the last state is always sent.
PROGRESS_EVERY: Final = 0.5
_REDACTED: Final = "[redacted]"

_INSTRUCTIONS = """\
Tools of the Test-Run Service, which runs automated tests against apps and reports a verdict per \
run. Ids carry their kind: p_ project, ab_ build, t_ test, j_ run, ep_ endpoint. The usual job: \
upload_build (an .apk or .app.zip on this machine) -> run_project (or run_test) with that build \
-> wait_for_runs with the started run ids -> read each run's verdict and failed requirements \
with their reasons -> get_run or download_run_file for details. Errors say what to fix."""


# --- argument types: the schemas carry the spec's rules; the library enforces them -------------


def _string(description: str, **rules: Any) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "description": description, **rules})


ProjectId = Annotated[str, _string("The project (p_...)", pattern="^p_")]
BuildId = Annotated[str, _string("The build (ab_...)", pattern="^ab_")]
TestId = Annotated[str, _string("The test (t_...)", pattern="^t_")]
RunId = Annotated[str, _string("The run (j_...)", pattern="^j_")]
EndpointId = Annotated[str, _string("The tester endpoint (ep_...)", pattern="^ep_")]
# Context is generic over the lifespan state and the request; this server uses neither.
ToolContext = Context[Any, Any]

_MODE_TEXT = (
    "auto (default): replay the learned path when it is fresh, otherwise explore; "
    "cold: always explore; warm: only replay"
)
Mode = Annotated[str | None, _string(_MODE_TEXT, enum=sorted(proto.MODES))]
IdempotencyKey = Annotated[
    str | None,
    _string(
        "Optional. The same key on a retried call returns the first call's runs instead of "
        "starting new ones; one is made up when left out",
        minLength=1,
        maxLength=255,
    ),
]
_STATUS_ORDER = [status.value for status in RunStatus]


# --- structured results ------------------------------------------------------------------------


class FailedRequirement(TypedDict):
    id: str
    title: str
    reason: str


class BuildsResult(TypedDict):
    builds: list[dict[str, Any]]
    maxBytes: int | None
    partBytes: int | None


class BuildResult(TypedDict):
    build: dict[str, Any]


class DeletedResult(TypedDict):
    id: str
    ok: bool


class RunStartResult(TypedDict):
    runId: str
    mode: str | None
    overage: Any
    link: str | None


class ProjectRunResult(TypedDict):
    runIds: list[str]
    started: list[dict[str, Any]]
    skipped: list[dict[str, Any]]


class RunsResult(TypedDict):
    runs: list[dict[str, Any]]


class RunResult(TypedDict):
    run: dict[str, Any]
    failedRequirements: list[FailedRequirement]
    captures: dict[str, str]
    files: list[str]


class StopResult(TypedDict):
    id: str
    status: str


class RunVerdict(TypedDict):
    id: str
    testId: str | None
    testTitle: str | None
    status: str
    outcome: str
    final: bool
    verdict: str | None
    headline: str | None
    durationMs: int | None
    failedRequirements: list[FailedRequirement]
    error: dict[str, str] | None
    link: str | None


class WaitResult(TypedDict):
    done: bool
    summary: str
    runs: list[RunVerdict]
    pending: list[str]
    unknown: list[str]


class DownloadResult(TypedDict):
    runId: str
    file: str
    path: str
    size: int


class EndpointsResult(TypedDict):
    endpoints: list[dict[str, Any]]


class EndpointAddedResult(TypedDict):
    id: str


# --- the server --------------------------------------------------------------------------------


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(path).resolve()


def _non_empty(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(value for value in values if value)


@attrs.frozen(kw_only=True)
class ServerOptions:
    """What `asyncclient mcp` was started with, besides the session."""

    download_dir: Path = attrs.field(default=Path("."), converter=_resolved)
    """The only folder download_run_file writes into (made absolute)."""
    read_only: bool = False
    """Offer only READ_TOOLS."""
    poll_interval: float = 3.0
    """wait_for_runs: seconds between sweeps, growing while nothing changes."""
    key_source: str | None = None
    """Where the key came from ("--api-key" or "ASYNCCLIENT_API_KEY"), named in a 401's advice."""
    secrets: tuple[str, ...] = attrs.field(default=(), converter=_non_empty)
    """Text that must never reach a client (the API key): scrubbed from every answer."""


def create_server(session: AsyncSession, options: ServerOptions) -> MCPServer[Any]:
    """An MCPServer whose tools call `session`; with options.read_only only READ_TOOLS."""
    server: MCPServer[Any] = MCPServer(
        "asyncclient",
        title="Test-Run Service",
        instructions=_INSTRUCTIONS,
        version=__version__,
        # The SDK's own log lines (tool failures at INFO) would repeat what the client is told.
        log_level="WARNING",
    )
    tools = _Tools(session, options)
    for name in TOOLS:
        if options.read_only and name not in READ_TOOLS:
            continue
        fn = getattr(tools, name)
        read_only = name in READ_TOOLS and name != "download_run_file"
        server.add_tool(
            fn,
            name=name,
            description=_describe(fn),
            annotations=ToolAnnotations(
                title=name.replace("_", " ").capitalize(),
                read_only_hint=read_only,
                destructive_hint=None if read_only else name in DESTRUCTIVE_TOOLS,
                idempotent_hint=None if read_only else name in _IDEMPOTENT,
                open_world_hint=False,
            ),
        )
    return server


def _describe(fn: Callable[..., Any]) -> str:
    """A tool's description: its docstring as one paragraph per blank-line-separated block."""
    doc = fn.__doc__ or ""
    blocks = [" ".join(block.split()) for block in doc.strip().split("\n\n")]
    return "\n\n".join(block for block in blocks if block)


async def serve_stdio(server: MCPServer[Any]) -> None:
    await server.run_stdio_async()


async def serve_http(
    server: MCPServer[Any], host: str, port: int, announce: Callable[[str], None]
) -> None:
    """Serve the streamable HTTP transport on host:port (0: a free port) until cancelled.

    The socket is bound here so that the address announced is the real one; on a loopback
    host the SDK also refuses requests whose Host or Origin is not loopback (DNS rebinding).
    """
    import uvicorn

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.create_server((host, port), family=family)
    try:
        bound = sock.getsockname()[1]
        app = server.streamable_http_app(host=host)
        shown = f"[{host}]" if ":" in host else host
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        announce(f"MCP server on http://{shown}:{bound}/mcp (streamable HTTP)")
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()


class _Tools:
    """The tools, as methods: each docstring is the description an agent reads."""

    def __init__(self, session: AsyncSession, options: ServerOptions) -> None:
        self._session = session
        self._options = options

    # --- answers -------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._options.secrets:
            text = text.replace(secret, _REDACTED)
        return text

    async def _answer(self, work: Awaitable[Mapping[str, Any]]) -> CallToolResult:
        """The tool's result as structured content (and the same JSON as text), or a tool error
        with the CLI's one-line message. Cancellation passes through."""
        try:
            value = await work
        except Exception as exc:
            return self._error(exc)
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        scrubbed = self._scrub(text)
        if scrubbed != text:  # never expected: the session keeps the key to itself
            value = json.loads(scrubbed)
        return CallToolResult(
            content=[TextContent(type="text", text=scrubbed)], structured_content=dict(value)
        )

    def _error(self, exc: Exception) -> CallToolResult:
        try:
            message, _code = describe_error(exc, key_source=self._options.key_source)
        except Exception:
            logger.exception("a tool failed unexpectedly")
            message = (
                f"internal error in asyncclient mcp ({type(exc).__name__}: {exc}); "
                "the server's log (stderr) has the details"
            )
        return CallToolResult(
            content=[TextContent(type="text", text=self._scrub(message))], is_error=True
        )

    # --- builds --------------------------------------------------------------------------------

    async def list_builds(self, project_id: ProjectId) -> Annotated[CallToolResult, BuildsResult]:
        """List a project's app builds, newest first: id, status (uploading, ready, rejected),
        platform, app id and name, version, label, size and times. Also the largest build the
        service takes (maxBytes) and the upload part size (partBytes)."""

        async def work() -> BuildsResult:
            found = await self._session.list_builds(project_id)
            return {
                "builds": [_compact(_json(build)) for build in found.builds],
                "maxBytes": found.max_bytes,
                "partBytes": found.part_bytes,
            }

        return await self._answer(work())

    async def get_build(self, build_id: BuildId) -> Annotated[CallToolResult, BuildResult]:
        """Show one build with every field: status, app id, version, version code, minimum OS,
        ABIs or architectures, warnings from the service's check, sha256 and label."""

        async def work() -> BuildResult:
            return {"build": _compact(_json(await self._session.get_build(build_id)))}

        return await self._answer(work())

    async def delete_build(self, build_id: BuildId) -> Annotated[CallToolResult, DeletedResult]:
        """Delete a build. Runs that used it keep their results; a build that a test pins cannot
        be deleted. Needs a key that can also create and edit tests."""

        async def work() -> DeletedResult:
            await self._session.delete_build(build_id)
            return {"id": build_id, "ok": True}

        return await self._answer(work())

    async def upload_build(
        self,
        project_id: ProjectId,
        path: Annotated[
            str,
            _string(
                "Path on the machine this server runs on: an Android .apk, a zipped iOS "
                "Simulator app (.app.zip) or an iOS Simulator .app folder; relative paths start "
                "at the server's working directory",
                minLength=1,
            ),
        ],
        ctx: ToolContext,
        # Free text is typed plain `str` ("" for none): the SDK parses a `str | None` argument
        # that looks like JSON into an object before validating it.
        label: Annotated[
            str, _string("Optional free label kept with the build, such as a commit")
        ] = "",
        skip_existing: Annotated[
            bool,
            Field(
                description="Return a ready build of the project with the same file name, size "
                "and sha256 instead of uploading it again"
            ),
        ] = False,
    ) -> Annotated[CallToolResult, BuildResult]:
        """Upload an app build from this machine and return it checked by the service: app id,
        version, platform and whether its devices can run it (a build they cannot run is an
        error that says why). The file is checked first, sent in parallel parts, resumed if an
        earlier upload of it was cut off, and its sha256 verified. Progress is reported in bytes.
        Use the returned build id with run_project or run_test."""

        async def work() -> BuildResult:
            file = _local_path(path)
            reporter = _ProgressReporter(ctx)

            def progress(done: int, total: int) -> None:
                shown = f"{format_size(done)} of {format_size(total)}"
                reporter.update(done, total, f"uploading {file.name}: {shown}")

            try:
                build = await self._session.upload_build(
                    project_id,
                    file,
                    label=label or None,
                    progress=progress,
                    skip_existing=skip_existing,
                )
            finally:
                await reporter.close()
            return {"build": _compact(_json(build))}

        return await self._answer(work())

    # --- runs ----------------------------------------------------------------------------------

    async def run_test(
        self,
        test_id: TestId,
        mode: Mode = None,
        build_id: Annotated[
            str | None,
            _string(
                "For app tests: run this build (ab_...); without it the newest ready build of "
                "the test's app runs",
                pattern="^ab_",
            ),
        ] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Annotated[CallToolResult, RunStartResult]:
        """Start a run of one test. Returns the run id (j_...), the mode actually used, whether
        the run goes beyond the plan's included runs (overage) and the result page link. Runs
        take minutes: follow them with wait_for_runs."""

        async def work() -> RunStartResult:
            start = await self._session.run_test(
                test_id, mode=mode, build_id=build_id, idempotency_key=idempotency_key
            )
            return {
                "runId": start.run_id,
                "mode": start.mode,
                "overage": start.overage,
                "link": start.link,
            }

        return await self._answer(work())

    async def run_project(
        self,
        project_id: ProjectId,
        mode: Mode = None,
        build_ids: Annotated[
            list[str] | None,
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^ab_"},
                    "maxItems": proto.IDS_PER_REQUEST,
                    "description": "Builds to run (ab_..., up to 50, at most one per app): each "
                    "app test runs the build of its own app",
                }
            ),
        ] = None,
        build_id: Annotated[
            str | None,
            _string("One build to run (ab_...), the same as build_ids with one id", pattern="^ab_"),
        ] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Annotated[CallToolResult, ProjectRunResult]:
        """Start a run of every test of a project (a suite). Returns runIds (pass them to
        wait_for_runs), each started run with its test, mode, build and link, and the tests that
        could not start with the reason. When nothing starts it is an error listing why."""

        async def work() -> ProjectRunResult:
            if build_ids is not None and len(build_ids) > proto.IDS_PER_REQUEST:
                raise ValidationError(
                    f"build_ids takes at most {proto.IDS_PER_REQUEST} builds; got {len(build_ids)}"
                )
            start = await self._session.run_project(
                project_id,
                mode=mode,
                build_ids=build_ids,
                build_id=build_id,
                idempotency_key=idempotency_key,
            )
            return {
                "runIds": [run.run_id for run in start.started],
                "started": [_compact(_json(run)) for run in start.started],
                "skipped": [_compact(_json(test)) for test in start.skipped],
            }

        return await self._answer(work())

    async def list_runs(
        self,
        ids: Annotated[
            list[str] | None,
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^j_"},
                    "minItems": 1,
                    "maxItems": proto.IDS_PER_REQUEST,
                    "description": "Up to 50 run ids (j_...): their full views, in this order",
                }
            ),
        ] = None,
        test_id: Annotated[
            str | None, _string("Only runs of this test (t_...)", pattern="^t_")
        ] = None,
        project_id: Annotated[
            str | None, _string("Only runs of this project (p_...)", pattern="^p_")
        ] = None,
        status: Annotated[
            str | None, _string("Only runs with this status", enum=_STATUS_ORDER)
        ] = None,
        limit: Annotated[
            int | None,
            WithJsonSchema(
                {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": proto.LIST_LIMIT_MAX,
                    "description": "At most this many runs (default 50, at most 200)",
                }
            ),
        ] = None,
    ) -> Annotated[CallToolResult, RunsResult]:
        """List runs, newest first: id, test, status, mode, source, platform, build, times,
        duration and link. Filter by test, project or status; with ids, those runs in full
        (verdict, headline, requirements) in the order given. To wait for runs to finish use
        wait_for_runs instead of calling this repeatedly."""

        async def work() -> RunsResult:
            if ids is not None and len(ids) > proto.IDS_PER_REQUEST:
                raise ValidationError(
                    f"list_runs takes at most {proto.IDS_PER_REQUEST} ids; got {len(ids)}: "
                    "ask in several calls, or use wait_for_runs, which takes any number"
                )
            runs = await self._session.list_runs(
                ids=ids, test_id=test_id, project_id=project_id, status=status, limit=limit
            )
            return {"runs": [_compact(_json(run)) for run in runs]}

        return await self._answer(work())

    async def get_run(self, run_id: RunId) -> Annotated[CallToolResult, RunResult]:
        """Show one run. While it is not final only its status means something; once final: the
        verdict, headline, each requirement's result with its reason (failedRequirements lists
        those that failed), values captured, the run's files (for download_run_file) and the
        result page link."""

        async def work() -> RunResult:
            from asyncclient.cli._download import run_files

            run = await self._session.get_run(run_id)
            return {
                "run": _compact(_json(run)),
                "failedRequirements": _failed(run),
                "captures": run.capture_values,
                "files": [f.path or f.link for f in run_files(run)],
            }

        return await self._answer(work())

    async def stop_run(self, run_id: RunId) -> Annotated[CallToolResult, StopResult]:
        """Stop a queued or running run; it ends cancelled and is not counted. A run that is
        already final cannot be stopped."""

        async def work() -> StopResult:
            return {"id": run_id, "status": str(await self._session.stop_run(run_id))}

        return await self._answer(work())

    async def wait_for_runs(
        self,
        run_ids: Annotated[
            list[str],
            WithJsonSchema(
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^j_"},
                    "minItems": 1,
                    "description": "The runs to wait for (j_...), any number, such as the "
                    "runIds that run_project returned",
                }
            ),
        ],
        ctx: ToolContext,
        timeout_seconds: Annotated[
            float,
            WithJsonSchema(
                {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MAX_WAIT_TIMEOUT,
                    "description": "Give up waiting after this many seconds (default 600, at "
                    "most 3600); the runs keep going on the service",
                }
            ),
        ] = DEFAULT_WAIT_TIMEOUT,
    ) -> Annotated[CallToolResult, WaitResult]:
        """Wait until every run is final and return each run's status, verdict, headline, failed
        requirements with their reasons, error and result page link, plus a one-line summary.
        Polls in batches (50 runs per request), reporting progress as runs finish. If the time
        limit passes first, done is false and pending lists the runs still going: call again
        with those ids. Ids the service does not know are listed in unknown."""

        async def work() -> WaitResult:
            if isinstance(timeout_seconds, bool) or not 0 < timeout_seconds <= MAX_WAIT_TIMEOUT:
                raise ValidationError(
                    f"timeout_seconds must be above 0 and at most {MAX_WAIT_TIMEOUT:g}; "
                    f"got {timeout_seconds!r}: wait again with the pending ids for longer"
                )
            return await self._wait(run_ids, ctx, timeout_seconds)

        return await self._answer(work())

    async def _wait(self, run_ids: list[str], ctx: ToolContext, seconds: float) -> WaitResult:
        interval = self._options.poll_interval
        watcher = self._session.watch_runs(
            run_ids, interval=interval, max_interval=max(interval, 30.0), timeout=seconds
        )
        total = len(watcher.run_ids)
        final: set[str] = set()
        reporter = _ProgressReporter(ctx)
        done = True
        async with watcher:
            try:
                async for run in watcher:
                    if run.is_final:
                        final.add(run.id)
                    count = f"{len(final)} of {total} runs final"
                    reporter.update(len(final), total, f"{count}; {run.id} is {run.status}")
            except WatchTimeoutError:
                done = False
            finally:
                await reporter.close()
            runs = list(watcher.runs.values())
            unknown = list(watcher.unknown)
        pending = [run.id for run in runs if not run.is_final]
        return {
            "done": done and not pending,
            "summary": _reports.counts_line(runs)
            + (f"; {len(unknown)} unknown" if unknown else "")
            + (f"; still going after {seconds:g} s: {len(pending)}" if pending else ""),
            "runs": [_verdict(run) for run in runs],
            "pending": pending,
            "unknown": unknown,
        }

    async def download_run_file(
        self,
        run_id: RunId,
        file: Annotated[
            str,
            _string(
                "The file: a path such as video.mp4 or screenshots/01.png (get_run lists them "
                "under files), or its full link",
                minLength=1,
            ),
        ],
        save_as: Annotated[
            str | None,
            _string(
                "Where to save it, relative to the server's download folder (default "
                "RUN_ID/FILE); absolute paths and '..' are refused",
                minLength=1,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, DownloadResult]:
        """Download one file of a finished run (its video or a screenshot) into the download
        folder this server was started with, never outside it. A partial file from an earlier
        attempt is resumed. Returns the saved path (relative to the download folder and on this
        machine) and its size."""

        async def work() -> DownloadResult:
            from asyncclient.cli._download import file_path

            rel = file_path(file, proto.check_id("run", run_id))
            target = self._target(save_as if save_as is not None else f"{run_id}/{rel}")
            await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
            saved = await self._session.download_run_file(run_id, file.strip(), target)
            size = (await asyncio.to_thread(saved.stat)).st_size
            return {
                "runId": run_id,
                "file": rel,
                "path": saved.relative_to(self._options.download_dir).as_posix(),
                "size": size,
            }

        return await self._answer(work())

    def _target(self, relative: str) -> Path:
        """`relative` inside the download folder, or ValidationError: no absolute path, no '..',
        and no symbolic link that leads out of it."""
        root = self._options.download_dir
        posix = PurePosixPath(relative.replace("\\", "/"))
        if posix.is_absolute() or Path(relative).is_absolute() or Path(relative).drive:
            raise ValidationError(
                f"save_as {relative!r} is an absolute path: give a path relative to the "
                "download folder"
            )
        if any(part == ".." for part in posix.parts) or not posix.parts:
            raise ValidationError(
                f"save_as {relative!r} leaves the download folder: give a path inside it, "
                "without '..'"
            )
        target = (root / Path(*posix.parts)).resolve()
        if not target.is_relative_to(root) or target == root:
            raise ValidationError(
                f"save_as {relative!r} leads outside the download folder (a symbolic link): "
                "choose another name"
            )
        return target

    # --- tester endpoints ----------------------------------------------------------------------

    async def list_endpoints(
        self, project_id: ProjectId
    ) -> Annotated[CallToolResult, EndpointsResult]:
        """List a project's tester endpoints (calls into the customer's own systems that the
        tester may make during a run): id, name, description, method, url and times. Header
        values are never returned."""

        async def work() -> EndpointsResult:
            found = await self._session.list_endpoints(project_id)
            return {"endpoints": [_compact(_json(endpoint)) for endpoint in found]}

        return await self._answer(work())

    async def add_endpoint(
        self,
        project_id: ProjectId,
        name: Annotated[
            str,
            _string(
                "Short name, such as create_voucher",
                minLength=1,
                maxLength=proto.ENDPOINT_NAME_MAX,
            ),
        ],
        description: Annotated[
            str,
            _string(
                "What the call does and when the tester should use it",
                minLength=1,
                maxLength=proto.ENDPOINT_DESCRIPTION_MAX,
            ),
        ],
        url: Annotated[str, _string("The address to call: https:// only", pattern="^https://")],
        method: Annotated[
            str, _string("HTTP method (default POST)", enum=sorted(proto.ENDPOINT_METHODS))
        ] = "POST",
        # Any, so that a malformed value is refused by the library, which never echoes header
        # values (the SDK's own validation error would quote them).
        headers: Annotated[
            Any,
            WithJsonSchema(
                {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "maxProperties": proto.ENDPOINT_HEADERS_MAX,
                    "description": "Request headers (up to 20), such as an Authorization "
                    "token: stored encrypted, never returned or shown",
                }
            ),
        ] = None,
        body_template: Annotated[
            str,
            _string(
                "Optional request body text, often JSON; {{param}} placeholders are filled in "
                "by the tester"
            ),
        ] = "",
    ) -> Annotated[CallToolResult, EndpointAddedResult]:
        """Register a tester endpoint in a project: a call into the customer's own system (for
        example creating a voucher) that the automated tester may make during a run. The tester
        sees only its name, description and what the call returned. Using endpoints in runs
        needs a paid plan; adding one needs a key that can also create and edit tests."""

        async def work() -> EndpointAddedResult:
            endpoint_id = await self._session.add_endpoint(
                project_id,
                name,
                description,
                url,
                method=method,
                headers=headers,
                body_template=body_template or None,
            )
            return {"id": endpoint_id}

        # Header values are secrets: the library never puts them in a result or an error.
        return await self._answer(work())

    async def delete_endpoint(
        self, endpoint_id: EndpointId
    ) -> Annotated[CallToolResult, DeletedResult]:
        """Delete a tester endpoint. Needs a key that can also create and edit tests."""

        async def work() -> DeletedResult:
            await self._session.delete_endpoint(endpoint_id)
            return {"id": endpoint_id, "ok": True}

        return await self._answer(work())


class _ProgressReporter:
    """Turns the library's progress callbacks (plain functions, called often) into MCP progress
    notifications: at most one per PROGRESS_EVERY seconds, and always the last state."""

    def __init__(self, ctx: ToolContext) -> None:
        self._ctx = ctx
        self._latest: tuple[float, float, str] | None = None
        self._sent: tuple[float, float, str] | None = None
        self._last_sent_at = 0.0
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    def update(self, done: float, total: float, message: str) -> None:
        self._latest = (done, total, message)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            wait = self._last_sent_at + PROGRESS_EVERY - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._wake.clear()
            await self._send()

    async def _send(self) -> None:
        latest = self._latest
        if latest is None or latest == self._sent:
            return
        self._sent = latest
        self._last_sent_at = time.monotonic()
        done, total, message = latest
        try:
            await self._ctx.report_progress(done, total, message)
        except Exception:  # a client that went away must not fail the work itself
            logger.debug("progress notification not sent", exc_info=True)

    async def close(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        await self._send()


# --- shaping results ---------------------------------------------------------------------------


def _local_path(path: str) -> Path:
    return Path(path).expanduser()


def _json(value: Any) -> Any:
    return to_json(value)


def _compact(value: Any) -> Any:
    """Drop the fields the service did not send (None): agents read every token."""
    if isinstance(value, dict):
        return {key: _compact(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_compact(item) for item in value]
    return value


def _failed(run: Run) -> list[FailedRequirement]:
    # Read leniently whatever shape the service gave them (asyncclient._lenient).
    # title: the check's words; id: its id, when the service gave one besides.
    return [
        {"id": req.name if req.title else "", "title": req.title or req.name, "reason": req.reason}
        for req in _reports.failed_requirements(run)
    ]


def _verdict(run: Run) -> RunVerdict:
    code, message = _reports.error_details(run)
    return {
        "id": run.id,
        "testId": run.test_id,
        "testTitle": run.test_title,
        "status": _reports.status_of(run),
        "outcome": _reports.outcome(run),
        "final": run.is_final,
        "verdict": run.verdict_text or None,
        "headline": run.headline_text or None,
        "durationMs": run.duration_ms,
        "failedRequirements": _failed(run),
        "error": {"code": code, "message": message} if code or message else None,
        "link": run.link,
    }
