"""Who may call: API keys, their capability and projects, and the `Authorization` header.

`authenticate` answers 401 for a missing or unknown key, `require_edit` 403 for a run-only key.
"""

from collections.abc import Mapping

import attrs

from asyncclient.testing._errors import ServiceError

__all__ = ["ApiKey", "authenticate", "bearer_token", "require_edit"]


@attrs.define(eq=False)
class ApiKey:
    token: str = attrs.field(repr=False)
    capability: str  # "run" | "edit"
    projects: frozenset[str]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <key>` header; None for another header or none."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def authenticate(keys: Mapping[str, ApiKey], authorization: str | None) -> ApiKey:
    """The key of an `Authorization: Bearer <key>` header, or 401."""
    if authorization is None:
        raise ServiceError(
            401,
            "unauthenticated",
            "send your API key as 'Authorization: Bearer <key>'",
            kind="no_key",
        )
    token = bearer_token(authorization)
    key = keys.get(token) if token is not None else None
    if key is None:
        # Never echo the key: it may be a real secret.
        raise ServiceError(
            401, "unauthenticated", "the API key is not known to the service", kind="bad_key"
        )
    return key


def require_edit(key: ApiKey, what: str) -> None:
    """403 unless the key can also create and edit tests."""
    if key.capability != "edit":
        raise ServiceError(
            403,
            "permission_denied",
            f"{what} needs a key that can also create and edit tests; this key can only "
            "run tests and read results",
            kind="capability",
        )
