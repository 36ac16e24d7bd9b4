"""`asyncclient bisect` against the emulator with a regression to find: the first bad build on
stdout, each step on stderr, --json for scripts, exit 1 when the budget ends the search, exit 2
for bad input before any run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from asyncclient.testing import FakeService, regression_seed

RunCli = Callable[..., Awaitable[Any]]


@pytest.fixture
async def shop() -> AsyncIterator[FakeService]:
    async with FakeService(regression_seed(builds=16, broken_at=5), speed=6000) as service:
        yield service


@pytest.fixture
def env(shop: FakeService) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": shop.url, "ASYNCCLIENT_API_KEY": "shop-run-key"}


ARGS = ("bisect", "p_shop", "t_checkout", "--good", "ab_shop_000", "--bad", "ab_shop_015")
# The emulator draws flakes from the key: one key, one search.
KEYED = ("--idempotency-key", "cli-bisect")


async def test_the_first_bad_build_is_printed_with_its_confidence(
    run_cli: RunCli, env: dict[str, str]
) -> None:
    result = await run_cli(*ARGS, *KEYED, "--interval", "0.02", env=env)
    assert result.code == 0, result.stderr
    assert result.stdout == "ab_shop_005\n"
    assert "first bad build: ab_shop_005 (last good ab_shop_004)" in result.stderr
    assert "confidence" in result.stderr
    assert "flake rate" in result.stderr
    steps = [line for line in result.stderr.splitlines() if line.startswith("ab_shop_0")]
    assert steps[0].split()[:2] == ["ab_shop_007", "bad"]  # the middle of 0..15 first


async def test_json_holds_the_answer_and_every_step(run_cli: RunCli, env: dict[str, str]) -> None:
    result = await run_cli("--json", *ARGS, *KEYED, "--interval", "0.02", env=env)
    assert result.code == 0, result.stderr
    data = result.json()
    assert (data["firstBad"], data["lastGood"]) == ("ab_shop_005", "ab_shop_004")
    assert data["confidence"] >= 0.95
    assert data["runs"] == sum(len(step["runs"]) for step in data["steps"])


async def test_a_spent_budget_exits_1_and_says_so(run_cli: RunCli, env: dict[str, str]) -> None:
    result = await run_cli(*ARGS, "--interval", "0.02", "--budget", "1", env=env)
    assert result.code == 1
    assert "not found: the budget of 1 device minutes is spent" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--good", "ab_shop_015", "--bad", "ab_shop_000"), "swap them"),
        (("--confidence", "1.5"), "confidence must be 0.5 to 0.999"),
        (("--flake-rate", "1.0"), "flake rate must be at least 0 and below 1"),
        (("--budget", "0"), "--budget must be a positive number"),
    ],
)
async def test_bad_input_is_one_line_and_exit_2_before_any_run(
    shop: FakeService, run_cli: RunCli, env: dict[str, str], extra: tuple[str, ...], said: str
) -> None:
    args = [*ARGS]
    if extra[0] == "--good":
        args = list(ARGS[:3]) + list(extra)
    else:
        args += extra
    result = await run_cli(*args, env=env)
    assert result.code == 2, result.stderr
    assert said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert shop.requests_for("run_test") == []
    if extra[0] != "--good":  # known here: not a request sent
        assert shop.requests == []
