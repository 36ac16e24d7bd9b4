"""Tests of the converter: wire names, lenient formats, unknown fields and statuses tolerated.
Pure: JSON values in, models out."""

import math
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncclient._core._converter import converter, parse_timestamp, structure_status
from asyncclient.models import (
    FINAL_STATUSES,
    Build,
    BuildList,
    Endpoint,
    ProjectRunStart,
    Run,
    RunStart,
    RunStatus,
    SkippedTest,
    StartedRun,
    UploadedPart,
    UploadStart,
)

T0 = datetime(2026, 11, 21, 5, 0, tzinfo=UTC)

BUILD_SINGLE: dict[str, Any] = {
    "id": "ab_1",
    "projectId": "p_demo",
    "status": "ready",
    "fileName": "shop.apk",
    "size": 1234,
    "platform": "android",
    "appId": "com.example.shop",
    "appName": "Shop",
    "version": "1.0.0",
    "versionCode": "7",
    "minOs": "24",
    "abis": ["arm64-v8a", "x86_64"],
    "warnings": ["targetSdk is old"],
    "sha256": "ab" * 32,
    "label": "commit 1",
    "createdAt": "2026-11-21T05:00:00.000Z",
    "readyAt": "2026-11-21T05:00:01.500Z",
}

RUN_FULL: dict[str, Any] = {
    "id": "j_1",
    "testId": "t_1",
    "testTitle": "Checkout works",
    "url": "http://h/api/v1/runs/j_1",
    "mode": "cold",
    "status": "passed",
    "final": True,
    "createdAt": "2026-11-21T05:00:00.000Z",
    "startedAt": "2026-11-21T05:00:05.000Z",
    "finishedAt": "2026-11-21T05:03:05.000Z",
    "durationMs": 180000,
    "error": None,
    "verdict": "passed",
    "headline": "Checkout completed.",
    "requirements": [{"id": "r1", "title": "Pay", "result": "passed", "reason": "ok"}],
    "captures": {"total": "12.00"},
    "video": "http://h/api/v1/runs/j_1/files/video.mp4",
    "screenshots": ["http://h/api/v1/runs/j_1/files/screenshots/01.png"],
    "build": {"id": "ab_1", "appId": "com.example.shop", "version": "1.0.0"},
    "link": "http://h/runs/j_1",
    "projectId": "p_demo",
    "buildId": "ab_1",
    "source": "test",
    "platform": "android",
}


def test_build_single_view() -> None:
    build = converter.structure(BUILD_SINGLE, Build)
    assert build == Build(
        id="ab_1",
        project_id="p_demo",
        status="ready",
        file_name="shop.apk",
        size=1234,
        platform="android",
        app_id="com.example.shop",
        app_name="Shop",
        version="1.0.0",
        version_code="7",
        min_os="24",
        abis=("arm64-v8a", "x86_64"),
        warnings=("targetSdk is old",),
        sha256="ab" * 32,
        label="commit 1",
        created_at=T0,
        ready_at=datetime(2026, 11, 21, 5, 0, 1, 500000, tzinfo=UTC),
    )


def test_build_list_view_lacks_single_view_fields() -> None:
    listed = {k: v for k, v in BUILD_SINGLE.items() if k not in ("projectId", "sha256")}
    result = converter.structure(
        {"builds": [listed, listed], "maxBytes": 4 << 30, "partBytes": 8 << 20}, BuildList
    )
    assert result.max_bytes == 4 << 30
    assert result.part_bytes == 8 << 20
    assert len(result.builds) == 2
    assert result.builds[0].project_id is None
    assert result.builds[0].sha256 is None


def test_unknown_fields_are_ignored() -> None:
    build = converter.structure({**BUILD_SINGLE, "newField": {"x": 1}, "snake_extra": 2}, Build)
    assert build.id == "ab_1"
    run = converter.structure({**RUN_FULL, "cost": 3}, Run)
    assert run.id == "j_1"


