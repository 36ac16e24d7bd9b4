"""The request core: one aiohttp session with the service's headers and timeouts, one attempt
of a request (errors mapped onto the error tree), and the retry loop around the attempts.
Over 400 lines: one attempt is one control flow (the body going out, the answer coming in
within its limit, each failure mapped and classed as retryable or not); the pieces that stand
alone live beside it (_bodies, _bounded, _network, _retry, _responses)."""

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import urlencode, urlsplit

import aiohttp
import orjson

from asyncclient import _protocol as proto
from asyncclient._bodies import PartBody, PartPayload, single, watched
from asyncclient._bounded import ERROR_BODY_LIMIT, read_bounded
from asyncclient._network import Network
from asyncclient._responses import error_from_response
from asyncclient._retry import RetryPolicy, retrying
from asyncclient.errors import ApiError, ResponseTooLargeError, TransportError

__all__ = ["Call", "Transport"]

logger = logging.getLogger("asyncclient")

T = TypeVar("T")

_DEBUG: Final = logging.DEBUG
# orjson decodes run views about twice as fast as the stdlib: most of a watcher's CPU.
_loads: Final = orjson.loads
_dumps: Final = orjson.dumps

# aiohttp failures worth another attempt; TLS and fingerprint failures will not heal by retrying.
_RETRYABLE_TRANSPORT: Final = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    aiohttp.UploadAbortedError,
    TimeoutError,
)
_PERMANENT_TRANSPORT: Final = (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch)
# Failures where the request surely never reached the service: it could not even connect.
_NEVER_SENT: Final = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# Stands in for the idle timer of a transfer's body on every other request.
_NO_DEADLINE: Final = contextlib.nullcontext()


class Call:
    """One logical request, shared by its attempts."""

    __slots__ = (
        "attempt",
        "consume",
        "data",
        "headers",
        "idempotent",
        "method",
        "op",
        "params",
        "path",
        "prepare",
        "retries",
        "status",
        "transfer",
        "url",
    )

    def __init__(
        self,
        method: str,
        url: str,
        path: str,
        params: Mapping[str, str] | None,
        data: bytes | PartBody | None,
        headers: Mapping[str, str],
        idempotent: bool,
        op: str,
        prepare: "Callable[[Mapping[str, str]], Awaitable[Mapping[str, str]]] | None" = None,
        consume: "Callable[[aiohttp.ClientResponse], Awaitable[Any]] | None" = None,
        retries: int | None = None,
        transfer: bool = False,
    ) -> None:
        self.method = method
        self.url = url
        self.path = path
        self.params = params
        self.data = data
        self.headers = headers
        self.idempotent = idempotent
        self.op = op
        self.prepare = prepare
        self.consume = consume
        self.retries = retries
        # A part upload or a file download: timed by idle time, not by a total (see AsyncSession).
        self.transfer = transfer
        self.attempt = 0
        self.status = 0

    def describe(self) -> str:
        """`METHOD path?query`, for logs (no secrets live in either)."""
        return f"{self.method} {self.target()}"

    def target(self) -> str:
        """Path and query, for logs and messages (no secrets live in either)."""
        path = urlsplit(self.url).path
        if self.params:
            return f"{path}?{urlencode(self.params, safe=',')}"
        return path


def _describe(
    exc: BaseException, timeout: float, connect_timeout: float | None, *, transfer: bool = False
) -> str:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"could not connect within {connect_timeout:g} s (connect_timeout)"
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(
        exc, aiohttp.ClientSSLError
    ):
        if isinstance(exc.os_error, socket.gaierror):
            # The resolver's codes are negative (EAI_NONAME is -2): os.strerror knows none of
            # them and says "Unknown error -2". aiohttp >= 3.10 raises ClientConnectorDNSError.
            return f"cannot connect to {exc.host}:{exc.port} (the host name could not be resolved)"
        errno = exc.os_error.errno
        reason = os.strerror(errno) if errno else str(exc.os_error)
        return f"cannot connect to {exc.host}:{exc.port} ({reason.lower()})"
    if transfer and isinstance(exc, TimeoutError):
        # Only idle timers run on a transfer: aiohttp's sock_read, or our body's own.
        return f"no data moved for {timeout:g} s (timeout)"
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"no complete answer within {timeout:g} s (timeout)"
    detail = str(exc)
    name = type(exc).__name__
    return f"{name}: {detail}" if detail else name


