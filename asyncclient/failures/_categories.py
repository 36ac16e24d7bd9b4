"""Failure categories from the repository's reviewed `failure-categories.toml` (a `[[category]]`
per category: name, kind, `match` or `regex`, statuses): the first match wins, then the built-in
ones. Read bounded, each problem one line; a regex is matched by RE2 in time linear in the text,
and one RE2 cannot run so is refused before any request (docs/guides/why-it-failed.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from asyncclient._local._toml import read_toml, table_of
from asyncclient.errors import ValidationError
from asyncclient.models import FINAL_STATUSES, Run

__all__ = [
    "BUILT_IN",
    "CATEGORIES_FILE",
    "DEFAULT_CATEGORIES",
    "Categories",
    "Category",
    "failure_text",
    "find_categories",
    "load_categories",
    "regex_problem",
]

Kind = Literal["infrastructure", "app"]
KINDS: Final = ("infrastructure", "app")
CATEGORIES_FILE: Final = "failure-categories.toml"
"""The categories file read from the directory the command runs in (the repository's root in
CI) when no other is named."""
FAILED_STATUSES: Final = ("failed", "blocked", "inconclusive", "error")
"""The statuses a failure can end in (`statuses` may name these)."""
TEXT_LIMIT: Final = 4000
"""The most characters of a failure's text a category's `match` or `regex` is tried on."""
_KEYS: Final = ("name", "kind", "match", "regex", "statuses")
_MAX_FILE_BYTES: Final = 1 << 20
_MAX_CATEGORIES: Final = 200
_MAX_PATTERN: Final = 500
_MAX_NAME: Final = 80


@attrs.frozen
class Category:
    """One category of failures.

    Attributes:
        name: What it is called in every report.
        kind: `infrastructure` (re-run it; it never makes a test flaky) or `app`.
        match: A substring of the failure's text (case-insensitive), or None.
        regex: A regular expression searched in the failure's text, or None.
        statuses: Only failures that ended in one of these (empty: any).
        built_in: One of the built-in categories, not the file's.
    """

    name: str
    kind: Kind
    match: str | None = None
    regex: str | None = attrs.field(default=None)
    statuses: tuple[str, ...] = ()
    built_in: bool = False
    _compiled: Any = attrs.field(
        default=attrs.Factory(lambda self: _compile(self.regex), takes_self=True),
        eq=False,
        repr=False,
    )

    def matches(self, status: str, text: str) -> bool:
        """Whether a failure that ended in `status` with `text` (failure_text) is of this
        category."""
        if self.statuses and status not in self.statuses:
            return False
        if self.match is not None and self.match.casefold() not in text.casefold():
            return False
        return self._compiled is None or self._compiled.search(text) is not None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "builtIn": self.built_in}


def _compile(pattern: str | None) -> Any:
    """The pattern compiled by RE2, case-insensitive (None: no pattern)."""
    return None if pattern is None else _re2_compile(pattern)


BUILT_IN: Final = (
    Category("run error", "infrastructure", statuses=("error",), built_in=True),
    Category("inconclusive", "infrastructure", statuses=("inconclusive",), built_in=True),
    Category("app or test", "app", built_in=True),
)
"""Tried after the file's categories: `error` and `inconclusive` are the infrastructure's
failures, any other the app's (or the test's)."""


@attrs.frozen
class Categories:
    """The categories in force: the file's, in its order, then BUILT_IN.

    Attributes:
        path: The file they were read from (None: the built-in ones only).
        categories: The file's categories, in its order.
    """

    path: Path | None = None
    categories: tuple[Category, ...] = ()
    read_text: bool = attrs.field(init=False, eq=False, repr=False)
    """Whether a category reads a failure's text (match or regex): then a run's list view,
    which says only its status, is not enough to tell its category."""
    all: tuple[Category, ...] = attrs.field(init=False, eq=False, repr=False)
    """Every category, in the order they are tried: the file's, then BUILT_IN."""

    def __attrs_post_init__(self) -> None:
        # Worked out once: both are read for every failure classified.
        reads = any(c.match is not None or c.regex is not None for c in self.categories)
        object.__setattr__(self, "read_text", reads)
        object.__setattr__(self, "all", (*self.categories, *BUILT_IN))

    def of(self, run: Run) -> Category:
        """The first category `run`'s failure matches (a built-in one at the latest)."""
        return self._of(run, run.status_kind)

    def _of(self, run: Run, status: str) -> Category:
        # No text-reading category: the status decides.
        return self.classify(status, failure_text(run) if self.read_text else "")

    def classify(self, status: str, text: str) -> Category:
        """The first category a failure that ended in `status` with `text` matches."""
        text = text[:TEXT_LIMIT]
        for category in self.all:
            if category.matches(status, text):
                return category
        return BUILT_IN[-1]  # pragma: no cover - the last built-in one matches everything

    def infrastructure(self, run: Run) -> bool:
        """Whether `run` did not pass for a reason of the infrastructure (a final run that
        was not stopped)."""
        status = run.status_kind  # read once: each read parses the service's field
        final = run.final if run.final is not None else status in FINAL_STATUSES
        if not final or status in ("passed", "cancelled"):
            return False
        return self._of(run, status).kind == "infrastructure"


