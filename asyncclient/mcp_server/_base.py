"""What every tool of the server stands on: the argument types whose schemas carry the spec's
rules, the server's options, the answer (bounded, scrubbed of secrets, errors in the CLI's
words from asyncclient._core._wording) and MCP progress notifications.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final

import attrs
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import WithJsonSchema
from typing_extensions import TypedDict

from asyncclient._client._session import AsyncSession
from asyncclient._core import _defaults as defaults
from asyncclient._core import _wording
from asyncclient.errors import ValidationError
from asyncclient.mcp_server import _budget

__all__ = [
    "Bounded",
    "BuildId",
    "EndpointId",
    "ProgressReporter",
    "ProjectId",
    "RunId",
    "ServerOptions",
    "TestId",
    "ToolContext",
    "ToolKit",
    "check_page",
    "compact",
    "paged",
    "string",
]

logger = logging.getLogger("asyncclient.mcp")

# Progress at most this often (s); the last always sent.
PROGRESS_EVERY: Final = 0.5
DEFAULT_PAGE: Final = 20
MAX_PAGE: Final = 100
_REDACTED: Final = "[redacted]"


# --- argument types: schemas carry the spec's rules ---


def string(description: str, **rules: Any) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "description": description, **rules})


def integer(description: str, **rules: Any) -> WithJsonSchema:
    return WithJsonSchema({"type": "integer", "description": description, **rules})


ProjectId = Annotated[str, string("The project (p_...)", pattern="^p_")]
BuildId = Annotated[str, string("The build (ab_...)", pattern="^ab_")]
TestId = Annotated[str, string("The test (t_...)", pattern="^t_")]
RunId = Annotated[str, string("The run (j_...)", pattern="^j_")]
EndpointId = Annotated[str, string("The tester endpoint (ep_...)", pattern="^ep_")]
Offset = Annotated[
    int,
    integer("Skip this many (default 0): the nextOffset of the previous page", minimum=0),
]
PageSize = Annotated[
    int,
    integer(
        f"At most this many (default {DEFAULT_PAGE}, at most {MAX_PAGE}); fewer when they "
        "would not fit the result's size",
        minimum=1,
        maximum=MAX_PAGE,
    ),
]
# Generic over lifespan and request; neither used.
ToolContext = Context[Any, Any]


class Bounded(TypedDict, total=False):
    """Every result may say what it left out to stay within its size."""

    leftOut: list[str]


# --- options -------------------------------------------------------------------------------------


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(path).resolve()


def _non_empty(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(value for value in values if value)


def _at_least_min(_instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < _budget.MIN_BUDGET:
        raise ValueError(f"{attribute.name} must be at least {_budget.MIN_BUDGET}; got {value!r}")


@attrs.frozen(kw_only=True)
class ServerOptions:
    """What `asyncclient mcp` was started with, besides the session."""

    download_dir: Path = attrs.field(default=Path("."), converter=_resolved)
    """The only folder download_run_file writes into (made absolute)."""
    read_only: bool = False
    """Offer only READ_TOOLS (wins over `tools`)."""
    tools: tuple[str, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(tuple)
    )
    """The tools to offer (select_tools makes it from toolsets and names); None: every tool."""
    poll_interval: float = defaults.INTERVAL
    """wait_for_runs: seconds between sweeps, growing while nothing changes."""
    key_source: str | None = None
    """Where the key came from ("--api-key" or "ASYNCCLIENT_API_KEY"), named in a 401's advice."""
    secrets: tuple[str, ...] = attrs.field(default=(), converter=_non_empty)
    """Text that must never reach a client (the API key): scrubbed from every answer."""
    result_chars: int = attrs.field(default=_budget.LIST_BUDGET, validator=_at_least_min)
    """The most characters of one result (its JSON text); lists page and cut to fit."""
    wait_result_chars: int = attrs.field(default=_budget.WAIT_BUDGET, validator=_at_least_min)
    """The same for wait_for_runs and run_project, whose runs an agent needs together."""


# --- answers ------------------------------------------------------------------------------------