def test_missing_optional_fields_take_defaults() -> None:
    assert converter.structure({"id": "ab_9"}, Build) == Build(id="ab_9")
    run = converter.structure({"id": "j_9", "status": "queued"}, Run)
    assert run.final is None
    assert run.requirements is None
    assert not run.is_final


def test_version_code_and_min_os_from_numbers() -> None:
    build = converter.structure({**BUILD_SINGLE, "versionCode": 42, "minOs": 24.0}, Build)
    assert build.version_code == "42"
    assert build.min_os == "24"
    odd = converter.structure({**BUILD_SINGLE, "versionCode": {"major": 1}}, Build)
    assert odd.version_code is None


def test_null_and_odd_lists() -> None:
    build = converter.structure({**BUILD_SINGLE, "abis": None, "warnings": None}, Build)
    assert build.abis == ()
    assert build.warnings == ()
    # One warning sent as a bare string is still that warning.
    assert converter.structure({**BUILD_SINGLE, "warnings": "one"}, Build).warnings == ("one",)


@pytest.mark.parametrize(
    ("status", "kept"),
    [
        ("ready", "ready"),
        ("quarantined", "quarantined"),
        (2, 2),
        ({"state": "ready", "since": "2026-11-21"}, {"state": "ready", "since": "2026-11-21"}),
        (None, None),
    ],
)
def test_a_build_status_of_any_shape_is_kept_as_sent(status: Any, kept: Any) -> None:
    build = converter.structure({**BUILD_SINGLE, "status": status}, Build)
    assert build.status == kept
    # The other fields are read as ever.
    assert build == attrs.evolve(converter.structure(BUILD_SINGLE, Build), status=kept)


def test_abis_as_one_comma_separated_string_are_split() -> None:
    build = converter.structure({**BUILD_SINGLE, "abis": "arm64-v8a, x86_64,"}, Build)
    assert build.abis == ("arm64-v8a", "x86_64")
    assert converter.structure({**BUILD_SINGLE, "abis": "arm64"}, Build).abis == ("arm64",)
    assert converter.structure({**BUILD_SINGLE, "abis": ["arm64"]}, Build).abis == ("arm64",)


def test_warnings_that_are_objects_are_kept() -> None:
    warnings = [{"code": "old_target_sdk", "message": "targetSdk is old"}, "plain text", 3]
    build = converter.structure({**BUILD_SINGLE, "warnings": warnings}, Build)
    assert build.warnings == tuple(warnings)
    assert converter.unstructure(build)["warnings"] == warnings


def test_odd_build_shapes_together_keep_every_other_field() -> None:
    build = converter.structure(
        {
            "id": "ab_odd",
            "status": {"state": "ready"},
            "size": "12",
            "abis": "arm64-v8a",
            "warnings": [{"code": "x"}],
            "createdAt": 1700000000,
            "readyAt": 1700000000123,
            "versionCode": 42,
            "extra": 1,
        },
        Build,
    )
    assert build.status == {"state": "ready"}
    assert build.size == 12
    assert build.abis == ("arm64-v8a",)
    assert build.warnings == ({"code": "x"},)
    assert build.created_at == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert build.ready_at is not None
    assert build.version_code == "42"


@pytest.mark.parametrize(
    "overage", [True, False, None, 3, 1.5, "yes", {"runs": 2, "cost": "1.00"}, [1, 2]]
)
def test_overage_of_any_shape_is_kept_as_sent(overage: Any) -> None:
    start = converter.structure(
        {"runId": "j_1", "mode": "warm", "overage": overage, "link": "l"}, RunStart
    )
    assert start == RunStart("j_1", "warm", overage, "l")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-21T05:00:00.000Z", T0),
        ("2026-11-21T05:00:00Z", T0),
        ("2026-11-21T06:00:00+01:00", T0),
        ("2026-11-21T05:00:00", T0),
        (T0.timestamp(), T0),
        (int(T0.timestamp()), T0),
        (int(T0.timestamp() * 1000), T0),
        (None, None),
        ("yesterday", None),
        (True, None),
        ({"at": 1}, None),
        (float("nan"), None),
        (1e30, None),
    ],
)
def test_tolerant_timestamps(value: Any, expected: datetime | None) -> None:
    parsed = parse_timestamp(value)
    assert parsed == expected
    if parsed is not None:
        assert parsed.tzinfo is not None


