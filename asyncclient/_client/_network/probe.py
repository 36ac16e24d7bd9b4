"""A closer look at a failed connection, made after the fact in a thread with a blocking
socket of its own (through the proxy's tunnel when there is one): the names a mismatched
certificate holds, whether a service ends TLS connections before any request (it wants a client
certificate), whether a plain-HTTP address speaks TLS. asyncclient._client._network calls these."""

from __future__ import annotations

import contextlib
import socket
import ssl
from typing import Final, Protocol
from urllib.parse import urlsplit

from asyncclient._client._network.proxies import Proxy

__all__ = ["alert_after_handshake", "peer_names", "speaks_tls", "ssl_words"]


class Network(Protocol):
    """What a closer look needs of the session's network (asyncclient._client._network.Network)."""

    @property
    def proxy(self) -> Proxy | None: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def where(self) -> str: ...

    @property
    def ssl_context(self) -> ssl.SSLContext | None: ...


_PROBE_TIMEOUT: Final = 5.0
# How long to wait for an alert after the handshake.
_ALERT_WAIT: Final = 1.0


def _open(network: Network, context: ssl.SSLContext | None) -> socket.socket:
    """A blocking connection to the service (through the proxy's tunnel), TLS if asked."""
    if network.proxy is None:
        sock = socket.create_connection((network.host, network.port), timeout=_PROBE_TIMEOUT)
    else:
        proxy = urlsplit(network.proxy.url)
        if proxy.scheme != "http" or proxy.hostname is None:
            raise ValueError("only an http:// proxy's tunnel is opened for a closer look")
        sock = socket.create_connection((proxy.hostname, proxy.port or 80), _PROBE_TIMEOUT)
        lines = [f"CONNECT {network.where} HTTP/1.1", f"Host: {network.where}"]
        authorization = network.proxy.authorization()
        if authorization:
            lines.append(f"Proxy-Authorization: {authorization}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            sock.close()
            raise ValueError("the proxy refused the tunnel")
    if context is None:
        return sock
    try:
        return context.wrap_socket(sock, server_hostname=network.host)
    except BaseException:
        sock.close()
        raise


def peer_names(network: Network) -> list[str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with contextlib.closing(_open(network, context)) as sock:
        assert isinstance(sock, ssl.SSLSocket)
        der = sock.getpeercert(binary_form=True)
    return _certificate_names(der) if der else []


def alert_after_handshake(network: Network) -> str:
    """How the service ends a TLS connection right after the handshake, before any request:
    TLS 1.3 refuses a missing or unknown client certificate that way, with an alert (nginx,
    OpenSSL) or by closing (Python's asyncio). "" if it keeps the connection open."""
    context = network.ssl_context or ssl.create_default_context()
    with contextlib.closing(_open(network, context)) as sock:
        sock.settimeout(_ALERT_WAIT)
        try:
            if sock.recv(1) == b"":
                return "it closed the connection right after the TLS handshake"
        except ssl.SSLError as exc:
            return ssl_words(exc)
        except TimeoutError:
            return ""
    return ""


def speaks_tls(network: Network) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _open(network, context).close()
    return True


def _certificate_names(der: bytes) -> list[str]:
    """The DNS names and IP addresses a certificate holds (its subject alternative names);
    none without cryptography (the tls extra brings it; the message then names no host)."""
    try:
        from cryptography import x509
    except ImportError:
        return []

    certificate = x509.load_der_x509_certificate(der)
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        common = certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        return [str(attribute.value) for attribute in common]
    names: list[str] = list(extension.value.get_values_for_type(x509.DNSName))
    names += [str(ip) for ip in extension.value.get_values_for_type(x509.IPAddress)]
    return names


def ssl_words(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        return reason.replace("_", " ").lower()
    return str(exc) or type(exc).__name__
