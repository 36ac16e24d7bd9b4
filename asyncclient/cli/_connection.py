"""How the CLI makes its session: the network options (each also read from the environment)
and the session built from them by the library's own rules, so the messages name the flags."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from asyncclient._core import _defaults as defaults

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient.cli._options import Connection

__all__ = ["NETWORK_FLAGS", "add_network_options", "open_session"]


def add_network_options(
    parser: argparse.ArgumentParser, default: Callable[[Any], Any], *, timeout_alias: bool = True
) -> None:
    """--proxy, --ca-file, --client-cert, --client-key, --request-timeout, --retries,
    --retry-deadline, --pool-timeout and --max-response-bytes, in their own group of the help.

    timeout_alias=False leaves out --timeout as another name of --request-timeout, for the
    commands where --timeout bounds the whole wait (run, watch) and before the command name.
    """
    net = parser.add_argument_group("network options (each also read from the environment)")
    net.add_argument(
        "--proxy",
        metavar="URL",
        default=default(None),
        help="HTTP proxy, http://[user:password@]host:port, or 'direct' to ignore the "
        "proxy variables (default: $ASYNCCLIENT_PROXY, else HTTPS_PROXY/HTTP_PROXY/ALL_PROXY "
        "and NO_PROXY as curl reads them)",
    )
    net.add_argument(
        "--ca-file",
        metavar="FILE",
        default=default(None),
        help="PEM file of CA certificates to trust besides the system's, e.g. a company CA "
        "(default: $ASYNCCLIENT_CA_FILE; SSL_CERT_FILE and SSL_CERT_DIR also work)",
    )
    net.add_argument(
        "--client-cert",
        metavar="FILE",
        default=default(None),
        help="PEM client certificate for services that ask for one (mutual TLS); may hold "
        "the key too (default: $ASYNCCLIENT_CLIENT_CERT)",
    )
    net.add_argument(
        "--client-key",
        metavar="FILE",
        default=default(None),
        help="PEM key of --client-cert, unencrypted (default: $ASYNCCLIENT_CLIENT_KEY)",
    )
    net.add_argument(
        "--request-timeout",
        *(["--timeout"] if timeout_alias else []),
        dest="request_timeout",
        metavar="SECONDS",
        type=float,
        default=default(None),
        help="how long one request may take (a part upload or a download: how long no data "
        "may move) before it is retried or fails (default: $ASYNCCLIENT_REQUEST_TIMEOUT, else "
        "30)" + ("; also --timeout" if timeout_alias else ""),
    )
    net.add_argument(
        "--retries",
        metavar="N",
        type=int,
        default=default(None),
        help="retries of a failed request after the first attempt (default: "
        f"$ASYNCCLIENT_RETRIES, else {defaults.MAX_RETRIES})",
    )
    net.add_argument(
        "--retry-deadline",
        metavar="SECONDS",
        type=float,
        default=default(None),
        help="how long a request rides out an outage of the service (no connection, 502, "
        f"503, 504), retrying (default: $ASYNCCLIENT_RETRY_DEADLINE, else "
        f"{defaults.RETRY_DEADLINE:g}; 0: only --retries "
        "times)",
    )
    net.add_argument(
        "--pool-timeout",
        metavar="SECONDS",
        type=float,
        default=default(None),
        help="how long a request may wait for a free connection (default: no limit; that "
        "wait never counts against --request-timeout)",
    )
    net.add_argument(
        "--max-response-bytes",
        metavar="N",
        type=int,
        default=default(None),
        help="the largest answer read into memory (default: "
        f"$ASYNCCLIENT_MAX_RESPONSE_BYTES, else {defaults.MAX_RESPONSE_BYTES}, "
        f"{defaults.MAX_RESPONSE_BYTES >> 20} MiB)",
    )


def open_session(args: argparse.Namespace, **options: Any) -> AsyncSession:
    """An AsyncSession from --base-url/--api-key or the environment.

    A missing address or key is refused here, naming both the flag and the variable to set.
    """
    from asyncclient._core._environment import resolve_api_key, resolve_base_url
    from asyncclient.cli._options import Connection, read

    given = read(Connection, args)
    # The library's rules, naming the flags.
    base_url = resolve_base_url(given.base_url, os.environ, flag="--base-url")
    api_key = resolve_api_key(given.api_key, os.environ, flag="--api-key", hint=given.api_key_hint)
    settings: dict[str, Any] = {
        # The library reads ASYNCCLIENT_MAX_RESPONSE_BYTES itself, naming the flag (_option_names).
        "max_response_bytes": given.max_response_bytes,
        "retry_deadline": given.retry_deadline,
        "pool_timeout": given.pool_timeout,
        "proxy": given.proxy,
        "ca_file": given.ca_file,
        "client_cert": given.client_cert,
        "client_key": given.client_key,
        **_request_options(given),
        **options,
    }
    return _command_session_class()(api_key=api_key, base_url=base_url, **settings)


def _request_options(given: Connection) -> dict[str, Any]:
    """--request-timeout, --retries or their variables, checked (the library has these
    options but not their variables)."""
    from asyncclient.errors import ValidationError

    options: dict[str, Any] = {}
    for flag, value, env, option, kind in (
        ("--request-timeout", given.request_timeout, "ASYNCCLIENT_REQUEST_TIMEOUT", "timeout",
         float),
        ("--retries", given.retries, "ASYNCCLIENT_RETRIES", "max_retries", int),
    ):  # fmt: skip
        source = flag
        if value is None:
            text = os.environ.get(env, "").strip()
            if not text:
                continue
            source = env
            try:
                value = kind(text)
            except ValueError:
                raise ValidationError(
                    f"{env} {text!r} is not a {'number' if kind is float else 'whole number'}"
                ) from None
        if value < 0 or (option == "timeout" and value == 0):
            least = "above 0" if option == "timeout" else "at least 0"
            raise ValidationError(f"{source} {value:g} is out of range: give a number {least}")
        options[option] = value
    return options


# Messages name the flags when the CLI made the session.
NETWORK_FLAGS = {
    "proxy": "--proxy",
    "ca_file": "--ca-file",
    "client_cert": "--client-cert",
    "client_key": "--client-key",
    "max_response_bytes": "--max-response-bytes",
    "retry_deadline": "--retry-deadline",
}


@functools.cache
def _command_session_class() -> type[AsyncSession]:
    from asyncclient import AsyncSession

    class CommandSession(AsyncSession):
        """An AsyncSession whose messages name the command's flags, not the arguments."""

        _option_names = NETWORK_FLAGS

    return CommandSession
