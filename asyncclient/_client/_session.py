"""AsyncSession: one method per operation of the service: check the input, call, structure.
The request core (transport, retries) is asyncclient._client._transport; downloads
asyncclient._client._download.
"""

import hashlib
import hmac
import os
from collections.abc import (
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, TypeVar, Unpack

import aiohttp
import aiohttp.payload

from asyncclient._client import _telemetry
from asyncclient._client._download import download_to
from asyncclient._client._network import Network
from asyncclient._client._transport import Transport
from asyncclient._core import _checks as checks
from asyncclient._core import _environment as environment
from asyncclient._core import _wire as wire
from asyncclient._core._converter import converter
from asyncclient._core._operations import OPERATIONS
from asyncclient._core._responses import (
    echoing_part,
    fitting_start,
    read_build,
    read_build_list,
    read_endpoints,
    read_id,
    read_project_run_start,
    read_raw_runs,
    read_run,
    read_run_start,
    read_runs_of,
    read_runs_within,
    read_status,
    read_upload_start,
    read_uploaded_part,
)
from asyncclient._core._retry import RetryPolicy, Sleep
from asyncclient._local._batches import each_batch
from asyncclient._local._bodies import PartBody, part_body
from asyncclient._version import __version__
from asyncclient.errors import (
    ConflictError,
    NotFoundError,
    UnknownRunsError,
    ValidationError,
)
from asyncclient.models import (
    Build,
    BuildList,
    Endpoint,
    ProjectRunStart,
    Run,
    RunStart,
    UploadedPart,
    UploadStart,
)
from asyncclient.upload import Adaptive, UploadResult
from asyncclient.upload._batch import upload_many, upload_one
from asyncclient.upload._values import ItemLike
from asyncclient.watch import RunWatcher, WatchOptions

if TYPE_CHECKING:
    from asyncclient.config import Config
    from asyncclient.failures import Categories, FailureReport
    from asyncclient.failures.bisect import BisectResult, BisectStep
    from asyncclient.flakiness import FlakinessReport

__all__ = ["AsyncSession", "PartBody"]


T = TypeVar("T")

#: How many `ids` batches of list_runs are fetched at once.
LIST_RUNS_CONCURRENCY: Final = 8


class AsyncSession:
    """A client of the Test-Run Service: one method per operation of the API.

    Every option has a default; the address and key come from the environment unless given.
    Use it as `async with AsyncSession() as session:` (or call `await session.close()`), and
    keep one for as long as the program runs: it holds the connection pool.

    Every operation raises `ApiError` when the service refuses (a subclass per status, such
    as `NotFoundError` or `PermissionDeniedError`), after the retries that status allows, and
    `TransportError` when the service could not be reached or did not answer in time, after
    the retries; each method's Raises names only what is its own (`ValidationError` for input
    refused before any request, and the statuses it explains).

    Args:
        api_key: The API key. Default: `$ASYNCCLIENT_API_KEY`. Never shown in logs, reprs,
            errors or output.
        base_url: The service's address, such as `https://service.example.com` (the
            `/api/v1` prefix is added). Default: `$ASYNCCLIENT_BASE_URL`.
        timeout: Seconds an ordinary request may take, from the moment it has a connection.
            For `upload_part` and `download_run_file`, how long no data may move instead.
        connect_timeout: Seconds to open a connection (TCP, TLS and proxy); `None`: no limit.
        max_retries: Retries of a failed request after the first attempt (connection errors,
            timeouts, 408, 429, 5xx); other 4xx answers are never retried.
        backoff_base: The first wait between retries, in seconds, doubled each time, with full
            jitter (a random wait between 0 and the step).
        backoff_max: The longest wait between retries, in seconds.
        max_retry_after: The longest wait a service's `Retry-After` may impose, in seconds
            (also for the run watcher); longer ones are cut to this.
        connection_limit: Requests in flight at once; a call waits for a free slot. Over
            HTTPS, file parts go out from as many threads at most, on connections of their own.
        client_session: An `aiohttp.ClientSession` of your own to send the requests through
            (for your trace configs, say; file parts included). Never closed by the session;
            its `timeout` and `raise_for_status` are overridden per request.
        user_agent: Text appended to the `User-Agent`
            (`asyncclient/<version> (+aiohttp/<v>; python/<v>)`).
        sleep: What waits between retries. Default: `asyncio.sleep`. Tests pass a recorder, or
            use `asyncclient.testing.recorded_retry_waits()`.
        proxy: An `http://[user:password@]host:port` proxy, or `"direct"` to ignore the
            environment. Default: `$ASYNCCLIENT_PROXY`, else `HTTPS_PROXY`, `HTTP_PROXY`,
            `ALL_PROXY` and `NO_PROXY` as curl and pip read them.
        ca_file: A PEM file of CAs to trust besides the system's. Default:
            `$ASYNCCLIENT_CA_FILE`; `SSL_CERT_FILE` and `SSL_CERT_DIR` work as in OpenSSL.
            Certificates are always verified.
        client_cert: A PEM client certificate, for a service that asks for one (mutual TLS).
            Default: `$ASYNCCLIENT_CLIENT_CERT`.
        client_key: The key of `client_cert`, if not in its file. Default:
            `$ASYNCCLIENT_CLIENT_KEY`.
        max_response_bytes: The largest answer read into memory, checked on its
            `Content-Length` and on the bytes as they arrive; past it `ResponseTooLargeError`,
            not retried. `None`: `$ASYNCCLIENT_MAX_RESPONSE_BYTES`, else 33554432 (32 MiB).
            Downloads stream to disk and have no limit.
        retry_deadline: Seconds within which a call rides out an outage (no connection, 502,
            503, 504), retrying with waits of at most 5 s; 0 counts an outage against
            `max_retries` like any failure. `None`: `$ASYNCCLIENT_RETRY_DEADLINE`, else 30.
            A host name that does not resolve fails at once.
        pool_timeout: Seconds a call may wait for a free connection of the pool; `None`: no
            limit. That wait never counts against `timeout` and never causes a retry.
        outage_threshold: Seconds calls must keep failing as an outage does (no connection,
            502, 503, 504, no answer in between) before the `asyncclient.outage` logger warns,
            once; shorter blips that the retries fix are not logged above DEBUG.

    Raises:
        ValidationError: A missing key or address, or an option out of range (the message
            names the option and the fix), before any request.

    Examples:
        ```python
        async with AsyncSession(timeout=10, retry_deadline=60) as session:
            build = await session.get_build("ab_demo_ios_100")
        ```
    """

    # How messages name the network options (the CLI names flags).
    _option_names: ClassVar[Mapping[str, str] | None] = None

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float | None = 10.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        max_retry_after: float = 60.0,
        connection_limit: int = 64,
        client_session: aiohttp.ClientSession | None = None,
        user_agent: str | None = None,
        sleep: Sleep | None = None,
        proxy: str | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        client_cert: str | os.PathLike[str] | None = None,
        client_key: str | os.PathLike[str] | None = None,
        max_response_bytes: int | None = None,
        retry_deadline: float | None = None,
        pool_timeout: float | None = None,
        outage_threshold: float = 2.0,
    ) -> None:
        names = self._option_names
        key = environment.resolve_api_key(api_key, os.environ)
        # One-way: what key_digest() derives from, never the key itself.
        self._key_root = hashlib.sha256(b"asyncclient key\x00" + key.encode()).digest()
        self._base_url = environment.resolve_base_url(base_url, os.environ)
        network = Network.resolve(
            self._base_url,
            os.environ,
            proxy=proxy,
            ca_file=ca_file,
            client_cert=client_cert,
            client_key=client_key,
            flags=names,
        )
        checks.check_number("timeout", timeout, minimum=0.001)
        if connect_timeout is not None:
            checks.check_number("connect_timeout", connect_timeout, minimum=0.001)
        checks.check_number("max_retries", max_retries, minimum=0, integer=True)
        checks.check_number("backoff_base", backoff_base, minimum=0)
        checks.check_number("backoff_max", backoff_max, minimum=0)
        checks.check_number("max_retry_after", max_retry_after, minimum=0)
        checks.check_number("connection_limit", connection_limit, minimum=1, integer=True)
        if pool_timeout is not None:
            checks.check_number("pool_timeout", pool_timeout, minimum=0.001)
        checks.check_number("outage_threshold", outage_threshold, minimum=0)
        deadline = environment.resolve_retry_deadline(
            retry_deadline, os.environ, flag=(names or {}).get("retry_deadline", "retry_deadline=")
        )
        response_limit = environment.resolve_max_response_bytes(
            max_response_bytes,
            os.environ,
            flag=network.flags.get("max_response_bytes", "max_response_bytes="),
        )
        if client_session is not None and not isinstance(client_session, aiohttp.ClientSession):
            raise ValidationError("client_session must be an aiohttp.ClientSession")
        self._max_retry_after = float(max_retry_after)
        self._t = Transport(
            key,
            self._base_url,
            user_agent=wire.user_agent(__version__, aiohttp.__version__, user_agent),
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_retries=max_retries,
            retry=RetryPolicy(backoff_base, backoff_max, max_retry_after, sleep, deadline=deadline),
            connection_limit=connection_limit,
            client_session=client_session,
            network=network,
            max_response_bytes=response_limit,
            pool_timeout=pool_timeout,
            outage_threshold=float(outage_threshold),
        )

    @classmethod
    def from_config(
        cls, config: "Config | None" = None, *, profile: str | None = None, **overrides: Any
    ) -> Self:
        """A session from the configuration files and the environment.

        `AsyncSession()` itself reads only its arguments and the environment; this reads
        `asyncclient.toml` (or `[tool.asyncclient]` in `pyproject.toml`) and the user file too,
        with their profiles (see `asyncclient.config`).

        Args:
            config: What `load_config()` returned. Default: `load_config(profile)`.
            profile: The `[profiles.NAME]` to use when `config` is not given.
            **overrides: `AsyncSession` arguments that win over the files and the environment.

        Returns:
            A new session (not yet connected).

        Raises:
            ValidationError: A mistake in a configuration file (naming the file and line), or
                no API key (naming the variable the file's `api_key_env` gives).

        Examples:
            ```python
            async with AsyncSession.from_config(profile="ci") as session:
                builds = await session.list_builds("p_demo")
            ```
        """
        from asyncclient.config import load_config

        if config is None:
            config = load_config(profile)
        options = {**config.session_options(), **overrides}
        hint = config.missing_key_hint
        if (
            hint
            and not options.get("api_key")
            and not os.environ.get(environment.API_KEY_ENV, "").strip()
        ):
            raise ValidationError(f"no API key: {hint} or pass api_key=")
        return cls(**options)

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The service's address the session was made with (without the /api/v1 prefix)."""
        return self._base_url

    def key_digest(self, purpose: str) -> bytes:
        """A secret for `purpose` (32 bytes) that every session with the same API key derives
        alike and that tells nothing of the key: what processes sharing a key sign what they
        share with (the fleet's verdicts), so that a writer without the key cannot forge it.

        Args:
            purpose: What the secret is for; another purpose gives another secret.
        """
        return hmac.new(self._key_root, purpose.encode(), hashlib.sha256).digest()

    @property
    def max_retry_after(self) -> float:
        """The longest wait (seconds) a service's Retry-After may impose; longer ones are cut."""
        return self._max_retry_after

    @property
    def network(self) -> Network:
        """How requests reach the service: `.proxy` (None: directly; `.proxy.shown` hides the
        password), `.ssl` (the TLS context), `.ca_file`, `.client_cert`."""
        return self._t.network

    def __repr__(self) -> str:
        proxy = self._t.network.proxy
        via = f" proxy={proxy.shown!r}" if proxy is not None else ""
        return f"<AsyncSession base_url={self._base_url!r}{via}>"

    async def __aenter__(self) -> Self:
        self._t.ensure_http()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (a client_session passed in is left open)."""
        await self._t.close()

    def _call(
        self,
        name: str,
        decode: Callable[[Any], T],
        /,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        body: bytes | PartBody | None = None,
        headers: Mapping[str, str] | None = None,
        retries: int | None = None,
        ids: Mapping[str, str] | None = None,
    ) -> Coroutine[Any, Any, T]:
        """One operation of the table (asyncclient._core._operations): its method and path, with the
        path's ids filled in, retried and timed as its row says; the coroutine to await."""
        operation = OPERATIONS[name]
        return self._t.request(
            operation,
            operation.path_for(**(ids or {})),
            params=params,
            json=json,
            body=body,
            headers=headers,
            decode=decode,
            retries=retries,
            ids=ids,
        )

    # --- builds ---------------------------------------------------------------------------------

    async def list_builds(self, project_id: str) -> BuildList:
        """The project's builds, newest first, with the largest build size and the part size.

        Args:
            project_id: The project (`p_...`).

        Returns:
            `BuildList(builds, max_bytes, part_bytes)`.

        Raises:
            ValidationError: `project_id` is not a project id, before any request.
            NotFoundError: No such project for this key.

        Examples:
            ```python
            listing = await session.list_builds("p_demo")
            ready = [b for b in listing.builds if b.status == "ready"]
            ```
        """
        project_id = checks.check_id("project", project_id)
        return await self._call("list_builds", read_build_list, ids={"project_id": project_id})

    async def get_build(self, build_id: str) -> Build:
        """One build in the single view (with `sha256` and `project_id`).

        Args:
            build_id: The build (`ab_...`).

        Returns:
            The `Build`.

        Raises:
            ValidationError: `build_id` is not a build id, before any request.
            NotFoundError: The service knows no such build (or not for this key).
        """
        build_id = checks.check_id("build", build_id)
        return await self._call("get_build", read_build, ids={"build_id": build_id})

    async def start_upload(
        self, project_id: str, file_name: str, size: int, label: str | None = None
    ) -> UploadStart:
        """Create a build in `uploading` state: the first step of an upload by hand.

        Most code calls `upload_build` instead, which does the three steps. Retried like an
        idempotent call: a retry after a lost answer can at worst leave an empty `uploading`
        build behind, which never runs.

        Args:
            project_id: The project (`p_...`).
            file_name: The name the service keeps (`.apk` or `.app.zip`).
            size: The file's size in bytes.
            label: A label of your own, such as the commit.

        Returns:
            `UploadStart(id, part_bytes, parts)`: the new build id and how to cut the file.

        Raises:
            ValidationError: A bad file name, size or label, before any request.
            PaymentRequiredError: The file is larger than the plan allows.
        """
        project_id = checks.check_id("project", project_id)
        payload: dict[str, Any] = {
            "fileName": checks.check_file_name(file_name),
            "size": checks.check_size(size),
        }
        if checks.check_label(label) is not None:
            payload["label"] = label
        return await self._call(
            "start_upload",
            lambda answer: fitting_start(read_upload_start(answer), payload["size"]),
            json=payload,
            ids={"project_id": project_id},
        )

    async def upload_part(
        self, build_id: str, part_number: int, data: bytes | bytearray | memoryview | PartBody
    ) -> UploadedPart:
        """Send one part of an upload started with `start_upload`; safe to retry.

        Timed by idle time, not by a total: it fails when no data moves for `timeout` seconds.

        Args:
            build_id: The build that `start_upload` made (`ab_...`).
            part_number: 1 for the first part.
            data: The part's bytes, or a `PartBody(path, offset, length)` streamed from the
                file (`file=` an open file lets many parts share it).

        Returns:
            `UploadedPart(part_number, etag)`, to pass to `complete_upload`.

        Raises:
            ValidationError: A bad build id or part number, an empty part, or a slice past the
                end of its file, before any request.
        """
        build_id = checks.check_id("build", build_id)
        part_number = checks.check_part_number(part_number)
        return await self._call(
            "upload_part",
            lambda answer: echoing_part(read_uploaded_part(answer), part_number),
            body=await part_body(data),
            ids={"build_id": build_id, "part_number": str(part_number)},
        )

    async def complete_upload(self, build_id: str, parts: Sequence[UploadedPart]) -> Build:
        """Finish an upload: the service checks the build and answers it.

        Args:
            build_id: The build that `start_upload` made (`ab_...`).
            parts: Every `UploadedPart` that `upload_part` returned.

        Returns:
            The checked `Build` (`status` `ready`).

        Raises:
            ValidationError: A bad build id or an empty part list, before any request.
            BuildRejectedError: The devices cannot run the build (`.problems` say why).
            ConflictError: A part is missing or its etag differs.
        """
        build_id = checks.check_id("build", build_id)
        if isinstance(parts, str | bytes) or not isinstance(parts, Iterable):
            raise ValidationError("parts must be the list of UploadedPart from upload_part")
        listed = list(parts)
        if not listed:
            raise ValidationError("parts is empty: list every UploadedPart from upload_part")
        if not all(isinstance(part, UploadedPart) for part in listed):
            raise ValidationError("parts must hold the UploadedPart values upload_part returned")
        payload = {"parts": [converter.unstructure(part) for part in listed]}
        return await self._call(
            "complete_upload", read_build, json=payload, ids={"build_id": build_id}
        )

    async def delete_build(self, build_id: str) -> None:
        """Delete a build. A retry that finds it gone counts as done.

        Args:
            build_id: The build (`ab_...`).

        Raises:
            ValidationError: `build_id` is not a build id, before any request.
            PermissionDeniedError: The key cannot also create and edit tests.
            ConflictError: A test pins the build.
            NotFoundError: No such build.
        """
        build_id = checks.check_id("build", build_id)
        await self._delete("delete_build", {"build_id": build_id})

    async def _delete(self, name: str, ids: Mapping[str, str]) -> None:
        try:
            await self._call(name, _ignore, ids=ids)
        except NotFoundError as exc:
            # An earlier attempt may have deleted it.
            if exc.attempts <= 1:
                raise

    # --- runs -----------------------------------------------------------------------------------

    async def run_test(
        self,
        test_id: str,
        mode: str | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> RunStart:
        """Start a run of one test.

        Sends an `Idempotency-Key` (a new uuid4 unless given) and reuses it on every retry, so
        a retry never starts a second run; pass your own to make a whole job safe to re-run.

        Args:
            test_id: The test (`t_...`).
            mode: `"auto"`, `"cold"` (explore afresh) or `"warm"` (replay the learned path);
                default: the service's.
            build_id: The build to run (`ab_...`); default: the newest ready build of the
                test's app.
            idempotency_key: At most 255 printable characters.

        Returns:
            `RunStart(run_id, mode, overage, link)`.

        Raises:
            ValidationError: A bad test id, mode, build id or key, before any request.
            NotFoundError: No such test or build for this key.
            PaymentRequiredError: The test needs a paid plan (tester endpoints).

        Examples:
            ```python
            start = await session.run_test("t_search", mode="cold")
            run = (await session.wait_for_runs([start.run_id]))[0]
            ```
        """
        test_id = checks.check_id("test", test_id)
        payload, key = checks.run_body(mode, None, build_id, idempotency_key)
        return await self._call(
            "run_test",
            read_run_start,
            json=payload,
            headers={"Idempotency-Key": key},
            ids={"test_id": test_id},
        )

    async def run_project(
        self,
        project_id: str,
        mode: str | None = None,
        build_ids: Sequence[str] | None = None,
        build_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ProjectRunStart:
        """Start a run of every test of a project.

        Args:
            project_id: The project (`p_...`).
            mode: `"auto"`, `"cold"` or `"warm"`; default: the service's.
            build_ids: Builds to run, at most one per app: each app test runs the build of its
                own app.
            build_id: One build to run (sent as `buildId`).
            idempotency_key: As for `run_test`; default a new uuid4, reused on retries.

        Returns:
            `ProjectRunStart(started, skipped)`: the runs started and the tests that were not,
            with the reason of each.

        Raises:
            ValidationError: A bad project id, mode, build ids or key, before any request.
            NotStartedError: No test started (402 `not_started`, 400 `empty`); `.skipped`
                says why for each test.
            NotFoundError: No such project or build for this key.

        Examples:
            ```python
            started = await session.run_project("p_demo", build_id="ab_demo_ios_100")
            runs = await session.wait_for_runs([s.run_id for s in started.started])
            ```
        """
        project_id = checks.check_id("project", project_id)
        payload, key = checks.run_body(mode, build_ids, build_id, idempotency_key)
        return await self._call(
            "run_project",
            read_project_run_start,
            json=payload,
            headers={"Idempotency-Key": key},
            ids={"project_id": project_id},
        )

    async def list_runs(
        self,
        ids: Iterable[str] | None = None,
        test_id: str | None = None,
        project_id: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        *,
        retries: int | None = None,
    ) -> list[Run]:
        """Runs, newest first; with `ids`, those runs (full view) in the order asked.

        More than 50 ids are fetched in concurrent batches of 50; ids the service does not
        know are left out.

        Args:
            ids: Run ids (`j_...`) to fetch, any number.
            test_id: Only the runs of this test.
            project_id: Only the runs of this project.
            status: Only runs in this status (`queued`, `running`, `passed`, `failed`, ...).
            limit: At most this many runs (1 to 200); with `ids`, the first in that order.
            retries: Overrides the session's `max_retries` for this call (a poller that handles
                429 itself passes 0).

        Returns:
            A list of `Run`.

        Raises:
            ValidationError: A bad filter (status, ids, limit), before any request.

        Examples:
            ```python
            failed = await session.list_runs(project_id="p_demo", status="failed", limit=10)
            ```
        """
        if retries is not None:
            checks.check_number("retries", retries, minimum=0, integer=True)
        params: dict[str, str] = {}
        if test_id is not None:
            params["testId"] = checks.check_id("test", test_id)
        if project_id is not None:
            params["projectId"] = checks.check_id("project", project_id)
        if status is not None:
            params["status"] = checks.check_choice("status", status, checks.RUN_STATUSES)
        if ids is None:
            if limit is not None:
                params["limit"] = str(checks.check_limit(limit))
            # Cut to what was asked, whatever the service answers.
            within = read_runs_within(limit if limit is not None else checks.LIST_LIMIT_MAX)
            # In a traced job, under its test's span.
            served = {"test_id": test_id} if test_id is not None else None
            return await self._call("list_runs", within, params=params, retries=retries, ids=served)
        if limit is not None:
            checks.check_limit(limit)
        wanted = checks.check_run_ids(ids)
        batches = list(wire.batched(wanted, checks.IDS_PER_REQUEST))
        if len(batches) == 1:
            found = await self._list_run_batch(batches[0], params, retries)
        else:

            async def fetch(batch: Sequence[str]) -> list[Run]:
                return await self._list_run_batch(batch, params, retries)

            answers = await each_batch(batches, fetch, LIST_RUNS_CONCURRENCY)
            found = [run for runs in answers for run in runs]
        by_id = {run.id: run for run in found}
        ordered = [by_id[run_id] for run_id in wanted if run_id in by_id]
        return ordered if limit is None else ordered[:limit]

    async def list_run_views(
        self, run_ids: Sequence[str], *, retries: int | None = None
    ) -> list[Mapping[str, Any]]:
        """One `GET /runs?ids=` of at most 50 runs, answered as the service's JSON objects.

        Not structured into `Run`s: for code that builds a `Run` only for the runs that
        changed, as the run watcher does.

        Args:
            run_ids: At most 50 run ids (`j_...`).
            retries: Overrides the session's `max_retries` for this request.

        Returns:
            The runs as JSON objects (dicts), as the service sent them.

        Raises:
            ValidationError: More than 50 ids, or one that is not a run id.
        """
        batch = checks.check_run_ids(run_ids)
        if len(batch) > checks.IDS_PER_REQUEST:
            raise ValidationError(
                f"list_run_views takes at most {checks.IDS_PER_REQUEST} run ids; use list_runs"
            )
        return await self._call(
            "list_runs", read_raw_runs, params={"ids": ",".join(batch)}, retries=retries
        )

    async def _list_run_batch(
        self, batch: Sequence[str], filters: Mapping[str, str], retries: int | None
    ) -> list[Run]:
        # No limit sent: the default 50 covers a batch.
        params = {**filters, "ids": ",".join(batch)}
        return await self._call("list_runs", read_runs_of(batch), params=params, retries=retries)

    async def flakiness(
        self,
        project_id: str,
        days: float = 14,
        *,
        tests: Iterable[str] | None = None,
        categories: "Categories | None" = None,
    ) -> "FlakinessReport":
        """Which of a project's tests flake across jobs, from the service's run history.

        A test is flaky on a build when it both passed and did not pass on that build; it
        is broken when its runs on each of its last 3 builds all did not pass (see
        `asyncclient.flakiness` for every definition). A run that failed for the
        infrastructure (`categories`) is left out, and counted apart. Requests are bounded:
        one listing of the project's newest runs (to find its tests, unless `tests` names
        them), then per test one listing and at most one `ids=` read per 50 runs whose
        listing left out their build (or, when a category reads a failure's text, what a run
        that did not pass failed of).

        Args:
            project_id: The project (`p_...`).
            days: The window: runs created in the last `days` days.
            tests: Only these tests (`t_...`); None: every test the project's newest 200 runs
                name.
            categories: The failure categories in force (`asyncclient.failures.
                load_categories`); None: the built-in ones (error and inconclusive are the
                infrastructure's).

        Returns:
            A `FlakinessReport`: one `TestFlakiness` per test, what hurts most first.

        Raises:
            ValidationError: A bad project or test id, or `days` not above 0.

        Examples:
            ```python
            report = await session.flakiness("p_demo", days=30)
            for test in report.tests:
                print(test.test_id, test.state, test.strip)
            ```
        """
        from asyncclient.flakiness import fetch_flakiness

        checks.check_id("project", project_id)
        named = None if tests is None else checks.check_id_list("test", tests, "tests")
        window = checks.check_days(days)
        return await fetch_flakiness(
            self, project_id, days=window, tests=named, categories=categories
        )

    async def bisect(
        self,
        project_id: str,
        test_id: str,
        *,
        good: str,
        bad: str,
        confidence: float = 0.95,
        flake_rate: float | None = None,
        budget_minutes: float | None = None,
        idempotency_key: str | None = None,
        on_step: "Callable[[BisectStep], None] | None" = None,
    ) -> "BisectResult":
        """The first build between `good` and `bad` a test fails on, found by halving the
        range, with a build called bad only after as many failures in a row as the test's
        flake rate needs for `confidence` (see `asyncclient.failures.bisect` for the rule).

        Args:
            project_id: The project whose builds are searched (`p_...`).
            test_id: The test that broke (`t_...`).
            good: A build it passes on (`ab_...`).
            bad: A build it fails on, of the same app, later in the builds' order.
            confidence: The least chance the answer is right, 0.5 to 0.999.
            flake_rate: How often it fails on good builds; default from its history.
            budget_minutes: Device minutes the search may spend.
            idempotency_key: The search's key (each run's is derived from it).
            on_step: Called with each `BisectStep` as it ends.

        The module's `bisect(session, ...)` also takes the runs' mode and the poll interval.

        Returns:
            A `BisectResult`: `first_bad`, `last_good`, `confidence`, the steps, runs and
            device minutes spent (`first_bad` None and `stopped` saying why when it stopped).

        Raises:
            ValidationError: Bad ids or figures, or good and bad not of one app in that
                order, before any run.

        Examples:
            ```python
            found = await session.bisect("p_demo", "t_checkout", good="ab_1", bad="ab_9")
            print(found.first_bad, f"{found.confidence:.1%}")
            ```
        """
        from asyncclient.failures.bisect import bisect

        return await bisect(
            self,
            project_id,
            test_id,
            good=good,
            bad=bad,
            confidence=confidence,
            flake_rate=flake_rate,
            budget_minutes=budget_minutes,
            idempotency_key=idempotency_key,
            on_step=on_step,
        )

    async def failure_clusters(
        self,
        project_id: str,
        days: float = 14,
        *,
        tests: Iterable[str] | None = None,
        categories: "Categories | None" = None,
    ) -> "FailureReport":
        """A project's failures over a window grouped by cause: twelve failures may be one
        outage.

        Reads the same bounded listings as `flakiness`, with the full views of the runs that
        did not pass whose listing leaves out what they failed of (50 a request, within the
        same bound), then groups the runs that did not pass (stopped ones are not counted) by
        signature (`asyncclient.failures.signature`: the status, headline, error and failed
        checks with ids, numbers, times, quoted values and URLs made general), each cause in
        its category.

        Args:
            project_id: The project (`p_...`).
            days: The window: runs created in the last `days` days.
            tests: Only these tests (`t_...`); None: every test the project's newest 200 runs
                name.
            categories: The failure categories in force; None: the built-in ones.

        Returns:
            A `FailureReport`: the causes, the one that hit most runs first (then most tests,
            then most builds), at most 50.

        Raises:
            ValidationError: A bad project or test id, or `days` not above 0.

        Examples:
            ```python
            report = await session.failure_clusters("p_demo", days=14)
            for cause in report.clusters:
                print(cause.count, cause.category.kind, cause.signature)
            ```
        """
        from asyncclient.failures import failure_report
        from asyncclient.flakiness import fetch_flakiness

        checks.check_id("project", project_id)
        named = None if tests is None else checks.check_id_list("test", tests, "tests")
        window = checks.check_days(days)
        now = datetime.now(UTC)
        read = await fetch_flakiness(
            self,
            project_id,
            days=window,
            tests=named,
            now=now,
            categories=categories,
            keep_runs=True,
        )
        return await failure_report(
            project_id,
            read.failed_runs,
            days=window,
            since=read.since,
            now=now,
            requests=read.requests,
            categories=categories,
        )

    async def get_run(self, run_id: str) -> Run:
        """One run in the full view.

        Once final it has its verdict, headline, requirements with reasons, captures, file
        links and result page.

        Args:
            run_id: The run (`j_...`).

        Returns:
            The `Run`.

        Raises:
            ValidationError: `run_id` is not a run id, before any request.
            NotFoundError: The service knows no such run.
        """
        run_id = checks.check_id("run", run_id)
        return await self._call("get_run", read_run, ids={"run_id": run_id})

    async def stop_run(self, run_id: str) -> str:
        """Stop a queued or running run.

        If an earlier attempt stopped it and only the answer was lost, the run's current
        status is returned.

        Args:
            run_id: The run (`j_...`).

        Returns:
            The run's new status (`"cancelled"`).

        Raises:
            ValidationError: `run_id` is not a run id, before any request.
            ConflictError: The run had already ended.
            NotFoundError: No such run.
        """
        run_id = checks.check_id("run", run_id)
        try:
            return await self._call("stop_run", read_status, ids={"run_id": run_id})
        except ConflictError as exc:
            # On a retry, a refusal means an earlier attempt stopped it.
            if exc.attempts <= 1:
                raise
        return (await self.get_run(run_id)).status

    @_telemetry.traced("download_run_file", "run_id", "file")
    async def download_run_file(self, run_id: str, file: str, dest: str | os.PathLike[str]) -> Path:
        """Download a run's file (its video, a screenshot) to disk, resuming a partial one.

        Streams to `<dest>.part`, resumes it with `Range`/`If-Range` (starting over if the
        file changed since), and renames it to `dest` once whole. Timed by idle time, not by
        a total.

        Args:
            run_id: The run (`j_...`).
            file: A path such as `screenshots/01.png` (taken as it is), or the file's link
                from the run (a full URL, percent-decoded as URLs are).
            dest: A file path, or an existing folder to keep the file's own name.

        Returns:
            The path written.

        Raises:
            ValidationError: A bad run id or file path, or no such destination folder.
            LocalFileError: The file cannot be written (disk full, permissions); the `.part`
                is kept for a resume.
            NotFoundError: No such run or file.

        Examples:
            ```python
            path = await session.download_run_file(run.id, "video.mp4", "evidence/")
            ```
        """
        return await download_to(self._t, OPERATIONS["download_run_file"], run_id, file, dest)

    # --- tester endpoints -----------------------------------------------------------------------

    async def list_endpoints(self, project_id: str) -> list[Endpoint]:
        """The project's tester endpoints (never their headers, which are write-only).

        Args:
            project_id: The project (`p_...`).

        Returns:
            A list of `Endpoint`.

        Raises:
            ValidationError: `project_id` is not a project id, before any request.
            NotFoundError: No such project for this key.
        """
        project_id = checks.check_id("project", project_id)
        return await self._call("list_endpoints", read_endpoints, ids={"project_id": project_id})

    async def add_endpoint(
        self,
        project_id: str,
        name: str,
        description: str,
        url: str,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        body_template: str | None = None,
    ) -> str:
        """Register a tester endpoint: an HTTP call the tests may make during a run.

        Header values are sent once and never logged. Not idempotent: retried only when the
        request could not have reached the service (it could not connect).

        Args:
            project_id: The project (`p_...`).
            name: At most 40 characters.
            description: What it does, at most 600 characters.
            url: An `https://` URL.
            method: `GET`, `POST`, `PUT`, `PATCH` or `DELETE`.
            headers: At most 20 headers (secrets welcome: they are write-only).
            body_template: The request body, with the service's placeholders.

        Returns:
            The new endpoint's id (`ep_...`).

        Raises:
            ValidationError: The spec's limits (name, description, method, url, headers),
                before any request.
            PermissionDeniedError: The key cannot also create and edit tests.
            PaymentRequiredError: Tester endpoints need a paid plan.
        """
        project_id = checks.check_id("project", project_id)
        payload = checks.check_endpoint(name, description, url, method, headers, body_template)
        return await self._call(
            "add_endpoint", read_id, json=payload, ids={"project_id": project_id}
        )

    async def delete_endpoint(self, endpoint_id: str) -> None:
        """Delete a tester endpoint. A retry that finds it gone counts as done.

        Args:
            endpoint_id: The endpoint (`ep_...`).

        Raises:
            ValidationError: `endpoint_id` is not an endpoint id, before any request.
            PermissionDeniedError: The key cannot also create and edit tests.
            NotFoundError: No such endpoint.
        """
        endpoint_id = checks.check_id("endpoint", endpoint_id)
        await self._delete("delete_endpoint", {"endpoint_id": endpoint_id})

    # --- uploads and watching: upload/ and watch.py ---

    @_telemetry.traced("upload_build", "project_id")
    async def upload_build(
        self,
        project_id: str,
        path: str | os.PathLike[str],
        *,
        label: str | None = None,
        concurrency: "int | Adaptive | None" = None,
        progress: Callable[[int, int], object] | None = None,
        skip_existing: bool = False,
        journal_dir: str | os.PathLike[str] | None = None,
    ) -> Build:
        """Upload one app build in parallel parts and return it checked and verified.

        Checks the file before any request, streams its parts from disk, retries each part on
        its own, resumes from a journal after an interruption, and compares the sha256 the
        service reports with the file's.

        Args:
            project_id: The project (`p_...`).
            path: An `.apk`, an `.app.zip`, or an iOS Simulator `.app` folder (zipped on the
                fly).
            label: A label of your own, such as the commit.
            concurrency: Parts in flight at once: found while uploading by default (from 4,
                up while throughput rises with it, down on 429, 503 or a timeout: see
                `Adaptive`); a number fixes it.
            progress: Called as `progress(done_bytes, total_bytes)` as the service stores each
                part (the bytes of the parts stored, never wound back).
            skip_existing: Return a ready build of the project with the same file name, size
                and sha256 instead of uploading again.
            journal_dir: Where the resume journal lives. Default: `default_journal_dir()`.

        Returns:
            The `Build`, ready, its sha256 verified (`sha256` None, with a warning logged, if
            the service never reports one).

        Raises:
            ValidationError: The file is missing, empty, not an app, or too large, before any
                upload request.
            BuildRejectedError: The devices cannot run the build (`.problems` say why).
            ChecksumMismatchError: The service's sha256 differs from the file's.
            LocalFileError: The journal cannot be written (disk full, permissions).

        Examples:
            ```python
            build = await session.upload_build("p_demo", "shop.apk", label="a1b2c3d")
            print(build.id, build.sha256)
            ```
        """
        return await upload_one(
            self,
            project_id,
            path,
            label=label,
            concurrency=concurrency,
            progress=progress,
            skip_existing=skip_existing,
            journal_dir=journal_dir,
        )

    @_telemetry.traced("upload_builds", "project_id")
    async def upload_builds(
        self,
        items: "Iterable[ItemLike]",
        *,
        project_id: str | None = None,
        max_parts_in_flight: "int | Adaptive | None" = None,
        concurrency: int | None = None,
        progress: Callable[[Path, int, int], object] | None = None,
        skip_existing: bool = False,
        journal_dir: str | os.PathLike[str] | None = None,
        on_result: "Callable[[UploadResult], object] | None" = None,
    ) -> "list[UploadResult]":
        """Upload many builds at once, sharing one budget of parts in flight.

        One failing build does not stop the others: each result holds its build or its error.

        Args:
            items: Paths, `(path, label)` pairs or `UploadItem`s; each goes to its
                `UploadItem.project_id`, else to `project_id`.
            project_id: The project of the items that name none (`p_...`).
            max_parts_in_flight: Parts in flight across every build: found while uploading by
                default (an `Adaptive`, 4 to 64); a number, or `concurrency`, fixes it (16
                when only `concurrency` is given).
            concurrency: Parts in flight per build (default: as many as the budget allows).
            progress: Called as `progress(path, done_bytes, total_bytes)` for every build
                without a callback of its own.
            skip_existing: As for `upload_build`.
            journal_dir: As for `upload_build`.
            on_result: Called with each `UploadResult` as soon as that build is done.

        Returns:
            One `UploadResult` per item, in input order.

        Raises:
            ValidationError: An item that is not a path, a pair or an `UploadItem`, or an item
                with no project. Each build's own failure (ApiError, TransportError,
                BuildRejectedError, ...) is in its `UploadResult.error`, not raised.

        Examples:
            ```python
            results = await session.upload_builds(["android/app.apk", "ios/Shop.app"],
                                                  project_id="p_demo")
            ids = [r.build.id for r in results if r.ok]
            ```
        """
        return await upload_many(
            self,
            items,
            project_id=project_id,
            max_parts_in_flight=max_parts_in_flight,
            concurrency=concurrency,
            progress=progress,
            skip_existing=skip_existing,
            journal_dir=journal_dir,
            on_result=on_result,
        )

    def watch_runs(
        self,
        run_ids: Iterable[str],
        *,
        interval: float = 3.0,
        max_interval: float = 30.0,
        timeout: float | None = None,
        stop_on_timeout: bool = False,
        **options: Unpack[WatchOptions],
    ) -> RunWatcher:
        """Follow many runs: a `Run` each time a run's status changes.

        Each run's last one is its final view. The watcher asks only for the runs not final
        yet, 50 ids per request; see `RunWatcher` for the pace and every option.

        Args:
            run_ids: The runs to follow (`j_...`).
            interval: Seconds between sweeps at first (jittered by 20%).
            max_interval: The longest pause, reached while nothing changes.
            timeout: Seconds before giving up with `WatchTimeoutError`; default: no limit.
            stop_on_timeout: Stop the runs still going when `timeout` passes.
            **options: The less common settings: see `WatchOptions`.

        Returns:
            A `RunWatcher`: use it as `async with ... as watcher: async for run in watcher`.

        Raises:
            ValidationError: A bad run id or option (raised when the watcher is made).
            WatchTimeoutError: While iterating, when `timeout` passes (`.runs`: latest views).
            ApiError: While iterating, a refusal (401, 403, ...), or 5xx after
                `max_failed_sweeps` failed sweeps in a row.
            TransportError: While iterating, after `max_failed_sweeps` failed sweeps in a row.

        Examples:
            ```python
            async with session.watch_runs(ids, timeout=1800) as watcher:
                async for run in watcher:
                    print(run.id, run.status)
            ```
        """
        return RunWatcher(
            self,
            run_ids,
            interval=interval,
            max_interval=max_interval,
            timeout=timeout,
            stop_on_timeout=stop_on_timeout,
            **options,
        )

    @_telemetry.traced("wait_for_runs")
    async def wait_for_runs(
        self,
        run_ids: Iterable[str],
        *,
        interval: float = 3.0,
        max_interval: float = 30.0,
        # The deadline spans sweeps and stopping: not asyncio.timeout.
        timeout: float | None = None,  # noqa: ASYNC109
        stop_on_timeout: bool = False,
        **options: Unpack[WatchOptions],
    ) -> list[Run]:
        """Wait until every run is final and return their final views.

        Args:
            run_ids: The runs to wait for (`j_...`).
            interval: Seconds between sweeps at first (jittered by 20%).
            max_interval: The longest pause, reached while nothing changes.
            timeout: Seconds before giving up; default: no limit.
            stop_on_timeout: Stop the runs still going when `timeout` passes.
            **options: The less common settings: see `WatchOptions`.

        Returns:
            The final `Run`s, in the order asked.

        Raises:
            ValidationError: A bad run id or option, before any request.
            WatchTimeoutError: `timeout` passed first (`.runs`: the latest views).
            UnknownRunsError: The service does not know some ids (`.run_ids`; `.runs` holds
                the final views of the others).
            ApiError: A refusal (401, 403, ...), or 5xx after `max_failed_sweeps` failed
                sweeps in a row.

        Examples:
            ```python
            runs = await session.wait_for_runs(ids, timeout=1800)
            failed = [run for run in runs if not run.passed]
            ```
        """
        asked = checks.check_id_list("run", run_ids, "run_ids", unique=False)
        async with self.watch_runs(
            asked,
            interval=interval,
            max_interval=max_interval,
            timeout=timeout,
            stop_on_timeout=stop_on_timeout,
            **options,
        ) as watcher:
            await watcher.wait()
        if watcher.unknown:
            known = tuple(run for run in watcher.runs.values() if run.id not in watcher.unknown)
            raise UnknownRunsError(watcher.unknown, known)
        views = watcher.runs
        return [views[run_id] for run_id in asked]


def _ignore(_payload: Any) -> None:
    return None
