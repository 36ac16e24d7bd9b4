"""Proxies: which one a request to the service goes through (an explicit one, the
ASYNCCLIENT_PROXY variable, or the variables curl and pip read, NO_PROXY honoured), and how it
is shown: its password never appears, `http://user:***@host:port`. Pure functions of their
arguments; asyncclient._client._network uses them."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
from collections.abc import Mapping
from typing import Final
from urllib.parse import quote, unquote, urlsplit

import attrs

from asyncclient._values._bounds import digits
from asyncclient.errors import ValidationError

__all__ = ["DIRECT", "PROXY_ENV", "Proxy", "bypasses", "resolve_proxy"]

PROXY_ENV: Final = "ASYNCCLIENT_PROXY"
#: "Connect directly, whatever the environment says".
DIRECT: Final = "direct"


@attrs.frozen(repr=False)
class Proxy:
    """A proxy to reach the service through. `url` carries the credentials (for aiohttp only);
    `shown` is the same address with the password replaced by ***, for every message."""

    url: str
    shown: str
    source: str
    user: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        return f"<Proxy {self.shown} from {self.source}>"

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never appear in output: the password, raw and as it stands in the URL."""
        if not self.password:
            return ()
        return tuple({self.password, quote(self.password, safe="")})

    def authorization(self) -> str | None:
        """The Proxy-Authorization header value for the URL's credentials, if any."""
        if self.user is None:
            return None
        raw = f"{self.user}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


def _env(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """The value of a proxy variable, lower case first (as curl reads them), and its name."""
    for key in (name.lower(), name.upper()):
        value = environ.get(key, "").strip()
        if value:
            return value, key
    return None


def bypasses(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether NO_PROXY's list names this host, as curl reads it: `*` for every host; a name
    matches itself and its subdomains (a leading dot is optional); an IP address or a CIDR
    range matches addresses; `host:port` only that port."""
    host = host.strip("[]").lower().rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        entry_port: int | None = None
        if entry.startswith("[") and "]" in entry:  # [::1]:8080
            inside, _, rest = entry[1:].partition("]")
            entry = inside
            if rest.startswith(":") and digits(rest[1:]):
                entry_port = int(rest[1:])
        elif entry.count(":") == 1:  # host:port (an IPv6 address has more colons)
            name, _, number = entry.partition(":")
            if digits(number):
                entry, entry_port = name, int(number)
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:
            with contextlib.suppress(ValueError):
                if "/" in entry:
                    if address in ipaddress.ip_network(entry, strict=False):
                        return True
                elif address == ipaddress.ip_address(entry):
                    return True
            continue
        name = entry.lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _check_proxy_url(value: str, source: str) -> Proxy:
    """The proxy address as given, checked; `host:port` alone means http://host:port."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValidationError(
            f"{source}: the proxy address {_hide_password(text)} is not valid ({exc}): "
            "give it as http://[user:password@]host:port"
        ) from None
    scheme = parts.scheme.lower()
    if scheme.startswith("socks"):
        raise ValidationError(
            f"{source}: SOCKS proxies are not supported: give an HTTP proxy "
            "(http://[user:password@]host:port), or set it to 'direct' to connect directly"
        )
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            f"{source}: the proxy address {_hide_password(text)} is not an http(s) address: "
            "give it as http://[user:password@]host:port"
        )
    host = parts.hostname
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    shown_netloc = netloc
    full_netloc = netloc
    if user is not None:
        credentials = quote(user, safe="")
        shown = credentials
        if password is not None:
            credentials += ":" + quote(password, safe="")
            shown += ":***"
        full_netloc = f"{credentials}@{netloc}"
        shown_netloc = f"{shown}@{netloc}"
    return Proxy(
        url=f"{scheme}://{full_netloc}",
        shown=f"{scheme}://{shown_netloc}",
        source=source,
        user=user,
        password=password,
    )


def _hide_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    return f"{scheme}{sep}{netloc}{slash}{tail}"


def resolve_proxy(
    base_url: str, proxy: str | None, environ: Mapping[str, str], *, flag: str = "proxy="
) -> Proxy | None:
    """The proxy for requests to `base_url`, or None to connect directly (see the module doc)."""
    if proxy is not None and proxy.strip():
        chosen: tuple[str, str] | None = (proxy.strip(), flag.rstrip("="))
    else:
        explicit = environ.get(PROXY_ENV, "").strip()
        chosen = (explicit, PROXY_ENV) if explicit else None
    if chosen is not None:
        value, source = chosen
        return None if value.lower() == DIRECT else _check_proxy_url(value, source)
    parts = urlsplit(base_url)
    scheme = parts.scheme.lower()
    default_port = 443 if scheme == "https" else 80
    no_proxy = _env(environ, "no_proxy")
    if no_proxy and bypasses(parts.hostname or "", parts.port or default_port, no_proxy[0]):
        return None
    # Both cases read, unlike curl: no CGI runs this.
    found = _env(environ, f"{scheme}_proxy") or _env(environ, "all_proxy")
    if found is None:
        return None
    value, name = found
    return _check_proxy_url(value, name)
