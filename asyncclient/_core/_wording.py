"""The wording the command line and the tool server share, below both: the one-line message
(and exit code) for an error, sizes for people, models as JSON values, and a run's files.

Neither `asyncclient.cli` nor `asyncclient.mcp_server` owns these: both stand on this module,
so an agent and a person read the same sentence for the same failure.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote, urlsplit

from asyncclient import errors

if TYPE_CHECKING:
    from asyncclient.models import Run

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_LOCAL_IO",
    "EXIT_NOT_PASSED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "RunFile",
    "describe_error",
    "file_path",
    "format_size",
    "run_files",
    "to_json",
]

EXIT_OK = 0
EXIT_NOT_PASSED = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_UNREACHABLE = 4
EXIT_LOCAL_IO = 5  # a local file could not be written
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader left


# --- errors --------------------------------------------------------------------------------------


def _needs_edit_key(method: str, url: str) -> bool:
    """Whether the request was one of the operations that need an edit key (the API spec:
    Delete a build, Add an endpoint, Delete an endpoint)."""
    path = urlsplit(url).path.rstrip("/")
    return method == "DELETE" or (method == "POST" and path.endswith("/endpoints"))


def describe_error(exc: BaseException, *, key_source: str | None = None) -> tuple[str, int]:
    """The one-line message and exit code for an exception of the library (or a local file
    problem); any other exception is raised again.

    key_source: where the API key came from ("--api-key", "ASYNCCLIENT_API_KEY"), named in a
    401's advice.
    """
    if isinstance(exc, errors.ValidationError | errors.MissingExtraError):
        return str(exc), EXIT_BAD_INPUT
    if isinstance(exc, errors.LocalFileError):
        return str(exc), EXIT_LOCAL_IO
    if isinstance(exc, errors.UnauthenticatedError):
        if key_source == "--api-key":
            advice = "check the key given with --api-key"
        elif key_source:
            advice = f"check the key in {key_source}"
        else:
            advice = "check the key in --api-key or ASYNCCLIENT_API_KEY"
        return f"{exc}; {advice}", EXIT_REFUSED
    if isinstance(exc, errors.PermissionDeniedError):
        if _needs_edit_key(exc.method, exc.url):
            advice = (
                "use a key that can also create and edit tests (--api-key or ASYNCCLIENT_API_KEY)"
            )
        else:
            # Some services answer 403 for another project's id.
            advice = "check the id, and that it belongs to one of this key's projects"
        return f"{exc}; {advice}", EXIT_REFUSED
    if isinstance(exc, errors.BuildRejectedError):
        lines = [str(exc)] + [f"  cannot run: {p.message}" for p in exc.problems]
        return "\n".join(lines), EXIT_REFUSED
    if isinstance(exc, errors.NotStartedError):
        lines = [str(exc)] + [f"  skipped {s.test_id}: {s.reason}" for s in exc.skipped]
        return "\n".join(lines), EXIT_REFUSED
    if isinstance(exc, errors.RedirectError):
        line = f"{exc.status} {errors.reason_phrase(exc.status)}: "
        if exc.location is None:
            return line + "a redirect without a Location; check --base-url", EXIT_REFUSED
        line += f"a redirect to {exc.location}, not followed (the API key goes nowhere else)"
        if exc.suggested_base_url:
            line += f"; if that is the service, use --base-url {exc.suggested_base_url}"
        return line, EXIT_REFUSED
    if isinstance(exc, errors.ApiError):
        return str(exc), EXIT_REFUSED
    if isinstance(exc, errors.TransportError) and exc.kind:
        # A network failure that names its own fix (certificate, proxy, TLS).
        return str(exc), EXIT_UNREACHABLE
    if isinstance(exc, errors.TransportError):
        return (
            f"{exc}; check --base-url or ASYNCCLIENT_BASE_URL and that the service is up",
            EXIT_UNREACHABLE,
        )
    if isinstance(exc, errors.AsyncClientError):
        return str(exc), EXIT_REFUSED
    if isinstance(exc, OSError) and exc.strerror:
        # A local file problem (a folder, a full disk).
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}: fix it and run the same command again", EXIT_LOCAL_IO
    raise exc


# --- sizes and JSON ------------------------------------------------------------------------------


def format_size(size: int | None) -> str:
    """Bytes for people: `512 B`, `1.5 KiB`, `12.0 MiB`."""
    if size is None:
        return ""
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def to_json(value: Any) -> Any:
    """Models (or lists of them) as JSON values, as --json and the tools write them.

    Rebuilt from the models, not the bytes the service sent: field names come from the converter
    (the service's names: camelCase; snake_case for endpoints), every field of the model is
    present and null when the service did not send it, and timestamps are written as ISO 8601
    UTC with milliseconds (`2026-11-21T05:00:00.000Z`).
    """
    from asyncclient._core._converter import converter

    return _json_ready(converter.unstructure(value))


def _json_ready(value: Any) -> Any:
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        text = moment.astimezone(UTC).isoformat(timespec="milliseconds")
        return text.removesuffix("+00:00") + "Z"
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item) for item in value]
    return value


# --- a run's files -------------------------------------------------------------------------------


class RunFile(NamedTuple):
    """A file of a run: its local path under the run (None if the link has another form), its
    link, and the service's own name for it where the local one differs (see file_path)."""

    path: str | None
    link: str
    renamed_from: str | None = None


def file_path(value: str, run_id: str) -> str:
    """The path of a run file under its run (`screenshots/01.png`), from a path or a full link.

    The library parses it (asyncclient._core._wire.run_file_path refuses `..`, empty parts and
    links of other runs with a ValidationError); the path is then decoded, and each of its
    parts made a name every platform can store (asyncclient._core._names: no `<>:"\\|?*`, device
    names or trailing dots), so it is the same local path on Linux, macOS and Windows and
    never leaves the folder it is written in.
    """
    from asyncclient._core._names import safe_relative_path
    from asyncclient._core._wire import run_file_path

    return safe_relative_path(unquote(run_file_path(run_id, value.strip())))


def run_files(run: Run) -> list[RunFile]:
    """The video, then the screenshots, of a run (empty before it is final)."""
    from asyncclient._core._wire import run_file_path

    files = []
    for link in run.file_refs:
        try:
            path: str | None = file_path(link, run.id)
            given = unquote(run_file_path(run.id, link.strip()))
        except errors.ValidationError:
            path = given = None
        files.append(RunFile(path, link, given if given != path else None))
    return files
