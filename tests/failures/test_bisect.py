"""asyncclient.failures.bisect against the emulator with a regression to find
(testing.regression_seed): the first bad build found in log2 steps of the rule's repeats, a
plain one-run-a-step search fooled by the flakes the rule is there for, and nothing counted
that the service ran on another build than the one asked."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncclient import AsyncSession
from asyncclient.errors import ValidationError
from asyncclient.failures.bisect import ASSUMED_FLAKE_RATE, bisect, repeats_needed
from asyncclient.testing import FakeService, regression_seed

KEY = "shop-run-key"


@pytest.fixture
async def shop() -> AsyncIterator[FakeService]:
    # Runs of 120 s at 6,000 service seconds a second: a step ends in a few polls.
    async with FakeService(regression_seed(builds=16, broken_at=9), speed=6000) as service:
        yield service


@pytest.fixture
async def session(shop: FakeService) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(KEY, shop.url) as s:
        yield s


def test_the_rule_asks_enough_failures_in_a_row_for_the_confidence() -> None:
    assert repeats_needed(0.2, 6, 0.95) == 3  # 6 * 0.2**3 = 0.048 <= 0.05; 0.2**2 * 6 > 0.05
    assert repeats_needed(0.0, 6, 0.95) == 1
    assert repeats_needed(0.05, 4, 0.95) == 2
    with pytest.raises(ValidationError, match="fix its flakiness first"):
        repeats_needed(0.9, 6, 0.99)
    with pytest.raises(ValidationError, match="confidence"):
        repeats_needed(0.2, 6, 1.0)


async def test_the_first_bad_build_is_found_within_log2_steps_of_the_rules_repeats(
    shop: FakeService, session: AsyncSession
) -> None:
    steps: list[Any] = []
    result = await bisect(
        session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_015",
        interval=0.02, idempotency_key="step-1", on_step=steps.append,
    )  # fmt: skip
    assert (result.first_bad, result.last_good) == ("ab_shop_009", "ab_shop_008")
    assert result.stopped is None
    assert result.flake_source == "history"  # 40 runs of the first build
    assert 0.2 <= result.flake_rate < 0.5  # the upper bound of what the history shows
    assert result.confidence >= 0.95
    assert len(result.steps) <= math.ceil(math.log2(15))
    assert result.runs <= len(result.steps) * result.repeats
    assert result.runs == len(shop.requests_for("run_test"))
    assert [s.build_id for s in steps] == [s.build_id for s in result.steps]
    # A build called bad failed the rule's number of times; one called good passed once.
    for step in result.steps:
        if step.verdict == "bad":
            assert (step.passed, step.failed) == (0, result.repeats)
        else:
            assert step.passed >= 1
    assert result.device_minutes > 0


async def test_one_run_a_step_is_fooled_by_a_flake_the_rule_is_not(
    shop: FakeService, session: AsyncSession
) -> None:
    """Flake rate 0 makes it the plain search: one run a step, a failure is a bad build. Over
    these keys the plain search names a good build at least once; the rule never does."""
    plain, ruled = set(), set()
    for n in range(6):
        found = await bisect(
            session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_015",
            flake_rate=0.0, interval=0.02, idempotency_key=f"plain-{n}",
        )  # fmt: skip
        plain.add(found.first_bad)
        found = await bisect(
            session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_015",
            interval=0.02, idempotency_key=f"ruled-{n}",
        )  # fmt: skip
        ruled.add(found.first_bad)
    assert ruled == {"ab_shop_009"}
    assert plain - {"ab_shop_009"}, plain  # some build before the break was called bad


async def test_a_run_the_service_ran_on_another_build_is_not_counted(shop: FakeService) -> None:
    from front_support import rewriting_front

    def elsewhere(run: dict[str, Any]) -> None:
        # The service says it ran the good build, however it names the build.
        if isinstance(run.get("build"), dict):
            run["build"]["id"] = "ab_shop_000"
        if "buildId" in run:
            run["buildId"] = "ab_shop_000"

    async with rewriting_front(shop, elsewhere) as url, AsyncSession(KEY, url) as session:
        result = await bisect(
            session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_015",
            interval=0.02, idempotency_key="step-2",
        )  # fmt: skip
    assert result.first_bad is None
    assert result.stopped is not None
    assert "none of its runs could be counted" in result.stopped
    (step,) = result.steps
    assert (step.passed, step.failed, step.verdict) == (0, 0, "unknown")


async def test_a_build_that_is_not_ready_is_left_out_and_never_run(
    shop: FakeService, session: AsyncSession
) -> None:
    shop.backend.build_store.builds["ab_shop_007"].status = "rejected"
    result = await bisect(
        session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_015",
        interval=0.02, idempotency_key="step-3",
    )  # fmt: skip
    assert result.left_out == {"ab_shop_007": "it is rejected, not ready"}
    assert "ab_shop_007" not in result.builds
    assert result.first_bad == "ab_shop_009"
    ran = {r.build.id for r in shop.backend.run_store.runs.values() if r.build is not None}
    assert "ab_shop_007" not in ran
    assert "ab_shop_008" in ran or "ab_shop_006" in ran  # its neighbours were tried


async def test_the_budget_stops_the_search_with_what_it_spent(
    shop: FakeService, session: AsyncSession
) -> None:
    result = await bisect(
        session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_015",
        budget_minutes=1, interval=0.02, idempotency_key="step-4",
    )  # fmt: skip
    assert result.first_bad is None
    assert result.stopped == "the budget of 1 device minutes is spent"
    assert len(result.steps) == 1  # one step of 2-minute runs spends it


async def test_without_history_the_assumed_rate_is_said(shop: FakeService) -> None:
    seed = regression_seed(builds=8, broken_at=3, history_runs=0)
    async with FakeService(seed, speed=6000) as bare, AsyncSession(KEY, bare.url) as session:
        result = await bisect(
            session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_007",
            interval=0.02, idempotency_key="step-5",
        )  # fmt: skip
    assert (result.flake_rate, result.flake_source) == (ASSUMED_FLAKE_RATE, "assumed")
    assert result.first_bad == "ab_shop_003"


async def test_one_key_draws_one_search_on_a_fresh_service() -> None:
    """The emulator draws each run's flake from its start's key: a search with a fixed key is
    the same search on every service, so what these tests assert cannot change from run to
    run (a search's key is a new uuid otherwise, and 1 in 20 of them may name a wrong build:
    the rule's 95 %)."""
    seed = regression_seed(builds=8, broken_at=3, history_runs=0)
    found = []
    for _ in range(2):
        async with FakeService(seed, speed=6000) as bare, AsyncSession(KEY, bare.url) as s:
            result = await bisect(
                s, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_007",
                interval=0.02, idempotency_key="one-key",
            )  # fmt: skip
        found.append([(step.build_id, step.passed, step.failed) for step in result.steps])
    assert found[0] == found[1]


def test_every_search_these_tests_start_has_a_fixed_key() -> None:
    tree = ast.parse(Path(__file__).read_text())
    searches = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "bisect"
        and any(k.arg == "interval" for k in node.keywords)
    ]
    assert len(searches) >= 9
    assert all(any(k.arg == "idempotency_key" for k in c.keywords) for c in searches)


