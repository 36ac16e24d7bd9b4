"""The wire protocol without I/O: urls, headers, input checks, decoding and retry decisions.
Everything here is a plain function of its arguments, so it is tested without a server.
Over 400 lines: it is the one home of every local check, so that no other module writes one."""

import math
import re
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

from asyncclient._suggest import did_you_mean
from asyncclient.errors import ValidationError

API_PREFIX: Final = "/api/v1"
API_KEY_ENV: Final = "ASYNCCLIENT_API_KEY"
BASE_URL_ENV: Final = "ASYNCCLIENT_BASE_URL"

# Resource kind -> (id prefix, what the prefix names in messages).
ID_PREFIXES: Final[Mapping[str, str]] = {
    "project": "p_",
    "build": "ab_",
    "test": "t_",
    "run": "j_",
    "endpoint": "ep_",
}
_KIND_BY_PREFIX: Final = {prefix: kind for kind, prefix in ID_PREFIXES.items()}

MODES: Final = frozenset({"auto", "cold", "warm"})
RUN_STATUSES: Final = frozenset(
    {"queued", "running", "passed", "failed", "blocked", "inconclusive", "error", "cancelled"}
)
ENDPOINT_METHODS: Final = frozenset({"POST", "GET", "PUT", "PATCH", "DELETE"})
ENDPOINT_NAME_MAX: Final = 40
ENDPOINT_DESCRIPTION_MAX: Final = 600
ENDPOINT_HEADERS_MAX: Final = 20
LIST_LIMIT_MAX: Final = 200
IDS_PER_REQUEST: Final = 50
APP_SUFFIXES: Final = (".apk", ".app.zip")

# 408 and 429 say "try again later"; 5xx are the service's own faults.
RETRYABLE_STATUSES: Final = frozenset({408, 429, *range(500, 600)})

_ID_TAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_FILES_MARKER = "/files/"


# --- configuration ------------------------------------------------------------------------------


def resolve_api_key(
    api_key: str | None,
    environ: Mapping[str, str],
    *,
    flag: str = "api_key=",
    hint: str | None = None,
) -> str:
    """The API key from the argument or the environment; refused with the fix when missing.
    `flag` names the argument in messages (the CLI passes "--api-key"); `hint` replaces the
    variable named in that message (a configuration file's api_key_env)."""
    key = api_key if api_key else environ.get(API_KEY_ENV, "")
    key = key.strip()
    if not key:
        raise ValidationError(f"no API key: {hint or 'set ' + API_KEY_ENV} or pass {flag}")
    # Checked here because a control character would otherwise surface as an aiohttp error
    # at the first request; the message deliberately does not repeat the key.
    if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in key):
        raise ValidationError(
            "the API key contains spaces or control characters: copy it again without them "
            f"({flag} or {API_KEY_ENV})"
        )
    return key


def resolve_base_url(
    base_url: str | None, environ: Mapping[str, str], *, flag: str = "base_url="
) -> str:
    """The service's base URL (scheme and host, no /api/v1) from the argument or environment.
    `flag` names the argument in messages (the CLI passes "--base-url")."""
    given = bool(base_url and base_url.strip())
    url = base_url if given and base_url is not None else environ.get(BASE_URL_ENV, "")
    url = url.strip().rstrip("/")
    if not url:
        raise ValidationError(
            f"no service address: pass {flag} or set {BASE_URL_ENV} (for example "
            "https://service.example; `asyncclient serve` runs a local emulator)"
        )
    source = flag.rstrip("=") if given else BASE_URL_ENV
    key_flag = "--api-key" if flag.startswith("--") else "api_key="
    try:
        parts = urlsplit(url)
        shown = _without_userinfo(url)
        if parts.username is not None or parts.password is not None:
            # A password in the URL would end up in logs and messages: the key is the header.
            raise ValidationError(
                f"{source} {shown} carries a user name or password: give the address alone "
                f"(https://host[:port]) and the key with {key_flag} or {API_KEY_ENV}"
            )
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError(
            f"{source} {_without_userinfo(url)} is not a valid address ({exc}): give it as "
            "https://host[:port]"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            f"{source} {shown} is not an http(s) address: give it as https://host[:port]"
        )
    if parts.query or parts.fragment:
        raise ValidationError(f"{source} {shown} must not carry a query or fragment")
    # People paste the API root; the paths below already carry the version prefix.
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    return url


MAX_RESPONSE_BYTES_ENV: Final = "ASYNCCLIENT_MAX_RESPONSE_BYTES"
DEFAULT_MAX_RESPONSE_BYTES: Final = 32 << 20


