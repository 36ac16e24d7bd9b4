"""Stopping the emulator leaves no connection open, whatever state a client left it in."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings

from asyncclient.testing import FakeService, NetworkConditions


async def _leave_mid_body(svc: FakeService, sent: int) -> None:
    """A client sends the head of a large part, `sent` bytes of it, and its end of the
    connection (FIN), while the emulator waits (latency) before reading the body."""
    port = int(svc.url.rsplit(":", 1)[1].split("/")[0])
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=svc.ssl_context(client_cert=False), server_hostname="127.0.0.1"
    )
    writer.write(
        b"PUT /api/v1/builds/ab_demo_android_100/parts/1 HTTP/1.1\r\n"
        b"Host: 127.0.0.1\r\nAuthorization: Bearer demo-run\r\n"
        b"Content-Type: application/octet-stream\r\nContent-Length: 67108864\r\n\r\n"
    )
    writer.write(b"\0" * sent)
    await writer.drain()
    for _ in range(20):  # the emulator takes in what it can, then pauses its reading
        await asyncio.sleep(0)
    writer.transport.get_extra_info("socket").shutdown(socket.SHUT_WR)
    for _ in range(20):  # ... and sees the end of the stream while paused
        await asyncio.sleep(0)
    writer.transport.abort()


def test_stop_closes_a_tls_connection_whose_peer_left_while_its_reading_was_paused() -> None:
    """Past the emulator's buffer (2 MiB) the TLS layer has paused reading for it; the end of
    the stream seen then leaves asyncio's TLS transport waiting for the reading to resume, and
    its close() does nothing. The graceful shutdown left such a socket to the garbage collector
    once the loop was gone: a ResourceWarning in whichever test ran next (an error here)."""

    async def scenario() -> None:
        svc = FakeService(tls=True, conditions=NetworkConditions(latency_ms=3_600_000))
        await svc.start()
        try:
            await _leave_mid_body(svc, 2_200_000)
        finally:
            await svc.stop()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(scenario())
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []
