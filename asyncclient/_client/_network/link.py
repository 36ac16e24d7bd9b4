"""The failures a transport of our own (the TLS part sender) names in its own words, and which
row of the one failure table (`_client._failures.FAILURES`) each is: no transport builds
another library's exceptions to be understood."""

import aiohttp

__all__ = ["BrokenAnswer", "Dropped", "LinkFailure", "NotConnected", "closed_by_service"]


class LinkFailure(Exception):
    """A failure a transport of our own names in the failure table's rows; its message is its
    reason, as it is said."""


class NotConnected(LinkFailure):
    """No connection in time: nothing went out."""


class Dropped(LinkFailure):
    """The connection broke while the request went out: it may have arrived. `closed`: the
    service closed or reset it (what the transport then looks at closer once)."""

    def __init__(self, reason: str, *, closed: bool) -> None:
        super().__init__(reason)
        self.closed = closed


class BrokenAnswer(LinkFailure):
    """An answer that could not be read whole."""


def closed_by_service(exc: BaseException) -> bool:
    """Whether the service closed the connection under the attempt, in any transport's words."""
    if isinstance(exc, Dropped):
        return exc.closed
    return isinstance(exc, aiohttp.ServerDisconnectedError)