class ToolKit:
    """The base of each resource's tools: the session, the options, and how a result is sent.
    Each public coroutine of a subclass is one tool; its docstring is what an agent reads."""

    def __init__(self, session: AsyncSession, options: ServerOptions) -> None:
        self._session = session
        self._options = options

    def _scrub(self, text: str) -> str:
        for secret in self._options.secrets:
            text = text.replace(secret, _REDACTED)
        return text

    async def _answer(
        self,
        work: Awaitable[Mapping[str, Any]],
        *,
        budget: int | None = None,
        parts: Iterable[str] | None = None,
        advice: Mapping[str, str] | None = None,
    ) -> CallToolResult:
        """The tool's result as structured content and the same JSON as text, cut to its budget
        (`_budget.bound` with `parts` and `advice`), or a tool error with the CLI's one-line
        message. Cancellation passes through."""
        try:
            value = await work
        except Exception as exc:
            return self._error(exc)
        limit = self._options.result_chars if budget is None else budget
        bounded = dict(value)
        text = _budget.dumps(bounded)
        if len(text) > limit:
            bounded = _budget.bound(bounded, limit, parts, advice=advice)
            text = _budget.dumps(bounded)
        if self._scrub(text) != text:  # never expected: the session keeps the key to itself
            bounded = _budget.bound(_scrub_value(bounded, self._scrub), limit)
            text = _budget.dumps(bounded)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=bounded
        )

    def _error(self, exc: Exception) -> CallToolResult:
        try:
            message, _code = _wording.describe_error(exc, key_source=self._options.key_source)
        except Exception:
            logger.exception("a tool failed unexpectedly")
            message = (
                f"internal error in asyncclient mcp ({type(exc).__name__}: {exc}); "
                "the server's log (stderr) has the details"
            )
        message = _budget.clip(message, (self._options.result_chars, 0), "error", _budget.Cuts())
        return CallToolResult(
            content=[TextContent(type="text", text=self._scrub(message))], is_error=True
        )


def _scrub_value(value: Any, scrub: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrub_value(item, scrub) for item in value]
    if isinstance(value, dict):
        return {scrub(key): _scrub_value(item, scrub) for key, item in value.items()}
    return value


def compact(value: Any) -> Any:
    """A model as JSON without the fields the service did not send (None): agents read every
    token."""
    return _drop_none(_wording.to_json(value))


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _drop_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_drop_none(item) for item in value]
    return value


# --- paging over one answer --------------------------------------------------------------------


def check_page(offset: Any, page_size: Any) -> None:
    """ValidationError unless offset >= 0 and 1 <= page_size <= MAX_PAGE (whole numbers)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError(f"offset must be a whole number from 0; got {offset!r}")
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise ValidationError(f"page_size must be a whole number; got {page_size!r}")
    if not 1 <= page_size <= MAX_PAGE:
        raise ValidationError(f"page_size must be from 1 to {MAX_PAGE}; got {page_size}")


def paged(
    items: list[dict[str, Any]],
    *,
    key: str,
    offset: int,
    page_size: int,
    budget: int,
    again: str,
    **extra: Any,
) -> dict[str, Any]:
    """A list tool's result over the service's one answer: `total`, `offset`, `nextOffset` (None
    at the end), under `key` at most page_size items from offset, as many whole ones as fit the
    budget (each clipped to _budget.ITEM_LEVEL), `extra` fields, and in `leftOut` what is left
    and how to ask for it (`again`: the call, such as "list_builds with the same filters")."""
    result: dict[str, Any] = {"total": len(items), "offset": offset, "nextOffset": None, key: []}
    result.update(extra)
    room = budget - _budget.size(result) - 400  # the notes
    window = items[offset : offset + page_size]
    shown, cuts = _budget.fit_items(window, _budget.ITEM_LEVEL, key, room)
    end = offset + len(shown)
    notes = cuts.notes()
    if end < len(items):
        first = offset + 1
        last = f"-{end}" if end > first else ""
        span = f"{key} {first}{last} of {len(items):,} shown" if shown else f"no {key} shown"
        notes.insert(0, f"{span}: call {again} and offset={end} for the next page")
        result["nextOffset"] = end
    elif offset and not shown:
        notes.insert(0, f"offset {offset} is past the last of {len(items):,} {key}")
    result[key] = shown
    if notes:
        result["leftOut"] = notes
    return result


# --- progress ------------------------------------------------------------------------------------


class ProgressReporter:
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
