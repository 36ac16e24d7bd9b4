"""The one reading of a failed attempt (asyncclient._client._failures): each of aiohttp's
failures and the OS's goes through it once, and comes out as the error class and the retry
decision written here, independently of the table it reads."""

from __future__ import annotations

import errno
import inspect
import socket
import ssl
from typing import Any

import aiohttp
import aiohttp.client_exceptions as client_exceptions
import pytest
from aiohttp.client_reqrep import ConnectionKey, RequestInfo
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from asyncclient._client._failures import FAILURES, read_failure, verdict_of
from asyncclient._client._network import Failure, link
from asyncclient.errors import (
    KINDS,
    CertificateError,
    CertificateExpiredError,
    CertificateNameMismatchError,
    ClientCertificateError,
    NotTLSError,
    PoolTimeoutError,
    ProxyAuthError,
    ProxyError,
    ProxyUnreachableError,
    ResponseTooLargeError,
    SpeaksTLSError,
    TLSError,
    TransportError,
)

KEY = ConnectionKey("service.example.com", 443, True, True, None, None, None)
INFO = RequestInfo(
    URL("https://service.example.com/api/v1/runs"),
    "GET",
    CIMultiDictProxy(CIMultiDict()),
    URL("https://service.example.com/api/v1/runs"),
)
REFUSED = OSError(errno.ECONNREFUSED, "Connection refused")
UNRESOLVED = socket.gaierror(socket.EAI_NONAME, "Name or service not known")

# Each failure, and what it must be: (sent twice allowed, sent once only).
CASES: list[tuple[str, BaseException, str, str]] = [
    ("ClientConnectorError", aiohttp.ClientConnectorError(KEY, REFUSED), "outage", "outage"),
    ("ClientProxyConnectionError", aiohttp.ClientProxyConnectionError(KEY, REFUSED), "outage",
     "outage"),
    ("ClientConnectorDNSError", aiohttp.ClientConnectorDNSError(KEY, UNRESOLVED), "permanent",
     "permanent"),
    ("ClientConnectorError around a gaierror", aiohttp.ClientConnectorError(KEY, UNRESOLVED),
     "permanent", "permanent"),
    ("ClientSSLError", aiohttp.ClientSSLError(KEY, ssl.SSLError(1, "wrong version number")),
     "permanent", "permanent"),
    ("ClientConnectorSSLError",
     aiohttp.ClientConnectorSSLError(KEY, ssl.SSLError(1, "handshake failure")), "permanent",
     "permanent"),
    ("ClientConnectorCertificateError",
     aiohttp.ClientConnectorCertificateError(KEY, ssl.SSLCertVerificationError(1, "untrusted")),
     "permanent", "permanent"),
    ("ServerFingerprintMismatch",
     aiohttp.ServerFingerprintMismatch(b"a", b"b", "service.example.com", 443), "permanent",
     "permanent"),
    ("ConnectionTimeoutError", aiohttp.ConnectionTimeoutError("connect"), "outage", "outage"),
    ("ServerDisconnectedError", aiohttp.ServerDisconnectedError(), "outage", "permanent"),
    ("ClientOSError", aiohttp.ClientOSError(errno.ECONNRESET, "reset by peer"), "outage",
     "permanent"),
    ("ClientConnectionResetError", client_exceptions.ClientConnectionResetError("reset"),
     "retry", "permanent"),
    ("ServerTimeoutError", aiohttp.ServerTimeoutError("read"), "retry", "permanent"),
    ("SocketTimeoutError", aiohttp.SocketTimeoutError("read"), "retry", "permanent"),
    ("ServerConnectionError", aiohttp.ServerConnectionError("gone"), "retry", "permanent"),
    ("ClientConnectionError", aiohttp.ClientConnectionError("gone"), "retry", "permanent"),
    ("ClientPayloadError", aiohttp.ClientPayloadError("cut short"), "retry", "permanent"),
    ("UploadAbortedError", aiohttp.UploadAbortedError("aborted"), "retry", "permanent"),
    ("ClientResponseError", aiohttp.ClientResponseError(INFO, (), status=500), "permanent",
     "permanent"),
    ("ClientHttpProxyError", aiohttp.ClientHttpProxyError(INFO, (), status=407), "permanent",
     "permanent"),
    ("ContentTypeError", aiohttp.ContentTypeError(INFO, ()), "permanent", "permanent"),
    ("WSServerHandshakeError", aiohttp.WSServerHandshakeError(INFO, ()), "permanent",
     "permanent"),
    ("WSMessageTypeError", client_exceptions.WSMessageTypeError("binary"), "permanent",
     "permanent"),
    ("InvalidURL", aiohttp.InvalidURL("ht!tp://"), "permanent", "permanent"),
    ("InvalidUrlClientError", aiohttp.InvalidUrlClientError("ht!tp://"), "permanent",
     "permanent"),
    ("RedirectClientError", aiohttp.RedirectClientError("/x"), "permanent", "permanent"),
    ("NonHttpUrlClientError", aiohttp.NonHttpUrlClientError("ftp://x"), "permanent",
     "permanent"),
    ("InvalidUrlRedirectClientError", aiohttp.InvalidUrlRedirectClientError("ht!tp://"),
     "permanent", "permanent"),
    ("NonHttpUrlRedirectClientError", aiohttp.NonHttpUrlRedirectClientError("ftp://x"),
     "permanent", "permanent"),
    ("ClientError", aiohttp.ClientError("other"), "permanent", "permanent"),
    # A transport of our own names its failures in the table's rows (_network.link).
    ("NotConnected", link.NotConnected("no connection in time"), "outage", "outage"),
    ("Dropped", link.Dropped("the service closed the connection", closed=True), "outage",
     "permanent"),
    ("Dropped, broken", link.Dropped("the connection broke (TLS: bad record mac)", closed=False),
     "outage", "permanent"),
    ("BrokenAnswer", link.BrokenAnswer("the answer ended before its length"), "retry",
     "permanent"),
    # The OS's own, as a transport may raise them unwrapped.
    ("TimeoutError", TimeoutError(), "retry", "permanent"),
    ("ConnectionRefusedError", ConnectionRefusedError(), "permanent", "permanent"),
    ("ConnectionResetError", ConnectionResetError(), "permanent", "permanent"),
    ("socket.gaierror", UNRESOLVED, "permanent", "permanent"),
    ("OSError", OSError(errno.EIO, "I/O error"), "permanent", "permanent"),
]  # fmt: skip


