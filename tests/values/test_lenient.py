"""The lenient readers on shapes the emulator's dialects do not send but a service could.

Each case is one a reviewer found read wrongly: the reader must give the service's information
to the user, not drop it or turn it around.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from asyncclient._core._responses import error_from_response
from asyncclient._values import _lenient as lenient
from asyncclient.errors import BuildRejectedError, NotStartedError


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        ("yes", "failed"),
        ("no", "passed"),
        ("TRUE", "failed"),
        ("false", "passed"),
        (True, "failed"),
        (0, "passed"),
        ("skipped", "skipped"),
        ("maybe", "unknown"),
    ],
)
def test_a_result_under_failed_means_the_opposite(value: Any, outcome: str) -> None:
    assert lenient.check_result(value, "failed") == outcome
    assert lenient.requirements([{"id": "r", "failed": value}])[0].outcome == outcome


def test_one_requirement_sent_as_an_object_is_one_requirement() -> None:
    read = lenient.requirements({"id": "login", "result": "failed", "reason": "no button"})

    assert [(r.name, r.outcome, r.reason) for r in read] == [("login", "failed", "no button")]


def test_an_object_of_name_to_result_is_still_one_requirement_each() -> None:
    read = lenient.requirements({"login": "passed", "search": {"result": "fail", "why": "x"}})

    assert [(r.name, r.outcome, r.reason) for r in read] == [
        ("login", "passed", ""),
        ("search", "failed", "x"),
    ]


@pytest.mark.parametrize("key", ["result", "status", "passed"])
def test_an_explicit_null_result_is_a_skipped_check(key: str) -> None:
    (read,) = lenient.requirements([{"id": "login", key: None}])

    assert (read.outcome, read.reason) == ("skipped", "")


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"code": "build_rejected", "message": "m", "details": {"reasons": ["a", "b"]}}},
        {"error": {"code": "build_rejected", "message": "m", "details": ["a", "b"]}},
        {"error": {"code": "build_rejected", "message": "m", "data": {"unsupported": ["a", "b"]}}},
        {"code": "build_rejected", "message": "m", "meta": {"problems": ["a", "b"]}},
        {"errors": [{"code": "build_rejected", "detail": "m", "meta": {"issues": ["a", "b"]}}]},
    ],
)
def test_rejection_problems_nested_in_the_error_reach_the_user(body: dict[str, Any]) -> None:
    exc = _error(422, body)

    assert isinstance(exc, BuildRejectedError)
    assert [p.message for p in exc.problems] == ["a", "b"]


def test_a_list_under_a_message_key_is_kept_not_dropped() -> None:
    exc = _error(422, {"code": "build_rejected", "message": "m", "reason": ["armv7 only"]})

    assert isinstance(exc, BuildRejectedError)
    assert [p.message for p in exc.problems] == ["reason: armv7 only"]


@pytest.mark.parametrize(
    "body",
    [
        {
            "error": {
                "code": "not_started",
                "message": "m",
                "data": {"started": [], "skipped": [{"test": "t_a", "why": "no device"}]},
            }
        },
        {
            "error": {
                "code": "not_started",
                "message": "m",
                "details": {"skipped": [{"testId": "t_a", "reason": "no device"}]},
            }
        },
        {
            "errors": [
                {
                    "code": "not_started",
                    "detail": "m",
                    "meta": {"skipped": [{"id": "t_a", "message": "no device"}]},
                }
            ]
        },
    ],
)
def test_not_started_lists_nested_in_the_error_reach_the_user(body: dict[str, Any]) -> None:
    exc = _error(402, body)

    assert isinstance(exc, NotStartedError)
    assert [(s.test_id, s.reason) for s in exc.skipped] == [("t_a", "no device")]


def test_started_runs_sent_as_plain_run_ids_are_kept() -> None:
    started, skipped = lenient.start_lists({"started": ["j_1", "j_2"], "skipped": ["t_x"]})

    assert [s["runId"] for s in started] == ["j_1", "j_2"]
    assert [s["testId"] for s in skipped] == ["t_x"]


def _error(status: int, body: dict[str, Any]) -> Exception:
    return error_from_response(status, {}, json.dumps(body).encode(), "POST", "http://h/x")


def test_one_requirement_whose_result_is_an_object_is_one_requirement() -> None:
    read = lenient.requirements({"id": "r1", "result": {"status": "fail"}, "reason": "x"})

    assert [(r.name, r.outcome, r.reason) for r in read] == [("r1", "failed", "x")]


@pytest.mark.parametrize("key", ["details", "reason", "detail"])
def test_rejection_words_beside_the_message_are_kept(key: str) -> None:
    exc = _error(422, {"error": {"code": "build_rejected", "message": "m", key: "armv7 only"}})

    assert isinstance(exc, BuildRejectedError)
    assert [p.message for p in exc.problems] == [f"{key}: armv7 only"]


def test_the_message_itself_is_not_repeated_as_a_problem() -> None:
    body = {"code": "build_rejected", "detail": "The devices cannot run this build"}

    exc = _error(422, body)

    assert isinstance(exc, BuildRejectedError)
    assert exc.message == "The devices cannot run this build"
    assert exc.problems == ()
