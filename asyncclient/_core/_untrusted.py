"""The one sanitiser of text the service, a repository or a CI sent, on its way to a person or
a CI system: `line()` (one line, controls and bidi overrides shown as escapes), `cell()`,
`block()`, `guard()` (a line a CI never runs as a workflow command), `markdown()`,
`json_text()`, `clip()`, and GitHub's workflow escapes. docs/security.md says what each
stops. A leaf: it imports nothing of the package.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "TITLE_LIMIT",
    "block",
    "cell",
    "clip",
    "guard",
    "json_text",
    "line",
    "markdown",
    "workflow_data",
    "workflow_property",
]

TITLE_LIMIT: Final = 500
"""The longest title or reason (in characters) kept by the bounded readers (the flakiness
analysis, the quarantine writer); longer ones are cut, ending in an ellipsis."""

# C0 but whitespace, DEL, C1, bidi controls, the BOM.
_SHOWN: Final = re.compile(
    "[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)
# Whitespace a terminal may act on: folded to a space.
_SPACES: Final = re.compile(r"\s+")
# Spaces and rich's colour codes before a `::`.
_WORKFLOW_START: Final = re.compile(r"^((?:\s|\x1b\[[0-9;]*m)*)::")
# What can start Markdown inside a line.
_MARKDOWN_ACTIVE: Final = re.compile(r"([\\`*_\[\]<>&|~:@!#$]|(?<=[wW]{3})\.)")
_JSON_RAW: Final = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def line(value: object) -> str:
    """One line of text, safe for a terminal or a log: whitespace folded to single spaces,
    other controls shown as escapes (see the module doc). None is empty."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    folded = " ".join(text.split())
    # Printable text skips the substitution.
    return folded if folded.isprintable() else _SHOWN.sub(_escape, folded)


def cell(value: object) -> str:
    """A table cell: one line (`line()`) that is never a workflow command (`guard()`)."""
    return guard(line(value))


def guard(text: str) -> str:
    """A whole output line that a CI system may read: never a workflow command (see the
    module doc)."""
    if "::" in text:
        text = _WORKFLOW_START.sub(r"\1\\::", text, count=1)
    if "##[" in text:
        text = text.replace("##[", "##\\[")
    return text


def block(text: str) -> str:
    """Lines of text (new lines kept), each made safe as `line()` and `guard()` do, leading
    indentation kept."""
    if text.isprintable():
        return guard(text)
    out = []
    for raw in text.split("\n"):
        stripped = raw.lstrip(" ")
        indent = raw[: len(raw) - len(stripped)]
        body = stripped.replace("\t", "    ")
        out.append(guard(indent + _SHOWN.sub(_escape, _fold_inner(body))))
    return "\n".join(out)


def _fold_inner(text: str) -> str:
    # Other whitespace becomes a space; alignment stays.
    return "".join(" " if ch.isspace() else ch for ch in text) if not text.isprintable() else text


def markdown(value: object) -> str:
    """Service text for Markdown, shown as the text it is (see the module doc)."""
    return _MARKDOWN_ACTIVE.sub(r"\\\1", line(value))


def json_text(dumped: str) -> str:
    """JSON text (from json.dumps) with the characters a terminal would act on, and `##[`,
    written as JSON escapes: the same JSON value, safe to print."""
    if dumped.isascii() and "\x7f" not in dumped:
        return dumped.replace("##[", "##\\u005b") if "##[" in dumped else dumped
    dumped = _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)
    return dumped.replace("##[", "##\\u005b") if "##[" in dumped else dumped


def clip(text: str, limit: int = TITLE_LIMIT) -> str:
    """`text` cut to `limit` characters, the last one an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def workflow_data(text: str) -> str:
    """A workflow command's data escaped as GitHub's runner reads it (`%`, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def workflow_property(text: str) -> str:
    """A workflow command's property value escaped as GitHub's runner reads it."""
    return workflow_data(text).replace(":", "%3A").replace(",", "%2C")
