"""How requests reach the service: the proxy (`proxy=`, ASYNCCLIENT_PROXY, then curl's and
pip's variables and NO_PROXY; `direct`), the TLS trust (the system's, plus `ca_file=`), the
client certificate, and one line with its fix for what went wrong on the way. Resolved once
per session; a proxy's password is never shown (`http://user:***@host:port`).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from asyncclient._client._network import probe as _probe
from asyncclient._client._network.probe import ssl_words
from asyncclient._client._network.proxies import DIRECT, PROXY_ENV, Proxy, resolve_proxy
from asyncclient.errors import ValidationError, reason_phrase

__all__ = [
    "CA_FILE_ENV",
    "CLIENT_CERT_ENV",
    "CLIENT_KEY_ENV",
    "DIRECT",
    "PROXY_ENV",
    "Failure",
    "Network",
    "Proxy",
    "resolve_proxy",
]

CA_FILE_ENV: Final = "ASYNCCLIENT_CA_FILE"
CLIENT_CERT_ENV: Final = "ASYNCCLIENT_CLIENT_CERT"
CLIENT_KEY_ENV: Final = "ASYNCCLIENT_CLIENT_KEY"

# OpenSSL's verify codes that mean "the certificate names another host".
_NAME_MISMATCH: Final = frozenset({62, 64})  # X509_V_ERR_HOSTNAME_MISMATCH, _IP_ADDRESS_MISMATCH
_EXPIRED: Final = frozenset({9, 10})  # X509_V_ERR_CERT_NOT_YET_VALID, _CERT_HAS_EXPIRED


# --- trust and client certificates ----------------------------------------------------------------


def _existing_file(value: str | os.PathLike[str] | None, flag: str, env: str) -> Path | None:
    if value is None or not str(value).strip():
        return None
    path = Path(os.path.expanduser(str(value).strip()))
    if path.is_dir():
        raise ValidationError(
            f"{flag} {path} is a folder: give a PEM file (for a folder of hashed CA files, set "
            "SSL_CERT_DIR)"
            if env == CA_FILE_ENV
            else f"{flag} {path} is a folder: give a PEM file"
        )
    if not path.is_file():
        raise ValidationError(f"{flag} {path} does not exist: give the path of a PEM file ({env})")
    return path


def trust_store(environ: Mapping[str, str], ca_file: object, platform: str) -> str:
    """Which verifier to trust: "truststore" (the operating system's own, with its store:
    macOS's Keychain, Windows' certificate store, where company CAs live; python.org's macOS
    Python has no CA file of its own) on macOS and Windows, else "openssl" (OpenSSL's store).
    A CA file given (--ca-file, ASYNCCLIENT_CA_FILE) or OpenSSL's SSL_CERT_FILE/SSL_CERT_DIR
    always win: they choose OpenSSL with those CAs."""
    if ca_file is not None or environ.get("SSL_CERT_FILE") or environ.get("SSL_CERT_DIR"):
        return "openssl"
    return "truststore" if platform in ("darwin", "win32") else "openssl"


def base_context(environ: Mapping[str, str], ca_file: object, platform: str) -> ssl.SSLContext:
    """A verifying client context with the trust trust_store() chooses."""
    if trust_store(environ, ca_file, platform) == "truststore":
        import truststore

        return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return ssl.create_default_context()


def _tls_context(
    ca_file: Path | None,
    client_cert: Path | None,
    client_key: Path | None,
    flags: Mapping[str, str],
    environ: Mapping[str, str],
) -> ssl.SSLContext:
    """The system's trust (see base_context), plus the CAs of ca_file, plus the client
    certificate."""
    context = base_context(environ, ca_file, sys.platform)
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except (ssl.SSLError, ValueError) as exc:
            raise ValidationError(
                f"{flags['ca_file']} {ca_file} holds no CA certificate in PEM form "
                f"({ssl_words(exc)}): give the CA's certificate as a .pem file"
            ) from None
    if client_cert is not None:
        try:
            context.load_cert_chain(
                str(client_cert),
                str(client_key) if client_key is not None else None,
                password=_no_password,
            )
        except (ssl.SSLError, ValueError) as exc:
            key_flag = flags["client_key"]
            raise ValidationError(
                f"{flags['client_cert']} {client_cert} cannot be used ({ssl_words(exc)}): give a "
                f"PEM certificate with its unencrypted key, in the same file or with {key_flag}"
            ) from None
    elif client_key is not None:
        raise ValidationError(
            f"{flags['client_key']} was given without {flags['client_cert']}: give both"
        )
    return context


def _no_password() -> str:
    # Else OpenSSL asks for a passphrase on the terminal.
    raise ValueError("the key is encrypted")


# --- failures -------------------------------------------------------------------------------------


@attrs.frozen
class Failure:
    """What went wrong on the way to the service: a kind (for the CLI's own wording of the
    fix), the reason as a clause, the library's fix, and whether trying again can help."""

    kind: str
    reason: str
    fix: str = ""
    permanent: bool = True


@attrs.frozen(repr=False)
class Network:
    """How this session reaches its service (see the module doc)."""

    host: str
    port: int
    https: bool
    proxy: Proxy | None
    ssl_context: ssl.SSLContext | None
    ca_file: Path | None = None
    client_cert: Path | None = None
    # Option names in messages: ca_file= here, --ca-file in the CLI.
    flags: Mapping[str, str] = attrs.field(factory=dict)

    def option_name(self, option: str, env: str) -> str:
        """An option and its variable as a message names them: "ca_file= or ASYNCCLIENT_CA_FILE"
        in the library, "--ca-file or ASYNCCLIENT_CA_FILE" from the CLI."""
        return f"{self.flags.get(option, option + '=')} or {env}"

    def __repr__(self) -> str:
        via = self.proxy.shown if self.proxy else "directly"
        return f"<Network {self.host}:{self.port} via {via}>"

    @classmethod
    def resolve(
        cls,
        base_url: str,
        environ: Mapping[str, str],
        *,
        proxy: str | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        client_cert: str | os.PathLike[str] | None = None,
        client_key: str | os.PathLike[str] | None = None,
        flags: Mapping[str, str] | None = None,
    ) -> Network:
        """Check and resolve every option before any request: a bad proxy address or a missing
        or unreadable certificate file is a ValidationError that names the fix."""
        names = {
            "proxy": "proxy=",
            "ca_file": "ca_file=",
            "client_cert": "client_cert=",
            "client_key": "client_key=",
            **(flags or {}),
        }

        def pick(value: str | os.PathLike[str] | None, env: str) -> Any:
            return value if value is not None and str(value).strip() else environ.get(env)

        ca = _existing_file(pick(ca_file, CA_FILE_ENV), names["ca_file"], CA_FILE_ENV)
        cert = _existing_file(
            pick(client_cert, CLIENT_CERT_ENV), names["client_cert"], CLIENT_CERT_ENV
        )
        key = _existing_file(pick(client_key, CLIENT_KEY_ENV), names["client_key"], CLIENT_KEY_ENV)
        parts = urlsplit(base_url)
        https = parts.scheme.lower() == "https"
        chosen = resolve_proxy(base_url, proxy, environ, flag=names["proxy"])
        # Without a CA file or certificate, aiohttp's default context is ours.
        context = None
        platform_trust = trust_store(environ, ca, sys.platform) == "truststore"
        if ca is not None or cert is not None or key is not None or platform_trust:
            context = _tls_context(ca, cert, key, names, environ)
        return cls(
            host=parts.hostname or "",
            port=parts.port or (443 if https else 80),
            https=https,
            proxy=chosen,
            ssl_context=context,
            ca_file=ca,
            client_cert=cert,
            flags=names,
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.proxy.secrets if self.proxy is not None else ()

    def request_options(self) -> dict[str, Any]:
        """What every aiohttp request of the session is given: the proxy and the TLS context."""
        options: dict[str, Any] = {}
        if self.proxy is not None:
            options["proxy"] = self.proxy.url
        if self.ssl_context is not None:
            options["ssl"] = self.ssl_context
        return options

    @property
    def where(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    # --- describing failures ------------------------------------------------------------------

    def classify(self, exc: BaseException) -> Failure | None:
        """The failure on the way to the service that `exc` is, or None for an ordinary one
        (refused connection, timeout, drop: the transport's own wording)."""
        import aiohttp  # loaded by the transport already

        proxy = self.proxy
        if isinstance(exc, aiohttp.ClientHttpProxyError) and proxy is not None:
            status = exc.status
            phrase = f"{status} {reason_phrase(status)}"
            if status == 407:
                if proxy.user is None:
                    return Failure(
                        "proxy_auth",
                        f"the proxy {proxy.shown} wants credentials ({phrase})",
                        f"put them in the proxy address (http://USER:PASSWORD@host:port) in "
                        f"{proxy.source}",
                    )
                return Failure(
                    "proxy_auth",
                    f"the proxy {proxy.shown} refused the user name and password in its "
                    f"address ({phrase})",
                    f"check the credentials in {proxy.source}",
                )
            return Failure(
                "proxy_refused",
                f"the proxy {proxy.shown} refused the tunnel to {self.where} ({phrase})",
                f"ask its administrators to allow {self.where}, or, if the service can be "
                f"reached directly, name {self.host} in NO_PROXY",
                permanent=status < 500,
            )
        if isinstance(exc, aiohttp.ClientProxyConnectionError) and proxy is not None:
            return Failure(
                "proxy_unreachable",
                f"cannot connect to the proxy {proxy.shown} ({_os_words(exc)})",
                f"check the proxy address in {proxy.source}, or name {self.host} in NO_PROXY "
                "to connect directly",
                permanent=False,
            )
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            error = exc.certificate_error
            code = getattr(error, "verify_code", None)
            if code in _NAME_MISMATCH:
                return Failure(
                    "name_mismatch",
                    f"the certificate of {self.where} is not valid for {self.host}",
                    "use the base URL with a host name the certificate holds",
                )
            if code in _EXPIRED:
                words = getattr(error, "verify_message", "") or "expired"
                return Failure(
                    "cert_expired",
                    f"the certificate of {self.where} is out of its validity ({words})",
                    "the service must renew it; check this machine's clock too",
                )
            words = getattr(error, "verify_message", "") or ssl_words(error)
            if self.ca_file is not None:
                fix = (
                    f"the CA file {self.ca_file} does not hold the CA that signed it: give "
                    f"the right one with {self.option_name('ca_file', CA_FILE_ENV)}"
                )
            else:
                fix = (
                    f"trust the CA that signed it with {self.option_name('ca_file', CA_FILE_ENV)} "
                    "(SSL_CERT_FILE works too)"
                )
            return Failure(
                "untrusted", f"the certificate of {self.where} is not trusted ({words})", fix
            )
        if isinstance(exc, aiohttp.ClientSSLError):
            words = ssl_words(getattr(exc, "os_error", exc))
            if "wrong version number" in words or "record layer failure" in words:
                return Failure(
                    "not_tls",
                    f"{self.where} does not speak TLS ({words})",
                    f"if it serves plain HTTP, use http://{self.where}",
                )
            if "certificate required" in words or "alert" in words:
                return self._client_cert_failure(words)
            return Failure("tls", f"the TLS handshake with {self.where} failed ({words})")
        return None

    def _client_cert_failure(self, words: str) -> Failure:
        asks = "asks" if "alert" in words else "most likely asks"
        if self.client_cert is None:
            return Failure(
                "client_cert",
                f"{self.where} {asks} for a client certificate ({words})",
                f"give one with {self.option_name('client_cert', CLIENT_CERT_ENV)} (and the key in "
                f"the same file or with {self.flags.get('client_key', 'client_key=')})",
            )
        return Failure(
            "client_cert",
            f"{self.where} most likely refused the client certificate {self.client_cert} ({words})",
            "give a certificate its CA accepts with "
            + self.option_name("client_cert", CLIENT_CERT_ENV),
        )

    async def diagnose(self, exc: BaseException, failure: Failure | None) -> Failure | None:
        """A closer look, after the fact, at a failure whose cause the error alone does not
        tell: which names a mismatched certificate holds, a dropped TLS connection that was a
        request for a client certificate, a plain-HTTP address of a TLS service. One short
        connection of its own (through the proxy, if any), in a thread; None when it learns
        nothing."""
        from asyncclient._client._network.link import closed_by_service

        try:
            if failure is not None and failure.kind == "name_mismatch":
                names = await asyncio.to_thread(_probe.peer_names, self)
                if not names:
                    return None
                return attrs.evolve(
                    failure,
                    reason=f"{failure.reason}: it holds {', '.join(names)}",
                    fix="use a base URL with one of those names, e.g. "
                    f"https://{_host_for_url(names[0])}:{self.port}",
                )
            if failure is None and closed_by_service(exc):
                if self.https:
                    words = await asyncio.to_thread(_probe.alert_after_handshake, self)
                    return self._client_cert_failure(words) if words else None
                if await asyncio.to_thread(_probe.speaks_tls, self):
                    return Failure(
                        "speaks_tls",
                        f"{self.where} speaks HTTPS, not plain HTTP",
                        f"use https://{self.where}",
                    )
        except (OSError, ValueError):  # ssl.SSLError and socket timeouts are OSErrors
            return None
        return None


def _os_words(exc: BaseException) -> str:
    error = getattr(exc, "os_error", None)
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno).lower()
    return str(error or exc) or type(exc).__name__


def _host_for_url(name: str) -> str:
    return f"[{name}]" if ":" in name else name
