"""Tests of the rules without I/O (asyncclient._core): configuration, input checks, urls,
Retry-After, waits. No server and no event loop: every function here is plain."""

import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from asyncclient._client._failures import verdict_of
from asyncclient._core import _checks as checks
from asyncclient._core import _environment as environment
from asyncclient._core import _wire as wire
from asyncclient._core._retry import classify
from asyncclient.errors import ValidationError, reason_phrase

# --- configuration ------------------------------------------------------------------------------


def test_api_key_from_argument_wins_over_environment() -> None:
    assert environment.resolve_api_key("arg-key", {"ASYNCCLIENT_API_KEY": "env-key"}) == "arg-key"


def test_api_key_from_environment() -> None:
    assert environment.resolve_api_key(None, {"ASYNCCLIENT_API_KEY": " env-key\n"}) == "env-key"


def test_missing_api_key_names_the_variable_and_the_argument() -> None:
    with pytest.raises(ValidationError) as info:
        environment.resolve_api_key(None, {})
    assert "ASYNCCLIENT_API_KEY" in str(info.value)
    assert "api_key=" in str(info.value)


def test_api_key_with_control_characters_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValidationError) as info:
        environment.resolve_api_key("sec ret", {})
    assert "sec ret" not in str(info.value)
    with pytest.raises(ValidationError):
        environment.resolve_api_key("secret\r\nX-Evil: 1", {})


def test_missing_base_url_names_the_variable_and_the_argument() -> None:
    with pytest.raises(ValidationError) as info:
        environment.resolve_base_url(None, {})
    assert "ASYNCCLIENT_BASE_URL" in str(info.value)
    assert "base_url=" in str(info.value)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://svc.example", "https://svc.example"),
        ("https://svc.example/", "https://svc.example"),
        ("https://svc.example/api/v1", "https://svc.example"),
        ("http://127.0.0.1:8080/api/v1/", "http://127.0.0.1:8080"),
        ("https://svc.example/prefix", "https://svc.example/prefix"),
    ],
)
def test_base_url_is_normalised(given: str, expected: str) -> None:
    assert environment.resolve_base_url(given, {}) == expected


def test_base_url_from_environment() -> None:
    env = {"ASYNCCLIENT_BASE_URL": "https://env.example/"}
    assert environment.resolve_base_url(None, env) == "https://env.example"


@pytest.mark.parametrize(
    "bad",
    ["svc.example", "ftp://svc.example", "https://", "https://h/?q=1", "http://h:abc",
     "http://h:99999", "http://@h"],
)  # fmt: skip
def test_bad_base_url_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="base_url"):
        environment.resolve_base_url(bad, {})


@pytest.mark.parametrize(
    "url", ["https://me:s3cret@svc.example", "https://:s3cret@svc.example/x", "http://s3cret@h"]
)
def test_a_base_url_with_a_password_is_refused_without_showing_it(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        environment.resolve_base_url(url, {})

    message = str(caught.value)
    assert "s3cret" not in message
    assert "***@" in message
    assert "user name or password" in message
    assert "ASYNCCLIENT_API_KEY" in message


def test_user_agent_names_client_aiohttp_and_python() -> None:
    py = ".".join(map(str, sys.version_info[:3]))
    assert wire.user_agent("1.2.3", "3.14.5") == f"asyncclient/1.2.3 (+aiohttp/3.14.5; python/{py})"
    assert wire.user_agent("1.2.3", "3.14.5", "ci-bot/7").endswith(") ci-bot/7")
    with pytest.raises(ValidationError):
        wire.user_agent("1", "2", "bad\r\nheader")


def test_base_headers_hide_the_key_in_repr_but_send_it() -> None:
    headers = wire.base_headers("sekrit-key", "asyncclient/1")
    assert headers["Authorization"] == "Bearer sekrit-key"
    assert f"{headers['Authorization']}" == "Bearer sekrit-key"
    assert "sekrit-key" not in repr(headers)
    assert headers["Accept"] == "application/json"


# --- input checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("project", "p_demo"),
        ("build", "ab_x1"),
        ("test", "t_9"),
        ("run", "j_1"),
        ("endpoint", "ep_a"),
    ],
)
def test_ids_with_their_prefix_pass(kind: str, value: str) -> None:
    assert checks.check_id(kind, value) == value


def test_id_of_another_kind_says_which_kind_it_looks_like() -> None:
    with pytest.raises(ValidationError) as info:
        checks.check_id("build", "j_1")
    assert str(info.value).startswith("j_1 is not a build id: build ids start with ab_")
    assert "run id" in str(info.value)


@pytest.mark.parametrize("value", ["", "ab_", "ab_/x", "ab_a b", "abc", "p_", 5, None])
def test_malformed_ids_are_refused(value: object) -> None:
    with pytest.raises(ValidationError):
        checks.check_id("build", value)