DEFAULT_CATEGORIES: Final = Categories()
"""The built-in categories only."""


def failure_text(run: Run) -> str:
    """A failure's text as a person reads it: the headline, the error's code and message, and
    each failed check's name and reason, one a line (at most TEXT_LIMIT characters)."""
    lines = [run.headline_text]
    if run.error_code or run.error_message:
        lines.append(f"{run.error_code} {run.error_message}".strip())
    lines += [f"{check.name}: {check.reason}" for check in run.failed_requirements[:20]]
    return "\n".join(line for line in lines if line)[:TEXT_LIMIT]


def find_categories(
    path: str | os.PathLike[str] | None = None, directory: str | os.PathLike[str] = "."
) -> Categories:
    """The categories in force: those of `path` when given (it must exist), else those of
    CATEGORIES_FILE in `directory` when it is there, else the built-in ones only. A file there
    that cannot be read or checked is an error, never skipped.

    Args:
        path: The categories file named (`--categories`, the config key `categories`).
        directory: Where the default file is looked for (the repository's root in CI).
    """
    if path is not None:
        return load_categories(path)
    default = Path(directory) / CATEGORIES_FILE
    if os.path.lexists(default):
        return load_categories(default)
    return DEFAULT_CATEGORIES


def load_categories(path: str | os.PathLike[str]) -> Categories:
    """Read and check a categories file.

    Args:
        path: The TOML file.

    Returns:
        Its categories (none when it has no `[[category]]` table).

    Raises:
        ValidationError: The file cannot be read, is not TOML, or a category is wrong (a regex
            RE2 cannot run in linear time too): one line naming the file, the category and the
            fix.
    """
    where = Path(path)
    data = read_toml(
        where,
        "categories file",
        limit=_MAX_FILE_BYTES,
        missing=f"no categories file {where}: give an existing file (see `asyncclient "
        "failures --help`)",
    )
    unknown = sorted(set(data) - {"category"})
    if unknown:
        raise ValidationError(
            f"{where}: unknown table {unknown[0]!r}: a categories file holds [[category]] tables"
        )
    tables = data.get("category", [])
    if not isinstance(tables, list):
        raise ValidationError(f"{where}: category must be an array of tables ([[category]])")
    if len(tables) > _MAX_CATEGORIES:
        raise ValidationError(
            f"{where}: {len(tables)} categories, more than {_MAX_CATEGORIES}: keep the ones "
            "that name a cause"
        )
    found = tuple(_category(where, i, table) for i, table in enumerate(tables))
    seen: set[str] = set()
    for i, category in enumerate(found):
        if category.name.casefold() in seen:
            raise ValidationError(
                f"{where}: category[{i}]: the name {category.name!r} is used twice; name "
                "each category once"
            )
        seen.add(category.name.casefold())
    return Categories(where, found)


