"""Lenient readers for every part of an answer whose shape the API spec leaves open (a run's
requirements, captures, verdict, files and error, an error body): each turns any dialect's
shape into what the models, reports and CLI need, never raises, and keeps an unknown shape as
compact text. Pure functions of JSON values.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from asyncclient._values._outcomes import CheckOutcome
from asyncclient.apps import Problem

__all__ = [
    "ErrorBody",
    "Requirement",
    "build_id_of",
    "build_sha256_of",
    "build_status_kind",
    "captures",
    "check_result",
    "decode_error_body",
    "error_fields",
    "failed_requirements",
    "file_refs",
    "read_error",
    "rejection_problems",
    "requirements",
    "run_status_kind",
    "start_lists",
    "text",
    "text_of",
    "warning_text",
]


#: Longest text kept from an unreadable value.
_RAW_LIMIT: Final = 300

# Services' words for a passed check, normalised.
_PASSED: Final = frozenset(
    {"passed", "pass", "ok", "okay", "success", "succeeded", "successful", "green", "met",
     "satisfied", "true", "yes", "y", "good", "fulfilled", "done", "complete", "completed"}
)  # fmt: skip
_FAILED: Final = frozenset(
    {"failed", "fail", "failure", "failing", "error", "errored", "ko", "not_ok", "nok", "red",
     "broken", "not_met", "unmet", "unsatisfied", "false", "no", "n", "bad", "violated",
     "rejected", "blocked", "crashed", "timeout", "timed_out"}
)  # fmt: skip
_SKIPPED: Final = frozenset(
    {"skipped", "skip", "cancelled", "canceled", "stopped", "aborted", "not_run", "notrun",
     "not_checked", "unchecked", "n/a", "na", "none", "pending", "ignored", "inconclusive",
     "unknown", "undetermined"}
)  # fmt: skip

# Other services' run statuses, by the spec's word.
_STATUS_SYNONYMS: Final = {
    "queued": ("queued", "pending", "waiting", "scheduled", "created", "new", "accepted"),
    "running": ("running", "in_progress", "inprogress", "started", "executing", "active"),
    "passed": ("passed", "pass", "success", "succeeded", "successful", "ok", "green"),
    "failed": ("failed", "fail", "failure", "red"),
    "blocked": ("blocked",),
    "inconclusive": ("inconclusive", "unknown", "undetermined", "indeterminate"),
    "error": ("error", "errored", "crashed", "timeout", "timed_out"),
    "cancelled": ("cancelled", "canceled", "stopped", "aborted", "killed", "terminated"),
}
_STATUS_KIND: Final = {word: kind for kind, words in _STATUS_SYNONYMS.items() for word in words}

# Other services' build statuses, by their meaning.
_BUILD_SYNONYMS: Final = {
    "uploading": ("uploading", "processing", "pending", "created", "new", "in_progress",
                  "incomplete", "partial", "awaiting_parts", "started", "receiving"),
    "checking": ("checking", "validating", "verifying", "analyzing", "analysing", "scanning"),
    "ready": ("ready", "available", "active", "ok", "processed", "valid", "complete",
              "completed", "success", "succeeded", "done", "accepted"),
    "rejected": ("rejected", "failed", "invalid", "error", "errored", "unsupported",
                 "incompatible", "refused"),
}  # fmt: skip
_BUILD_KIND: Final = {word: kind for kind, words in _BUILD_SYNONYMS.items() for word in words}

# Keys, in order of preference, under which services put each piece.
_NAME_KEYS: Final = ("id", "name", "requirement", "check", "key", "slug", "code")
_TITLE_KEYS: Final = ("title", "name", "label", "description", "requirement", "check", "text")
_RESULT_KEYS: Final = ("result", "status", "outcome", "state", "verdict", "passed", "ok",
                       "success", "succeeded", "met", "failed", "pass")  # fmt: skip
_REASON_KEYS: Final = ("reason", "message", "details", "detail", "explanation", "why",
                       "comment", "error", "description", "evidence", "note", "notes")  # fmt: skip
_TEXT_KEYS: Final = ("text", "message", "summary", "headline", "title", "label", "value",
                     "status", "result", "outcome", "verdict", "name", "description",
                     "detail", "details", "reason", "code")  # fmt: skip
_URL_KEYS: Final = ("url", "href", "link", "uri", "downloadUrl", "download_url", "path",
                    "file", "fileName", "file_name", "name", "src")  # fmt: skip
_LIST_KEYS: Final = ("items", "results", "requirements", "checks", "data", "values", "list")
_CODE_KEYS: Final = ("code", "error_code", "errorCode", "type", "kind", "reason_code")
_MESSAGE_KEYS: Final = ("message", "detail", "details", "title", "error_description",
                        "description", "msg", "reason", "text")  # fmt: skip


def compact(value: Any, limit: int = _RAW_LIMIT) -> str:
    """A JSON value as one short line: what is shown of a shape no reader understands."""
    try:
        dumped = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    except (TypeError, ValueError):
        dumped = repr(value)
    line = " ".join(dumped.split())
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def text(value: Any) -> str:
    """One line of text from any JSON value (None is empty; a string as it is, spaces folded)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return compact(value)


