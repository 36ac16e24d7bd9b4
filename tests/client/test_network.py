"""Reaching the service on real networks: HTTPS with private CAs, client certificates, forward
proxies (proxy.py in a process of its own), NO_PROXY, redirects, and the one-line error of each
failure on the way. The client suites themselves also run over TLS and the proxy (the modules
marked `networks`); this module is about choosing the way and saying what went wrong."""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web
from network_support import PROXY_PASSWORD, PROXY_USER, ForwardProxy, forward_proxy

from asyncclient import AsyncSession
from asyncclient._client._network import Network
from asyncclient._client._network.proxies import bypasses, resolve_proxy
from asyncclient.errors import RedirectError, TransportError, ValidationError
from asyncclient.testing import FakeService

# --- choosing the proxy (no server) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "expected"),
    [
        ("svc.example.com", 443, "*", True),
        ("svc.example.com", 443, "example.com", True),
        ("svc.example.com", 443, ".example.com", True),
        ("example.com", 443, ".example.com", True),
        ("badexample.com", 443, "example.com", False),
        ("svc.example.com", 443, "other.com, example.com", True),
        ("SVC.Example.COM", 443, "example.com", True),
        ("127.0.0.1", 8443, "127.0.0.1", True),
        ("127.0.0.1", 8443, "127.0.0.0/8", True),
        ("10.1.2.3", 443, "127.0.0.0/8", False),
        ("::1", 443, "::1", True),
        ("::1", 443, "[::1]:443", True),
        ("127.0.0.1", 8443, "127.0.0.1:9000", False),
        ("127.0.0.1", 8443, "127.0.0.1:8443", True),
        ("localhost", 80, "", False),
        ("localhost", 80, " , ,", False),
    ],
)
def test_no_proxy_names_hosts_as_curl_reads_them(
    host: str, port: int, no_proxy: str, expected: bool
) -> None:
    assert bypasses(host, port, no_proxy) is expected


@pytest.mark.parametrize(
    ("environ", "explicit", "expected", "source"),
    [
        ({"HTTPS_PROXY": "http://p:1"}, None, "http://p:1", "HTTPS_PROXY"),
        ({"https_proxy": "http://low:1", "HTTPS_PROXY": "http://up:1"}, None, "http://low:1", None),
        ({"HTTP_PROXY": "http://p:1"}, None, None, None),  # an https service: HTTPS_PROXY only
        ({"ALL_PROXY": "http://all:1"}, None, "http://all:1", "ALL_PROXY"),
        ({"HTTPS_PROXY": "http://p:1", "ALL_PROXY": "http://all:1"}, None, "http://p:1", None),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"}, None, None, None),
        ({"HTTPS_PROXY": "p:3128"}, None, "http://p:3128", None),
        ({"HTTPS_PROXY": "http://p:1", "ASYNCCLIENT_PROXY": "http://mine:2"}, None, "http://mine:2",
         "ASYNCCLIENT_PROXY"),
        ({"HTTPS_PROXY": "http://p:1", "ASYNCCLIENT_PROXY": "direct"}, None, None, None),
        ({"ASYNCCLIENT_PROXY": "http://mine:2"}, "http://given:3", "http://given:3", "proxy"),
        ({"HTTPS_PROXY": "http://p:1"}, "direct", None, None),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"}, "http://given:3",
         "http://given:3", None),  # an explicit proxy is meant: NO_PROXY is for the variables
    ],
)  # fmt: skip
def test_the_proxy_comes_from_the_argument_then_the_variables(
    environ: dict[str, str], explicit: str | None, expected: str | None, source: str | None
) -> None:
    proxy = resolve_proxy("https://svc.example.com", explicit, environ)
    assert (proxy.url if proxy else None) == expected
    if source is not None:
        assert proxy is not None
        assert proxy.source == source


def test_a_plain_http_service_reads_http_proxy() -> None:
    proxy = resolve_proxy("http://svc.example.com", None, {"HTTP_PROXY": "http://p:1"})
    assert proxy is not None
    assert proxy.url == "http://p:1"


def test_proxy_credentials_are_used_but_never_shown() -> None:
    proxy = resolve_proxy("https://svc", "http://me:p%40ss@proxy:3128", {})
    assert proxy is not None
    assert proxy.url == "http://me:p%40ss@proxy:3128"
    assert proxy.shown == "http://me:***@proxy:3128"
    assert proxy.password == "p@ss"
    assert "p@ss" not in repr(proxy)
    assert "p%40ss" not in repr(proxy)
    session = AsyncSession("key", "https://svc", proxy="http://me:p%40ss@proxy:3128")
    shown = repr(session) + repr(session.network)
    assert "p@ss" not in shown
    assert "p%40ss" not in shown
    assert "me:***@proxy:3128" in repr(session)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("socks5://proxy:1080", "SOCKS proxies are not supported"),
        ("ftp://proxy:21", "is not an http(s) address"),
        ("http://proxy:notaport", "is not valid"),
        ("http://me:secret@proxy:99999", "is not valid"),
    ],
)
def test_a_bad_proxy_is_refused_before_any_request(value: str, words: str) -> None:
    with pytest.raises(ValidationError, match="proxy") as caught:
        AsyncSession("key", "https://svc", proxy=value)
    assert words in str(caught.value)
    assert "secret" not in str(caught.value)


