"""The one "did you mean" helper: pure, no I/O."""

import pytest

from asyncclient._core._suggest import closest, did_you_mean

COMMANDS = ["list", "get", "stop"]


@pytest.mark.parametrize(
    ("value", "choices", "meant"),
    [
        ("lsit", COMMANDS, "list"),  # two neighbours swapped: difflib alone scores 0.75
        ("stpo", COMMANDS, "stop"),
        ("LIST", COMMANDS, "list"),
        ("bulds", ["builds", "runs"], "builds"),
        ("runing", ["queued", "running"], "running"),
        ("upload_prt", ["upload_part", "get_build"], "upload_part"),
        ("clod", ["auto", "cold", "warm"], "cold"),
        ("hot", ["auto", "cold", "warm"], None),
        ("s3cr3t-value", ["serve", "runs", "upload"], None),  # a secret is never "meant"
        ("list", COMMANDS, "list"),
    ],
)
def test_closest(value: str, choices: list[str], meant: str | None) -> None:
    assert closest(value, choices) == meant


def test_did_you_mean_is_a_suffix_or_nothing() -> None:
    assert did_you_mean("lsit", COMMANDS) == " (did you mean list?)"
    assert did_you_mean("zzz", COMMANDS) == ""


def test_a_looser_cutoff_for_what_is_no_secret() -> None:
    assert closest("--verbos", ["--verbose", "--version"], cutoff=0.6) == "--verbose"