def resolve_max_response_bytes(
    value: object, environ: Mapping[str, str], *, flag: str = "max_response_bytes="
) -> int:
    """The largest answer read into memory: the argument, the variable, or 32 MiB."""
    source = flag.rstrip("=")
    if value is None:
        text = environ.get(MAX_RESPONSE_BYTES_ENV, "").strip()
        if not text:
            return DEFAULT_MAX_RESPONSE_BYTES
        source = MAX_RESPONSE_BYTES_ENV
        try:
            value = int(text)
        except ValueError:
            raise ValidationError(
                f"{source} {text!r} is not a number of bytes: give a whole number such as "
                f"{DEFAULT_MAX_RESPONSE_BYTES}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
        raise ValidationError(
            f"{source} must be a whole number of bytes, at least 1024 (default "
            f"{DEFAULT_MAX_RESPONSE_BYTES}, 32 MiB)"
        )
    return value


def resolve_retry_deadline(
    value: object, environ: Mapping[str, str], *, flag: str = "retry_deadline="
) -> float:
    """Seconds within which an outage is retried: the argument, ASYNCCLIENT_RETRY_DEADLINE,
    or 30; 0 turns it off (an outage then counts against max_retries like any failure)."""
    source = flag.rstrip("=")
    if value is None:
        text = environ.get("ASYNCCLIENT_RETRY_DEADLINE", "").strip()
        if not text:
            return 30.0
        source = "ASYNCCLIENT_RETRY_DEADLINE"
        try:
            value = float(text)
        except ValueError:
            value = text
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValidationError(
            f"{source} {value!r} is not a number of seconds: give 0 or more (default 30; 0 "
            "retries an outage only max_retries times)"
        )
    return float(value)


def _without_userinfo(url: str) -> str:
    """The URL as it may be shown: any `user:password@` before the host replaced by `***@`."""
    if "@" not in url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "***"
    host_part, slash, path = rest.partition("/")
    if "@" in host_part:
        host_part = "***@" + host_part.rpartition("@")[2]
    return f"{scheme}://{host_part}{slash}{path}"


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


# --- input checks -------------------------------------------------------------------------------


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def check_id(kind: str, value: object, param: str | None = None) -> str:
    """Return value when it looks like an id of `kind`, else raise ValidationError saying why."""
    prefix = ID_PREFIXES[kind]
    name = param or f"{kind}_id"
    if not isinstance(value, str):
        raise ValidationError(
            f"{name} must be a string {kind} id ({prefix}...), not {type(value).__name__}"
        )
    if value.startswith(prefix) and _ID_TAIL.fullmatch(value, len(prefix)):
        return value
    for other_prefix, other_kind in _KIND_BY_PREFIX.items():
        if other_kind != kind and value.startswith(other_prefix):
            raise ValidationError(
                f"{value} is not {_a(kind)} id: {kind} ids start with {prefix} "
                f"({value} looks like {_a(other_kind)} id); check the {name} argument"
            )
    if value.startswith(prefix):
        raise ValidationError(
            f"{value!r} is not a valid {kind} id: after {prefix} only letters, digits, "
            f"'_', '-' and '.' may follow; check the {name} argument"
        )
    raise ValidationError(
        f"{value!r} is not {_a(kind)} id: {kind} ids start with {prefix}; check the {name} argument"
    )


def check_choice(name: str, value: object, allowed: frozenset[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        choices = ", ".join(sorted(allowed))
        hint = did_you_mean(value, sorted(allowed)) if isinstance(value, str) else ""
        raise ValidationError(f"{name} must be one of {choices}; got {value!r}{hint}")
    return value


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValidationError(f"limit must be a whole number from 1 to {LIST_LIMIT_MAX}")
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise ValidationError(
            f"limit must be from 1 to {LIST_LIMIT_MAX}; got {limit} "
            "(fetch more by narrowing with test_id, project_id or status)"
        )
    return limit


def check_run_ids(ids: object) -> list[str]:
    """Validate and de-duplicate run ids, keeping the first-seen order."""
    if isinstance(ids, str | bytes):
        raise ValidationError("ids must be a list of run ids (j_...), not one string")
    if not isinstance(ids, Iterable):
        raise ValidationError("ids must be a list of run ids (j_...)")
    unique = list(dict.fromkeys(check_id("run", run_id, "ids") for run_id in ids))
    if not unique:
        raise ValidationError("ids is empty: pass at least one run id, or ids=None to list runs")
    return unique


def check_file_name(file_name: object) -> str:
    if not isinstance(file_name, str) or not file_name.strip():
        raise ValidationError("file_name must be the app's file name, ending .apk or .app.zip")
    if "/" in file_name or "\\" in file_name:
        raise ValidationError(
            f"file_name {file_name!r} must be a bare file name, not a path (use its basename)"
        )
    if not file_name.lower().endswith(APP_SUFFIXES):
        raise ValidationError(
            f"file_name {file_name!r} must end .apk (Android) or .app.zip (a zipped iOS "
            "Simulator .app)"
        )
    return file_name


def check_size(size: object, name: str = "size") -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValidationError(f"{name} must be the file's size in bytes, a number above 0")
    return size


def check_part_number(part_number: object) -> int:
    if isinstance(part_number, bool) or not isinstance(part_number, int) or part_number < 1:
        raise ValidationError(
            f"part_number must be a whole number from 1 (parts count from 1); got {part_number!r}"
        )
    return part_number


def check_endpoint(
    name: object,
    description: object,
    url: object,
    method: object,
    headers: object,
    body_template: object,
) -> dict[str, Any]:
    """Check an endpoint against the service's limits and return its wire body."""
    if not isinstance(name, str) or not 1 <= len(name) <= ENDPOINT_NAME_MAX:
        got = len(name) if isinstance(name, str) else type(name).__name__
        raise ValidationError(
            f"endpoint name must be 1 to {ENDPOINT_NAME_MAX} characters (got {got}); "
            "use a short name such as create_voucher"
        )
    if not isinstance(description, str) or not 1 <= len(description) <= ENDPOINT_DESCRIPTION_MAX:
        got = len(description) if isinstance(description, str) else type(description).__name__
        raise ValidationError(
            f"endpoint description must be 1 to {ENDPOINT_DESCRIPTION_MAX} characters "
            f"(got {got}); say what the call does and when to use it, briefly"
        )
    if not isinstance(url, str) or not url.startswith("https://") or not urlsplit(url).netloc:
        raise ValidationError(
            "endpoint url must be an https:// address with a host (plain http is refused)"
        )
    method_upper = method.upper() if isinstance(method, str) else method
    check_choice("endpoint method", method_upper, ENDPOINT_METHODS)
    body: dict[str, Any] = {
        "name": name,
        "description": description,
        "method": method_upper,
        "url": url,
    }
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise ValidationError("endpoint headers must be a mapping of header name to value")
        if len(headers) > ENDPOINT_HEADERS_MAX:
            raise ValidationError(
                f"an endpoint may carry at most {ENDPOINT_HEADERS_MAX} headers; got "
                f"{len(headers)}: drop the ones the call does not need"
            )
        for header_name, header_value in headers.items():
            # Never echo the value: header values are secrets.
            if not isinstance(header_name, str) or not header_name:
                raise ValidationError("endpoint header names must be non-empty strings")
            if not isinstance(header_value, str):
                raise ValidationError(f"endpoint header {header_name!r} must have a string value")
        body["headers"] = dict(headers)
    if body_template is not None:
        if not isinstance(body_template, str):
            raise ValidationError("body_template must be a string (it may hold {{param}} slots)")
        body["bodyTemplate"] = body_template
    return body


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
    # A decoded "/" or NUL would leave the folder given as dest, or not name a file at all.
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
    if value.isdigit():
        return float(value)
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        # Not RFC 9110, but some services send fractions; negatives and nan are nonsense.
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


# --- retries ------------------------------------------------------------------------------------


class RetrySignal(Exception):
    """Raised by one attempt to ask the retry loop for another; carries the error to raise if
    the attempts run out and the service's Retry-After, if any."""

    def __init__(
        self, error: BaseException, retry_after: float | None = None, *, outage: bool = False
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        # The service looks down or restarting (no connection, 502/503/504): retried until
        # the retry deadline rather than for a number of tries (asyncclient._retry).
        self.outage = outage
        self.wait = 0.0  # the wait the retry policy chose after it (asyncclient._retry)


OUTAGE_STATUSES: Final = frozenset({502, 503, 504})
DEFAULT_RETRY_DEADLINE: Final = 30.0
RETRY_DEADLINE_ENV: Final = "ASYNCCLIENT_RETRY_DEADLINE"


# Where services put the id of an answer (the first one found wins).
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
    # An id is short and printable: anything else is not shown (it could be a whole page).
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


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES


def should_retry_transport(*, idempotent: bool, never_sent: bool) -> bool:
    """A connection failure is retried for idempotent requests, and for the others only when
    the request surely never reached the service (it could not even connect)."""
    return idempotent or never_sent


# --- checks of numbers and labels (the one home of each) -----------------------------------------


def check_number(name: str, value: object, *, minimum: float, integer: bool = False) -> float:
    """value as a number of at least `minimum` (a whole one if `integer`), else ValidationError."""
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(value)  # type: ignore[arg-type]
        or value < minimum  # type: ignore[operator]
    ):
        kind = "a whole number" if integer else "a number"
        raise ValidationError(f"{name} must be {kind} of at least {minimum:g}; got {value!r}")
    return value  # type: ignore[return-value]


def check_count(name: str, value: object, minimum: int = 1) -> int:
    """A whole number of at least `minimum` (1): a concurrency, a limit of parts or sweeps."""
    return int(check_number(name, value, minimum=minimum, integer=True))


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A duration in seconds: above 0, or 0 or more with allow_zero."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{name} must be a number of seconds; got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "above 0"
        raise ValidationError(f"{name} must be {bound}; got {value!r}")
    return float(value)


def check_label(label: object) -> str | None:
    """A build's label: a string (for example a commit id) or None."""
    if label is not None and not isinstance(label, str):
        raise ValidationError("label must be a string (for example a commit id) or None")
    return label


def check_idempotency_key(key: object) -> str:
    """The Idempotency-Key of a run start: the one given, or a new uuid4."""
    if key is None:
        return str(uuid.uuid4())
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= 255
        or not all(ch.isascii() and ch.isprintable() for ch in key)
    ):
        raise ValidationError("idempotency_key must be 1 to 255 printable ASCII characters")
    return key
