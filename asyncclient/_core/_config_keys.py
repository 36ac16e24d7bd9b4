"""The keys of the configuration files (asyncclient.config): each setting's type, its flag and
its environment variable, for the top level and for each command's table."""

from collections.abc import Mapping
from typing import Final

import attrs

from asyncclient._core import _defaults as defaults

__all__ = ["COMMAND_KEYS", "GLOBAL_KEYS", "Key"]


@attrs.frozen
class Key:
    """A setting: its type ("str", "path", "int", "float", "bool", "list"), its flag and its
    environment variable (each may be absent)."""

    kind: str
    flag: str | None = None
    env: str | None = None
    default: object = None  # what applies when nothing sets it (shown by `config show`)


GLOBAL_KEYS: Final[Mapping[str, Key]] = {
    "base_url": Key("str", "--base-url", "ASYNCCLIENT_BASE_URL"),
    "proxy": Key("str", "--proxy", "ASYNCCLIENT_PROXY"),
    "ca_file": Key("path", "--ca-file", "ASYNCCLIENT_CA_FILE"),
    "client_cert": Key("path", "--client-cert", "ASYNCCLIENT_CLIENT_CERT"),
    "client_key": Key("path", "--client-key", "ASYNCCLIENT_CLIENT_KEY"),
    "request_timeout": Key(
        "float", "--request-timeout", "ASYNCCLIENT_REQUEST_TIMEOUT", defaults.REQUEST_TIMEOUT
    ),
    "retries": Key("int", "--retries", "ASYNCCLIENT_RETRIES", defaults.MAX_RETRIES),
    "retry_deadline": Key(
        "float", "--retry-deadline", "ASYNCCLIENT_RETRY_DEADLINE", defaults.RETRY_DEADLINE
    ),
    "pool_timeout": Key("float", "--pool-timeout"),
    "max_response_bytes": Key(
        "int", "--max-response-bytes", "ASYNCCLIENT_MAX_RESPONSE_BYTES", defaults.MAX_RESPONSE_BYTES
    ),
    "log": Key("str", None, "ASYNCCLIENT_LOG"),
    "api_key_env": Key("str"),
    "api_key": Key("str", "--api-key", "ASYNCCLIENT_API_KEY"),
}

_FOLLOW: Final[Mapping[str, Key]] = {
    "retry_failed": Key("int", "--retry-failed"),
    "retry_strategy": Key("str", "--retry-strategy", default="rounds"),
    "hedge_target": Key("float", "--hedge-target", default=0.95),
    "retry_budget": Key("float", "--retry-budget"),
    "max_failures": Key("int", "--max-failures"),
    "fail_on_flaky": Key("bool", "--fail-on-flaky"),
    "junit": Key("path", "--junit"),
    "ctrf": Key("path", "--ctrf"),
    "allure_results": Key("path", "--allure-results"),
    "events": Key("path", "--events"),
    "html": Key("path", "--html"),
    "download_failed": Key("path", "--download-failed"),
    "interval": Key("float", "--interval"),
    "timeout": Key("float", "--timeout"),
    "stop_on_timeout": Key("bool", "--stop-on-timeout"),
    "quarantine": Key("path", "--quarantine"),
    "fail_on_quarantined": Key("bool", "--fail-on-quarantined"),
    "no_history": Key("bool", "--no-history"),
    "categories": Key("path", "--categories"),
    "rerun_known": Key("bool", "--rerun-known"),
    "baseline": Key("str", "--baseline"),
    "baseline_ref": Key("str", "--baseline-ref"),
    "pre_existing": Key("str", "--pre-existing", default="fail"),
}

COMMAND_KEYS: Final[Mapping[str, Mapping[str, Key]]] = {
    "run": {
        **_FOLLOW,
        "mode": Key("str", "--mode"),
        "allow_skipped": Key("bool", "--allow-skipped"),
        "reuse_passed": Key("float", "--reuse-passed"),
        "new_test_runs": Key("int", "--new-test-runs"),
        "new_test_budget": Key("float", "--new-test-budget"),
        "new_test_warn": Key("bool", "--new-test-warn"),
        "priority": Key("str", "--priority"),
    },
    "watch": {**_FOLLOW, "stop_on_interrupt": Key("bool", "--stop-on-interrupt")},
    "upload": {
        "concurrency": Key("int", "--concurrency"),
        "max_parts_in_flight": Key("int", "--max-parts-in-flight"),
        "skip_existing": Key("bool", "--skip-existing"),
    },
    "download": {"concurrency": Key("int", "--concurrency")},
    # The fleet's ledger (asyncclient.fleet): read by every command that follows runs.
    "fleet": {
        "url": Key("str", None, "ASYNCCLIENT_FLEET"),
        "lease": Key("float", None, "ASYNCCLIENT_FLEET_LEASE", 30.0),
        "max_runs": Key("int", None, "ASYNCCLIENT_FLEET_MAX_RUNS"),
    },
    "flaky": {"categories": Key("path", "--categories")},
    "failures": {"categories": Key("path", "--categories")},
    "mcp": {
        "toolsets": Key("list", "--toolsets", "ASYNCCLIENT_MCP_TOOLSETS"),
        "tools": Key("list", "--tools", "ASYNCCLIENT_MCP_TOOLS"),
        "exclude_tools": Key("list", "--exclude-tools", "ASYNCCLIENT_MCP_EXCLUDE_TOOLS"),
        "read_only": Key("bool", "--read-only", "ASYNCCLIENT_MCP_READ_ONLY"),
        "poll_interval": Key("float", "--poll-interval"),
        "result_chars": Key("int", "--result-chars"),
        "download_dir": Key("path", "--download-dir"),
        "http": Key("str", "--http"),
    },
}

TYPE_WORDS: Final = {
    "str": "a string",
    "path": "a path (a string)",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "list": "a list of strings",
}