def text_of(value: Any, keys: Iterable[str] = _TEXT_KEYS) -> str:
    """The text a value stands for: a string itself, the first text found under `keys` of an
    object (an object within is read the same way), else the whole value compactly."""
    if value is None or isinstance(value, str | bool | int | float):
        return text(value)
    if isinstance(value, Mapping):
        for key in keys:
            inner = value.get(key)
            if inner is None or inner == "":
                continue
            if isinstance(inner, Mapping):
                found = text_of(inner, keys)
                if found:
                    return found
                continue
            if isinstance(inner, str | bool | int | float):
                return text(inner)
        return compact(value) if value else ""
    if isinstance(value, list | tuple):
        return "; ".join(part for part in (text_of(item, keys) for item in value) if part)
    return text(value)


def _first(mapping: Mapping[str, Any], keys: Iterable[str]) -> tuple[str | None, Any]:
    for key in keys:
        value = mapping.get(key)
        if value is not None and value != "":
            return key, value
    return None, None


def _word(value: str) -> str:
    return "_".join(value.strip().lower().replace("-", " ").split())


def check_result(value: Any, key: str | None = None) -> CheckOutcome:
    """passed, failed, skipped or unknown, from a result sent as a boolean, a word or a number.
    `key` is where it was found: `failed: true` means the opposite of `passed: true`."""
    if isinstance(value, Mapping):
        _inner_key, inner = _first(value, _RESULT_KEYS)
        return check_result(inner, _inner_key) if inner is not None else "unknown"
    if isinstance(value, bool):
        passed = value if key != "failed" else not value
        return "passed" if passed else "failed"
    if isinstance(value, int | float):
        if key == "failed":
            return "failed" if value else "passed"
        return "passed" if value == 1 else "failed" if value == 0 else "unknown"
    if isinstance(value, str):
        word = _word(value)
        outcome: CheckOutcome = (
            "passed" if word in _PASSED
            else "failed" if word in _FAILED
            else "skipped" if word in _SKIPPED
            else "unknown"
        )  # fmt: skip
        if key == "failed" and outcome in ("passed", "failed"):
            # `failed: "yes"` is a failure; `failed: "no"` a pass.
            return "failed" if outcome == "passed" else "passed"
        return outcome
    return "unknown"


def run_status_kind(status: Any) -> str:
    """The documented status a run's status word means (`canceled`, `stopped` -> cancelled;
    `SUCCESS` -> passed), or the word itself, lower-cased, when it means none of them."""
    word = _word(text_of(status, ("status", "state", "value", "name", "code"))) if status else ""
    return _STATUS_KIND.get(word, word)


def build_status_kind(status: Any) -> str:
    """What a build's status word means: uploading (parts may still be sent), checking,
    ready, rejected; or the word itself, lower-cased, when it means none of them. A status
    sent as an object is read for its state, status, value or name."""
    word = _word(text_of(status, ("status", "state", "value", "name", "code"))) if status else ""
    return _BUILD_KIND.get(word, word)


@attrs.frozen
class Requirement:
    """One check of a run, read from whatever shape the service sent.

    name: its id or name; title: its title when it has one besides; outcome: passed, failed,
    skipped or unknown; result: the result as the service wrote it; reason: why, as text (the
    whole item, compactly, when no part of it could be read).
    """

    name: str = ""
    title: str = ""
    outcome: CheckOutcome = "unknown"
    result: str = ""
    reason: str = ""

    @property
    def label(self) -> str:
        """name and title together, without repeating one that equals the other."""
        parts = [self.name, self.title] if self.title != self.name else [self.name]
        return " ".join(part for part in parts if part) or "requirement"

    def line(self) -> str:
        """`label: reason` (the form every report shows)."""
        return f"{self.label}: {self.reason}" if self.reason else self.label


