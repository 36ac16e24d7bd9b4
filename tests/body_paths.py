"""BodyPath: which way a PartBody's bytes left, for the `body_path` fixture (conftest.py)."""

import attrs


@attrs.define
class BodyPath:
    """`mode`: "sendfile", or the loop refusing it the way asyncio does for a transport that
    cannot (RuntimeError: SendfileNotAvailableError) or uvloop does (NotImplementedError)."""

    mode: str
    sent: int = 0
    refused: int = 0
    # Over TLS the bytes must be encrypted: sendfile is never tried, every mode reads.
    tls: bool = False

    def check(self, attempts: int = 1) -> None:
        """The way of sending under test is the one taken: by sendfile only, or refused once per
        attempt and read throughout (over TLS: read, sendfile never tried)."""
        if self.tls:
            assert (self.sent, self.refused) == (0, 0)
        elif self.mode == "sendfile":
            assert (self.sent > 0, self.refused) == (True, 0)
        else:
            assert (self.sent, self.refused) == (0, attempts)
