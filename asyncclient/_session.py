"""AsyncSession: one method per operation of the service: check the input, call, structure.
The request core (transport, retries) is asyncclient._transport; downloads asyncclient._download.
Over 400 lines for one concern: fifteen operations and the upload and watch entry points, each
with the docstring users read, on the one public class.
"""

import asyncio
import logging
import os
from collections.abc import (
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar, Unpack

import aiofiles
import aiofiles.os
import aiohttp
import aiohttp.payload

from asyncclient import _protocol as proto
from asyncclient import _tracing
from asyncclient._bodies import PartBody
from asyncclient._converter import converter
from asyncclient._download import download_run_file
from asyncclient._network import Network
from asyncclient._operations import OPERATIONS
from asyncclient._responses import (
    read_build,
    read_build_list,
    read_endpoints,
    read_id,
    read_project_run_start,
    read_raw_runs,
    read_run,
    read_run_start,
    read_runs,
    read_status,
    read_upload_start,
    read_uploaded_part,
)
from asyncclient._retry import RetryPolicy, Sleep
from asyncclient._transport import Transport
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
from asyncclient.upload import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_PARTS_IN_FLIGHT,
    ItemLike,
    UploadResult,
)
from asyncclient.upload._batch import upload_many, upload_one
from asyncclient.watch import DEFAULT_INTERVAL, DEFAULT_MAX_INTERVAL, RunWatcher, WatchOptions

if TYPE_CHECKING:
    from asyncclient.config import Config

__all__ = ["AsyncSession", "PartBody"]

logger = logging.getLogger("asyncclient")

T = TypeVar("T")

#: How many `ids` batches of list_runs are fetched at once.
LIST_RUNS_CONCURRENCY: Final = 8


