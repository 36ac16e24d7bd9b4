"""Every local check of what a caller passes, made before any request: ids, choices, list
limits, file names and sizes, endpoints, numbers, labels and idempotency keys. Each is a plain
function of its arguments that returns the value checked or raises ValidationError saying what
is wrong and how to fix it; this is the one home of each check, so no other module writes one.
"""

import hashlib
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from asyncclient._core._suggest import did_you_mean
from asyncclient.errors import ValidationError

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

_ID_TAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def is_id(kind: str, value: object) -> bool:
    """Whether `value` is an id of `kind` the API could have made (check_id's rule, without
    the message): how the service's ids are checked before they are printed or handed on."""
    prefix = ID_PREFIXES[kind]
    return (
        isinstance(value, str)
        and value.startswith(prefix)
        and _ID_TAIL.fullmatch(value, len(prefix)) is not None
    )


def check_id(kind: str, value: object, param: str | None = None) -> str:
    """Return value when it looks like an id of `kind`, else raise ValidationError saying why."""
    prefix = ID_PREFIXES[kind]
    if type(value) is str and value.startswith(prefix) and _ID_TAIL.fullmatch(value, len(prefix)):
        return value
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


def check_id_list(kind: str, values: object, name: str, *, unique: bool = True) -> list[str]:
    """`values` as a list of ids of `kind`, each checked, and with `unique` duplicates dropped
    (the first kept): the one check of every argument that lists ids (run_ids, build_ids,
    ids)."""
    prefix = ID_PREFIXES[kind]
    if isinstance(values, str | bytes):
        raise ValidationError(f"{name} must be a list of {kind} ids ({prefix}...), not one string")
    if not isinstance(values, Iterable):
        raise ValidationError(f"{name} must be a list of {kind} ids ({prefix}...)")
    checked = [check_id(kind, value, name) for value in values]
    return list(dict.fromkeys(checked)) if unique else checked


class CheckedIds(tuple[str, ...]):
    """Ids already checked and unique, which check_run_ids takes as they are: the run
    watcher's batches, checked once when their ids were added rather than on every sweep
    (100,000 ids a sweep)."""

    __slots__ = ()


def check_run_ids(ids: object) -> list[str]:
    """Validate and de-duplicate run ids, keeping the first-seen order; at least one."""
    if type(ids) is CheckedIds and ids:
        return list(ids)
    unique = check_id_list("run", ids, "ids")
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


# --- numbers and labels ------------------------------------------------------------------------


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


def check_days(value: object) -> float:
    """A window of history in days: a number above 0 (fractions allowed)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValidationError(f"days must be a number of days above 0 (such as 14); got {value!r}")
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


KEY_LENGTH: Final = 64
"""The longest idempotency key the client derives: the spec states no limit, and a service
that keeps only a prefix must still tell every key apart (the digest comes first)."""
_KEY_TAIL: Final = re.compile(r"[^A-Za-z0-9._:/-]")


def derived_key(base: str, *parts: str, label: str | None = None) -> str:
    """The idempotency key of one start within a job whose own key is `base` (a re-run, a
    repeat, a verification's run, the CI start): a digest of the whole first, then `label`
    (default: the parts) for a person to read, `KEY_LENGTH` characters at most. Equal inputs
    give equal keys, so a job run again with its key starts nothing twice; a service that
    keeps only the first 32 characters still tells every start apart."""
    whole = "\x1f".join((base, *parts)).encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(whole).hexdigest()[:32]
    readable = "/".join(parts) if label is None else label
    return f"{digest}-{_KEY_TAIL.sub('_', readable)}"[:KEY_LENGTH]


_ON: Final = frozenset({"1", "true", "yes", "on"})
_OFF: Final = frozenset({"", "0", "false", "no", "off"})


def switch(text: str) -> bool | None:
    """An on/off setting's words, as variables and CI inputs give them: 1, true, yes, on (any
    case) or 0, false, no, off and nothing; None for anything else (the caller names it)."""
    word = text.strip().lower()
    return True if word in _ON else False if word in _OFF else None


def run_body(
    mode: object, build_ids: object, build_id: object, idempotency_key: object
) -> tuple[dict[str, Any], str]:
    """The checked JSON body and Idempotency-Key of run_test (build_ids None) or run_project."""
    payload: dict[str, Any] = {}
    if mode is not None:
        payload["mode"] = check_choice("mode", mode, MODES)
    if build_ids is not None:
        checked = check_id_list("build", build_ids, "build_ids", unique=False)
        if len(checked) > IDS_PER_REQUEST:
            raise ValidationError(
                f"build_ids may name at most {IDS_PER_REQUEST} builds (one per app); "
                f"got {len(checked)}"
            )
        if checked:
            payload["buildIds"] = checked
    if build_id is not None:
        payload["buildId"] = check_id("build", build_id)
    return payload, check_idempotency_key(idempotency_key)