def test_id_check_names_the_parameter() -> None:
    with pytest.raises(ValidationError, match="build_ids"):
        checks.check_id("build", "t_1", "build_ids")


def test_choices_limit_and_numbers() -> None:
    assert checks.check_choice("mode", "warm", checks.MODES) == "warm"
    with pytest.raises(ValidationError, match="auto, cold, warm"):
        checks.check_choice("mode", "hot", checks.MODES)
    with pytest.raises(ValidationError, match="status"):
        checks.check_choice("status", "done", checks.RUN_STATUSES)
    assert checks.check_limit(1) == 1
    assert checks.check_limit(200) == 200
    for bad in (0, 201, -1, True, 2.5, "10"):
        with pytest.raises(ValidationError, match="limit"):
            checks.check_limit(bad)
    assert checks.check_part_number(1) == 1
    for bad_part in (0, -3, True, 1.0):
        with pytest.raises(ValidationError, match="part_number"):
            checks.check_part_number(bad_part)
    assert checks.check_size(1) == 1
    for bad_size in (0, -1, False, 1.5):
        with pytest.raises(ValidationError, match="size"):
            checks.check_size(bad_size)


def test_run_ids_are_deduplicated_in_order() -> None:
    assert checks.check_run_ids(["j_2", "j_1", "j_2", "j_3", "j_1"]) == ["j_2", "j_1", "j_3"]
    assert checks.check_run_ids(iter(["j_1"])) == ["j_1"]


@pytest.mark.parametrize(
    ("ids", "match"),
    [([], "empty"), ("j_1,j_2", "not one string"), (["j_1", "ab_1"], "not a run id"), (5, "list")],
)
def test_bad_run_ids(ids: object, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        checks.check_run_ids(ids)


@pytest.mark.parametrize("name", ["shop.apk", "Shop.APK", "shop.app.zip"])
def test_app_file_names(name: str) -> None:
    assert checks.check_file_name(name) == name


@pytest.mark.parametrize("name", ["shop.zip", "shop.ipa", "shop.app", "", "dir/shop.apk", 3])
def test_bad_app_file_names(name: object) -> None:
    with pytest.raises(ValidationError, match="file_name"):
        checks.check_file_name(name)


def _endpoint(**changes: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "name": "create_voucher",
        "description": "Creates a voucher for the test shopper.",
        "url": "https://shop.example/vouchers",
        "method": "post",
        "headers": {"X-Api-Key": "hidden-value"},
        "body_template": '{"amount": {{amount}}}',
    }
    fields.update(changes)
    return fields


def test_endpoint_body_uses_wire_names() -> None:
    body = checks.check_endpoint(**_endpoint())
    assert body == {
        "name": "create_voucher",
        "description": "Creates a voucher for the test shopper.",
        "method": "POST",
        "url": "https://shop.example/vouchers",
        "headers": {"X-Api-Key": "hidden-value"},
        "bodyTemplate": '{"amount": {{amount}}}',
    }
    minimal = checks.check_endpoint(**_endpoint(headers=None, body_template=None))
    assert "headers" not in minimal
    assert "bodyTemplate" not in minimal


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"name": "x" * 41}, "1 to 40 characters"),
        ({"name": ""}, "1 to 40 characters"),
        ({"description": "d" * 601}, "1 to 600 characters"),
        ({"description": ""}, "1 to 600"),
        ({"url": "http://shop.example/v"}, "https://"),
        ({"url": "https://"}, "https://"),
        ({"method": "TRACE"}, "DELETE, GET, PATCH, POST, PUT"),
        ({"headers": {f"H{i}": "v" for i in range(21)}}, "at most 20 headers"),
        ({"headers": {"X-Key": 5}}, "string value"),
        ({"headers": ["X-Key"]}, "mapping"),
        ({"body_template": {"a": 1}}, "body_template"),
    ],
)
def test_endpoint_limits(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match) as info:
        checks.check_endpoint(**_endpoint(**changes))
    assert "hidden-value" not in str(info.value)


def test_endpoint_with_exactly_the_limits_passes() -> None:
    body = checks.check_endpoint(
        **_endpoint(name="n" * 40, description="d" * 600, headers={f"H{i}": "v" for i in range(20)})
    )
    assert len(body["headers"]) == 20


