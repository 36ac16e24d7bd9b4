"""Decoding the service's answers: JSON bodies into models, error answers into the error tree.
Sans I/O: functions of (status, headers, body); the session calls them, tests call them alone.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar
from urllib.parse import urljoin, urlsplit, urlunsplit

import orjson

from asyncclient._core._checks import check_id
from asyncclient._core._converter import (
    converter,
    structure_hook,
    structure_list,
    structure_skipped,
    structure_started,
    structure_status,
)
from asyncclient._core._wire import API_PREFIX, excerpt, parse_retry_after, request_id_of
from asyncclient._values._lenient import decode_error_body, rejection_problems, start_lists
from asyncclient.errors import (
    ApiError,
    BadRequestError,
    BuildRejectedError,
    ConflictError,
    NotFoundError,
    NotStartedError,
    PaymentRequiredError,
    PermissionDeniedError,
    RateLimitedError,
    RedirectError,
    ServerError,
    UnauthenticatedError,
    reason_phrase,
)
from asyncclient.models import (
    Build,
    BuildList,
    Endpoint,
    ProjectRunStart,
    Run,
    RunStart,
    UploadedPart,
    UploadStart,
)

__all__ = [
    "echoing_part",
    "error_class",
    "error_from_response",
    "fitting_start",
    "read_build",
    "read_build_list",
    "read_endpoints",
    "read_id",
    "read_project_run_start",
    "read_raw_runs",
    "read_run",
    "read_run_start",
    "read_runs",
    "read_runs_of",
    "read_runs_within",
    "read_status",
    "read_upload_start",
    "read_uploaded_part",
    "structure_error_details",
]

T = TypeVar("T")


# --- success bodies ------------------------------------------------------------------------------


def _field(key: str, cls: type[T]) -> Callable[[Any], T]:
    hook = structure_hook(cls)

    def read(payload: Any) -> T:
        return hook(payload[key])

    return read


def _list_field(key: str, cls: type[T]) -> Callable[[Any], list[T]]:
    def read(payload: Any) -> list[T]:
        return structure_list(cls, payload[key])

    return read


read_build: Final = _field("build", Build)
read_build_list: Final = structure_hook(BuildList)
read_upload_start: Final = structure_hook(UploadStart)
read_uploaded_part: Final = structure_hook(UploadedPart)
_structure_run_start: Final = structure_hook(RunStart)
_structure_project_run_start: Final = structure_hook(ProjectRunStart)


def read_run_start(payload: Any) -> RunStart:
    """A Start run answer; its run id checked before anything prints or follows it (a
    ValidationError, a ValueError: the transport reports an answer that could not be read)."""
    start = _structure_run_start(payload)
    check_id("run", start.run_id, "the answer's runId")
    return start


def read_project_run_start(payload: Any) -> ProjectRunStart:
    """A Run project answer; each started run's id and test id checked (as read_run_start)."""
    start = _structure_project_run_start(payload)
    for started in start.started:
        check_id("run", started.run_id, "the answer's runId")
        check_id("test", started.test_id, "the answer's testId")
    return start


read_run: Final = _field("run", Run)
read_runs: Final = _list_field("runs", Run)


def read_runs_of(ids: Sequence[str]) -> Callable[[Any], list[Run]]:
    """A List runs answer to `ids=`: only the runs asked for are structured (a service that
    answers more costs the decoding of its JSON, never more runs)."""
    wanted = frozenset(ids)

    def read(payload: Any) -> list[Run]:
        runs = payload["runs"]
        if isinstance(runs, list):
            runs = [
                r
                for r in runs
                if not isinstance(r, dict) or r.get("id", "") in wanted or "id" not in r
            ]
        return structure_list(Run, runs)

    return read


def read_runs_within(limit: int) -> Callable[[Any], list[Run]]:
    """A List runs answer cut to the `limit` asked before it is structured: a service that
    ignores the limit costs the decoding of its JSON, never more runs than asked."""

    def read(payload: Any) -> list[Run]:
        runs = payload["runs"]
        if isinstance(runs, list) and len(runs) > limit:
            runs = runs[:limit]
        return structure_list(Run, runs)

    return read


read_endpoints: Final = _list_field("endpoints", Endpoint)


def read_raw_runs(payload: Any) -> list[Mapping[str, Any]]:
    """The runs of a List runs answer as JSON objects (the watcher structures only changes)."""
    runs = payload["runs"]
    if not isinstance(runs, list):
        raise TypeError(f"expected a list of runs, got {type(runs).__name__}")
    # Elements without an id match no watched run.
    return [run for run in runs if isinstance(run, dict) and isinstance(run.get("id"), str)]


def read_status(payload: Any) -> str:
    return structure_status(payload["status"])


def read_id(payload: Any) -> str:
    value = payload["id"]
    if not isinstance(value, str):
        raise TypeError("id is not a string")
    return value


# --- error answers -------------------------------------------------------------------------------