def _fitting_start(start: UploadStart, size: int) -> UploadStart:
    """The start_upload answer, if its part size and count fit the file (ValueError, read as an
    invalid answer, otherwise)."""
    if start.part_bytes <= 0 or start.parts != -(-size // start.part_bytes):
        raise ValueError(
            f"partBytes {start.part_bytes} and parts {start.parts} do not fit a file of "
            f"{size} bytes"
        )
    return start


def _echoing_part(part: UploadedPart, number: int) -> UploadedPart:
    """The upload_part answer, if it names the part sent and gives an etag."""
    if part.part_number != number or not part.etag:
        raise ValueError(f"the answer named part {part.part_number} with etag {part.etag!r}")
    return part


def _run_body(
    mode: object, build_ids: object, build_id: object, idempotency_key: object
) -> tuple[dict[str, Any], str]:
    """The checked JSON body and Idempotency-Key of run_test (build_ids None) or run_project."""
    payload: dict[str, Any] = {}
    if mode is not None:
        payload["mode"] = proto.check_choice("mode", mode, proto.MODES)
    if build_ids is not None:
        if isinstance(build_ids, str | bytes) or not isinstance(build_ids, Iterable):
            raise ValidationError("build_ids must be a list of build ids (ab_...)")
        checked = [proto.check_id("build", value, "build_ids") for value in build_ids]
        if len(checked) > proto.IDS_PER_REQUEST:
            raise ValidationError(
                f"build_ids may name at most {proto.IDS_PER_REQUEST} builds (one per app); "
                f"got {len(checked)}"
            )
        if checked:
            payload["buildIds"] = checked
    if build_id is not None:
        payload["buildId"] = proto.check_id("build", build_id)
    return payload, proto.check_idempotency_key(idempotency_key)


class AsyncSession:
    """A client of the Test-Run Service: one method per operation.

    api_key / base_url fall back to ASYNCCLIENT_API_KEY / ASYNCCLIENT_BASE_URL. Options:
    timeout (seconds), connect_timeout, max_retries (after the first attempt), backoff_base /
    backoff_max (exponential backoff with full jitter), max_retry_after (cap on a
    service-requested wait, also for the run watcher), connection_limit (open connections),
    client_session (an aiohttp.ClientSession to use instead of our own; never closed by us, and
    its raise_for_status and timeout are overridden per request), user_agent (text appended to
    the User-Agent), sleep (what waits between retries: asyncio.sleep by default; tests pass a
    recorder, or use asyncclient.testing.recorded_retry_waits()).

    Network: proxy (an http(s) proxy URL, "direct" to ignore the environment; default: the
    HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY variables, as curl and pip read them, or
    ASYNCCLIENT_PROXY), ca_file (a PEM file of CAs to trust besides the system's; default
    ASYNCCLIENT_CA_FILE; SSL_CERT_FILE and SSL_CERT_DIR work as in OpenSSL), client_cert and
    client_key (a PEM client certificate and its key, for services that ask for one; default
    ASYNCCLIENT_CLIENT_CERT / ASYNCCLIENT_CLIENT_KEY). Certificates are always verified.

    retry_deadline: seconds within which a call rides out an outage (no connection, 502, 503,
    504), retrying with waits of at most 5 s (default 30, or ASYNCCLIENT_RETRY_DEADLINE; 0: an
    outage counts against max_retries like any failure); a host name that does not resolve
    fails at once. pool_timeout: how long a call may wait for a free connection of the pool
    (default no limit): that wait never counts against `timeout` nor causes a retry.

    max_response_bytes: the largest answer read into memory (default 32 MiB, or
    ASYNCCLIENT_MAX_RESPONSE_BYTES), checked on its Content-Length and on the bytes as they
    arrive, after decompression; past it, ResponseTooLargeError, not retried. Error answers are
    read only as far as their message (64 KiB). Downloads stream to disk and have no limit.

    Timeouts: an ordinary (JSON) request must be answered whole within `timeout` seconds. The
    transfers, upload_part and download_run_file, have no total limit, since a large part or
    file on a slow link may take any time: they fail only when no data moves for `timeout`
    seconds (the body not being taken, or no bytes of the answer arriving), or when connecting
    takes longer than `connect_timeout`.

    Use it as `async with AsyncSession() as s:` or call `await s.close()` when done.
    """

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
        _flags: Mapping[str, str] | None = None,
    ) -> None:
        key = proto.resolve_api_key(api_key, os.environ)
        self._base_url = proto.resolve_base_url(base_url, os.environ)
        # _flags: how the CLI names these options in messages (--proxy, --ca-file, ...).
        network = Network.resolve(
            self._base_url,
            os.environ,
            proxy=proxy,
            ca_file=ca_file,
            client_cert=client_cert,
            client_key=client_key,
            flags=_flags,
        )
        proto.check_number("timeout", timeout, minimum=0.001)
        if connect_timeout is not None:
            proto.check_number("connect_timeout", connect_timeout, minimum=0.001)
        proto.check_number("max_retries", max_retries, minimum=0, integer=True)
        proto.check_number("backoff_base", backoff_base, minimum=0)
        proto.check_number("backoff_max", backoff_max, minimum=0)
        proto.check_number("max_retry_after", max_retry_after, minimum=0)
        proto.check_number("connection_limit", connection_limit, minimum=1, integer=True)
        if pool_timeout is not None:
            proto.check_number("pool_timeout", pool_timeout, minimum=0.001)
        deadline = proto.resolve_retry_deadline(
            retry_deadline, os.environ, flag=(_flags or {}).get("retry_deadline", "retry_deadline=")
        )
        response_limit = proto.resolve_max_response_bytes(
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
            user_agent=proto.user_agent(__version__, aiohttp.__version__, user_agent),
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_retries=max_retries,
            retry=RetryPolicy(backoff_base, backoff_max, max_retry_after, sleep, deadline=deadline),
            connection_limit=connection_limit,
            client_session=client_session,
            network=network,
            max_response_bytes=response_limit,
            pool_timeout=pool_timeout,
        )

    @classmethod
    def from_config(
        cls, config: "Config | None" = None, *, profile: str | None = None, **overrides: Any
    ) -> Self:
        """A session from the configuration files and the environment (asyncclient.config):
        `config` as load_config() returned it (default: load_config(profile)); `overrides`
        win over both. AsyncSession() itself reads only its arguments and the environment.

        Raises:
            ValidationError: a mistake in a configuration file (naming the file and line).
        """
        from asyncclient.config import load_config

        if config is None:
            config = load_config(profile)
        return cls(**{**config.session_options(), **overrides})

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The service's address the session was made with (without the /api/v1 prefix)."""
        return self._base_url

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

    async def _call(
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
        transfer: bool = False,
        ids: Mapping[str, str] | None = None,
    ) -> T:
        """One operation of the table (asyncclient._operations): its method and path, with the
        path's ids filled in, retried as the table says it may be."""
        operation = OPERATIONS[name]
        return await self._t.request(
            operation.method,
            operation.path_for(**(ids or {})),
            params=params,
            json=json,
            body=body,
            headers=headers,
            idempotent=operation.retry_safe,
            op=name,
            decode=decode,
            retries=retries,
            transfer=transfer,
            ids=ids,
        )

    # --- builds ---------------------------------------------------------------------------------

    async def list_builds(self, project_id: str) -> BuildList:
        """The project's builds (newest first), the largest build size and the part size.

        Raises:
            ValidationError: `project_id` is not a project id (p_...).
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        project_id = proto.check_id("project", project_id)
        return await self._call("list_builds", read_build_list, ids={"project_id": project_id})

    async def get_build(self, build_id: str) -> Build:
        """One build in the single view (with `sha256` and `project_id`).

        Raises:
            ValidationError: `build_id` is not a build id (ab_...).
            NotFoundError: the service knows no such build (or not for this key).
        """
        build_id = proto.check_id("build", build_id)
        return await self._call("get_build", read_build, ids={"build_id": build_id})

    async def start_upload(
        self, project_id: str, file_name: str, size: int, label: str | None = None
    ) -> UploadStart:
        """Create a build in `uploading` state; answers its id, part size and part count.

        Retried like an idempotent call: a retry after a lost answer can at worst leave an
        empty `uploading` build behind, which never runs.

        Raises:
            ValidationError: a bad file name, size or label, found before any request.
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        project_id = proto.check_id("project", project_id)
        payload: dict[str, Any] = {
            "fileName": proto.check_file_name(file_name),
            "size": proto.check_size(size),
        }
        if proto.check_label(label) is not None:
            payload["label"] = label
        return await self._call(
            "start_upload",
            lambda answer: _fitting_start(read_upload_start(answer), payload["size"]),
            json=payload,
            ids={"project_id": project_id},
        )

    async def upload_part(
        self, build_id: str, part_number: int, data: bytes | bytearray | memoryview | PartBody
    ) -> UploadedPart:
        """Send one part (bytes, or a PartBody streamed from a file); safe to retry.

        Timed by idle time, not by a total: see the AsyncSession docstring.

        Raises:
            ValidationError: a bad build id or part number.
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        build_id = proto.check_id("build", build_id)
        part_number = proto.check_part_number(part_number)
        body: bytes | PartBody
        if isinstance(data, PartBody):
            try:
                if data.file is not None:  # open already: no thread needed to ask its size
                    file_size = os.fstat(data.file.fileno()).st_size
                else:
                    file_size = (await aiofiles.os.stat(data.path)).st_size
            except OSError as exc:
                raise ValidationError(f"cannot read {data.path}: {exc.strerror}") from exc
            if data.offset + data.length > file_size:
                raise ValidationError(
                    f"the part {data.offset}+{data.length} runs past the end of {data.path} "
                    f"({file_size} bytes)"
                )
            body = data
        elif isinstance(data, bytes | bytearray | memoryview):
            body = bytes(data)
            if not body:
                raise ValidationError("a part must hold at least one byte")
        else:
            raise ValidationError("data must be bytes or a PartBody describing a file slice")
        headers = (
            None if isinstance(body, PartBody) else {"Content-Type": "application/octet-stream"}
        )
        return await self._call(
            "upload_part",
            lambda answer: _echoing_part(read_uploaded_part(answer), part_number),
            body=body,
            headers=headers,
            transfer=True,
            ids={"build_id": build_id, "part_number": str(part_number)},
        )

    async def complete_upload(self, build_id: str, parts: Sequence[UploadedPart]) -> Build:
        """Finish an upload; answers the checked build, or raises BuildRejectedError (422).

        Raises:
            ValidationError: a bad build id or an empty part list.
            BuildRejectedError: the devices cannot run the build (`.problems`).
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        build_id = proto.check_id("build", build_id)
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
        """Delete a build (needs an edit key). A retry that finds it gone counts as done.

        Raises:
            ValidationError: `build_id` is not a build id (ab_...).
            PermissionDeniedError: the key cannot also create and edit tests.
            ConflictError: a test pins the build.
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        build_id = proto.check_id("build", build_id)
        await self._delete("delete_build", {"build_id": build_id})

    async def _delete(self, name: str, ids: Mapping[str, str]) -> None:
        try:
            await self._call(name, _ignore, ids=ids)
        except NotFoundError as exc:
            # An earlier attempt may have deleted it before its answer was lost.
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
        """Start a run of one test. Sends an Idempotency-Key (a new uuid4 unless given) and
        reuses it on every retry, so retries never start a second run.

        Raises:
            ValidationError: a bad test id, mode, build id or idempotency key.
            PaymentRequiredError: the test needs a paid plan (tester endpoints).
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        test_id = proto.check_id("test", test_id)
        payload, key = _run_body(mode, None, build_id, idempotency_key)
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
        """Start a run of every test of a project; NotStartedError when none could start.

        Raises:
            ValidationError: a bad project id, mode, build ids or idempotency key.
            NotStartedError: no test started (402 not_started, 400 empty; see `.skipped`).
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        project_id = proto.check_id("project", project_id)
        payload, key = _run_body(mode, build_ids, build_id, idempotency_key)
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

        More than 50 ids are fetched in batches of 50, LIST_RUNS_CONCURRENCY at once; ids the
        service does not know are left out. With ids, `limit` keeps the first runs in that order.
        `retries` overrides the session's max_retries for this call (a poller that handles 429
        itself passes 0).

        Raises:
            ValidationError: a bad filter (status, ids, limit) found before any request.
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        if retries is not None:
            proto.check_number("retries", retries, minimum=0, integer=True)
        params: dict[str, str] = {}
        if test_id is not None:
            params["testId"] = proto.check_id("test", test_id)
        if project_id is not None:
            params["projectId"] = proto.check_id("project", project_id)
        if status is not None:
            params["status"] = proto.check_choice("status", status, proto.RUN_STATUSES)
        if ids is None:
            if limit is not None:
                params["limit"] = str(proto.check_limit(limit))
            return await self._call("list_runs", read_runs, params=params, retries=retries)
        if limit is not None:
            proto.check_limit(limit)
        wanted = proto.check_run_ids(ids)
        batches = list(proto.batched(wanted, proto.IDS_PER_REQUEST))
        if len(batches) == 1:
            found = await self._list_run_batch(batches[0], params, retries)
        else:
            gate = asyncio.Semaphore(LIST_RUNS_CONCURRENCY)

            async def fetch(batch: Sequence[str]) -> list[Run]:
                async with gate:
                    return await self._list_run_batch(batch, params, retries)

            found = [run for runs in await _gather(fetch(b) for b in batches) for run in runs]
        by_id = {run.id: run for run in found}
        ordered = [by_id[run_id] for run_id in wanted if run_id in by_id]
        return ordered if limit is None else ordered[:limit]

    async def list_run_views(
        self, run_ids: Sequence[str], *, retries: int | None = None
    ) -> list[Mapping[str, Any]]:
        """One `GET /runs?ids=` of at most 50 run ids, answered as the service's JSON objects,
        not structured: for code that builds a Run only for the runs that changed, as the run
        watcher does. `retries` overrides the session's max_retries for this request.

        Raises:
            ValidationError: more than 50 ids, or one that is not a run id.
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        batch = proto.check_run_ids(run_ids)
        if len(batch) > proto.IDS_PER_REQUEST:
            raise ValidationError(
                f"list_run_views takes at most {proto.IDS_PER_REQUEST} run ids; use list_runs"
            )
        return await self._run_views(batch, retries=retries)

    async def _run_views(
        self, batch: Sequence[str], *, retries: int | None
    ) -> list[Mapping[str, Any]]:
        """list_run_views of ids already checked (the run watcher checks them once, not per
        sweep)."""
        return await self._call(
            "list_runs", read_raw_runs, params={"ids": ",".join(batch)}, retries=retries
        )

    async def _list_run_batch(
        self, batch: Sequence[str], filters: Mapping[str, str], retries: int | None
    ) -> list[Run]:
        # No limit goes to the service: its default (50) covers a whole batch.
        params = {**filters, "ids": ",".join(batch)}
        return await self._call("list_runs", read_runs, params=params, retries=retries)

    async def get_run(self, run_id: str) -> Run:
        """One run in the full view: once final, its verdict, headline, requirements with reasons,
        captures, file links and result page.

        Raises:
            ValidationError: `run_id` is not a run id (j_...).
            NotFoundError: the service knows no such run.
        """
        run_id = proto.check_id("run", run_id)
        return await self._call("get_run", read_run, ids={"run_id": run_id})

    async def stop_run(self, run_id: str) -> str:
        """Stop a queued or running run; answers its status (cancelled). If an earlier attempt
        stopped it and only the answer was lost, the run's current status is returned.

        Raises:
            ValidationError: `run_id` is not a run id (j_...).
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        run_id = proto.check_id("run", run_id)
        try:
            return await self._call("stop_run", read_status, ids={"run_id": run_id})
        except ConflictError as exc:
            # Whatever its code: on a retry, a refusal means an earlier attempt stopped it.
            if exc.attempts <= 1:
                raise
        return (await self.get_run(run_id)).status

    @_tracing.traced("download_run_file", "run_id", "file")
    async def download_run_file(self, run_id: str, file: str, dest: str | os.PathLike[str]) -> Path:
        """Download a run file (a path such as screenshots/01.png, or the link from the run) to
        dest (a file path, or an existing directory to keep the file's own name).

        A link (a full http(s) URL) is percent-decoded as URLs are; a path is taken as the
        file's name as it is (`step%201.png` names a file with a percent sign). Streams to
        `<dest>.part`, resuming a partial one with Range/If-Range (starting over if the file
        changed since), and renames it to dest once whole. Asks for the bytes as they are stored
        (`Accept-Encoding: identity`). Timed by idle time, not by a total: see the AsyncSession
        docstring. Returns the final path.

        Raises:
            ValidationError: a bad run id or file path, or no such destination folder.
            LocalFileError: the file cannot be written (disk full, ...); the part is kept.
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        return await download_run_file(self._t, run_id, file, dest)

    # --- tester endpoints -----------------------------------------------------------------------

    async def list_endpoints(self, project_id: str) -> list[Endpoint]:
        """The project's tester endpoints (never their headers, which are write-only).

        Raises:
            ValidationError: `project_id` is not a project id (p_...).
        """
        project_id = proto.check_id("project", project_id)
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
        """Register a tester endpoint (needs an edit key); answers its id. Header values are
        sent once and never logged. Not idempotent: retried only when the request could not
        have reached the service (it could not connect).

        Raises:
            ValidationError: the spec's limits (name, description, method, url, headers).
            PermissionDeniedError: the key cannot also create and edit tests.
            PaymentRequiredError: tester endpoints need a paid plan.
            ApiError: the service refused (a subclass per status, such as NotFoundError).
            TransportError: the service could not be reached, after the retries.
        """
        project_id = proto.check_id("project", project_id)
        payload = proto.check_endpoint(name, description, url, method, headers, body_template)
        return await self._call(
            "add_endpoint", read_id, json=payload, ids={"project_id": project_id}
        )

    async def delete_endpoint(self, endpoint_id: str) -> None:
        """Delete a tester endpoint; needs a key that can also create and edit tests.

        Raises:
            ValidationError: `endpoint_id` is not an endpoint id (ep_...).
            PermissionDeniedError: the key cannot edit tests.
            NotFoundError: no such endpoint (a retried delete that finds it gone succeeds).
        """
        endpoint_id = proto.check_id("endpoint", endpoint_id)
        await self._delete("delete_endpoint", {"endpoint_id": endpoint_id})

    # --- uploads and watching: the work lives in upload.py and watch.py ----------------------

    @_tracing.traced("upload_build", "project_id")
    async def upload_build(
        self,
        project_id: str,
        path: str | os.PathLike[str],
        *,
        label: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        progress: Callable[[int, int], object] | None = None,
        skip_existing: bool = False,
        journal_dir: str | os.PathLike[str] | None = None,
    ) -> Build:
        """Upload one app build and return it checked and verified.

        path: an .apk, an .app.zip, or an iOS Simulator .app folder (zipped on the fly). Parts go
        up `concurrency` at a time; `progress(done_bytes, total_bytes)` follows them (see Progress).
        skip_existing: return a ready build of the project with the same file name, size and sha256
        instead of uploading. journal_dir: where the resume journal lives (default_journal_dir()).

        Raises ValidationError (found before any upload request), BuildRejectedError (the devices
        cannot run it; .problems), ChecksumMismatchError, or the session's ApiError/TransportError.
        A build whose sha256 the service never reports is returned unverified (Build.sha256 None),
        with a warning logged.
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

    @_tracing.traced("upload_builds", "project_id")
    async def upload_builds(
        self,
        items: "Iterable[ItemLike]",
        *,
        project_id: str | None = None,
        max_parts_in_flight: int = DEFAULT_MAX_PARTS_IN_FLIGHT,
        concurrency: int | None = None,
        progress: Callable[[Path, int, int], object] | None = None,
        skip_existing: bool = False,
        journal_dir: str | os.PathLike[str] | None = None,
        on_result: "Callable[[UploadResult], object] | None" = None,
    ) -> "list[UploadResult]":
        """Upload many builds at once, sharing one budget of `max_parts_in_flight` parts.

        items: paths, (path, label) pairs or UploadItems; each goes to its UploadItem.project_id,
        else to `project_id`. One result per item, in input order: the build or the error; one
        failing build does not stop the others. See asyncclient.upload._batch.upload_many.

        Raises:
            ValidationError: an item that is not a path, a (path, label) pair or an
                UploadItem, or no project for one. Each build's own failure is in its
                UploadResult.error, not raised.
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
        interval: float = DEFAULT_INTERVAL,
        max_interval: float = DEFAULT_MAX_INTERVAL,
        timeout: float | None = None,
        stop_on_timeout: bool = False,
        **options: Unpack[WatchOptions],
    ) -> RunWatcher:
        """`async for run in session.watch_runs(ids)`: a Run each time a run's status changes;
        each run's last one is its final view. See RunWatcher for every option.

        Raises:
            ValidationError: a bad run id or option (raised when the watcher is made).
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

    @_tracing.traced("wait_for_runs")
    async def wait_for_runs(
        self,
        run_ids: Iterable[str],
        *,
        interval: float = DEFAULT_INTERVAL,
        max_interval: float = DEFAULT_MAX_INTERVAL,
        # The deadline spans many sweeps and ends with stopping runs: asyncio.timeout cannot.
        timeout: float | None = None,  # noqa: ASYNC109
        stop_on_timeout: bool = False,
        **options: Unpack[WatchOptions],
    ) -> list[Run]:
        """Wait until every run is final; returns their final views in the order asked.

        Raises WatchTimeoutError when `timeout` passes first, and UnknownRunsError (naming the
        ids, carrying the final runs of the others) when the service did not know some ids.
        """
        if isinstance(run_ids, str | bytes):
            raise ValidationError("run_ids must be a list of run ids (j_...), not one string")
        asked = list(run_ids)
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


async def _gather(coros: Iterable[Awaitable[T]]) -> list[T]:
    """gather that cancels (and awaits) the others when one fails, so none is left running."""
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
