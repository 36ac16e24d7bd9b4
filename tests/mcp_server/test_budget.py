"""The size rules every tool result keeps (asyncclient.mcp_server._budget), against shapes a
hostile or simply very large service could send: whatever goes in, the JSON that comes out fits
its budget and names what it left out."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp")

from asyncclient.mcp_server import _budget
from asyncclient.mcp_server._base import paged
from asyncclient.mcp_server._wait import wait_result
from asyncclient.models import Run


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def test_a_result_that_fits_is_left_as_it_is() -> None:
    result = {"build": {"id": "ab_1", "warnings": ["a"] * 10}}
    assert _budget.bound(result, 1000) == result


def test_a_megabyte_of_text_is_cut_and_the_cut_named() -> None:
    result = {"build": {"id": "ab_1", "appName": "x" * 1_000_000, "label": "v1"}}
    out = _budget.bound(result, 2000)
    assert _size(out) <= 2000
    assert out["build"]["id"] == "ab_1"
    assert out["build"]["label"] == "v1"
    assert out["build"]["appName"].endswith(_budget.ELLIPSIS)
    assert out["leftOut"] == ["build.appName: 1,000 of 1,000,000 characters"]


def test_a_list_the_agent_asked_for_keeps_whole_items_and_says_how_many() -> None:
    runs = [{"id": f"j_{i:05d}", "status": "passed", "title": "t" * 50} for i in range(10_000)]
    out = _budget.bound({"runs": runs}, 16_000, advice={"runs": "narrow the filter"})
    assert _size(out) <= 16_000
    shown = len(out["runs"])
    assert 100 < shown < 10_000
    assert out["runs"] == runs[:shown]  # whole, in order
    assert out["leftOut"] == [f"runs: {shown:,} of 10,000 shown; narrow the filter"]


def test_parts_are_cut_in_the_order_given_and_lists_fill_the_room_left() -> None:
    result = {
        "run": {"requirements": [{"reason": "r" * 300} for _ in range(1000)]},
        "failedRequirements": [{"reason": "f" * 300} for _ in range(1000)],
        "files": ["video.mp4", "screenshots/01.png"],
    }
    out = _budget.bound(result, 16_000, parts=("run", "failedRequirements", "files"))
    assert _size(out) <= 16_000
    assert out["files"] == ["video.mp4", "screenshots/01.png"]  # cut last, filled first
    assert 10 < len(out["failedRequirements"]) < 1000
    assert "run.requirements" in " ".join(out["leftOut"])


def test_notes_are_folded_by_place_and_counted() -> None:
    items = [{"id": i, "reason": "x" * 5000} for i in range(3)]
    out = _budget.bound({"runs": items}, 6000)
    assert "runs[].reason: 3 texts cut to 1,000 characters" in out["leftOut"]
    many = {f"k{i}": {"deep": ["y" * 500] * 300} for i in range(50)}
    out = _budget.bound({"run": many}, 3000)
    assert _size(out) <= 3000
    assert len(out["leftOut"]) <= _budget.NOTES_MAX


# Any JSON a service could send, nested and long; the budget holds whatever it is.
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3000),
    lambda inner: (
        st.lists(inner, max_size=60) | st.dictionaries(st.text(max_size=8), inner, max_size=60)
    ),
    max_leaves=400,
)


@given(payload=_json, budget=st.integers(_budget.MIN_BUDGET, 20_000))
def test_any_payload_fits_any_budget(payload: Any, budget: int) -> None:
    out = _budget.bound({"value": payload, "items": [payload, payload]}, budget)
    assert _size(out) <= budget
    assert set(out) <= {"value", "items", "leftOut"}


def test_a_page_says_where_the_next_one_starts() -> None:
    items = [{"id": f"ab_{i}", "label": "l" * 100} for i in range(300)]

    def page(offset: int, page_size: int, budget: int) -> dict[str, Any]:
        return paged(
            items, key="builds", offset=offset, page_size=page_size, budget=budget,
            again="list_builds", maxBytes=7,
        )  # fmt: skip

    assert page(40, 20, 100_000) == {
        "total": 300,
        "offset": 40,
        "nextOffset": 60,
        "builds": items[40:60],
        "maxBytes": 7,
        "leftOut": ["builds 41-60 of 300 shown: call list_builds and offset=60 for the next page"],
    }
    last = page(280, 100, 100_000)
    assert (len(last["builds"]), last["nextOffset"], "leftOut" in last) == (20, None, False)
    small = page(0, 100, 2000)
    assert _size(small) <= 2000
    assert small["nextOffset"] == len(small["builds"])
    assert 5 < len(small["builds"]) < 20
    assert page(500, 10, 2000)["leftOut"] == ["offset 500 is past the last of 300 builds"]
    # A cut inside an item is named only for the items shown.
    items[0]["label"] = items[99]["label"] = "x" * 5000
    first = page(0, 100, 4000)
    assert first["builds"][0]["label"].endswith(_budget.ELLIPSIS)
    assert len(first["builds"]) < 99
    assert first["leftOut"][1] == "builds[].label: 1,000 of 5,000 characters"  # one cut, not two
    assert len(first["leftOut"]) == 2


def _run(i: int, status: str) -> Run:
    final = status not in ("queued", "running")
    return Run(
        id=f"j_{i:05d}",
        status=status,
        final=final,
        test_id=f"t_{i % 7}",
        test_title="A check " * 5,
        headline=f"Run {i} ended {status}." if final else None,
        duration_ms=30_000 if final else None,
    )


def test_wait_result_counts_everything_and_shows_failures_first() -> None:
    statuses = ["passed"] * 8 + ["failed", "running"]
    runs = [_run(i, statuses[i % 10]) for i in range(100_000)]
    result = wait_result(runs, ["j_gone"], done=False, seconds=60, budget=32_000)
    assert _size(result) <= 32_000
    assert result["counts"] == {"running": 10_000, "passed": 80_000, "failed": 10_000}
    assert result["done"] is False
    assert result["unknown"] == ["j_gone"]
    assert 0 < len(result["pending"]) < 10_000
    assert all(run["status"] == "failed" for run in result["notPassed"])
    notes = "\n".join(result["leftOut"])
    assert "call wait_for_runs again with the same run_ids" in notes
    shown = len(result["notPassed"])
    assert f"notPassed: {shown:,} of 10,000 shown; get_run gives any run in full" in notes
    assert result["summary"] == (
        "100000 runs: 80000 passed, 10000 failed, 10000 running; 1 unknown; "
        "still going after 60 s: 10000"
    )


def test_a_partial_wait_result_says_how_long_the_runs_still_have_to_go() -> None:
    from asyncclient.eta import JobEta
    from asyncclient.models import Run, RunStatus

    runs = [
        Run(id="j_1", status=RunStatus.PASSED, final=True, test_id="t_a"),
        Run(id="j_2", status=RunStatus.RUNNING, test_id="t_b"),
    ]
    result = wait_result(runs, [], done=False, seconds=60, budget=32_000, eta=JobEta(100, 150))
    assert result["eta"] == {"seconds": 100.0, "p90Seconds": 150.0, "text": "about 2-3 min left"}
    assert result["summary"].endswith("still going after 60 s: 1 (about 2-3 min left)")
    finished = wait_result(runs[:1], [], done=True, seconds=60, budget=32_000, eta=JobEta(0, 0))
    assert "eta" not in finished