_BY_CODE: dict[str, type[ApiError]] = {
    "build_rejected": BuildRejectedError,
    "not_started": NotStartedError,
    "empty": NotStartedError,
    # A bad or missing key, whether 401 or 403.
    "unauthenticated": UnauthenticatedError,
    "invalid_key": UnauthenticatedError,
    "invalid_api_key": UnauthenticatedError,
    "unknown_key": UnauthenticatedError,
    "missing_key": UnauthenticatedError,
    "invalid_token": UnauthenticatedError,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthenticatedError,
    402: PaymentRequiredError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    429: RateLimitedError,
}


def error_class(status: int, code: str | None) -> type[ApiError]:
    """The class for an error answer: by code first, then by status."""
    if code is not None:
        by_code = _BY_CODE.get(code)
        if by_code is not None:
            return by_code
    by_status = _BY_STATUS.get(status)
    if by_status is not None:
        return by_status
    if 500 <= status <= 599:
        return ServerError
    return ApiError


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    method: str,
    url: str,
) -> ApiError:
    """The ApiError for an error answer, whatever shape its body has (sans I/O: no raise).

    The body is read by asyncclient._values._lenient.decode_error_body: nested, flat, `{"error":
    "text"}` and `{"errors": [...]}` bodies, details inside the error or beside it, and plain
    text or HTML pages (a proxy's) all give a code (when there is one) and a message.
    """
    if 300 <= status < 400:
        return _redirect(status, headers, method, url)
    read = decode_error_body(body, _loads)
    code, message, details = read.code, read.message, read.details
    if not message:
        message = reason_phrase(status)
        if body and read.parsed is not None and not isinstance(read.parsed, str):
            message = f"{message}; the answer was {excerpt(body)!r}"
    cls = error_class(status, code)
    retry_after = parse_retry_after(headers.get("Retry-After"))
    if retry_after is None:
        hinted = details.get("retryAfter", details.get("retry_after"))
        if isinstance(hinted, int | float) and not isinstance(hinted, bool) and hinted >= 0:
            retry_after = float(hinted)
    err = cls(
        status,
        code,
        message,
        read.parsed,
        method,
        url,
        retry_after=retry_after,
        details=details,
        request_id=request_id_of(headers, details),
    )
    if isinstance(err, BuildRejectedError | NotStartedError):
        structure_error_details(err, details)
    return err


def _redirect(status: int, headers: Mapping[str, str], method: str, url: str) -> RedirectError:
    """A redirect, never followed (the key would go with it): say where it points and which
    base URL would reach that place."""
    raw = (headers.get("Location") or "").strip()
    if not raw:
        return RedirectError(status, None, "a redirect without a Location", None, method, url)
    location = _shown_url(urljoin(url, raw))
    parts = urlsplit(location)
    suggested: str | None = None
    if parts.scheme in ("http", "https") and parts.netloc:
        prefix, marker, _ = parts.path.partition(API_PREFIX + "/")
        base = f"{parts.scheme}://{parts.netloc}"
        if marker:
            suggested = base + prefix.rstrip("/")
        elif _path_of(url) == parts.path or parts.path in ("", "/"):
            suggested = base
    message = f"a redirect to {location}, not followed (the API key goes nowhere else)"
    if suggested and suggested != _base_of(url):
        message += f"; if that is the service, use the base URL {suggested}"
    return RedirectError(
        status, None, message, None, method, url, location=location, suggested_base_url=suggested
    )


def _shown_url(url: str) -> str:
    """A URL without any user name or password in it."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _path_of(url: str) -> str:
    return urlsplit(url).path


def _base_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _loads(body: bytes | str) -> Any:
    return orjson.loads(body)


def structure_error_details(
    err: "BuildRejectedError | NotStartedError", details: Mapping[str, Any]
) -> None:
    """Attach the typed extras of build_rejected / not_started / empty errors, leniently: the
    readers of asyncclient._values._lenient find them under any usual key, inside the error or
    beside it; a part of another shape is left at its default rather than hiding the error."""
    if isinstance(err, BuildRejectedError):
        err.problems = rejection_problems(details, message=err.message)
        build = details.get("build")
        if isinstance(build, Mapping):
            try:
                err.build = converter.structure(build, Build)
            except (KeyError, TypeError, ValueError):
                err.build = None
    else:
        started, skipped = start_lists(details)
        err.started = structure_started(started)
        err.skipped = structure_skipped(skipped)


def fitting_start(start: UploadStart, size: int) -> UploadStart:
    """The start_upload answer, if its part size and count fit the file (ValueError, read as an
    invalid answer, otherwise)."""
    if start.part_bytes <= 0 or start.parts != -(-size // start.part_bytes):
        raise ValueError(
            f"partBytes {start.part_bytes} and parts {start.parts} do not fit a file of "
            f"{size} bytes"
        )
    return start


def echoing_part(part: UploadedPart, number: int) -> UploadedPart:
    """The upload_part answer, if it names the part sent and gives an etag."""
    if part.part_number != number or not part.etag:
        raise ValueError(f"the answer named part {part.part_number} with etag {part.etag!r}")
    return part
