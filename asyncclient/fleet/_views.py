"""One sweep for the fleet: one job (the poller, a lease in Redis) polls the runs the jobs
watch and publishes each view for a few seconds, a verdict signed with a secret of the API
key; each test's history is shared signed the same way. The others read them, ask the service
for what is missing or unsigned, and take over when the poller is gone."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import orjson

from asyncclient._core._checks import IDS_PER_REQUEST, is_id
from asyncclient._core._converter import converter, structure_list
from asyncclient.fleet._common import mark_stopped
from asyncclient.models import Run

if TYPE_CHECKING:
    from asyncclient.fleet import Fleet

__all__ = ["VIEW_SECONDS", "SharedViews"]

#: How old a published view may be for any watcher (one that sweeps less often takes older
#: views: as old as its own time between sweeps, up to _KEPT_SECONDS).
VIEW_SECONDS: Final = 5.0
_KEPT_SECONDS: Final = 30.0
#: How long a job sweeps alone after the ledger failed it.
_DOWN_SECONDS: Final = 30.0
#: The statuses a shared view may have: a run still going.
_GOING: Final = frozenset({"queued", "running"})
#: A view published larger than this is not shared (each job reads its own).
_MAX_VIEW_BYTES: Final = 64 << 10
_PURPOSE: Final = "asyncclient fleet views"
#: How old a test's history shared by another job may be (the ETA, known failures and new
#: tests read it; a job that reuses passes reads its own).
HISTORY_SECONDS: Final = 30.0
_MAX_HISTORY_BYTES: Final = 1 << 20
_SIG_CHARS: Final = 64  # a published history: the body's HMAC (hex), then the body
#: How often a first look waiting for the poller's next poll reads the ledger.
_FIRST_LOOK_STEP: Final = 0.2
#: The least room between the poller's polls and a view's age limit: for the poll itself.
_POLL_ROOM: Final = 1.0


class SharedViews:
    """`session` for a run watcher (its RunSource), with `list_run_views` shared across the
    fleet: answered from views a job published within `view_seconds`, the rest from the
    service (published in turn). The job holding the poller's lease also polls, on its own
    clock and as seldom as `view_seconds` allows, the runs other jobs want;
    runs no job has asked for yet (just started) wait for that poll, so many jobs' first
    looks are one request. Anything the ledger cannot give is asked of the service, as
    without a fleet; `close()` ends the polling."""

    def __init__(
        self, session: Any, fleet: Fleet, holder: str, *, view_seconds: float = VIEW_SECONDS
    ) -> None:
        self._session = session
        # Verdicts are shared signed with this (None: each job reads its own).
        digest = getattr(session, "key_digest", None)
        self._secret: bytes | None = digest(_PURPOSE) if callable(digest) else None
        self._fleet = fleet
        self._holder = holder
        self._view_seconds = view_seconds
        self._ttl_ms = int(view_seconds * 1000)
        self._kept_ms = int(max(view_seconds, _KEPT_SECONDS) * 1000)
        self._poll_took = 0.0  # seconds: its last poll
        self._swept_at: float | None = None
        self._others_at = 0.0
        # The poller's clock, beside its job's sweeps.
        self._timer: asyncio.Task[None] | None = None
        self._closed = False
        self._down_until = 0.0  # the ledger failed: the service alone until then
        # Stopped runs: only their verdicts are taken from the fleet.
        self._stopped_here: set[str] = set()
        self._stopped_elsewhere: set[str] = set()
        self._awaited: set[str] = set()  # stopped elsewhere, waited for
        self.requests = 0  # to the service, by this source
        self.shared = 0  # views read from the fleet instead
        self.shared_histories = 0  # histories read from the fleet instead

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def __aenter__(self) -> SharedViews:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def watch_runs(self, run_ids: Any, **options: Any) -> Any:
        """A RunWatcher whose sweeps go through this source."""
        from asyncclient.watch import RunWatcher

        return RunWatcher(self, run_ids, **options)

    @property
    def _room(self) -> float:
        """Seconds kept between the poller's polls and `view_seconds`: three of its last
        poll (its next may be as slow, and late), one at least."""
        return max(_POLL_ROOM, 3 * self._poll_took)

    @property
    def _others_every(self) -> float:
        """Seconds between the poller's polls for the others: as far apart as views stay
        within `view_seconds` (one poll's room left), never closer than half of it."""
        return max(self._view_seconds / 2, self._view_seconds - self._room)

    @property
    def max_retry_after(self) -> float:
        return float(self._session.max_retry_after)

    async def stop_run(self, run_id: str) -> str:
        """Stop a run (as the session does) and tell the fleet: its view is read again."""
        self._stopped_here.add(run_id)
        try:
            return str(await self._session.stop_run(run_id))
        finally:
            if time.monotonic() >= self._down_until:
                await mark_stopped(self._fleet, [run_id])

    async def list_run_views(
        self, run_ids: Sequence[str], *, retries: int | None = None
    ) -> list[Mapping[str, Any]]:
        wanted = list(run_ids)
        found: dict[str, Mapping[str, Any]] = {}
        poller: bool | None = None
        unseen: list[str] = []
        if time.monotonic() >= self._down_until:
            try:
                found, poller, unseen = await self._read(wanted)
            except Exception:  # the ledger is down: the service alone for a while
                self._down_until = time.monotonic() + _DOWN_SECONDS
        if unseen and poller is False:
            # New or stopped: the poller's next poll brings them.
            stopped = self._stopped_elsewhere.intersection(unseen)
            self._awaited |= stopped
            seconds = self._view_seconds if stopped else self._fleet.lease
            with contextlib.suppress(Exception):
                found.update(await self._await_views(unseen, seconds))
        missing = [r for r in wanted if r not in found]
        self.shared += len(wanted) - len(missing)
        if missing and poller:
            # One request: the poller's own runs and the others' due ones.
            others = await self._due_for_others()
            self._others_at = time.monotonic()
            found.update(
                await self._fetch(missing + [r for r in others if r not in missing], retries)
            )
        elif missing:
            found.update(await self._fetch(missing, retries))
        if poller:
            await self._poll_when_due(retries)
        if self._timer is None and not self._closed:
            self._timer = asyncio.create_task(self._poll_on_time(), name="asyncclient-poller")
        return [found[r] for r in wanted if r in found]

    async def test_history(self, test_id: str, limit: int) -> list[Run]:
        """A test's newest `limit` runs, as `list_runs(test_id=, limit=)` answers them: from
        the fleet when a job of this API key read them within HISTORY_SECONDS (signed with
        its secret, so a writer to the ledger without the key cannot plant one), else from
        the service, published for the others."""
        if self._secret is None or not is_id("test", test_id):
            return list(await self._session.list_runs(test_id=test_id, limit=limit))
        key = f"{self._fleet.prefix}history:{test_id}:{limit}"
        now = int(time.time() * 1000)
        if time.monotonic() >= self._down_until:
            try:
                found = _history(
                    await self._fleet._redis.get(key), test_id, limit, now, self._secret
                )
            except Exception:  # the ledger is down: the service alone for a while
                self._down_until = time.monotonic() + _DOWN_SECONDS
            else:
                if found is not None:
                    self.shared_histories += 1
                    return found
        self.requests += 1
        runs = list(await self._session.list_runs(test_id=test_id, limit=limit))
        body = orjson.dumps(
            {"at": now, "test": test_id, "limit": limit, "runs": converter.unstructure(runs)}
        )
        if len(body) <= _MAX_HISTORY_BYTES and time.monotonic() >= self._down_until:
            signed = _mac(self._secret, body).encode() + body
            try:
                await self._fleet._redis.set(key, signed, px=int(HISTORY_SECONDS * 1000))
            except Exception:
                self._down_until = time.monotonic() + _DOWN_SECONDS
        return runs

    async def close(self) -> None:
        """Stop polling for the others and hand the poller's lease back when this job holds
        it, so that another job polls for the fleet at its next sweep rather than after the
        lease lapses."""
        self._closed = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
        with contextlib.suppress(Exception):  # unreachable: the lease lapses by itself
            await self._fleet._script("LET_GO", "poller", self._holder)

    async def _poll_when_due(self, retries: int | None) -> None:
        """As the poller: the others' runs polled, at most once per `_others_every`."""
        if time.monotonic() - self._others_at >= self._others_every:
            self._others_at = time.monotonic()
            with contextlib.suppress(Exception):  # others fall back to their own polls
                await self._poll_for_others(retries)

    async def _poll_on_time(self) -> None:
        """While this source lives: as the poller, the others' runs polled every
        `_others_every` also when this job's own sweeps are further apart (its runs
        quiet, its watcher backed off); not the poller, the lease taken when it is free."""
        while not self._closed:
            await asyncio.sleep(max(0.0, self._others_at + self._others_every - time.monotonic()))
            if time.monotonic() < self._down_until:
                self._others_at = time.monotonic()
                continue
            try:
                mine = await self._hold_lease()
            except Exception:  # the ledger is down: the service alone for a while
                self._down_until = time.monotonic() + _DOWN_SECONDS
                continue
            if mine:
                await self._poll_when_due(0)  # failed: the others ask themselves
            else:
                self._others_at = time.monotonic()

    async def _hold_lease(self) -> bool:
        """Whether this job is (now) the poller: the lease taken when free, renewed when ours."""
        r, p = self._fleet._redis, self._fleet.prefix
        lease = int(self._fleet.lease * 1000)
        async with r.pipeline(transaction=False) as pipe:
            pipe.set(p + "poller", self._holder, nx=True, px=lease)
            pipe.get(p + "poller")
            _, poller = await pipe.execute()
        return await self._renewed(poller)

    async def _renewed(self, poller: bytes | None) -> bool:
        """Whether `poller` (the lease's holder as read) is this job: then its lease renewed."""
        mine = poller is not None and poller.decode("utf-8", "replace") == self._holder
        if mine:
            lease = int(self._fleet.lease * 1000)
            await self._fleet._redis.set(
                self._fleet.prefix + "poller", self._holder, xx=True, px=lease
            )
        return mine

    async def _await_views(
        self, run_ids: list[str], seconds: float
    ) -> dict[str, Mapping[str, Any]]:
        """The views of `run_ids` as the poller publishes them at its next poll, waited for
        while another job holds the poller's lease, at most `seconds` (one lease: a poller
        that has not polled by then is as good as dead); those not published: left out."""
        r, p = self._fleet._redis, self._fleet.prefix
        keys = [f"{p}view:{run_id}" for run_id in run_ids]
        found: dict[str, Mapping[str, Any]] = {}
        until = time.monotonic() + seconds
        while time.monotonic() < until and len(found) < len(run_ids):
            await asyncio.sleep(_FIRST_LOOK_STEP)
            now = int(time.time() * 1000)
            async with r.pipeline(transaction=False) as pipe:
                pipe.zadd(p + "wanted", dict.fromkeys(run_ids, now + self._ttl_ms), gt=True)
                pipe.get(p + "poller")
                pipe.mget(keys)
                _, poller, views = await pipe.execute()
            for run_id, raw in zip(run_ids, views, strict=True):
                view = self._taken(_view(raw, run_id, now, self._ttl_ms, self._secret), run_id)
                if view is not None:
                    found[run_id] = view
            if poller is None or poller.decode("utf-8", "replace") == self._holder:
                break  # no other poller: the caller asks itself
        return found

    def _taken(self, view: Mapping[str, Any] | None, run_id: str) -> Mapping[str, Any] | None:
        """`view` as this job may take it: of a run stopped, only a verdict."""
        stopped = run_id in self._stopped_here or run_id in self._stopped_elsewhere
        return None if view is None or (stopped and view.get("status") in _GOING) else view

    async def _read(
        self, wanted: list[str]
    ) -> tuple[dict[str, Mapping[str, Any]], bool, list[str]]:
        """The fresh views of `wanted`, whether this job is (now) the poller, and the runs of
        `wanted` to wait for the poller's poll for: those the ledger holds no view of at all,
        and (once) those another job stopped, until their verdict. Fresh: at most
        `view_seconds` old, or as old as the time since this job's last sweep (a job that
        polls every 30 s takes a view 20 s old, as its own poll would have been)."""
        r, p = self._fleet._redis, self._fleet.prefix
        now = int(time.time() * 1000)
        since, self._swept_at = self._swept_at, time.monotonic()
        gap = 0 if since is None else int((self._swept_at - since) * 1000)
        tolerance = max(self._ttl_ms, min(self._kept_ms, gap * 9 // 10))
        # Wanted until about its next sweep (1.5x a quiet one).
        until = now + max(self._ttl_ms, min(self._kept_ms, 2 * gap))
        lease = int(self._fleet.lease * 1000)
        async with r.pipeline(transaction=False) as pipe:
            pipe.zadd(p + "wanted", dict.fromkeys(wanted, until), gt=True)
            pipe.zremrangebyscore(p + "wanted", 0, now - lease)
            pipe.zremrangebyscore(p + "wanted", f"({now + self._kept_ms + lease}", "+inf")
            pipe.pexpire(p + "wanted", self._kept_ms + lease)  # gone once the fleet is idle
            pipe.set(p + "poller", self._holder, nx=True, px=lease)
            pipe.get(p + "poller")
            pipe.mget([f"{p}view:{run_id}" for run_id in wanted])
            pipe.mget([f"{p}stopped:{run_id}" for run_id in wanted])
            *_, poller, views, stops = await pipe.execute()
        mine = await self._renewed(poller)
        self._stopped_elsewhere.update(r for r, s in zip(wanted, stops, strict=True) if s)
        found: dict[str, Mapping[str, Any]] = {}
        unseen: list[str] = []
        for run_id, raw in zip(wanted, views, strict=True):
            view = self._taken(_view(raw, run_id, now, tolerance, self._secret), run_id)
            if view is not None:
                found[run_id] = view
            elif (
                raw is None
                or run_id in self._stopped_elsewhere - self._stopped_here - self._awaited
            ):
                unseen.append(run_id)
        return found, mine, unseen if poller is not None else []

    async def _fetch(self, run_ids: list[str], retries: int | None) -> dict[str, Mapping[str, Any]]:
        """The service's views of `run_ids` (50 a request), published for the fleet."""
        got: dict[str, Mapping[str, Any]] = {}
        for at in range(0, len(run_ids), IDS_PER_REQUEST):
            self.requests += 1
            views = await self._session.list_run_views(
                run_ids[at : at + IDS_PER_REQUEST], retries=retries
            )
            for view in views:
                run_id = view.get("id") if isinstance(view, Mapping) else None
                if isinstance(run_id, str) and is_id("run", run_id):
                    got[run_id] = view
        if time.monotonic() >= self._down_until:
            try:
                await self._publish(got)
            except Exception:
                self._down_until = time.monotonic() + _DOWN_SECONDS
        return got

    async def _publish(self, views: Mapping[str, Mapping[str, Any]]) -> None:
        r, p = self._fleet._redis, self._fleet.prefix
        now = int(time.time() * 1000)
        async with r.pipeline(transaction=False) as pipe:
            for run_id, view in views.items():
                shared: dict[str, Any] = {"at": now, "view": view}
                if self._secret is not None and view.get("status") not in _GOING:
                    shared["sig"] = _signature(self._secret, now, view)
                data = orjson.dumps(shared)
                if len(data) <= _MAX_VIEW_BYTES:
                    pipe.set(f"{p}view:{run_id}", data, px=self._kept_ms)
            await pipe.execute()

    async def _poll_for_others(self, retries: int | None) -> None:
        """As the poller: the runs due (`_due_for_others`) polled and published."""
        stale = await self._due_for_others()
        if stale:
            began = time.monotonic()
            await self._fetch(stale, retries)
            self._poll_took = max(time.monotonic() - began, self._poll_took / 2)

    async def _due_for_others(self) -> list[str]:
        """The runs jobs still want that are going and whose views would be too old before
        this job's next poll; none when the ledger cannot say. Wanted: until about each job's
        next sweep (as its `_read` put it), so a job that sweeps seldom finds them fresh."""
        try:
            return await self._due()
        except Exception:  # the ledger failed: the next sweep finds it out
            return []

    async def _due(self) -> list[str]:
        r, p = self._fleet._redis, self._fleet.prefix
        now = int(time.time() * 1000)
        wanted = await r.zrangebyscore(p + "wanted", now, now + self._kept_ms, start=0, num=10_000)
        watched = [t for t in (v.decode("utf-8", "replace") for v in wanted) if is_id("run", t)]
        if not watched:
            return []
        fresh = await r.mget([f"{p}view:{run_id}" for run_id in watched])
        # Too old by our next poll (a quarter room: just published).
        room = self._room
        lasts = int(max(self._view_seconds - self._others_every - room, room / 4) * 1000)
        return [
            run_id
            for run_id, raw in zip(watched, fresh, strict=True)
            if _view(raw, run_id, now, lasts, self._secret) is None
            and not _final(_view(raw, run_id, now, self._kept_ms, self._secret))
        ]


def _mac(secret: bytes, data: bytes) -> str:
    """What signs all the fleet shares: HMAC-SHA256 under the key's secret, in hex."""
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def _signature(secret: bytes, at: int, view: Mapping[str, Any]) -> str:
    """The HMAC of a shared verdict and its time, under the key's secret."""
    return _mac(secret, orjson.dumps({"at": at, "view": view}, option=orjson.OPT_SORT_KEYS))


def _view(
    raw: bytes | None, run_id: str, now: int, tolerance: int, secret: bytes | None
) -> Mapping[str, Any] | None:
    """A published view of `run_id`, published at most `tolerance` ms before `now`: one still
    going, or a verdict (any other status) signed with `secret`, the API key's. An unsigned or
    wrongly signed verdict is read from the service itself, so a writer to the ledger who lacks
    the key can delay a job's verdict, never forge it."""
    if raw is None or len(raw) > _MAX_VIEW_BYTES:
        return None
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(found, dict):
        return None
    at, view = found.get("at"), found.get("view")
    if not (isinstance(at, int) and 0 <= now - at <= tolerance):
        return None
    if not (isinstance(view, dict) and view.get("id") == run_id):
        return None
    if view.get("status") in _GOING:
        return view
    sig = found.get("sig")
    if secret is None or not isinstance(sig, str):
        return None
    return view if hmac.compare_digest(sig, _signature(secret, at, view)) else None


def _final(view: Mapping[str, Any] | None) -> bool:
    """Whether `view` (as `_view` read it) is a signed verdict of a final run: it will not
    change, so the poller need not ask for it again."""
    return view is not None and view.get("final") is True and view.get("status") not in _GOING


def _history(
    raw: bytes | None, test_id: str, limit: int, now: int, secret: bytes
) -> list[Run] | None:
    """A history a job of this key published for `test_id` and `limit` at most
    HISTORY_SECONDS before `now`, read as the service's answer is; None for anything else."""
    if raw is None or len(raw) > _SIG_CHARS + _MAX_HISTORY_BYTES:
        return None
    sig, body = raw[:_SIG_CHARS], raw[_SIG_CHARS:]
    if not hmac.compare_digest(sig, _mac(secret, body).encode()):
        return None
    try:
        found = orjson.loads(body)
        at, runs = found["at"], found["runs"]
        if found["test"] != test_id or found["limit"] != limit:
            return None
        if not (isinstance(at, int) and 0 <= now - at <= HISTORY_SECONDS * 1000):
            return None
        if not isinstance(runs, list) or len(runs) > limit:
            return None
        return structure_list(Run, runs)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