def _requirement(item: Any, fallback: str) -> Requirement:
    if isinstance(item, Mapping):
        _name_key, name = _first(item, _NAME_KEYS)
        title_key, title = _first(item, _TITLE_KEYS)
        if title_key == _name_key:
            title = None
        result_key, result = _first(item, _RESULT_KEYS)
        _reason_key, reason = _first(item, _REASON_KEYS)
        # `result: null`: no result (a stopped run), so skipped.
        outcome: CheckOutcome = (
            check_result(result, result_key)
            if result_key is not None or not any(k in item for k in _RESULT_KEYS)
            else "skipped"
        )
        read = Requirement(
            name=text_of(name) if name is not None else "",
            title=text_of(title) if title is not None else "",
            outcome=outcome,
            result=text_of(result) if result is not None else "",
            reason=text_of(reason) if reason is not None else "",
        )
        if not read.name and not read.title:
            read = attrs.evolve(read, name=fallback)
        if read.outcome == "unknown" and not read.reason:
            read = attrs.evolve(read, reason=compact(item))
        return read
    if isinstance(item, bool | int | float):
        return Requirement(name=fallback, outcome=check_result(item), result=text(item))
    if isinstance(item, str):
        outcome = check_result(item)
        if outcome != "unknown":
            return Requirement(name=fallback, outcome=outcome, result=text(item))
        return Requirement(name=fallback, reason=text(item))
    return Requirement(name=fallback, reason=compact(item))


def requirements(value: Any) -> tuple[Requirement, ...]:
    """Each check of a run: from a list of objects (any of the usual key names), an object of
    `{name: result}` or `{name: {...}}`, a list wrapped in an object, or a lone value."""
    if value is None or value == "" or value == [] or value == {}:
        return ()
    if isinstance(value, list | tuple):
        return tuple(_requirement(item, f"#{i}") for i, item in enumerate(value, 1))
    if isinstance(value, Mapping):
        for key in _LIST_KEYS:
            inner = value.get(key)
            if isinstance(inner, list | tuple):
                return requirements(inner)
        if _is_one_requirement(value):
            return (_requirement(value, "requirement"),)
        read: list[Requirement] = []
        for name, item in value.items():
            one = _requirement(item, str(name))
            if isinstance(item, Mapping) and not _first(item, _NAME_KEYS)[1]:
                one = attrs.evolve(one, name=str(name))
            read.append(one)
        return tuple(read)
    return (_requirement(value, "requirements"),)


def _is_one_requirement(value: Mapping[str, Any]) -> bool:
    """An object that is itself one check (`{"id", "result", "reason"}`), not `{name: result}`:
    it has a result key with a plain value and a name or reason beside it."""
    result_key, result = _first(value, _RESULT_KEYS)
    plain = (str, bool, int, float)
    if result_key is None or not isinstance(result, (*plain, Mapping)):
        return False
    others = [k for k in (*_NAME_KEYS, *_TITLE_KEYS, *_REASON_KEYS) if k in value]
    return bool(others) and all(
        isinstance(value[k], plain) or value[k] is None for k in value if k in others
    )


def failed_requirements(value: Any) -> tuple[Requirement, ...]:
    """The checks whose result is a failure, in the service's order."""
    return tuple(req for req in requirements(value) if req.outcome == "failed")


def captures(value: Any) -> dict[str, str]:
    """The values a run read, name -> text: from an object, a list of `{name, value}` (or
    key/label/id and value/text), or anything else kept compactly under "value"."""
    if value is None or value == "" or value == [] or value == {}:
        return {}
    if isinstance(value, Mapping):
        return {str(name): text_of(item, ("value", *_TEXT_KEYS)) for name, item in value.items()}
    if isinstance(value, list | tuple):
        read: dict[str, str] = {}
        for i, item in enumerate(value, 1):
            if isinstance(item, Mapping):
                _k, name = _first(item, ("name", "key", "label", "id", "field", "title"))
                _v, inner = _first(item, ("value", "text", "val", "content", "data"))
                if name is not None:
                    read[text_of(name)] = text_of(inner) if inner is not None else ""
                    continue
            read[f"#{i}"] = text_of(item)
        return read
    return {"value": text(value)}


