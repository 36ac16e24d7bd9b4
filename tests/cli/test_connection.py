"""The command on real networks: `serve --tls` and its CA file, --ca-file / SSL_CERT_FILE,
--client-cert, --proxy and the proxy variables, and one line with the fix for each failure.
The CLI suites themselves also run over TLS and the proxy (modules marked `networks`)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from network_support import PROXY_PASSWORD, ForwardProxy, read_serve_info

from asyncclient.testing import FakeService
from asyncclient.testing.builders import build_apk

KEY_ENV = "ASYNCCLIENT_API_KEY"


@pytest.fixture
async def tls_service() -> AsyncIterator[FakeService]:
    async with FakeService(speed=2000.0, tls=True) as svc:
        yield svc


def env_for(service: FakeService, **extra: str) -> dict[str, str]:
    return {"ASYNCCLIENT_BASE_URL": service.url, KEY_ENV: service.run_key, **extra}


async def test_without_the_ca_the_command_names_the_fix(
    run_cli: Any, tls_service: FakeService
) -> None:
    result = await run_cli("builds", "list", "p_demo", env=env_for(tls_service))
    assert result.code == 4
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: the certificate of 127.0.0.1:")
    assert "is not trusted" in lines[0]
    assert "trust the CA that signed it with --ca-file or ASYNCCLIENT_CA_FILE" in lines[0]
    assert "Traceback" not in result.stderr


async def test_ca_file_by_flag_and_by_variable(run_cli: Any, tls_service: FakeService) -> None:
    ca = str(tls_service.ca_file)
    by_flag = await run_cli("builds", "list", "p_demo", "--ca-file", ca, env=env_for(tls_service))
    assert by_flag.code == 0, by_flag.stderr
    by_env = await run_cli(
        "builds", "list", "p_demo", env=env_for(tls_service, ASYNCCLIENT_CA_FILE=ca)
    )
    assert by_env.code == 0, by_env.stderr
    assert by_env.stdout == by_flag.stdout
    missing = await run_cli(
        "builds", "list", "p_demo", "--ca-file", "/no/such/ca.pem", env=env_for(tls_service)
    )
    assert missing.code == 2
    assert missing.stderr.strip() == (
        "error: --ca-file /no/such/ca.pem does not exist: give the path of a PEM file "
        "(ASYNCCLIENT_CA_FILE)"
    )
    assert tls_service.request_counts() == {"list_builds": 2}


async def test_ssl_cert_file_keeps_working(tls_service: FakeService) -> None:
    # OpenSSL reads SSL_CERT_FILE when a process builds its first default context: a new process.
    env = {**os.environ, **env_for(tls_service), "SSL_CERT_FILE": str(tls_service.ca_file)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "builds", "list", "p_demo", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert b'"builds"' in out


async def test_client_certificate_flags_reach_a_mutual_tls_service(run_cli: Any) -> None:
    async with FakeService(clock="manual", tls=True, require_client_cert=True) as svc:
        env = env_for(svc, ASYNCCLIENT_CA_FILE=str(svc.ca_file))
        refused = await run_cli("builds", "list", "p_demo", env=env)
        assert refused.code == 4
        assert "client certificate" in refused.stderr
        assert "--client-cert or ASYNCCLIENT_CLIENT_CERT" in refused.stderr
        accepted = await run_cli(
            "builds", "list", "p_demo", "--client-cert", str(svc.client_cert_file), env=env
        )
        assert accepted.code == 0, accepted.stderr
        assert svc.request_counts() == {"list_builds": 1}


async def test_the_readme_tour_through_a_proxy_shows_no_secret(
    run_cli: Any,
    tls_service: FakeService,
    proxy_with_credentials: ForwardProxy,
    tmp_path: Path,
) -> None:
    env = env_for(
        tls_service,
        ASYNCCLIENT_CA_FILE=str(tls_service.ca_file),
        HTTPS_PROXY=proxy_with_credentials.url,
        ASYNCCLIENT_STATE_DIR=str(tmp_path / "state"),
    )
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", filler_bytes=1 << 20)
    outputs: list[str] = []

    async def step(*argv: str) -> Any:
        result = await run_cli(*argv, "--verbose", env=env)
        outputs.extend([result.stdout, result.stderr])
        return result

    upload = await step("upload", "p_demo", str(apk))
    assert upload.code == 0, upload.stderr
    build = upload.stdout.strip()
    report = tmp_path / "report.xml"
    run = await step(
        "run", "project", "p_demo", "--build", build, "--wait", "--interval", "0.05",
        "--junit", str(report),
    )  # fmt: skip
    assert run.code == 1  # t_checkout fails on purpose in the demo seed
    assert "checkout" in report.read_text()
    listed = await step("runs", "list", "--project", "p_demo", "--json")
    assert listed.code == 0
    run_id = listed.json()["runs"][0]["id"]
    fetched = await step("download", run_id, "--output", str(tmp_path / "files"))
    assert fetched.code == 0, fetched.stderr
    assert any((tmp_path / "files").rglob("*.png"))
    tunnels = await proxy_with_credentials.wait_for_tunnel(tls_service.port)
    assert len(tunnels) >= 4  # each command opened its own
    text = "".join(outputs) + report.read_text()
    assert "-> 200" in text  # --verbose logged the requests
    # ... and named the proxy each went through, its password hidden.
    assert ", via proxy http://" in text
    assert ":***@127.0.0.1:" in text
    assert PROXY_PASSWORD not in text
    assert tls_service.run_key not in text


async def test_proxy_direct_ignores_the_variables(
    run_cli: Any, tls_service: FakeService, open_proxy: ForwardProxy
) -> None:
    env = env_for(
        tls_service,
        ASYNCCLIENT_CA_FILE=str(tls_service.ca_file),
        HTTPS_PROXY="http://127.0.0.1:9",  # nothing listens there
    )
    direct = await run_cli("builds", "list", "p_demo", "--proxy", "direct", env=env)
    assert direct.code == 0, direct.stderr
    through = await run_cli("builds", "list", "p_demo", "--proxy", open_proxy.url, env=env)
    assert through.code == 0, through.stderr
    assert len(await open_proxy.wait_for_tunnel(tls_service.port)) == 1
    broken = await run_cli("builds", "list", "p_demo", env=env)
    assert broken.code == 4
    assert broken.stderr.strip().startswith(
        "error: cannot connect to the proxy http://127.0.0.1:9 (connection refused)"
    )
    assert "check the proxy address in HTTPS_PROXY" in broken.stderr


async def test_a_proxy_that_wants_credentials_exits_4_with_the_fix(
    run_cli: Any, tls_service: FakeService, proxy_with_credentials: ForwardProxy
) -> None:
    env = env_for(tls_service, ASYNCCLIENT_CA_FILE=str(tls_service.ca_file))
    bare = f"http://127.0.0.1:{proxy_with_credentials.port}"
    result = await run_cli("builds", "list", "p_demo", "--proxy", bare, env=env)
    assert result.code == 4
    assert result.stderr.strip() == (
        f"error: the proxy {bare} wants credentials (407 Proxy Authentication Required) "
        "(GET /api/v1/projects/p_demo/builds): put them in the proxy address "
        "(http://USER:PASSWORD@host:port) in --proxy"
    )


async def test_a_redirect_names_the_base_url_to_use(run_cli: Any) -> None:
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPPermanentRedirect(f"https://127.0.0.1:8443{request.path_qs}")

    app = web.Application()
    app.router.add_get("/{tail:.*}", moved)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        result = await run_cli(
            "builds", "list", "p_demo", env={"ASYNCCLIENT_BASE_URL": url, KEY_ENV: "k"}
        )
    finally:
        await runner.cleanup()
    assert result.code == 3
    assert result.stderr.strip() == (
        "error: 308 Permanent Redirect: a redirect to "
        "https://127.0.0.1:8443/api/v1/projects/p_demo/builds, not followed (the API key goes "
        "nowhere else); if that is the service, use --base-url https://127.0.0.1:8443"
    )


async def test_serve_tls_prints_its_ca_file_and_the_commands_use_it(
    run_cli: Any, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "serve", "--port", "0", "--tls", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        info = await read_serve_info(proc)
        assert info["baseUrl"].startswith("https://127.0.0.1:")
        ca_file = Path(info["caFile"])
        assert ca_file.is_file()
        assert info["clientCertFile"] is None
        env_vars = {"ASYNCCLIENT_BASE_URL": info["baseUrl"], KEY_ENV: "demo-run"}
        untrusted = await run_cli("builds", "list", "p_demo", env=env_vars)
        assert untrusted.code == 4
        assert "--ca-file" in untrusted.stderr
        trusted = await run_cli("builds", "list", "p_demo", "--ca-file", str(ca_file), env=env_vars)
        assert trusted.code == 0, trusted.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0
    assert not ca_file.exists()  # the throwaway CA goes with the service


async def test_serve_tls_banner_says_what_to_export(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "asyncclient", "serve", "--port", "0", "--tls",
        "--require-client-cert",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    banner: list[str] = []
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            while not banner or banner[-1] != "Ctrl-C stops it.":
                banner.append((await proc.stdout.readline()).decode().rstrip("\n"))
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)
    assert banner[0].startswith("Test-Run Service emulator on https://127.0.0.1:")
    exports = [line.strip() for line in banner if line.strip().startswith("export ")]
    assert exports[1].startswith("export ASYNCCLIENT_CA_FILE=")
    assert exports[1].endswith("/ca.pem")
    assert exports[2].startswith("export ASYNCCLIENT_CLIENT_CERT=")


async def test_demo_runs_over_tls(run_cli: Any, tmp_path: Path) -> None:
    result = await run_cli("demo", "--tls", "--speed", "600", "--output", str(tmp_path))
    assert result.code == 0, result.stderr
    assert "on https://127.0.0.1:" in result.stderr
    assert "TLS: its certificate comes from a throwaway CA" in result.stderr
    assert any(tmp_path.rglob("*.png"))
