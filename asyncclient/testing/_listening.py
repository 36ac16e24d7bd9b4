"""The emulator's listening socket: each connection gets a small kernel receive buffer from
its first byte, so a body read slowly (a modelled link) is acknowledged as a real link carries
it; a loopback connection's buffer, left to grow, would take in megabytes at once."""

import os
import socket

RECEIVE_BUFFER = 256 << 10


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port), non-blocking. Blocking."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        if os.name == "posix":  # as asyncio's servers: a restarted service rebinds at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
