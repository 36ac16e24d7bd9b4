"""The one "did you mean" of the package: the choice a mistyped word was probably meant to be.

Used for every choice the command line and the library check (commands, flags, modes, statuses,
methods, emulator operations), so a typo gets the same help wherever it is made.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]

# Shown back only when close: it may be a secret.
DEFAULT_CUTOFF = 0.8


def _swapped_neighbours(word: str, choice: str) -> bool:
    """True when `word` is `choice` with two neighbouring characters swapped (lsit, list)."""
    if len(word) != len(choice) or word == choice:
        return False
    diff = [i for i, (a, b) in enumerate(zip(word, choice, strict=True)) if a != b]
    return (
        len(diff) == 2
        and diff[1] == diff[0] + 1
        and word[diff[0]] == choice[diff[1]]
        and word[diff[1]] == choice[diff[0]]
    )


def closest(value: str, choices: Iterable[str], *, cutoff: float = DEFAULT_CUTOFF) -> str | None:
    """The choice `value` was probably meant to be, or None.

    The same word in other letter case; the same word with two neighbouring letters swapped
    (the commonest typo, which difflib scores low on short words: `lsit` is only 0.75 like
    `list`); otherwise difflib's closest match scoring at least `cutoff`.
    """
    options = [str(choice) for choice in choices]
    folded = value.casefold()
    for choice in options:
        if choice.casefold() == folded:
            return choice
    for choice in options:
        if _swapped_neighbours(folded, choice.casefold()):
            return choice
    matches = difflib.get_close_matches(value, options, n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(value: str, choices: Iterable[str], *, cutoff: float = DEFAULT_CUTOFF) -> str:
    """` (did you mean CHOICE?)` to append to a message, or "" when nothing is close."""
    meant = closest(value, choices, cutoff=cutoff)
    return f" (did you mean {meant}?)" if meant is not None else ""