def _category(where: Path, index: int, table: Any) -> Category:
    place = f"{where}: category[{index}]"
    table = table_of(place, table, _KEYS, "a table with name, kind and match or regex")
    name = table.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME:
        raise ValidationError(f"{place}: name must be text of 1 to {_MAX_NAME} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValidationError(f"{place}: name must be one line of printable text")
    place = f"{where}: category {name.strip()!r}"
    kind = table.get("kind")
    if kind not in KINDS:
        raise ValidationError(f'{place}: kind must be "infrastructure" or "app", got {kind!r}')
    match, regex = table.get("match"), table.get("regex")
    if match is not None and regex is not None:
        raise ValidationError(f"{place}: give match or regex, not both")
    for key, value in (("match", match), ("regex", regex)):
        if value is not None and (
            not isinstance(value, str) or not value or len(value) > _MAX_PATTERN
        ):
            raise ValidationError(f"{place}: {key} must be text of 1 to {_MAX_PATTERN} characters")
    statuses = table.get("statuses", [])
    if not isinstance(statuses, list) or not all(s in FAILED_STATUSES for s in statuses):
        raise ValidationError(
            f"{place}: statuses must be a list of {', '.join(FAILED_STATUSES)}; got {statuses!r}"
        )
    if match is None and regex is None and not statuses:
        raise ValidationError(f"{place}: give match, regex or statuses: it would match any failure")
    if regex is not None:
        problem = regex_problem(regex)
        if problem:
            raise ValidationError(f"{place}: regex {regex!r} refused: {problem}")
    return Category(
        name.strip(), kind, match=match, regex=regex, statuses=tuple(dict.fromkeys(statuses))
    )


# --- the regex check ----------------------------------------------------------------------------

_MAX_PROGRAM: Final = 1 << 22
"""The most memory (bytes) RE2 may give one compiled pattern: a pattern that needs more (a
large counted repeat of a large class) is refused."""


def _re2_compile(pattern: str) -> Any:
    """`pattern` compiled by RE2, case-insensitive; re2.error (or MissingExtraError) when it
    cannot be."""
    from asyncclient._core._extras import require

    require("a failure category's regex", "regex", "re2")
    import re2

    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # the refusal is ours to say, in one line
    options.max_mem = _MAX_PROGRAM
    return re2.compile(pattern, options)


def regex_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be a category's regex, or None when it can. Matched by RE2, a
    regex takes time linear in the text whatever it is, so no pattern can stall a job; what
    RE2 cannot run in linear time is refused: back-references (`(a)\\1`), lookahead and
    lookbehind (`(?=`, `(?!`, `(?<=`, `(?<!`), atomic groups and possessive quantifiers
    (`(?>`, `a++`), conditionals, counted repeats over 1000, and a pattern whose program
    would need more than 4 MiB.

    Args:
        pattern: The regex, as the file gave it.

    Raises:
        MissingExtraError: google-re2 is not installed (the `regex` extra; `cli` has it).
    """
    try:
        _re2_compile(pattern)
    except (ImportError, MemoryError):
        raise
    except UnicodeError:
        return "it holds a character that is not text (a lone surrogate)"
    except Exception as exc:  # re2.error, or text RE2 cannot take (a lone surrogate)
        said = exc.args[0] if exc.args else exc
        if isinstance(said, bytes):
            said = said.decode("utf-8", "replace")
        return _why("".join(c if c.isprintable() else repr(c)[1:-1] for c in str(said)[:120]))
    return None


def _why(said: str) -> str:
    """RE2's reason, said as what to change."""
    if said.startswith("invalid escape sequence: \\") and said[-1:].isdigit():
        return "back-references cannot be matched in linear time; match the text itself"
    if "perl operator" in said:
        return (
            f"RE2 matches in linear time and has no lookaround, atomic groups or conditionals "
            f"({said}); match the text itself"
        )
    if "repetition" in said:
        return f"{said}: a quantifier may not follow another, and counts go up to 1000"
    if "pattern too large" in said:
        return "its program would need more than 4 MiB; write a shorter pattern"
    return f"it is not a regular expression RE2 can run ({said})"
