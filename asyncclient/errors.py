"""The exceptions asyncclient raises: one root, `AsyncClientError`, and one class per condition
(the tree is drawn on the reference's Errors page). It imports nothing of the
package but, for its annotations, the types of asyncclient.apps and asyncclient.models."""

import errno
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from asyncclient.apps import Problem
    from asyncclient.models import Build, Run, SkippedTest, StartedRun

__all__ = [
    "KINDS",
    "ApiError",
    "AsyncClientError",
    "BadRequestError",
    "BuildRejectedError",
    "CertificateError",
    "CertificateExpiredError",
    "CertificateNameMismatchError",
    "ChecksumMismatchError",
    "ClientCertificateError",
    "ConflictError",
    "EventLoopError",
    "LocalFileError",
    "MissingExtraError",
    "NotFoundError",
    "NotStartedError",
    "NotTLSError",
    "PaymentRequiredError",
    "PermissionDeniedError",
    "PoolTimeoutError",
    "ProxyAuthError",
    "ProxyError",
    "ProxyUnreachableError",
    "RateLimitedError",
    "RedirectError",
    "ResponseTooLargeError",
    "ServerError",
    "SpeaksTLSError",
    "TLSError",
    "TransportError",
    "UnauthenticatedError",
    "UnknownRunsError",
    "ValidationError",
    "WatchTimeoutError",
    "reason_phrase",
]


def reason_phrase(status: int) -> str:
    """The HTTP reason phrase of a status ("Not Found"), or "Unknown Status"."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown Status"


class AsyncClientError(Exception):
    """The root of every error asyncclient raises."""


class ValidationError(AsyncClientError, ValueError):
    """Input refused before any request was sent; the message names the problem and the fix."""


class MissingExtraError(AsyncClientError, ImportError):
    """A feature needs an optional part that is not installed; the message says which feature,
    which extra, and the command that installs it (`pip install 'asyncclient[cli]'`).

    Attributes:
        feature: What was asked for (`--html`, `serve --tls`, ...).
        extra: The extra that brings it (`cli`, `tls`, `mcp`, ...).
    """

    def __init__(self, feature: str, extra: str, missing: str) -> None:
        super().__init__(
            f"{feature} needs the {extra} extra ({missing} is not installed): "
            f"pip install 'asyncclient[{extra}]'",
            name=missing,
        )
        self.feature = feature
        self.extra = extra


class EventLoopError(AsyncClientError, RuntimeError):
    """An AsyncSession was used from an event loop while another loop that it is bound to is
    still running: a session belongs to one event loop at a time. (One whose loop has closed,
    as after `asyncio.run`, starts afresh on the next call from a new loop.)"""


class TransportError(AsyncClientError):
    """The service could not be reached, the connection broke, or the request timed out.

    Raised after the retries allowed for the request were used up; the aiohttp exception is
    the `__cause__`. A failure on the way to the service that names its own fix is one of the
    subclasses below (a certificate, TLS, a proxy, the pool, an answer too large), with
    `fix` saying what to change and `kind` its name ("untrusted", "proxy_auth", ...; "" for
    the others: refused, dropped, timed out). `detail` is the message without the fix.
    `request_id`: the service's id of the answer when one came, else None.
    """

    KIND: ClassVar[str] = ""

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        url: str = "",
        attempts: int = 1,
        kind: str = "",
        fix: str = "",
        request_id: str | None = None,
    ) -> None:
        self.detail = message
        self._kind = kind or type(self).KIND
        self.fix = fix
        self.request_id = request_id
        if request_id:
            message = f"{message} (request id {request_id})"
        self.message = f"{message}: {fix}" if fix else message
        super().__init__(self.message)
        self.method = method
        self.url = url
        self.attempts = attempts

    @property
    def kind(self) -> str:
        """The failure's name ("untrusted", "proxy_auth", ...; "" for an ordinary one): its
        class says the same (CertificateError, ProxyAuthError, ...)."""
        return self._kind

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (self.message,), self._state()))

    def _state(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "url": self.url,
            "attempts": self.attempts,
            "_kind": self.kind,
            "fix": self.fix,
            "detail": self.detail,
            "request_id": self.request_id,
        }


class CertificateError(TransportError):
    """The service's certificate is not trusted: give its CA (`ca_file`)."""

    KIND = "untrusted"


class CertificateNameMismatchError(CertificateError):
    """The certificate is not valid for the host of the base URL (it names the ones it holds
    when it can tell)."""

    KIND = "name_mismatch"


class CertificateExpiredError(CertificateError):
    """The certificate is out of its validity (or this machine's clock is)."""

    KIND = "cert_expired"


class TLSError(TransportError):
    """The TLS handshake with the service failed."""

    KIND = "tls"


class NotTLSError(TLSError):
    """An https:// base URL whose address speaks plain HTTP."""

    KIND = "not_tls"