# --- urls ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("video.mp4", "video.mp4"),
        ("screenshots/01.png", "screenshots/01.png"),
        ("/screenshots/01.png", "screenshots/01.png"),
        ("http://h:1/api/v1/runs/j_1/files/screenshots/01.png", "screenshots/01.png"),
        ("https://h/api/v1/runs/j_1/files/video.mp4?sig=1", "video.mp4"),
        ("a b/c#d.png", "a%20b/c"),
        # A link is already percent-encoded: decoded once, then encoded again.
        ("http://h/api/v1/runs/j_1/files/screenshots/step%201.png", "screenshots/step%201.png"),
        ("https://h/api/v1/runs/j_1/files/a%2Bb%25c.png", "a%2Bb%25c.png"),
        ("https://h/api/v1/runs/j_1/files/caf%C3%A9.png", "caf%C3%A9.png"),
        # A path is the name as it is: its "%" is a "%".
        ("screenshots/step%201.png", "screenshots/step%25201.png"),
        ("100%.png", "100%25.png"),
    ],
)
def test_run_file_path(file: str, expected: str) -> None:
    assert wire.run_file_path("j_1", file) == expected


@pytest.mark.parametrize(
    "file",
    [
        "",
        "../secret",
        "a//b",
        "screenshots/..",
        7,
        # Decoded, these would leave the folder given as dest, or name no file at all.
        "https://h/api/v1/runs/j_1/files/%2E%2E/secret",
        "https://h/api/v1/runs/j_1/files/..%2F..%2Fetc%2Fpasswd",
        "https://h/api/v1/runs/j_1/files/a%00.png",
    ],
)
def test_bad_run_file_paths(file: object) -> None:
    with pytest.raises(ValidationError):
        wire.run_file_path("j_1", file)


def test_run_file_link_of_another_run_is_refused() -> None:
    with pytest.raises(ValidationError, match="belongs to run j_2"):
        wire.run_file_path("j_1", "http://h/api/v1/runs/j_2/files/video.mp4")


def test_batched() -> None:
    ids = [f"j_{i}" for i in range(120)]
    batches = list(wire.batched(ids, 50))
    assert [len(b) for b in batches] == [50, 50, 20]
    assert [i for b in batches for i in b] == ids


# --- answers ------------------------------------------------------------------------------------


def test_excerpt_is_one_short_line() -> None:
    assert (
        wire.excerpt(b"<html>\n  <body>oops</body>\n</html>") == "<html> <body>oops</body> </html>"
    )
    long = wire.excerpt(b"x" * 1000, 50)
    assert len(long) == 50
    assert long.endswith("\u2026")
    assert wire.excerpt(b"\xff\xfeok") == "\ufffd\ufffdok"


def test_reason_phrase() -> None:
    assert reason_phrase(404) == "Not Found"
    assert reason_phrase(599) == "Unknown Status"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        (" 0 ", 0.0),
        ("1.5", 1.5),
        (None, None),
        ("", None),
        ("-3", None),
        ("soon", None),
    ],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert wire.parse_retry_after(value) == expected


def test_retry_after_http_date() -> None:
    now = datetime(2026, 11, 21, 5, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=42), usegmt=True)
    assert wire.parse_retry_after(later, now=now.timestamp()) == 42.0
    earlier = format_datetime(now - timedelta(seconds=42), usegmt=True)
    assert wire.parse_retry_after(earlier, now=now.timestamp()) == 0.0
    assert wire.parse_retry_after("Fri, 32 Foo 2026 99:00:00 GMT") is None


def test_content_range() -> None:
    assert wire.parse_content_range("bytes 100-199/1000") == (100, 199, 1000)
    assert wire.parse_content_range("bytes 0-9/*") == (0, 9, None)
    assert wire.parse_content_range("items 0-9/10") is None
    assert wire.parse_content_range(None) is None
    assert wire.parse_unsatisfied_range("bytes */1000") == 1000
    assert wire.parse_unsatisfied_range("bytes 0-1/2") is None


# --- retries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
def test_retryable_statuses(status: int) -> None:
    assert classify(status) != "permanent"


@pytest.mark.parametrize("status", [200, 400, 401, 402, 403, 404, 409, 416, 422, 600])
def test_statuses_not_retried(status: int) -> None:
    assert classify(status) == "permanent"


def test_transport_retry_decision() -> None:
    dropped = aiohttp.ServerDisconnectedError()
    never_sent = aiohttp.ClientConnectorError(
        ConnectionKey("h", 1, False, True, None, None, None), ConnectionRefusedError()
    )
    assert verdict_of(dropped, idempotent=True) != "permanent"
    assert verdict_of(never_sent, idempotent=False) != "permanent"
    assert verdict_of(dropped, idempotent=False) == "permanent"


def test_is_id_is_check_ids_rule_without_the_message() -> None:
    for kind, good, bad in [("run", "j_1a-b.c", "j_1\n::error::x"), ("test", "t_x", "t_x\"y"),
                            ("build", "ab_9", "j_9")]:  # fmt: skip
        assert checks.is_id(kind, good)
        assert checks.check_id(kind, good) == good
        assert not checks.is_id(kind, bad)
        with pytest.raises(ValidationError):
            checks.check_id(kind, bad)
    assert not checks.is_id("run", None)
