"""The emulator's error answers: `ServiceError` (status, code, message, extras) and its makers.

Raised by the state rules and the handlers alike; a dialect writes it on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["ServiceError", "Skip", "invalid", "invalid_state", "lookup_error", "not_found", "show"]


@attrs.frozen
class Skip:
    """A test a project run left out, and why (the spec's skipped list; a 409 when every test
    of the project is skipped carries them all)."""

    test_id: str
    code: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"testId": self.test_id, "reason": self.reason, "code": self.code}


def show(value: str) -> str:
    """An id from a request, shortened for a message."""
    return value if len(value) <= 80 else value[:77] + "..."


class ServiceError(Exception):
    """An answer other than success: status, code, message and extra fields of the error body.

    kind names the condition where the API spec leaves the status and code open (no_key,
    bad_key, capability, missing, foreign, malformed_id, pinned, plan, invalid, not_started,
    rate_limited, unavailable, internal, no_route): a dialect may answer those its own way.
    skipped: the tests not started, for not_started and empty.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        kind: str | None = None,
        skipped: Sequence[Skip] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})
        self.kind = kind
        self.skipped = None if skipped is None else list(skipped)


def invalid(field: str, message: str) -> ServiceError:
    return ServiceError(400, "invalid_request", message, extra={"field": field}, kind="invalid")


def not_found(message: str, kind: str = "missing") -> ServiceError:
    return ServiceError(404, "not_found", message, kind=kind)


def lookup_error(what: str, prefix: str, ident: str, exists: bool) -> ServiceError:
    """404 for an id the key cannot see: marked malformed (no such prefix), foreign (another
    project's) or missing, for the dialects that answer those differently."""
    kind = "foreign" if exists else "missing" if ident.startswith(prefix) else "malformed_id"
    return not_found(f"no {what} {show(ident)} in your projects", kind)


def invalid_state(message: str) -> ServiceError:
    return ServiceError(409, "invalid_state", message)
