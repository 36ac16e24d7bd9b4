"""The operations the service's API spec lists (tests/data/api-spec.md, a copy of it)."""

from __future__ import annotations

import re
from pathlib import Path

SPEC = Path(__file__).parent / "data" / "api-spec.md"
_LINE = re.compile(
    r"^#### (?P<title>.+)\n\n- (?P<method>[A-Z]+) (?P<path>/\S+)\. "
    r"(?:Tool: (?P<tool>\w+)|REST only)\.",
    re.M,
)


def _shape(path: str) -> str:
    """A path with its placeholders unnamed: `/builds/{}` for `{buildId}` and `{build_id}`."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def spec_operations() -> dict[tuple[str, str], tuple[str, str | None]]:
    """Each operation the spec lists, by (method, path shape): its heading and its tool."""
    found = {
        (m["method"], _shape(m["path"])): (m["title"], m["tool"])
        for m in _LINE.finditer(SPEC.read_text())
    }
    assert len(found) >= 10, "the spec's operations were not read: did its layout change?"
    return found