def test_bad_certificate_files_are_refused_before_any_request(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ca_file": tmp_path / "missing.pem"}, "does not exist"),
        ({"ca_file": tmp_path}, "is a folder"),
        ({"ca_file": tmp_path / "junk.pem"}, "holds no CA certificate"),
        ({"client_cert": tmp_path / "junk.pem"}, "cannot be used"),
        ({"client_key": tmp_path / "junk.pem"}, "without client_cert="),
    ]
    for options, words in cases:
        with pytest.raises(ValidationError, match=words):
            AsyncSession("key", "https://svc", **options)


def test_an_encrypted_client_key_is_refused_not_prompted_for(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    authority = trustme.CA()
    issued = authority.issue_cert("client")
    key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    (tmp_path / "key.pem").write_bytes(encrypted)
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    with pytest.raises(ValidationError, match="unencrypted key"):
        AsyncSession(
            "key", "https://svc", client_cert=tmp_path / "cert.pem", client_key=tmp_path / "key.pem"
        )


def test_the_environment_gives_the_ca_file_and_the_client_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCCLIENT_CA_FILE", str(tmp_path / "nowhere.pem"))
    with pytest.raises(ValidationError, match="ASYNCCLIENT_CA_FILE"):
        AsyncSession("key", "https://svc")


# --- HTTPS against the emulator ---------------------------------------------------------------


@pytest.fixture
async def tls_service() -> AsyncIterator[FakeService]:
    async with FakeService(clock="manual", tls=True) as svc:
        yield svc


async def test_a_trusted_ca_file_reaches_the_service(tls_service: FakeService) -> None:
    assert tls_service.url.startswith("https://127.0.0.1:")
    assert tls_service.ca_file is not None
    assert tls_service.ca_file.read_text().startswith("-----")
    async with AsyncSession(tls_service.run_key, tls_service.url, ca_file=tls_service.ca_file) as s:
        builds = await s.list_builds(tls_service.project_id)
    assert builds.part_bytes > 0
    assert tls_service.request_counts() == {"list_builds": 1}


async def test_an_untrusted_certificate_says_to_give_the_ca_file(tls_service: FakeService) -> None:
    async with AsyncSession(tls_service.run_key, tls_service.url) as s:
        with pytest.raises(TransportError) as caught:
            await s.list_builds(tls_service.project_id)
    error = caught.value
    assert error.kind == "untrusted"
    assert error.attempts == 1  # a certificate does not heal by retrying
    assert f"the certificate of 127.0.0.1:{tls_service.port} is not trusted" in str(error)
    assert "ca_file= or ASYNCCLIENT_CA_FILE" in str(error)
    assert tls_service.request_counts() == {}


async def test_a_wrong_ca_file_is_named(tls_service: FakeService, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    async with AsyncSession(tls_service.run_key, tls_service.url, ca_file=other) as s:
        with pytest.raises(TransportError, match="does not hold the CA that signed it") as caught:
            await s.list_builds(tls_service.project_id)
    assert str(other) in str(caught.value)


async def test_a_name_mismatch_says_which_names_the_certificate_holds(tmp_path: Path) -> None:
    authority = trustme.CA()
    pair = tmp_path / "server.pem"
    issued = authority.issue_cert("service.example", "api.service.example")
    issued.private_key_and_cert_chain_pem.write_to_path(str(pair))
    ca = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(ca))
    async with (
        FakeService(clock="manual", tls_cert=pair, tls_ca=ca) as svc,
        AsyncSession(svc.run_key, svc.url, ca_file=svc.ca_file) as session,
    ):
        assert svc.ca_file == ca
        port = svc.port
        with pytest.raises(TransportError) as caught:
            await session.list_builds(svc.project_id)
    error = caught.value
    assert error.kind == "name_mismatch"
    assert "is not valid for 127.0.0.1: it holds service.example, api.service.example" in str(error)
    assert f"https://service.example:{port}" in error.fix


async def test_a_plain_http_address_of_a_tls_service_says_to_use_https(
    tls_service: FakeService,
) -> None:
    plain = tls_service.url.replace("https://", "http://")
    async with AsyncSession(tls_service.run_key, plain, max_retries=1) as s:
        with pytest.raises(TransportError) as caught:
            await s.list_builds(tls_service.project_id)
    assert caught.value.kind == "speaks_tls"
    assert caught.value.fix == f"use https://127.0.0.1:{tls_service.port}"


async def test_an_https_address_of_a_plain_service_says_it_speaks_no_tls() -> None:
    async with FakeService(clock="manual") as svc:
        plain = svc.url
        async with AsyncSession(svc.run_key, plain.replace("http://", "https://")) as s:
            with pytest.raises(TransportError) as caught:
                await s.list_builds(svc.project_id)
    assert caught.value.kind == "not_tls"
    assert f"use {plain}" in str(caught.value)


async def test_mutual_tls_needs_the_client_certificate() -> None:
    async with FakeService(clock="manual", tls=True, require_client_cert=True) as svc:
        assert svc.client_cert_file is not None
        async with AsyncSession(svc.run_key, svc.url, ca_file=svc.ca_file, max_retries=2) as s:
            with pytest.raises(TransportError) as caught:
                await s.list_builds(svc.project_id)
        assert caught.value.kind == "client_cert"
        assert "client certificate" in str(caught.value)
        assert "client_cert= or ASYNCCLIENT_CLIENT_CERT" in caught.value.fix
        async with AsyncSession(
            svc.run_key, svc.url, ca_file=svc.ca_file, client_cert=svc.client_cert_file
        ) as s:
            assert (await s.list_builds(svc.project_id)).builds
        assert svc.request_counts() == {"list_builds": 1}


def test_emulator_tls_options_are_checked_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tls_key was given without tls_cert"):
        FakeService(tls_key=tmp_path / "k.pem")
    with pytest.raises(ValueError, match="does not exist"):
        FakeService(tls_cert=tmp_path / "missing.pem")
    with pytest.raises(ValueError, match="client_ca goes with a certificate you bring"):
        FakeService(tls=True, client_ca=tmp_path / "ca.pem")


async def test_the_emulator_gives_a_ready_client_context(tls_service: FakeService) -> None:
    context = tls_service.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    async with FakeService(clock="manual") as plain:
        assert plain.ca_file is None
        assert not plain.tls
        with pytest.raises(RuntimeError, match="does not serve TLS"):
            plain.ssl_context()


# --- forward proxies ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def filtering_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    """A forward proxy that refuses tunnels to `localhost` (and lets 127.0.0.1 through)."""
    plugin = ("--plugins", "proxy.plugin.FilterByUpstreamHostPlugin")
    with forward_proxy(
        tmp_path_factory.mktemp("proxy-filter"),
        credentials=False,
        args=(*plugin, "--filtered-upstream-hosts", "localhost"),
    ) as proxy:
        yield proxy


async def test_https_proxy_carries_every_request(
    tls_service: FakeService, open_proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", open_proxy.url)
    before = len(open_proxy.tunnels(tls_service.port))
    # One connection at a time: each tunnel the proxy logs is one the client opened.
    async with AsyncSession(
        tls_service.run_key, tls_service.url, ca_file=tls_service.ca_file, connection_limit=1
    ) as s:
        assert s.network.proxy is not None
        assert s.network.proxy.source == "HTTPS_PROXY"
        for _ in range(3):
            await s.list_builds(tls_service.project_id)
        await s.list_runs(limit=5)
    tunnels = (await open_proxy.wait_for_tunnel(tls_service.port))[before:]
    assert len(tunnels) == 1  # one kept-alive tunnel carried all four requests
    assert tunnels[0][1] > 1000  # and the bytes of their answers
    assert tls_service.request_counts() == {"list_builds": 3, "list_runs": 1}


async def test_no_proxy_naming_the_service_connects_directly(
    tls_service: FakeService, open_proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", open_proxy.url)
    monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
    async with AsyncSession(tls_service.run_key, tls_service.url, ca_file=tls_service.ca_file) as s:
        assert s.network.proxy is None
        await s.list_builds(tls_service.project_id)
    assert open_proxy.tunnels(tls_service.port) == []
    assert tls_service.request_counts() == {"list_builds": 1}


async def test_a_proxy_that_wants_credentials_says_so(
    tls_service: FakeService, proxy_with_credentials: ForwardProxy
) -> None:
    bare = f"http://127.0.0.1:{proxy_with_credentials.port}"
    async with AsyncSession(
        tls_service.run_key, tls_service.url, ca_file=tls_service.ca_file, proxy=bare
    ) as s:
        with pytest.raises(TransportError) as caught:
            await s.list_builds(tls_service.project_id)
    assert caught.value.kind == "proxy_auth"
    assert caught.value.attempts == 1
    assert f"the proxy {bare} wants credentials (407 Proxy Authentication Required)" in str(
        caught.value
    )
    assert "http://USER:PASSWORD@host:port" in caught.value.fix


async def test_wrong_proxy_credentials_are_named_without_the_password(
    tls_service: FakeService, proxy_with_credentials: ForwardProxy
) -> None:
    wrong = f"http://{PROXY_USER}:not-{PROXY_PASSWORD}@127.0.0.1:{proxy_with_credentials.port}"
    async with AsyncSession(
        tls_service.run_key, tls_service.url, ca_file=tls_service.ca_file, proxy=wrong
    ) as s:
        with pytest.raises(TransportError) as caught:
            await s.list_builds(tls_service.project_id)
    text = str(caught.value) + repr(caught.value) + repr(caught.value.__cause__)
    assert "refused the user name and password in its address" in text
    assert f"{PROXY_USER}:***@127.0.0.1" in text
    assert PROXY_PASSWORD not in text


async def test_a_proxy_that_refuses_the_tunnel_says_so(
    tls_service: FakeService, filtering_proxy: ForwardProxy
) -> None:
    url = tls_service.url.replace("127.0.0.1", "localhost")
    async with AsyncSession(
        tls_service.run_key, url, ca_file=tls_service.ca_file, proxy=filtering_proxy.url
    ) as s:
        with pytest.raises(TransportError) as caught:
            await s.list_builds(tls_service.project_id)
    assert caught.value.kind == "proxy_refused"
    assert f"refused the tunnel to localhost:{tls_service.port} (418" in str(caught.value)
    assert "NO_PROXY" in caught.value.fix


async def test_an_unreachable_proxy_is_named(tls_service: FakeService, waits: list[float]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with AsyncSession(
        tls_service.run_key,
        tls_service.url,
        ca_file=tls_service.ca_file,
        proxy=f"http://127.0.0.1:{port}",
        max_retries=2,
    ) as s:
        with pytest.raises(TransportError) as caught:
            await s.list_builds(tls_service.project_id)
    assert caught.value.kind == "proxy_unreachable"
    assert f"cannot connect to the proxy http://127.0.0.1:{port} (connection refused)" in str(
        caught.value
    )
    assert caught.value.attempts == 3  # never sent: worth retrying, like any refused connection
    assert len(waits) == 2


async def test_requests_through_the_proxy_log_no_secret(
    tls_service: FakeService,
    proxy_with_credentials: ForwardProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncclient")
    async with AsyncSession(
        tls_service.run_key,
        tls_service.url,
        ca_file=tls_service.ca_file,
        proxy=proxy_with_credentials.url,
    ) as s:
        await s.list_builds(tls_service.project_id)
        shown = repr(s) + repr(s.network)
    assert await proxy_with_credentials.wait_for_tunnel(tls_service.port)
    logged = caplog.text
    assert "GET /api/v1/projects/p_demo/builds -> 200" in logged
    for secret in (PROXY_PASSWORD, tls_service.run_key):
        assert secret not in logged
        assert secret not in shown


# --- redirects ------------------------------------------------------------------------------------


async def test_a_redirect_is_not_followed_and_says_where_it_points() -> None:
    seen: list[dict[str, str]] = []

    async def elsewhere(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"builds": [], "maxBytes": 1, "partBytes": 1})

    target = web.Application()
    target.router.add_get("/{tail:.*}", elsewhere)
    target_runner = web.AppRunner(target)
    await target_runner.setup()
    await web.TCPSite(target_runner, "127.0.0.1", 0).start()
    target_port = target_runner.addresses[0][1]

    async def moved(request: web.Request) -> web.Response:
        location = f"http://me:pw@127.0.0.1:{target_port}/edge{request.path_qs}"
        raise web.HTTPMovedPermanently(location)

    app = web.Application()
    app.router.add_get("/{tail:.*}", moved)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        async with AsyncSession("the-key", f"http://127.0.0.1:{port}") as s:
            with pytest.raises(RedirectError) as caught:
                await s.list_builds("p_demo")
    finally:
        await runner.cleanup()
        await target_runner.cleanup()
    error = caught.value
    assert error.status == 301
    assert error.location == f"http://127.0.0.1:{target_port}/edge/api/v1/projects/p_demo/builds"
    assert error.suggested_base_url == f"http://127.0.0.1:{target_port}/edge"
    assert f"use the base URL http://127.0.0.1:{target_port}/edge" in str(error)
    assert "pw" not in str(error)
    assert seen == []  # the key went nowhere else
    assert error.attempts == 1


def test_network_repr_hides_the_proxy_password() -> None:
    network = Network.resolve(
        "https://svc", {"HTTPS_PROXY": f"http://{PROXY_USER}:{PROXY_PASSWORD}@p:1"}
    )
    assert PROXY_PASSWORD not in repr(network)
    assert network.secrets == (PROXY_PASSWORD,)
