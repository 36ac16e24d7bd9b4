"""The two tiers of the suite: the default one (`pytest`, the README's command) and the slow one
(`pytest -m slow`), which .ci/run runs too. A many-process test takes the `repetitions` fixture
(tests/conftest.py) and repeats its round with `repeat()`: once by default, every time in the
slow tier, so that each assertion runs in both and the repetitions only in the slow one."""

from __future__ import annotations


def repeat(repetitions: int | None, full: int) -> range:
    """The rounds of a many-process test: `full` of them in the slow tier, one by default."""
    return range(full if repetitions is None else repetitions)