class Transport:
    """What every request of a session shares: the aiohttp session (made on first use, or
    borrowed), the headers with the API key, the timeouts and the retry policy."""

    def __init__(
        self,
        key: str,
        base_url: str,
        *,
        user_agent: str,
        timeout: float,
        connect_timeout: float | None,
        max_retries: int,
        retry: RetryPolicy,
        connection_limit: int,
        client_session: aiohttp.ClientSession | None,
        network: Network,
        max_response_bytes: int = proto.DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._max_response_bytes = max_response_bytes
        self._base_url = base_url
        self._network = network
        # A dropped connection is looked at closely once (see Network.diagnose).
        self._probed = False
        self._headers = proto.base_headers(key, user_agent)
        self._timeout_s = float(timeout)
        self._connect_timeout_s = connect_timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._transfer_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=timeout
        )
        self._connection_limit = connection_limit
        self._http: aiohttp.ClientSession | None = client_session
        self._owns_http = client_session is None
        self._max_retries = max_retries
        self._retry = retry
        self._closed = False
        self._api = self._base_url + proto.API_PREFIX
        # Our own session carries the timeout; a borrowed one gets it on every request. A
        # borrowed session made with raise_for_status=True would turn error answers into
        # aiohttp exceptions: every request asks for the answer itself.
        self._request_options: dict[str, Any] = {
            "allow_redirects": False,
            "raise_for_status": False,
            **network.request_options(),
        }
        if client_session is not None:
            self._request_options["timeout"] = self._timeout
        self._transfer_options = {**self._request_options, "timeout": self._transfer_timeout}

    @property
    def api(self) -> str:
        """The base URL with the API's path prefix."""
        return self._api

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    @property
    def network(self) -> Network:
        return self._network

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close the connections (a client_session passed in is left open)."""
        self._closed = True
        http, self._http = self._http, None
        if http is not None and self._owns_http:
            await http.close()

    def ensure_http(self) -> aiohttp.ClientSession:
        if self._http is None:
            if self._closed:
                raise RuntimeError("this AsyncSession is closed; create a new one")
            connector = aiohttp.TCPConnector(limit=self._connection_limit)
            http = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            # aiohttp resends an idempotent request once, at once and unseen, when a reused
            # connection drops (RFC 9112 9.3.1.1). Our loop already retries with backoff and
            # counts every attempt (a DELETE's 404 after a retry means done), so a hidden
            # second loop would only skew that; aiohttp's own test client turns it off too.
            if hasattr(http, "_retry_connection"):
                http._retry_connection = False
            self._http = http
        return self._http

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        body: bytes | PartBody | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
        op: str,
        decode: Callable[[Any], T],
        retries: int | None = None,
        transfer: bool = False,
    ) -> T:
        """Send one request (with retries) and decode its JSON answer with `decode`."""
        request_headers: Mapping[str, str] = self._headers
        if json is not None:
            body = _dumps(json)
            request_headers = {**request_headers, "Content-Type": "application/json"}
        if headers:
            request_headers = {**request_headers, **headers}
        call = Call(
            method,
            self._api + path,
            path,
            params,
            body,
            request_headers,
            idempotent,
            op,
            retries=retries,
            transfer=transfer,
        )
        raw: bytes = await self.run(call)
        try:
            return decode(_loads(raw) if raw else None)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ApiError(
                call.status,
                "invalid_response",
                f"the answer to {op} could not be read ({type(exc).__name__}: {exc}); "
                f"it began {proto.excerpt(raw, 120)!r}",
                raw.decode("utf-8", "replace"),
                method,
                call.url,
                attempts=call.attempt,
            ) from exc

    async def run(self, call: Call) -> Any:
        """Attempt the call, retrying what asks for it (RetrySignal) with the policy's waits;
        on giving up, raise the public error with the number of attempts made."""
        retries = self._max_retries if call.retries is None else call.retries
        try:
            return await retrying(
                lambda: self._attempt(call), self._retry, retries, describe=call.describe
            )
        except (ApiError, TransportError) as error:
            error.attempts = call.attempt
            raise

    async def _attempt(self, call: Call) -> Any:
        """One attempt. Returns the body (or what call.consume made of the answer); raises
        RetrySignal for a failure worth another attempt, the public error otherwise."""
        call.attempt += 1
        http = self._http or self.ensure_http()
        debug = logger.isEnabledFor(_DEBUG)
        started = time.perf_counter() if debug else 0.0
        headers = call.headers
        if call.prepare is not None:
            headers = await call.prepare(headers)
        data: Any = call.data
        stream: AsyncGenerator[Any, None] | None = None
        payload: PartPayload | None = None
        deadline: contextlib.AbstractAsyncContextManager[Any] = _NO_DEADLINE
        if isinstance(data, PartBody):
            # An explicit length keeps aiohttp from chunked encoding; the body streams. The file
            # is opened here, not in aiohttp's writer task, so it is closed below whatever
            # becomes of that task (release() first stops a body still going out).
            headers = {
                **headers,
                "Content-Type": "application/octet-stream",
                "Content-Length": str(data.length),
            }
            timer = deadline = asyncio.timeout(None)
            handle = None if data.file is not None else await data.open()
            data = payload = PartPayload(data, handle, timer, self._timeout_s)
        elif call.transfer and data is not None:
            # aiohttp's sock_read only watches the answer; this watches the body going out.
            if isinstance(data, bytes):
                headers = {**headers, "Content-Length": str(len(data))}
                data = single(data)
            timer = deadline = asyncio.timeout(None)
            stream = data = watched(data, timer, self._timeout_s)
        options = self._transfer_options if call.transfer else self._request_options
        try:
            async with (
                deadline,
                http.request(
                    call.method,
                    call.url,
                    params=call.params,
                    data=data,
                    headers=headers,
                    **options,
                ) as resp,
            ):
                status = call.status = resp.status
                consume = call.consume
                if consume is not None and (200 <= status < 300 or status == 416):
                    result = await consume(resp)
                    if debug:
                        self._log_attempt(call, status, started)
                    return result
                if 200 <= status < 300:
                    body = await read_bounded(resp, self._max_response_bytes, call, self._too_large)
                    if debug:
                        self._log_attempt(call, status, started)
                    return body
                # Enough for the error's message; the rest is dropped as it arrives, and an
                # error page over the limit is not fetched again by a retry.
                body = await read_bounded(
                    resp, self._max_response_bytes, call, self._too_large, keep=ERROR_BODY_LIMIT
                )
                resp_headers = resp.headers
                url = str(resp.url)
        except (aiohttp.ClientError, TimeoutError) as exc:
            if debug:
                self._log_attempt(call, type(exc).__name__, started)
            await self._raise_transport_error(exc, call)
        finally:
            # A stream still running belongs to aiohttp's writer task, whose cancellation
            # unwinds it (closing the file); an idle one is closed here.
            if stream is not None and not getattr(stream, "ag_running", False):
                await stream.aclose()
            if payload is not None:
                await payload.release()
        if debug:
            self._log_attempt(call, status, started)
        api_error = error_from_response(status, resp_headers, body, call.method, url)
        api_error.attempts = call.attempt
        if call.idempotent and proto.is_retryable_status(status):
            raise proto.RetrySignal(api_error, api_error.retry_after)
        raise api_error

    def _too_large(self, call: "Call", seen: str) -> ResponseTooLargeError:
        status = call.status
        answer = "the answer" if 200 <= status < 300 else f"the {status} answer"
        return ResponseTooLargeError(
            f"{answer} to {call.method} {call.target()} is larger than the limit of "
            f"{self._max_response_bytes:,} bytes ({seen})",
            method=call.method,
            url=call.url,
            attempts=call.attempt,
            kind="too_large",
            fix="if it is genuine, raise the limit with "
            + self._network.option_name("max_response_bytes", proto.MAX_RESPONSE_BYTES_ENV),
            limit=self._max_response_bytes,
        )

    async def _raise_transport_error(self, exc: BaseException, call: Call) -> None:
        """Raise the TransportError for a failed attempt: as a RetrySignal when another attempt
        may help, as itself when not (a certificate, a proxy's refusal, a body not resendable)."""
        network = self._network
        failure = network.classify(exc)
        if failure is not None and failure.kind == "name_mismatch":
            failure = await network.diagnose(exc, failure) or failure
        elif (
            failure is None
            and isinstance(exc, aiohttp.ServerDisconnectedError)
            and not self._probed
        ):
            self._probed = True
            failure = await network.diagnose(exc, None)
        tries = f", {call.attempt} attempts" if call.attempt > 1 else ""
        reason = failure.reason if failure is not None else self._describe(exc, call)
        error = TransportError(
            f"{reason} ({call.method} {call.target()}{tries})",
            method=call.method,
            url=call.url,
            attempts=call.attempt,
            kind=failure.kind if failure is not None else "",
            fix=failure.fix if failure is not None else "",
        )
        # aiohttp's own words may hold a proxy's address with its password: never chain them.
        cause = None if any(secret in str(exc) for secret in network.secrets) else exc
        retryable = (
            isinstance(exc, _RETRYABLE_TRANSPORT)
            and not isinstance(exc, _PERMANENT_TRANSPORT)
            and not (failure is not None and failure.permanent)
            and proto.should_retry_transport(
                idempotent=call.idempotent, never_sent=isinstance(exc, _NEVER_SENT)
            )
        )
        if not retryable:
            raise error from cause
        error.__cause__ = cause
        raise proto.RetrySignal(error) from cause

    def _describe(self, exc: BaseException, call: Call) -> str:
        return _describe(exc, self._timeout_s, self._connect_timeout_s, transfer=call.transfer)

    def _log_attempt(self, call: Call, outcome: int | str, started: float) -> None:
        logger.debug(
            "%s %s -> %s in %.1f ms (attempt %d, %s)",
            call.method,
            call.target(),
            outcome,
            (time.perf_counter() - started) * 1000.0,
            call.attempt,
            call.op,
        )
