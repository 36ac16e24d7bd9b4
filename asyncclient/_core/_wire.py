"""The wire without I/O: the headers every request carries, URLs and their segments, the id
batches of one request, and reading what answers carry (Retry-After, Content-Range, request
ids, an excerpt of a body for messages). Plain functions of their arguments, tested without a
server."""

import math
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

from asyncclient._core._checks import ID_PREFIXES
from asyncclient._core._operations import API_PREFIX
from asyncclient._values._bounds import digits
from asyncclient.errors import ValidationError

__all__ = [
    "API_PREFIX",
    "REQUEST_ID_HEADERS",
    "RedactedStr",
    "base_headers",
    "batched",
    "excerpt",
    "is_url",
    "parse_content_range",
    "parse_retry_after",
    "parse_unsatisfied_range",
    "request_id_of",
    "run_file_path",
    "segment",
    "user_agent",
]

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_FILES_MARKER = "/files/"


# --- headers ------------------------------------------------------------------------------------


def user_agent(version: str, aiohttp_version: str, suffix: str | None = None) -> str:
    """The User-Agent header: asyncclient/<v> (+aiohttp/<v>; python/<v>) [suffix]."""
    py = ".".join(str(part) for part in sys.version_info[:3])
    agent = f"asyncclient/{version} (+aiohttp/{aiohttp_version}; python/{py})"
    if suffix:
        suffix = suffix.strip()
        if any(not ch.isprintable() for ch in suffix):
            raise ValidationError("user_agent must be printable text without control characters")
        agent = f"{agent} {suffix}"
    return agent


class RedactedStr(str):
    """A header value that reprs as *** so dicts of headers never show it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"


def base_headers(api_key: str, agent: str) -> dict[str, str]:
    """The headers every request carries (built once per session)."""
    return {
        "Authorization": RedactedStr(f"Bearer {api_key}"),
        "User-Agent": agent,
        "Accept": "application/json",
    }


# --- urls ---------------------------------------------------------------------------------------


def segment(value: str) -> str:
    """One path segment, percent-encoded (ids are already checked; this keeps odd ones safe)."""
    return quote(value, safe="")


def run_file_path(run_id: str, file: object) -> str:
    """The file part of a run-file URL (percent-encoded) from a relative path or a full link
    taken from the run.

    A full URL (http(s)://host/...) is already percent-encoded, so each of its segments is
    decoded before being encoded again; a path is taken literally (a "%" in it is a "%").
    """
    if not isinstance(file, str) or not file.strip():
        raise ValidationError("file must be a run file path such as video.mp4, or its link")
    marker = file.rfind(_FILES_MARKER)
    if marker >= 0:
        head, rel = file[:marker], file[marker + len(_FILES_MARKER) :]
        link_run = head.rsplit("/", 1)[-1]
        if link_run.startswith(ID_PREFIXES["run"]) and link_run != run_id:
            raise ValidationError(
                f"the file link belongs to run {link_run}, not {run_id}: pass the matching run id"
            )
    else:
        rel = file
    rel = rel.split("?", 1)[0].split("#", 1)[0].strip("/")
    parts = rel.split("/")
    if is_url(file):
        parts = [unquote(part) for part in parts]
    # A decoded "/" or NUL would leave dest.
    if not rel or any(part in ("", ".", "..") or "/" in part or "\x00" in part for part in parts):
        raise ValidationError(f"{file!r} is not a run file path (for example screenshots/01.png)")
    return "/".join(segment(part) for part in parts)


def is_url(value: str) -> bool:
    """True for a full http(s) URL with a host (a link), False for a path."""
    parts = urlsplit(value.strip())
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def batched(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- answers ------------------------------------------------------------------------------------


def excerpt(body: bytes, limit: int = 200) -> str:
    """A short one-line piece of a body for messages."""
    text = " ".join(body[: limit * 4].decode("utf-8", "replace").split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta seconds or an HTTP date), else None."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if digits(value):
        return float(value)
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        # Fractions are tolerated; negatives and nan are not.
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    from email.utils import parsedate_to_datetime  # only dates need this import

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """(first, last, total) of `Content-Range: bytes first-last/total`; None if not of that form."""
    if not value:
        return None
    match = _CONTENT_RANGE.fullmatch(value.strip())
    if match is None:
        return None
    first, last, total = match.groups()
    return int(first), int(last), None if total == "*" else int(total)


def parse_unsatisfied_range(value: str | None) -> int | None:
    """The total size in `Content-Range: bytes */SIZE` (a 416 answer)."""
    if not value:
        return None
    match = re.fullmatch(r"bytes\s+\*/(\d+)", value.strip())
    return int(match.group(1)) if match else None


# Where services put an answer's id (first wins).
REQUEST_ID_HEADERS: Final = (
    "X-Request-Id",
    "Request-Id",
    "X-Amzn-RequestId",
    "X-Amz-Request-Id",
    "X-Correlation-Id",
    "X-Trace-Id",
)
_REQUEST_ID_KEYS: Final = ("requestId", "request_id", "requestID")


def _clean_request_id(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    value = value.strip()
    # Ids are short and printable, or not shown.
    if not value or len(value) > 200 or not value.isprintable():
        return None
    return value


def request_id_of(
    headers: Mapping[str, str] | None, details: Mapping[str, Any] | None = None
) -> str | None:
    """The service's id of an answer: from the usual headers, else from the error body's
    fields (`requestId`, `request_id`); None when it gave none."""
    if headers:
        for name in REQUEST_ID_HEADERS:
            found = _clean_request_id(headers.get(name))
            if found:
                return found
    for key in _REQUEST_ID_KEYS:
        found = _clean_request_id((details or {}).get(key))
        if found:
            return found
    return None
