"""The request core, each step named for what it handles: request -> make_call (the Call) ->
_send_and_decode -> send_handling_retries (the loop of _client._retrying) ->
_send_handling_pool (a slot of the pool) -> _send_observed (span, metric, DEBUG line) ->
_send_single_request (the body out, the answer in within its limit, a failure mapped)."""

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import urlencode, urlsplit

import aiohttp
import orjson

from asyncclient._client import _telemetry
from asyncclient._client._call import Call, Exchange
from asyncclient._client._failures import read_failure
from asyncclient._client._network import Network
from asyncclient._client._network.bounded import ERROR_BODY_LIMIT, read_bounded
from asyncclient._client._network.link import LinkFailure, closed_by_service
from asyncclient._client._outage import DEFAULT_OUTAGE_THRESHOLD, Outages
from asyncclient._client._retrying import retrying
from asyncclient._client._slots import Slots
from asyncclient._client._tls_parts import PartLink, PartSender, TooLarge, Unconnected
from asyncclient._core import _environment as environment
from asyncclient._core import _wire as wire
from asyncclient._core._operations import Operation
from asyncclient._core._responses import error_from_response
from asyncclient._core._retry import Retry, RetryPolicy, classify
from asyncclient._local._bodies import Body, attempt_body, retrying_body
from asyncclient._values import _bounds as bounds
from asyncclient.errors import (
    ApiError,
    EventLoopError,
    PoolTimeoutError,
    ResponseTooLargeError,
    TransportError,
)

__all__ = ["Transport"]

# One DEBUG record per attempt and per retry.
requests_log: Final = logging.getLogger("asyncclient.requests")
retries_log: Final = logging.getLogger("asyncclient.retries")


def _short(reason: str) -> str:
    """`connection refused` out of `cannot connect to host:port (connection refused) (GET ...)`."""
    if reason.startswith("cannot connect to ") and "(" in reason:
        return reason.split("(", 1)[1].split(")", 1)[0]
    return reason.split(" (", 1)[0]


T = TypeVar("T")

_DEBUG: Final = logging.DEBUG
# orjson: twice as fast on runs, a watcher's main cost.
_loads: Final = orjson.loads
answers_log: Final = logging.getLogger("asyncclient.answers")


def _parsed(raw: bytes, operation: str) -> Any:
    """The JSON answer, nested at most bounds.MAX_DEPTH deep (said in one line when cut)."""
    value = _loads(raw)
    # Too few brackets to nest too deep: skip the walk.
    if raw.count(b"[") + raw.count(b"{") >= bounds.MAX_DEPTH:
        value, cut = bounds.cut_depth(value)
        if cut:
            answers_log.warning(
                "the answer to %s nests deeper than %d levels: read to that depth",
                operation,
                bounds.MAX_DEPTH,
            )
    return value


_dumps: Final = orjson.dumps