def test_timestamps_inside_models() -> None:
    run = converter.structure({**RUN_FULL, "createdAt": 1795150800000, "startedAt": "garbage"}, Run)
    assert run.created_at == datetime.fromtimestamp(1795150800, UTC)
    assert run.started_at is None


def test_run_full_view_keeps_json_values_plain() -> None:
    run = converter.structure(RUN_FULL, Run)
    assert run.status is RunStatus.PASSED
    assert run.final is True
    assert run.is_final
    assert run.passed
    assert run.duration_ms == 180000
    assert run.requirements == RUN_FULL["requirements"]
    assert run.captures == {"total": "12.00"}
    assert run.screenshots == RUN_FULL["screenshots"]
    assert run.build == RUN_FULL["build"]
    assert run.verdict == "passed"
    assert run.source == "test"
    assert run.project_id == "p_demo"
    assert run.build_id == "ab_1"
    assert run.test_title == "Checkout works"


def test_unknown_status_is_kept_as_a_string_and_not_final() -> None:
    run = converter.structure({"id": "j_1", "status": "paused_for_review"}, Run)
    assert run.status == "paused_for_review"
    assert not isinstance(run.status, RunStatus)
    assert not run.is_final
    assert not run.passed
    said_final = converter.structure({"id": "j_1", "status": "archived", "final": True}, Run)
    assert said_final.is_final


def test_final_flag_wins_over_status() -> None:
    run = converter.structure({"id": "j_1", "status": "passed", "final": False}, Run)
    assert not run.is_final
    listed = converter.structure({"id": "j_1", "status": "cancelled"}, Run)
    assert listed.is_final


def test_odd_final_flag_falls_back_to_the_status() -> None:
    run = converter.structure({"id": "j_1", "status": "running", "final": "maybe"}, Run)
    assert run.final is None
    assert not run.is_final


def test_structure_status() -> None:
    assert structure_status("failed") is RunStatus.FAILED
    assert structure_status("new_one") == "new_one"
    assert structure_status(None) == ""
    assert structure_status(3) == "3"
    assert {RunStatus.PASSED, RunStatus.CANCELLED} <= FINAL_STATUSES
    assert RunStatus.RUNNING not in FINAL_STATUSES
    assert "passed" in FINAL_STATUSES


def test_upload_models() -> None:
    assert converter.structure({"id": "ab_1", "partBytes": 8, "parts": 3}, UploadStart) == (
        UploadStart("ab_1", 8, 3)
    )
    part = converter.structure({"partNumber": 2, "etag": "e"}, UploadedPart)
    assert part == UploadedPart(2, "e")
    assert converter.unstructure(part) == {"partNumber": 2, "etag": "e"}


def test_run_starts() -> None:
    start = converter.structure(
        {"runId": "j_1", "mode": "cold", "overage": False, "link": "http://h/r"}, RunStart
    )
    assert start == RunStart("j_1", "cold", False, "http://h/r")
    project = converter.structure(
        {
            "started": [
                {"testId": "t_1", "runId": "j_1", "mode": "warm", "buildId": None, "link": "l"}
            ],
            "skipped": [{"testId": "t_2", "reason": "no_build"}],
            "future": 1,
        },
        ProjectRunStart,
    )
    assert project == ProjectRunStart(
        started=(StartedRun("t_1", "j_1", "warm", None, "l"),),
        skipped=(SkippedTest("t_2", "no_build"),),
    )