class SpeaksTLSError(TLSError):
    """An http:// base URL whose address speaks HTTPS."""

    KIND = "speaks_tls"


class ClientCertificateError(TLSError):
    """The service asked for a client certificate and got none, or refused the one sent."""

    KIND = "client_cert"


class ProxyError(TransportError):
    """The proxy refused the tunnel to the service."""

    KIND = "proxy_refused"


class ProxyAuthError(ProxyError):
    """The proxy wants credentials (407), or refused the ones in its address."""

    KIND = "proxy_auth"


class ProxyUnreachableError(ProxyError):
    """No connection to the proxy itself."""

    KIND = "proxy_unreachable"


class PoolTimeoutError(TransportError):
    """No free connection of the session's pool within `pool_timeout`: nothing went out."""

    KIND = "pool_timeout"


class ResponseTooLargeError(TransportError):
    """An answer larger than the session's max_response_bytes (`limit`): not read further and
    not retried, since the next answer would be as large."""

    KIND = "too_large"

    def __init__(self, message: str, *, limit: int = 0, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.limit = limit

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "limit": self.limit}


class ApiError(AsyncClientError):
    """The service answered with an error status.

    status: the HTTP status; code: the error code from the body (None when the body had none);
    message: the service's message, or a description of the answer when it was not JSON;
    body: the parsed JSON body, or its text; method/url: the request (never its headers);
    retry_after: seconds the service asked to wait, if it said; attempts: requests made;
    details: the error's fields whatever the body's shape (also as `.error`); request_id: the
    service's id of the answer (an X-Request-Id header, a requestId in the body), to find the
    call in its logs; it ends the message as `(request id ...)`.
    """

    def __init__(
        self,
        status: int,
        code: str | None,
        message: str,
        body: Any = None,
        method: str = "",
        url: str = "",
        *,
        retry_after: float | None = None,
        attempts: int = 1,
        details: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.method = method
        self.url = url
        self.retry_after = retry_after
        self.attempts = attempts
        self.details: Mapping[str, Any] = dict(details or {})
        self.request_id = request_id
        super().__init__(self._line())

    def _line(self) -> str:
        label = self.code or reason_phrase(self.status)
        request = ""
        if self.method or self.url:
            parts = urlsplit(self.url)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            request = " (" + " ".join(p for p in (self.method, target) if p) + ")"
        if self.request_id:
            request += f" (request id {self.request_id})"
        if self.message.lower().startswith(label.lower()):
            # "Unauthorized: bad key" needs no second "Unauthorized" before it.
            return f"{self.status} {self.message}{request}"
        return f"{self.status} {label}: {self.message}{request}"

    @property
    def error(self) -> Mapping[str, Any]:
        """The error's fields whatever the body's shape: the `error` object merged over the
        top level, the first of `errors`, or the flat body (empty for a body that is not JSON)."""
        return self.details

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.status, self.code, self.message, self.body, self.method, self.url)
        state = {
            "retry_after": self.retry_after,
            "attempts": self.attempts,
            "details": self.details,
            "request_id": self.request_id,
        }
        state.update(self._extra_state())
        return (_rebuild, (type(self), args, state))

    def _extra_state(self) -> dict[str, Any]:
        return {}


class RedirectError(ApiError):
    """3xx: the service pointed elsewhere. Never followed, so the API key goes nowhere else;
    `location` is where it pointed (without any user name or password in it) and
    `suggested_base_url` the base URL that would reach it, when the location shows one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.location: str | None = kwargs.pop("location", None)
        self.suggested_base_url: str | None = kwargs.pop("suggested_base_url", None)
        super().__init__(*args, **kwargs)

    def _extra_state(self) -> dict[str, Any]:
        return {"location": self.location, "suggested_base_url": self.suggested_base_url}


class BadRequestError(ApiError):
    """400: the request was malformed or out of the service's limits (`error.field` says which)."""


class UnauthenticatedError(ApiError):
    """401: no API key, or one the service does not know."""


class PaymentRequiredError(ApiError):
    """402: the plan does not allow this (for example tester endpoints on a free plan)."""


class PermissionDeniedError(ApiError):
    """403: the key may not do this (deleting builds and managing endpoints need an edit key)."""


class NotFoundError(ApiError):
    """404: no such id among the key's projects, or no such path."""


class ConflictError(ApiError):
    """409: the resource is not in a state that allows this (pinned, final, already exists...)."""


class BuildRejectedError(ApiError):
    """422 build_rejected: the service's devices cannot run the build.

    problems: what they cannot run (asyncclient.apps.Problem); build: the rejected build.
    """

    problems: "tuple[Problem, ...]" = ()
    build: "Build | None" = None

    def _extra_state(self) -> dict[str, Any]:
        return {"problems": self.problems, "build": self.build}