WAITING_FOR_CONNECTION: Final = "waiting for a connection"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _close_at_loop_end(
    http: aiohttp.ClientSession, also: Callable[[], object]
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        also()
        await http.close()


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
        max_response_bytes: int = environment.DEFAULT_MAX_RESPONSE_BYTES,
        pool_timeout: float | None = None,
        outage_threshold: float = DEFAULT_OUTAGE_THRESHOLD,
    ) -> None:
        self._max_response_bytes = max_response_bytes
        self._base_url = base_url
        self._network = network
        # A dropped connection is looked at closely once (see Network.diagnose).
        self._probed = False
        self._headers = wire.base_headers(key, user_agent)
        self._timeout_s = float(timeout)
        self._connect_timeout_s = connect_timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        # Our slots hold the waiting, so total starts at the send.
        self._own_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        self._pool_timeout = pool_timeout
        self._outages = Outages(outage_threshold, retry.deadline, retry.now)
        self._transfer_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=timeout
        )
        self._connection_limit = connection_limit
        self._http: aiohttp.ClientSession | None = client_session
        self._owns_http = client_session is None
        # Our session's loop, and its closer at loop shutdown (_bind).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closer: AsyncGenerator[None, None] | None = None
        self._slots: Slots | None = None
        # File parts over TLS go out from threads, directly on our own session (a borrowed
        # one keeps every request); chosen here, made on the first part (per loop).
        self._parts_on_threads: Final = (
            network.https and network.proxy is None and client_session is None
        )
        self._parts: PartLink | None = None
        self._max_retries = max_retries
        self._retry = retry
        self._closed = False
        self._api = self._base_url + wire.API_PREFIX
        # Borrowed sessions: timeout per request, never raise for status.
        self._request_options: dict[str, Any] = {
            "allow_redirects": False,
            **network.request_options(),
        }
        if client_session is not None:
            self._request_options["raise_for_status"] = False
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
        self._close_parts()
        http, self._http = self._http, None
        closer, self._closer = self._closer, None
        if self._loop is not None and self._loop is not _running_loop():
            return  # bound to another loop, closed since (its shutdown closed the connections)
        if closer is not None:
            await closer.aclose()  # closes http
        elif http is not None and self._owns_http:
            await http.close()

    def _close_parts(self) -> None:
        parts, self._parts = self._parts, None
        if parts is not None:
            parts.close()

    def ensure_http(self) -> aiohttp.ClientSession:
        if self._owns_http and self._loop is not None and self._loop is not _running_loop():
            self._rebind()
        if self._http is None:
            if self._closed:
                raise RuntimeError("this AsyncSession is closed; create a new one")
            connector = aiohttp.TCPConnector(limit=self._connection_limit)
            http = aiohttp.ClientSession(connector=connector, timeout=self._own_timeout)
            # No hidden resend: our loop counts every attempt.
            if hasattr(http, "_retry_connection"):
                http._retry_connection = False
            self._http = http
            self._bind(http)
        return self._http

    def _bind(self, http: aiohttp.ClientSession) -> None:
        """Tie our aiohttp session to the running loop: an async generator, started here and
        parked at its yield, is what a runner's shutdown_asyncgens closes before the loop
        ends (asyncio.run, asyncio.Runner, pytest's loops), and its `finally` closes the
        connections on that loop, while it still runs: nothing is left unclosed."""
        self._loop = _running_loop()
        # Wait for a slot here: untimed, never retried.
        self._slots = Slots(self._connection_limit)
        closer = _close_at_loop_end(http, self._close_parts)
        step = closer.asend(None)  # registers it with the loop (the firstiter hook) ...
        with contextlib.suppress(StopIteration):
            step.send(None)  # ... and runs it to its yield, no await between
        self._closer = closer

    def _rebind(self) -> None:
        """Called from another loop than the one our aiohttp session is on: start afresh if
        that loop has closed (its shutdown closed the connections), refuse if it still runs."""
        old = self._loop
        assert old is not None
        if not old.is_closed():
            raise EventLoopError(
                "this AsyncSession is in use by another event loop that is still running: a "
                "session belongs to one event loop at a time; create one AsyncSession per "
                "event loop (per thread), or call it from its own loop"
            )
        # The loop ended (asyncio.run returned): its shutdown closed the connections.
        self._http, self._closer, self._loop, self._slots = None, None, None, None

    def make_call(
        self,
        operation: Operation,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Body = None,
        headers: Mapping[str, str] | None = None,
        prepare: "Callable[[Mapping[str, str]], Awaitable[Mapping[str, str]]] | None" = None,
        consume: "Callable[[aiohttp.ClientResponse], Awaitable[Any]] | None" = None,
        retries: int | None = None,
    ) -> Call:
        """A call of `operation` at `path` (below the API prefix), with the service's headers
        and `headers` over them."""
        sent = {**self._headers, **headers} if headers else self._headers
        return Call(
            operation,
            self._api + path,
            path,
            params,
            body,
            sent,
            prepare=prepare,
            consume=consume,
            retries=retries,
        )

    def request(
        self,
        operation: Operation,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        body: Body = None,
        headers: Mapping[str, str] | None = None,
        decode: Callable[[Any], T],
        retries: int | None = None,
        ids: Mapping[str, str] | None = None,
    ) -> Coroutine[Any, Any, T]:
        """Send one request of `operation` (with retries, as its row allows) and decode its
        JSON answer with `decode`; with OpenTelemetry, in a span named after the operation
        (asyncclient._client._telemetry) holding `ids`. A plain function handing back the
        coroutine to await: one frame less on every call."""
        if json is not None:
            body = _dumps(json)
            headers = {**(headers or {}), "Content-Type": "application/json"}
        call = self.make_call(
            operation, path, params=params, body=body, headers=headers, retries=retries
        )
        return self._send_and_decode(call, decode, ids)

    async def _send_and_decode(
        self, call: Call, decode: Callable[[Any], T], ids: Mapping[str, str] | None
    ) -> T:
        operation = call.operation
        if call.tracer is not None:
            with _telemetry.operation(call.tracer, operation.name, ids) as current:
                try:
                    raw: bytes = await self.send_handling_retries(call)
                finally:
                    if current.is_recording():
                        current.set_attribute("asyncclient.attempts", call.attempts)
        else:
            raw = await self.send_handling_retries(call)
        try:
            return decode(_parsed(raw, operation.name) if raw else None)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise ApiError(
                call.last.status,
                "invalid_response",
                f"the answer to {operation.name} could not be read ({type(exc).__name__}: "
                f"{exc}); it began {wire.excerpt(raw, 120)!r}",
                raw.decode("utf-8", "replace"),
                operation.method,
                call.url,
                attempts=call.attempts,
                request_id=call.request_id,
            ) from exc

    async def send_handling_retries(self, call: Call) -> Any:
        """Attempt the call, retrying each attempt that returns a Retry, with the policy's waits;
        on giving up, raise the public error with the number of attempts made."""
        outages = self._outages
        policy = self._retry
        started = policy.now()
        try:
            # The first attempt, outside the retry loop: most calls end here.
            result = await self._send_handling_pool(call)
            if isinstance(result, Retry):
                result = await retrying(
                    lambda: self._send_handling_pool(call),
                    policy,
                    self._max_retries if call.retries is None else call.retries,
                    on_retry=functools.partial(self._retried, call),
                    first=result,
                    started=started,
                )
        except BaseException as error:
            if isinstance(error, ApiError | TransportError):
                error.attempts = call.attempts
            if outages.since is not None:
                # Any answer but an outage's says the service is back.
                answered = isinstance(error, ApiError) and classify(error.status) != "outage"
                outages.left(id(call), answered=answered, request=call.describe())
            raise
        if outages.since is not None:
            outages.left(id(call), answered=True, request=call.describe())
        return result

    def _retried(self, call: Call, retry: Retry) -> None:
        """A failed attempt that will be tried again: told to the outage watch when it is an
        outage's, counted (asyncclient.client.retries) and logged (asyncclient.retries)."""
        error = retry.error
        status = error.status if isinstance(error, ApiError) else None
        failure = call.last.failure
        retrying_body(call.data, status, float(retry.wait))
        if retry.outage and self._retry.deadline:  # 0: an outage is a failure like any
            reason = getattr(error, "detail", None) or str(error)
            self._outages.failed(id(call), _short(reason), call.describe())
        meters = call.meters
        debug = retries_log.isEnabledFor(_DEBUG)
        if meters is None and not debug:
            return
        kind = None if status else _telemetry.error_type(failure or error)
        if meters is not None:
            reason = kind or str(status)
            meters.retries.add(
                1, {"asyncclient.operation": call.op, "asyncclient.retry.reason": reason}
            )
        if debug:
            retries_log.debug(
                "%s: attempt %d failed (%s); retrying in %.2f s",
                call.describe(),
                call.attempts,
                error,
                retry.wait,
                extra={
                    "operation": call.op,
                    "attempt": call.attempts,
                    "wait": float(retry.wait),
                    "http_status": status,
                    "error": kind,
                    "request_id": call.request_id if status else None,
                },
            )

    async def _send_handling_pool(self, call: Call) -> Any:
        """One attempt, and its outcome: the body (or what call.consume made of the answer), or
        a Retry for a failure worth another attempt; the public error, raised, for one that is
        not. On our own session it first waits for a slot of the pool (pool_timeout bounds the
        wait)."""
        call.attempts += 1
        call.last = Exchange(call.attempts)
        http = self._http
        if http is None or self._loop is not asyncio.get_running_loop():
            http = self.ensure_http()
        slots = self._slots
        if slots is None:
            return await self._send_observed(call, http)
        if not slots.take_now():
            await self._wait_for_slot(call, slots)
        try:
            call.last.phase = "waiting for the answer"
            if call.tracer or call.meters or requests_log.isEnabledFor(_DEBUG):
                return await self._send_observed(call, http)
            if call.transfer or call.prepare is not None:
                return await self._send_single_request(call, http, call.headers)
            return await self._exchange(call, http, call.data, call.headers, self._request_options)
        finally:
            slots.give()

    async def _wait_for_slot(self, call: Call, slots: Slots) -> None:
        """Wait for one of the pool's slots, within pool_timeout."""
        call.last.phase = WAITING_FOR_CONNECTION
        if self._pool_timeout is None:
            await slots.take()
        else:
            try:
                async with asyncio.timeout(self._pool_timeout):
                    await slots.take()
            except TimeoutError:
                # Nothing went out; a retry would only queue again.
                raise PoolTimeoutError(
                    f"no free connection within {self._pool_timeout:g} s (pool_timeout): all "
                    f"{self._connection_limit} connections were busy with other calls "
                    f"({call.method} {call.target()}); raise connection_limit or pool_timeout",
                    method=call.method,
                    url=call.url,
                    attempts=call.attempts,
                ) from None

    async def _send_observed(self, call: Call, http: aiohttp.ClientSession) -> Any:
        """The request of one attempt, on `http` (see _send_handling_pool), observed when anything
        observes it: its CLIENT span, its duration metric, its DEBUG line."""
        tracer, meters = call.tracer, call.meters
        if tracer is None and meters is None and not requests_log.isEnabledFor(_DEBUG):
            return await self._send_single_request(call, http, call.headers)
        started = time.perf_counter()
        headers = call.headers
        span = None
        network = self._network
        if tracer is not None:
            url = _telemetry.url_full(call.url, call.query())
            span = _telemetry.start_attempt(
                tracer, call.method, url, network.host, network.port, call.attempts
            )
            headers = _telemetry.inject(headers, span)
        raised: BaseException | None = None
        try:
            return await self._send_single_request(call, http, headers)
        except BaseException as exc:
            raised = exc
            raise
        finally:
            self._record_attempt(call, span, meters, started, raised)

    def _record_attempt(
        self,
        call: Call,
        span: Any,
        meters: "_telemetry.Instruments | None",
        started: float,
        raised: BaseException | None,
    ) -> None:
        """One attempt's end, on its span, in the duration metric and in its DEBUG line."""
        seconds = time.perf_counter() - started
        status = call.last.status
        failure = call.last.failure
        error: str | None = None
        if failure is not None:
            error = _telemetry.error_type(failure)
        elif status >= 400:
            error = str(status)
        elif raised is not None:
            error = _telemetry.error_type(raised)
        if span is not None:
            _telemetry.end_attempt(span, status, error)
        network = self._network
        if meters is not None:
            attributes: dict[str, Any] = {
                "http.request.method": call.method,
                "server.address": network.host,
                "server.port": network.port,
                "url.scheme": "https" if network.https else "http",
            }
            if status:
                attributes["http.response.status_code"] = status
            if error is not None:
                attributes["error.type"] = error
            meters.duration.record(seconds, attributes)
        if requests_log.isEnabledFor(_DEBUG):
            self._log_attempt(call, status, error, seconds)

    async def _send_single_request(
        self, call: Call, http: aiohttp.ClientSession, headers: Mapping[str, str]
    ) -> Any:
        """The request of one attempt with `headers`, its answer read and mapped: a part or a
        download (timed by idle time, its body opened per attempt) around _exchange."""
        if call.prepare is not None:
            headers = await call.prepare(headers)
        data: Any = call.data
        if not call.transfer:
            return await self._exchange(call, http, data, headers, self._request_options)
        parts = self._part_link(data)
        if parts is not None:
            try:
                return await self._send_part(parts, call, data, headers)
            except Unconnected:
                pass  # aiohttp connects, or says why it cannot
        sending = await attempt_body(data, headers, self._timeout_s)
        try:
            if sending.timer is None:
                return await self._exchange(
                    call, http, sending.data, sending.headers, self._transfer_options
                )
            try:
                async with sending.timer:
                    return await self._exchange(
                        call, http, sending.data, sending.headers, self._transfer_options
                    )
            except TimeoutError as exc:  # the body stopped moving
                call.last.failure = exc
                return await self._transport_failure(exc, call)
        finally:
            await sending.close()

    async def _exchange(
        self,
        call: Call,
        http: aiohttp.ClientSession,
        data: Any,
        headers: Mapping[str, str],
        options: Mapping[str, Any],
    ) -> Any:
        """One request on aiohttp and its answer: the body (or what call.consume made of it)
        within max_response_bytes, a Retry, or the public error raised."""
        try:
            async with http.request(
                call.method, call.url, params=call.params, data=data, headers=headers, **options
            ) as resp:
                status = call.last.status = resp.status
                call.last.headers = resp.headers
                consume = call.consume
                if consume is not None and (200 <= status < 300 or status == 416):
                    result = await consume(resp)
                    return result
                if 200 <= status < 300:
                    body = await read_bounded(resp, self._max_response_bytes, call, self._too_large)
                    return body
                # Enough for the message; the rest is dropped.
                body = await read_bounded(
                    resp, self._max_response_bytes, call, self._too_large, keep=ERROR_BODY_LIMIT
                )
                resp_headers = resp.headers
                url = str(resp.url)
        except (aiohttp.ClientError, TimeoutError) as exc:
            call.last.failure = exc
            return await self._transport_failure(exc, call)
        return self._refused(call, status, resp_headers, body, url)

    def _part_link(self, data: object) -> PartLink | None:
        """What sends `data` if it is a file part and the session sends parts from threads;
        None: aiohttp sends it, as every other request."""
        if not (self._parts_on_threads and PartSender.takes(data)):
            return None
        if self._parts is not None:
            return self._parts
        self._parts = PartSender(
            self._network,
            limit=self._connection_limit,
            connect_timeout=self._connect_timeout_s,
            idle=self._timeout_s,
            max_response_bytes=self._max_response_bytes,
            keep=ERROR_BODY_LIMIT,
        )
        return self._parts

    async def _send_part(
        self, parts: PartLink, call: Call, part: Any, headers: Mapping[str, str]
    ) -> Any:
        """One attempt at a file part by the session's PartLink, its answer and failures
        read as aiohttp's are (the same table, _failures.FAILURES)."""
        url = call.url
        target = urlsplit(url).path
        if call.params:
            target += "?" + urlencode(call.params)
        try:
            answer = await parts.send(part, call.method, target, headers)
        except TooLarge as over:
            call.last.status, call.last.headers = over.status, over.headers
            raise self._too_large(call, over.seen) from None
        except (LinkFailure, TimeoutError) as exc:
            call.last.failure = exc
            return await self._transport_failure(exc, call)
        status = call.last.status = answer.status
        call.last.headers = answer.headers
        if 200 <= status < 300:
            return answer.body
        return self._refused(call, status, answer.headers, answer.body, url)

    def _refused(
        self, call: Call, status: int, headers: Mapping[str, str], body: bytes, url: str
    ) -> Retry:
        """An error answer: its ApiError raised, or returned in a Retry when it may pass."""
        api_error = error_from_response(status, headers, body, call.method, url)
        api_error.attempts = call.attempts
        verdict = classify(status, idempotent=call.idempotent)
        if verdict == "permanent":
            raise api_error
        return Retry(api_error, api_error.retry_after, outage=verdict == "outage")

    def _too_large(self, call: "Call", seen: str) -> ResponseTooLargeError:
        status = call.last.status
        answer = "the answer" if 200 <= status < 300 else f"the {status} answer"
        return ResponseTooLargeError(
            f"{answer} to {call.method} {call.target()} is larger than the limit of "
            f"{self._max_response_bytes:,} bytes ({seen})",
            method=call.method,
            url=call.url,
            attempts=call.attempts,
            fix="if it is genuine, raise the limit with "
            + self._network.option_name("max_response_bytes", environment.MAX_RESPONSE_BYTES_ENV),
            limit=self._max_response_bytes,
            request_id=call.request_id,
        )

    async def _transport_failure(self, exc: BaseException, call: Call) -> Retry:
        """The TransportError of a failed attempt: returned in a Retry when another attempt may
        help, raised when not (a certificate, a proxy's refusal, a body not resendable)."""
        network = self._network
        failure = network.classify(exc)
        if failure is not None and failure.kind == "name_mismatch":
            failure = await network.diagnose(exc, failure) or failure
        elif failure is None and closed_by_service(exc) and not self._probed:
            self._probed = True
            failure = await network.diagnose(exc, None)
        reading = read_failure(
            exc,
            failure,
            idempotent=call.idempotent,
            timeout=self._timeout_s,
            connect_timeout=self._connect_timeout_s,
            transfer=call.transfer,
            phase=call.last.phase,
        )
        tries = f", {call.attempts} attempts" if call.attempts > 1 else ""
        error = reading.error(
            f"{reading.reason} ({call.method} {call.target()}{tries})",
            method=call.method,
            url=call.url,
            attempts=call.attempts,
            fix=reading.fix,
        )
        # aiohttp's words may hold a proxy's password: never chain them.
        cause = None if any(secret in str(exc) for secret in network.secrets) else exc
        if reading.verdict == "permanent":
            raise error from cause
        error.__cause__ = cause
        return Retry(error, outage=reading.verdict == "outage")

    def _log_attempt(self, call: Call, status: int, error: str | None, seconds: float) -> None:
        # Request id, Idempotency-Key, the proxy without password; nothing else.
        said = ""
        request_id = call.request_id if status else None
        if request_id:
            said += f", request id {request_id}"
        key = call.headers.get("Idempotency-Key")
        if key:
            said += f", Idempotency-Key {key}"
        proxy = self._network.proxy.shown if self._network.proxy is not None else None
        if proxy is not None:
            said += f", via proxy {proxy}"
        failure = call.last.failure
        outcome = type(failure).__name__ if failure is not None else (status or error)
        target = call.target()
        requests_log.debug(
            "%s %s -> %s in %.1f ms (attempt %d, %s%s)",
            call.method,
            target,
            outcome,
            seconds * 1000.0,
            call.attempts,
            call.op,
            said,
            extra={
                "operation": call.op,
                "method": call.method,
                "target": target,
                "attempt": call.attempts,
                "http_status": status or None,
                "error": error,
                "duration": seconds,
                "request_id": request_id,
                "proxy": proxy,
            },
        )