def file_refs(value: Any) -> tuple[str, ...]:
    """The file references of a run's video or screenshots: file names, relative paths or
    absolute URLs, also inside objects (url, href, path, ...) or lists of either."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value.strip(),) if value.strip() else ()
    if isinstance(value, list | tuple):
        return tuple(ref for item in value for ref in file_refs(item))
    if isinstance(value, Mapping):
        for key in _LIST_KEYS:
            inner = value.get(key)
            if isinstance(inner, list | tuple):
                return file_refs(inner)
        _key, ref = _first(value, _URL_KEYS)
        return file_refs(ref) if isinstance(ref, str | Mapping) else ()
    return ()


def build_id_of(value: Any) -> str | None:
    """The id of the build a run used, whether sent as an id or as an object."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, Mapping):
        _key, found = _first(value, ("id", "buildId", "build_id"))
        return found if isinstance(found, str) and found else None
    return None


def build_sha256_of(value: Any) -> str | None:
    """The sha256 of the build a run used, when the service sent the build as an object that
    carries it (`sha256`, `checksum`, `hash`); lower case, or None."""
    if not isinstance(value, Mapping):
        return None
    _key, found = _first(value, ("sha256", "sha_256", "checksum", "hash"))
    if isinstance(found, str) and len(found) == 64:
        lowered = found.lower()
        if all(c in "0123456789abcdef" for c in lowered):
            return lowered
    return None


def error_fields(value: Any) -> tuple[str, str]:
    """(code, message) of a run's error, sent as an object, a string, or anything else."""
    if value is None or value == "" or value is False:
        return "", ""
    if isinstance(value, Mapping):
        _ck, code = _first(value, _CODE_KEYS)
        _mk, message = _first(value, _MESSAGE_KEYS)
        code_text = code if isinstance(code, str) else ""
        if message is None:
            rest = {k: v for k, v in value.items() if k not in _CODE_KEYS}
            return code_text, compact(rest) if rest else ""
        return code_text, text_of(message)
    return "", text_of(value)


def warning_text(value: Any) -> str:
    """A build warning, sent as a string or as an object with a message (and a code)."""
    if isinstance(value, Mapping):
        code, message = error_fields(value)
        return f"{code}: {message}" if code and message and code not in message else message
    return text_of(value)


# --- error bodies --------------------------------------------------------------------------------


@attrs.frozen
class ErrorBody:
    """What an error answer said, whatever its shape.

    parsed: the JSON value, or the body's text when it was not JSON (None when empty);
    code and message: as found (None when absent); details: the error's fields merged from the
    error object and the top level (where services put extras such as lists and problems).
    """

    parsed: Any = None
    code: str | None = None
    message: str | None = None
    details: Mapping[str, Any] = attrs.field(factory=dict)


_TAG: Final = re.compile(r"<[^>]+>")
_HTML_TITLE: Final = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_HTML_HEADING: Final = re.compile(r"<h1[^>]*>(.*?)</h1>", re.I | re.S)
_SCRIPT: Final = re.compile(r"<(script|style)[^>]*>.*?</\1>", re.I | re.S)
_CODE_LIKE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")


def _html_text(body: str) -> str:
    """The gist of an HTML page (a proxy's error page): its title and first heading."""
    parts: list[str] = []
    for pattern in (_HTML_TITLE, _HTML_HEADING):
        match = pattern.search(body)
        if match:
            found = " ".join(html.unescape(_TAG.sub(" ", match.group(1))).split())
            if found and found not in parts:
                parts.append(found)
    if not parts:
        stripped = " ".join(html.unescape(_TAG.sub(" ", _SCRIPT.sub(" ", body))).split())
        parts.append(stripped)
    line = " - ".join(part for part in parts if part)
    return line if len(line) <= _RAW_LIMIT else line[: _RAW_LIMIT - 1] + "\u2026"


def _looks_like_html(body: str) -> bool:
    head = body.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html", "<head", "<body")) or "<html" in head


def _code_message(obj: Mapping[str, Any]) -> tuple[str | None, str | None]:
    code: str | None = None
    for key in _CODE_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and _CODE_LIKE.match(value):
            code = value
            break
    message: str | None = None
    for key in _MESSAGE_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value.strip():
            message = " ".join(value.split())
            break
    return code, message


def decode_error_body(body: bytes | str | None, parse: Any = json.loads) -> ErrorBody:
    """The code, message and details of an error answer of any shape: `{"error": {...}}`,
    flat `{code, message}`, `{"error": "text"}`, `{"errors": [{...}]}`, details inside the
    error or beside it, a JSON string, plain text, an HTML page, or nothing."""
    if body is None or (isinstance(body, bytes | str) and not body.strip()):
        return ErrorBody()
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        parsed = parse(body)
    except (ValueError, TypeError):
        if _looks_like_html(raw):
            return ErrorBody(raw, None, _html_text(raw) or None)
        line = " ".join(raw.split())
        line = line if len(line) <= _RAW_LIMIT else line[: _RAW_LIMIT - 1] + "\u2026"
        return ErrorBody(raw, None, line or None)
    return read_error(parsed)