def test_every_failure_aiohttp_names_is_read_here() -> None:
    """A new exception class in aiohttp fails this test until its decision is written."""
    named = {
        name
        for name in client_exceptions.__all__
        if inspect.isclass(getattr(client_exceptions, name))
        and issubclass(getattr(client_exceptions, name), BaseException)
    }
    assert named <= {case[0] for case in CASES}


def test_each_failure_our_own_transport_names_is_a_row_of_the_table() -> None:
    """A class added to _network.link fails this until a row of FAILURES reads it (else it
    would fall through as permanent), and its words are said as they are."""
    for name in link.__all__:
        kind = getattr(link, name)
        if not (isinstance(kind, type) and issubclass(kind, link.LinkFailure)):
            continue
        if kind is not link.LinkFailure:
            assert any(issubclass(kind, kinds) for kinds, _, _ in FAILURES), name
    said = read_failure(
        link.Dropped("the connection broke (reset)", closed=False),
        None, idempotent=True, timeout=30.0, connect_timeout=10.0,
    )  # fmt: skip
    assert said.reason == "the connection broke (reset)"
    late = read_failure(
        link.NotConnected("no connection"), None, idempotent=True, timeout=30.0,
        connect_timeout=10.0,
    )  # fmt: skip
    assert late.reason == "could not connect within 10 s (connect_timeout)"


@pytest.mark.parametrize(("name", "failure", "again", "once"), CASES, ids=[c[0] for c in CASES])
def test_each_failure_goes_through_the_one_reading(
    name: str, failure: BaseException, again: str, once: str
) -> None:
    for idempotent, expected in ((True, again), (False, once)):
        reading = read_failure(
            failure, None, idempotent=idempotent, timeout=30.0, connect_timeout=10.0
        )
        assert reading.verdict == expected, (name, idempotent)
        assert reading.error is TransportError
        assert reading.reason
        assert reading.fix == ""


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("untrusted", CertificateError),
        ("name_mismatch", CertificateNameMismatchError),
        ("cert_expired", CertificateExpiredError),
        ("tls", TLSError),
        ("not_tls", NotTLSError),
        ("speaks_tls", SpeaksTLSError),
        ("client_cert", ClientCertificateError),
        ("proxy_refused", ProxyError),
        ("proxy_auth", ProxyAuthError),
        ("proxy_unreachable", ProxyUnreachableError),
        ("pool_timeout", PoolTimeoutError),
        ("too_large", ResponseTooLargeError),
    ],
)
def test_a_named_failure_is_raised_as_its_class_with_its_kind(
    kind: str, expected: type[TransportError]
) -> None:
    named = Failure(kind, "the reason", "the fix", permanent=True)
    failure = aiohttp.ClientSSLError(KEY, ssl.SSLError(1, "x"))
    reading = read_failure(failure, named, idempotent=True, timeout=30.0, connect_timeout=None)
    assert reading.error is expected
    assert KINDS[kind] is expected
    error = reading.error(reading.reason, fix=reading.fix)
    assert isinstance(error, TransportError)
    assert error.kind == kind
    assert str(error) == "the reason: the fix"


def test_a_named_failure_is_never_an_outage_and_permanent_when_it_says_so() -> None:
    refused = aiohttp.ClientProxyConnectionError(KEY, REFUSED)
    passing = Failure("proxy_unreachable", "no proxy", "check it", permanent=False)
    lasting = Failure("proxy_unreachable", "no proxy", "check it", permanent=True)
    assert verdict_of(refused, idempotent=True) == "outage"
    assert verdict_of(refused, idempotent=True, named=passing) == "retry"
    assert verdict_of(refused, idempotent=True, named=lasting) == "permanent"


def test_the_table_names_each_failure_class_once() -> None:
    kinds: list[Any] = [kind for row in FAILURES for kind in row[0]]
    assert len(kinds) == len(set(kinds))


def test_a_failures_class_and_kind_survive_pickling() -> None:
    import pickle

    error = ProxyAuthError("the proxy wants credentials", fix="put them in", method="GET")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ProxyAuthError
    assert (again.kind, again.fix, str(again)) == ("proxy_auth", "put them in", str(error))
    plain = pickle.loads(pickle.dumps(TransportError("down", kind="legacy")))
    assert plain.kind == "legacy"