def test_endpoint_list_view_is_snake_case() -> None:
    endpoint = converter.structure(
        {
            "id": "ep_1",
            "name": "create_voucher",
            "description": "d",
            "method": "POST",
            "url": "https://x.example",
            "created_at": "2026-11-21T05:00:00.000Z",
            "last_used_at": None,
            "lastUsedAt": "2026-11-21T05:00:00.000Z",
        },
        Endpoint,
    )
    assert endpoint == Endpoint(
        "ep_1", "create_voucher", "d", "POST", "https://x.example", T0, None
    )


def test_models_are_frozen() -> None:
    build = Build(id="ab_1")
    with pytest.raises(AttributeError):
        build.id = "ab_2"  # type: ignore[misc]


def test_a_missing_required_field_is_an_error() -> None:
    with pytest.raises(KeyError):
        converter.structure({"status": "ready"}, Build)
    with pytest.raises(ValueError, match="expected a number"):
        converter.structure({"id": "ab_1", "partBytes": "many", "parts": 1}, UploadStart)


# --- the generated structurers agree with cattrs' own ---------------------------------------

_EDGES = st.sampled_from(
    [-1, 0, 1, 2**53 - 1, 2**53, -(2**63), 1.0, 1.5, math.nan, math.inf, True, False, None, "",
     " 7 ", "7", "true", "READY", "arm64,x86_64", 1_700_000_000, 1_700_000_000_000]
)  # fmt: skip
_SCALAR = st.one_of(
    _EDGES,
    _EDGES,
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=30),
    st.sampled_from(["2026-11-21T05:00:00Z", "2026-11-21 05:00", " 2026-11-21T05:00:00+01:00"]),
)
_JSON = _SCALAR | st.lists(_SCALAR, max_size=3) | st.dictionaries(st.text(max_size=5), _SCALAR)
_CAMEL = (Build, BuildList, UploadStart, UploadedPart, RunStart, StartedRun, SkippedTest, Run)


def _reference(cls: type[Any]) -> Any:
    """What cattrs' make_dict_structure_fn makes of cls with the converter's own hooks."""
    from cattrs.gen import make_dict_structure_fn, override

    from asyncclient._core import _converter as module

    open_hooks = {
        Build: {"status": module._as_is, "abis": module._abis, "warnings": module._any_tuple},
        RunStart: {"overage": module._as_is},
    }.get(cls, {})
    overrides: dict[str, Any] = {
        field.name: override(
            rename=module.camel(field.name), struct_hook=open_hooks.get(field.name)
        )
        if field.name in open_hooks
        else override(rename=module.camel(field.name))
        for field in attrs.fields(cls)
    }
    return make_dict_structure_fn(cls, converter, **overrides)


def _outcome(function: Any, payload: Any, cls: type[Any]) -> Any:
    try:
        return ("value", function(payload, cls))
    except Exception as exc:  # the same failure, by its type
        return ("error", type(exc))


@pytest.mark.parametrize("cls", _CAMEL, ids=lambda cls: cls.__name__)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_generated_structurer_reads_any_object_as_cattrs_would(
    cls: type[Any], data: st.DataObject
) -> None:
    from asyncclient._core import _converter as module

    fields = attrs.fields(cls)
    required = {
        module.camel(f.name): st.text(max_size=8) | _JSON
        for f in fields
        if f.default is attrs.NOTHING
    }
    optional = {module.camel(f.name): _JSON for f in fields if f.default is not attrs.NOTHING}
    payload = data.draw(st.fixed_dictionaries(required, optional={**optional, "extra": _JSON}))
    if required and data.draw(st.integers(0, 9)) == 0:
        del payload[next(iter(required))]  # a required key missing: the same error
    ours = _outcome(converter.get_structure_hook(cls), payload, cls)
    # By repr: a NaN kept as sent is equal in both, though never == itself.
    assert repr(ours) == repr(_outcome(_reference(cls), payload, cls))
