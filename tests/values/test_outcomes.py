"""asyncclient._values._outcomes: one word set for every `outcome` the client reads or writes
(a report's run, a suite's test, a run's requirement), as pytest's TestReport has one; JUnit's,
CTRF's and Allure's own words are said only by their writers. The emulator's seeds speak the
service's statuses and are not the client's outcomes."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from asyncclient._values._outcomes import AnyOutcome, CheckOutcome, RunOutcome, TestOutcome

PACKAGE = Path(__file__).resolve().parents[2] / "asyncclient"
WORDS = set(get_args(AnyOutcome))


def test_each_kind_of_outcome_takes_its_words_from_the_one_set() -> None:
    for kind in (RunOutcome, TestOutcome, CheckOutcome):
        assert set(get_args(kind)) <= WORDS, kind


def _is_outcome(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "outcome"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "outcome"
    return isinstance(node, ast.Name) and node.id == "outcome"


def _words(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [word for item in node.elts for word in _words(item)]
    return []


def outcome_words(source: str) -> set[str]:
    """Every word an outcome is compared with (==, !=, in, not in) in `source`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_outcome(side) for side in sides):
                for side in sides:
                    found.update(_words(side))
    return found


def test_every_outcome_the_client_compares_is_a_word_of_the_set() -> None:
    wrong = {
        f"{path.relative_to(PACKAGE)}: {word}"
        for path in PACKAGE.rglob("*.py")
        if "testing" not in path.relative_to(PACKAGE).parts
        for word in outcome_words(path.read_text())
        if word not in WORDS
    }
    assert wrong == set()


def test_the_word_check_sees_a_writers_word_outside_its_writer() -> None:
    source = 'if attempt.outcome in ("failure", "error"):\n    pass\nok = run["outcome"] == "x"\n'
    assert outcome_words(source) == {"failure", "error", "x"}
