"""The one reading of a failed attempt's exception: which error of the tree it is raised as,
its words and fix, and whether another attempt may help (FAILURES, read once per failure).
What the network layer names (a certificate, TLS, a proxy: `Network.classify`) gives the
class and the fix; everything else is a TransportError in the words below."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Final

import aiohttp
import attrs

from asyncclient._client._network.link import BrokenAnswer, Dropped, LinkFailure, NotConnected
from asyncclient._core._retry import Verdict
from asyncclient.errors import KINDS, TransportError

if TYPE_CHECKING:
    from asyncclient._client._network import Failure

__all__ = ["FAILURES", "Reading", "read_failure", "verdict_of"]


# Rows: failures, then verdicts when resending is safe, and not.
# First match wins; none: permanent. Outages retry until the deadline.
FAILURES: Final[tuple[tuple[tuple[type[BaseException], ...], Verdict, Verdict], ...]] = (
    # TLS, fingerprints and unresolved names do not heal by retrying.
    ((aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch), "permanent", "permanent"),
    ((aiohttp.ClientConnectorDNSError, socket.gaierror), "permanent", "permanent"),
    # Nothing listening, or no connection in time: nothing went out.
    (
        (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, NotConnected),
        "outage",
        "outage",
    ),
    # Dropped: down or restarting, but the request may have arrived.
    ((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, Dropped), "outage", "permanent"),
    # A transfer that broke or timed out midway.
    (
        (
            aiohttp.ClientConnectionError,
            aiohttp.ClientPayloadError,
            aiohttp.UploadAbortedError,
            BrokenAnswer,
            TimeoutError,
        ),
        "retry",
        "permanent",
    ),
)


@attrs.frozen
class Reading:
    """A failed attempt, read: the class to raise, its words and fix, the retry decision."""

    error: type[TransportError]
    reason: str
    fix: str
    verdict: Verdict


def _unresolved(exc: BaseException) -> bool:
    return isinstance(exc, aiohttp.ClientConnectorError) and isinstance(
        exc.os_error, socket.gaierror
    )


def verdict_of(exc: BaseException, *, idempotent: bool, named: Failure | None = None) -> Verdict:
    """Whether another attempt may help: the first FAILURES row that matches; a failure the
    network layer named is never an outage (it has a fix of its own), and is permanent when
    it says so."""
    if _unresolved(exc):
        return "permanent"
    verdict: Verdict = "permanent"
    for kinds, again, once in FAILURES:
        if isinstance(exc, kinds):
            verdict = again if idempotent else once
            break
    if named is not None and verdict != "permanent":
        return "permanent" if named.permanent else "retry"
    return verdict


def _words(
    exc: BaseException,
    timeout: float,
    connect_timeout: float | None,
    *,
    transfer: bool,
    phase: str | None,
) -> str:
    """An ordinary failure in a clause: what happened, with the setting that bounded it."""
    if isinstance(exc, (aiohttp.ConnectionTimeoutError, NotConnected)):
        return f"could not connect within {connect_timeout:g} s (connect_timeout)"
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(
        exc, aiohttp.ClientSSLError
    ):
        if isinstance(exc.os_error, socket.gaierror):
            # The resolver's codes are negative (EAI_NONAME is -2): os.strerror knows none.
            return f"cannot connect to {exc.host}:{exc.port} (the host name could not be resolved)"
        errno = exc.os_error.errno
        reason = os.strerror(errno) if errno else str(exc.os_error)
        return f"cannot connect to {exc.host}:{exc.port} ({reason.lower()})"
    if transfer and isinstance(exc, TimeoutError):
        # Only idle timers run on a transfer: sock_read or our body's.
        return f"no data moved for {timeout:g} s (timeout)"
    if isinstance(exc, TimeoutError) and not str(exc):
        where = f", {phase}" if phase else ""
        return f"no complete answer within {timeout:g} s (timeout{where})"
    detail = str(exc)
    if isinstance(exc, LinkFailure):
        return detail
    name = type(exc).__name__
    return f"{name}: {detail}" if detail else name


def read_failure(
    exc: BaseException,
    named: Failure | None,
    *,
    idempotent: bool,
    timeout: float,
    connect_timeout: float | None,
    transfer: bool = False,
    phase: str | None = None,
) -> Reading:
    """The one reading of a failed attempt: `named` is what the network layer recognised in
    it (Network.classify, after a closer look when that was needed), if anything."""
    verdict = verdict_of(exc, idempotent=idempotent, named=named)
    if named is not None:
        return Reading(KINDS.get(named.kind, TransportError), named.reason, named.fix, verdict)
    reason = _words(exc, timeout, connect_timeout, transfer=transfer, phase=phase)
    return Reading(TransportError, reason, "", verdict)