async def test_bad_input_is_refused_before_any_run(
    shop: FakeService, session: AsyncSession
) -> None:
    for good, bad, said in (
        ("ab_shop_015", "ab_shop_000", "swap them"),
        ("ab_shop_000", "ab_nope", "is not a build of p_shop"),
        ("nope", "ab_shop_001", "--good"),
    ):
        with pytest.raises(ValidationError, match=said):
            await bisect(session, "p_shop", "t_checkout", good=good, bad=bad)
    assert shop.requests_for("run_test") == []


def test_the_result_reads_as_json() -> None:
    from asyncclient.failures.bisect import BisectResult, BisectStep

    step = BisectStep("ab_1", ("j_1",), 1, 0, 0, "good", 120.0)
    result = BisectResult("ab_2", "ab_1", 0.99, 3, 0.2, "given", (step,), 1, 2.0, ("ab_1",), {})
    data = json.loads(json.dumps(result.to_json()))
    assert data["firstBad"] == "ab_2"
    assert data["steps"][0]["verdict"] == "good"


async def test_every_dialect_gives_the_same_answer(dialect: str) -> None:
    """`dialect`: conftest's, one run per emulator dialect."""
    seed = regression_seed(builds=8, broken_at=5)
    async with (
        FakeService(seed, speed=6000, dialect=dialect) as service,
        AsyncSession(KEY, service.url) as session,
    ):
        result = await bisect(
            session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_007",
            interval=0.02, idempotency_key="dialects",
        )  # fmt: skip
    assert (result.first_bad, result.last_good, result.stopped) == (
        "ab_shop_005",
        "ab_shop_004",
        None,
    )
    assert result.flake_source == "history"


async def test_a_break_next_to_a_build_that_cannot_run_names_no_build(
    shop: FakeService, session: AsyncSession
) -> None:
    """The test broke at ab_shop_009; ab_shop_008 cannot be run: the break is at 008 or 009,
    and the search says so instead of naming one."""
    shop.backend.build_store.builds["ab_shop_008"].status = "rejected"
    result = await bisect(
        session, "p_shop", "t_checkout", good="ab_shop_000", bad="ab_shop_015",
        interval=0.02, idempotency_key="step-6",
    )  # fmt: skip
    assert result.first_bad is None
    assert result.stopped == (
        "the test broke after ab_shop_007 and by ab_shop_009, but ab_shop_008 between them "
        "could not be run"
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(label=st.none() | st.text(max_size=300) | st.integers() | st.lists(st.text(max_size=5)))
def test_a_label_the_service_sends_orders_a_build_only_as_a_bounded_seq(label: object) -> None:
    """A build's label is the service's text (any JSON value): it orders builds only through a
    whole `seq=N` word of at most 12 digits; anything else orders nothing, and nothing crashes."""
    from asyncclient.failures.bisect import _seq
    from asyncclient.models import Build

    found = _seq(Build(id="ab_1", label=label))
    assert found is None or (isinstance(found, int) and 0 <= found < 10**12)
    if found is not None:
        assert isinstance(label, str)
        assert f"seq={found}" in label or f"seq=0{found}" in label or "seq=0" in label


def test_a_build_id_that_is_not_one_is_never_searched() -> None:
    """The listing is the service's: a build whose id is not a build id (a terminal escape, a
    path) orders nothing and is never run or printed."""
    from datetime import UTC, datetime

    from asyncclient.failures.bisect import _order
    from asyncclient.models import Build

    def build(build_id: str, n: int) -> Build:
        made = datetime(2026, 12, 1, n, tzinfo=UTC)
        return Build(id=build_id, app_id="a", platform="android", created_at=made)

    listed = [build("ab_1", 1), build("ab_\x1b[31m", 2), build("../ab_3", 3), build("ab_4", 4)]
    same, start, end = _order(listed, listed[0], listed[3])
    assert [b.id for b in same] == ["ab_1", "ab_4"]
    assert (start, end) == (0, 1)
