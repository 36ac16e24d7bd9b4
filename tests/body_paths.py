"""BodyPath: which way a PartBody's bytes left, for the `body_path` fixture (conftest.py)."""

import attrs


@attrs.define
class BodyPath:
    mode: str
    sent: int = 0
    refused: int = 0

    def check(self, *, whole: bool = True) -> None:
        """The way of sending under test is the one that was taken (for one part; `whole`:
        the part went out whole, not stuck in its first slice)."""
        if self.mode == "sendfile":
            assert (self.sent > 0, self.refused) == (True, 0)
        elif self.mode == "read":
            assert (self.sent, self.refused) == (0, 1)  # refused once, then read throughout
        else:
            assert (self.sent, self.refused) == (1, 1 if whole else 0)