class NotStartedError(ApiError):
    """402 not_started or 400 empty from run_project: no test started; .started/.skipped say why."""

    started: "tuple[StartedRun, ...]" = ()
    skipped: "tuple[SkippedTest, ...]" = ()

    def _extra_state(self) -> dict[str, Any]:
        return {"started": self.started, "skipped": self.skipped}


class RateLimitedError(ApiError):
    """429: too many requests; `retry_after` holds the seconds the service asked to wait."""


class ServerError(ApiError):
    """5xx: a fault of the service."""


class LocalFileError(AsyncClientError, OSError):
    """A file on this machine could not be written (or read): the disk is full, permission is
    denied, the file system is read-only, a folder stands where a file goes.

    Also an OSError, with the `errno`, `strerror` and `filename` of the failure; its message
    names the path and what to do. Nothing was lost: a partial download and an upload's journal
    are kept, so the same command resumes once the cause is fixed. The CLI exits 5.
    """

    def __init__(self, message: str, code: int | None, strerror: str | None, filename: str):
        super().__init__(code, strerror, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        return (type(self), (self.message, self.errno, self.strerror, self.filename))

    @classmethod
    def of(cls, exc: OSError, what: str, elsewhere: str) -> "LocalFileError":
        """The error for `exc`: `what` (e.g. "cannot write /x/y.part"), the system's reason, and
        what to do: free space, or `elsewhere` (e.g. "choose another folder with -o").

        Args:
            exc: The operating system's error.
            what: What could not be done, such as `cannot write /x/y.part`.
            elsewhere: What to do instead when freeing space does not apply.

        Returns:
            The error, its message naming the path, the reason and the fix.
        """
        path = exc.filename if isinstance(exc.filename, str) else what
        reason = (exc.strerror or str(exc)).rstrip(".")
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "free space on its disk and run the same command again (nothing is lost)"
        elif isinstance(exc, IsADirectoryError):
            reason, fix = "a folder is in the way", f"move it away or {elsewhere}"
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            fix = f"make it writable or {elsewhere}"
        else:
            fix = elsewhere
        return cls(f"{what}: {reason}; {fix}", exc.errno, exc.strerror, path)


class ChecksumMismatchError(AsyncClientError):
    """The sha256 the service computed for an uploaded build differs from the local file's.

    `build_id`: that build; `deleted`: whether the client could delete it (with a key that can
    also create and edit tests). A build that was not deleted must not be used.
    """

    def __init__(
        self,
        message: str,
        *,
        expected: str = "",
        actual: str = "",
        build_id: str = "",
        deleted: bool = False,
    ) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
        self.build_id = build_id
        self.deleted = deleted

    def __reduce__(self) -> tuple[Any, ...]:
        state = {
            "expected": self.expected,
            "actual": self.actual,
            "build_id": self.build_id,
            "deleted": self.deleted,
        }
        return (_rebuild, (type(self), (self.args[0],), state))


class WatchTimeoutError(AsyncClientError):
    """Watching runs gave up before all were final; `runs` holds their last known state."""

    def __init__(self, message: str, runs: "Sequence[Run]" = ()) -> None:
        super().__init__(message)
        self.runs: tuple[Run, ...] = tuple(runs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (self.args[0], self.runs), {}))


class UnknownRunsError(AsyncClientError):
    """Watched run ids the service left out of its answers several times in a row: unknown ids,
    deleted runs, or runs of a project the key does not belong to.

    run_ids: those ids; runs: the final views of the other runs watched.
    """

    def __init__(self, run_ids: "Sequence[str]", runs: "Sequence[Run]" = ()) -> None:
        self.run_ids: tuple[str, ...] = tuple(run_ids)
        self.runs: tuple[Run, ...] = tuple(runs)
        shown = ", ".join(self.run_ids[:5]) + (", ..." if len(self.run_ids) > 5 else "")
        super().__init__(
            f"the service does not know {len(self.run_ids)} run id(s): {shown}; check the ids "
            "(a deleted run, or one of a project this key does not belong to, is unknown too)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (self.run_ids, self.runs), {}))


KINDS: Mapping[str, type[TransportError]] = {
    cls.KIND: cls
    for cls in (
        CertificateError,
        CertificateNameMismatchError,
        CertificateExpiredError,
        TLSError,
        NotTLSError,
        SpeaksTLSError,
        ClientCertificateError,
        ProxyError,
        ProxyAuthError,
        ProxyUnreachableError,
        PoolTimeoutError,
        ResponseTooLargeError,
    )
}
"""Each transport failure's kind and the class it is raised as."""


def _rebuild(cls: type[Exception], args: tuple[Any, ...], state: dict[str, Any]) -> Exception:
    err = cls(*args)
    err.__dict__.update(state)
    return err
