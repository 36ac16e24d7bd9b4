"""The session's settings read from its arguments and the environment: the API key, the
service's address, the largest answer read and the retry deadline, each with the one-line
error that names the variable or argument to fix. No I/O beyond the mapping it is given."""

import math
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from asyncclient._core import _defaults as defaults
from asyncclient._core._operations import API_PREFIX
from asyncclient._core._retry import DEFAULT_RETRY_DEADLINE, RETRY_DEADLINE_ENV
from asyncclient.errors import ValidationError

API_KEY_ENV: Final = "ASYNCCLIENT_API_KEY"
BASE_URL_ENV: Final = "ASYNCCLIENT_BASE_URL"
MAX_RESPONSE_BYTES_ENV: Final = "ASYNCCLIENT_MAX_RESPONSE_BYTES"
DEFAULT_MAX_RESPONSE_BYTES: Final = defaults.MAX_RESPONSE_BYTES


def resolve_api_key(
    api_key: str | None,
    environ: Mapping[str, str],
    *,
    flag: str = "api_key=",
    hint: str | None = None,
) -> str:
    """The API key from the argument or the environment; refused with the fix when missing.
    `flag` names the argument in messages (the CLI passes "--api-key"); `hint` replaces the
    variable named in that message (a configuration file's api_key_env)."""
    key = api_key if api_key else environ.get(API_KEY_ENV, "")
    key = key.strip()
    if not key:
        raise ValidationError(f"no API key: {hint or 'set ' + API_KEY_ENV} or pass {flag}")
    # Else a control character surfaces as an aiohttp error later.
    if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in key):
        raise ValidationError(
            "the API key contains spaces or control characters: copy it again without them "
            f"({flag} or {API_KEY_ENV})"
        )
    return key


def resolve_base_url(
    base_url: str | None, environ: Mapping[str, str], *, flag: str = "base_url="
) -> str:
    """The service's base URL (scheme and host, no /api/v1) from the argument or environment.
    `flag` names the argument in messages (the CLI passes "--base-url")."""
    given = bool(base_url and base_url.strip())
    url = base_url if given and base_url is not None else environ.get(BASE_URL_ENV, "")
    url = url.strip().rstrip("/")
    if not url:
        raise ValidationError(
            f"no service address: pass {flag} or set {BASE_URL_ENV} (for example "
            "https://service.example; `asyncclient serve` runs a local emulator)"
        )
    source = flag.rstrip("=") if given else BASE_URL_ENV
    key_flag = "--api-key" if flag.startswith("--") else "api_key="
    try:
        parts = urlsplit(url)
        shown = _without_userinfo(url)
        if parts.username is not None or parts.password is not None:
            # A password in the URL would reach logs: use the key.
            raise ValidationError(
                f"{source} {shown} carries a user name or password: give the address alone "
                f"(https://host[:port]) and the key with {key_flag} or {API_KEY_ENV}"
            )
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError(
            f"{source} {_without_userinfo(url)} is not a valid address ({exc}): give it as "
            "https://host[:port]"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            f"{source} {shown} is not an http(s) address: give it as https://host[:port]"
        )
    if parts.query or parts.fragment:
        raise ValidationError(f"{source} {shown} must not carry a query or fragment")
    # People paste the API root; our paths carry the version.
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    return url


def resolve_max_response_bytes(
    value: object, environ: Mapping[str, str], *, flag: str = "max_response_bytes="
) -> int:
    """The largest answer read into memory: the argument, the variable, or 32 MiB."""
    source = flag.rstrip("=")
    if value is None:
        text = environ.get(MAX_RESPONSE_BYTES_ENV, "").strip()
        if not text:
            return DEFAULT_MAX_RESPONSE_BYTES
        source = MAX_RESPONSE_BYTES_ENV
        try:
            value = int(text)
        except ValueError:
            raise ValidationError(
                f"{source} {text!r} is not a number of bytes: give a whole number such as "
                f"{DEFAULT_MAX_RESPONSE_BYTES}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
        raise ValidationError(
            f"{source} must be a whole number of bytes, at least 1024 (default "
            f"{DEFAULT_MAX_RESPONSE_BYTES}, 32 MiB)"
        )
    return value


def resolve_retry_deadline(
    value: object, environ: Mapping[str, str], *, flag: str = "retry_deadline="
) -> float:
    """Seconds within which an outage is retried: the argument, ASYNCCLIENT_RETRY_DEADLINE,
    or 30; 0 turns it off (an outage then counts against max_retries like any failure)."""
    source = flag.rstrip("=")
    if value is None:
        text = environ.get(RETRY_DEADLINE_ENV, "").strip()
        if not text:
            return DEFAULT_RETRY_DEADLINE
        source = RETRY_DEADLINE_ENV
        try:
            value = float(text)
        except ValueError:
            value = text
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValidationError(
            f"{source} {value!r} is not a number of seconds: give 0 or more (default 30; 0 "
            "retries an outage only max_retries times)"
        )
    return float(value)


def _without_userinfo(url: str) -> str:
    """The URL as it may be shown: any `user:password@` before the host replaced by `***@`."""
    if "@" not in url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "***"
    host_part, slash, path = rest.partition("/")
    if "@" in host_part:
        host_part = "***@" + host_part.rpartition("@")[2]
    return f"{scheme}://{host_part}{slash}{path}"