def read_error(parsed: Any) -> ErrorBody:
    """decode_error_body for a body already parsed (or kept as text)."""
    if isinstance(parsed, str):
        return ErrorBody(parsed, None, " ".join(parsed.split()) or None)
    if isinstance(parsed, list):
        return _from_error_list(parsed, {}, parsed)
    if not isinstance(parsed, Mapping):
        return ErrorBody(parsed, None, compact(parsed) if parsed is not None else None)
    top = {k: v for k, v in parsed.items() if k not in ("error", "errors")}
    inner = parsed.get("error")
    if isinstance(inner, Mapping):
        details = _with_nested({**top, **inner})
        code, message = _code_message(inner)
        top_code, top_message = _code_message(top)
        return ErrorBody(parsed, code or top_code, message or top_message, details)
    errors = parsed.get("errors")
    if isinstance(errors, list) and errors:
        return _from_error_list(errors, top, parsed)
    top = _with_nested(top)
    code, message = _code_message(top)
    if isinstance(inner, str) and inner.strip():
        # {"error": "code", "message": ...} or {"error": "the whole text"}.
        if message is None:
            message = " ".join(inner.split())
        elif code is None and _CODE_LIKE.match(inner):
            code = inner
    if message is None and isinstance(errors, str) and errors.strip():
        message = " ".join(errors.split())
    return ErrorBody(parsed, code, message, top)


#: Keys under which services nest an error's extra fields.
_NESTED_KEYS: Final = ("details", "detail", "data", "meta", "extra", "extras", "context", "info")


def _with_nested(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The error's fields with those of an object nested under details, data, meta, ... lifted
    beside them (a field already there wins), so lists and problems are found wherever sent."""
    merged = dict(fields)
    for key in _NESTED_KEYS:
        nested = fields.get(key)
        if isinstance(nested, Mapping):
            for inner_key, value in nested.items():
                merged.setdefault(inner_key, value)
    return merged


def _from_error_list(errors: list[Any], top: Mapping[str, Any], parsed: Any) -> ErrorBody:
    first = next((item for item in errors if isinstance(item, Mapping)), None)
    messages = []
    for item in errors:
        if isinstance(item, Mapping):
            _code, message = _code_message(item)
            if message:
                messages.append(message)
        elif isinstance(item, str) and item.strip():
            messages.append(" ".join(item.split()))
    details: dict[str, Any] = dict(top)
    code: str | None = None
    if first is not None:
        details.update(first)
        code, _message = _code_message(first)
    details = _with_nested(details)
    if code is None:
        code = _code_message(top)[0]
    message = "; ".join(dict.fromkeys(messages)) or _code_message(top)[1]
    return ErrorBody(parsed, code, message, details)


# --- build_rejected and not_started details ----------------------------------------------------

_PROBLEM_KEYS: Final = ("problems", "unsupported", "cannotRun", "cannot_run", "incompatible",
                        "incompatibilities", "reasons", "issues", "violations", "rejections",
                        "requirements", "missing", "errors", "details")  # fmt: skip
_KNOWN_DETAIL_KEYS: Final = frozenset(
    {*_CODE_KEYS, *_MESSAGE_KEYS, "build", "status", "meta", "error", "errors", "field",
     "retryAfter", "source", "links", "id", "documentation_url", "doc_url", "requestId",
     "request_id", "traceId", "trace_id", "timestamp"}
)  # fmt: skip


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple):
        return tuple(text_of(item) for item in value if item is not None and item != "")
    return (text_of(value),) if value is not None and value != "" else ()


def _problem(item: Any, kind_hint: str = "") -> Problem:
    if isinstance(item, Mapping):
        _ck, kind = _first(item, ("kind", "type", "code", "category", "what", "name"))
        _fk, found = _first(item, ("found", "actual", "got", "value", "abis", "have"))
        _sk, supported = _first(item, ("supported", "expected", "allowed", "accepted", "want"))
        _mk, message = _first(item, ("message", "reason", "detail", "details", "description",
                                     "text", "title"))  # fmt: skip
        kind_text = text_of(kind) if kind is not None else kind_hint
        message_text = text_of(message) if message is not None else ""
        if not message_text:
            rest = {
                k: v
                for k, v in item.items()
                if k not in ("kind", "type", "code", "category", "found", "supported")
            }
            message_text = compact(rest) if rest else kind_text
            if found is not None or supported is not None:
                message_text = (
                    f"{kind_text or 'unsupported'}: found {', '.join(_strings(found)) or '-'}; "
                    f"supported {', '.join(_strings(supported)) or '-'}"
                )
        return Problem(kind_text, _strings(found), _strings(supported), message_text)
    return Problem(kind_hint, (), (), text_of(item))


def rejection_problems(details: Mapping[str, Any], message: str = "") -> tuple[Problem, ...]:
    """What the devices cannot run, from a build_rejected error's details: a list of problem
    objects or of strings under any of the usual keys (or an object of `{kind: message}`);
    failing those, the details no reader knows, compactly, so nothing the service said is lost.
    `message`: the error's message as read; other text under a message key (`details`,
    `reason`, ...) is not that message but more of what the service said, so it is kept."""
    for key in _PROBLEM_KEYS:
        value = details.get(key)
        if isinstance(value, list | tuple) and value:
            return tuple(_problem(item) for item in value)
        if key in _MESSAGE_KEYS or key in _NESTED_KEYS:
            continue  # a string is the message; an object was lifted beside it
        if isinstance(value, str) and value.strip():
            return (Problem("", (), (), " ".join(value.split())),)
        if isinstance(value, Mapping) and value:
            return tuple(_problem(item, str(kind)) for kind, item in value.items())
    # Left: unknown fields, and known keys holding more.
    said = " ".join(message.split())
    rest = {
        k: v
        for k, v in details.items()
        if k not in _KNOWN_DETAIL_KEYS
        or (k in _MESSAGE_KEYS and not isinstance(v, str | int | float | bool | None))
        or (k in _MESSAGE_KEYS and isinstance(v, str) and v.strip() and " ".join(v.split()) != said)
    }
    rest = {k: v for k, v in rest.items() if k not in _NESTED_KEYS or not isinstance(v, Mapping)}
    return tuple(Problem(str(k), (), (), f"{k}: {text_of(v)}") for k, v in rest.items())


def _test_ref(value: Any) -> str:
    if isinstance(value, Mapping):
        _key, found = _first(value, ("id", "testId", "test_id"))
        return text(found)
    return text(value)


def start_lists(
    details: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The started and skipped lists of a not_started / empty answer (or of a run_project
    answer), found inside the error or beside it and under the usual other names, each item
    rewritten to the documented keys (testId, runId, ..., reason as text, code)."""
    started_raw = _first(details, ("started", "startedRuns", "started_runs", "runs"))[1]
    skipped_raw = _first(
        details, ("skipped", "skippedTests", "skipped_tests", "notStarted", "not_started")
    )[1]
    started = []
    for item in started_raw if isinstance(started_raw, list | tuple) else ():
        if isinstance(item, str | int) and not isinstance(item, bool) and str(item).strip():
            # Plain run ids: the test is known by asking.
            started.append({"testId": "", "runId": str(item).strip(), "buildId": None})
            continue
        if not isinstance(item, Mapping):
            continue
        one = dict(item)
        one.setdefault("testId", _test_ref(_first(item, ("testId", "test_id", "test"))[1]))
        one.setdefault("runId", text(_first(item, ("runId", "run_id", "id"))[1]))
        if "buildId" not in one:
            one["buildId"] = build_id_of(_first(item, ("build_id", "build"))[1])
        started.append(one)
    skipped = []
    for item in skipped_raw if isinstance(skipped_raw, list | tuple) else ():
        if isinstance(item, Mapping):
            test_id = _test_ref(_first(item, ("testId", "test_id", "test", "id"))[1])
            _rk, reason = _first(item, ("reason", "message", "detail", "details", "why",
                                        "error", "description"))  # fmt: skip
            code, reason_message = error_fields(reason) if isinstance(reason, Mapping) else ("", "")
            _ck, own_code = _first(item, ("code", "reasonCode", "reason_code", "errorCode"))
            reason_text = reason_message or (text_of(reason) if reason is not None else "")
            if not reason_text:
                rest = {k: v for k, v in item.items() if k not in ("testId", "test_id", "test")}
                reason_text = compact(rest) if rest else ""
            skipped.append(
                {
                    "testId": test_id,
                    "reason": reason_text,
                    "code": text(own_code) if own_code is not None else (code or None),
                }
            )
        elif item is not None:
            skipped.append({"testId": text(item), "reason": "", "code": None})
    return started, skipped
