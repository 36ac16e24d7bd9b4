"""Network conditions and faults: each kind as a raw aiohttp client sees it, seeded randomness."""

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp
import pytest
from emulator_support import SMALL_SEED, Http

from asyncclient.testing import FakeService, Fault, NetworkConditions, ServiceSettings
from asyncclient.testing._conditions import FaultPlan
from asyncclient.testing.pytest_plugin import FakeServiceFactory

# --- the pure plan --------------------------------------------------------------------------


def test_injected_faults_are_used_in_order_per_operation() -> None:
    plan = FaultPlan()
    assert not plan.active
    plan.inject("get_run", Fault("500", times=2))
    plan.inject("get_run", Fault("drop_after"))
    plan.inject("list_runs", Fault("429", retry_after=9))
    assert plan.pending("get_run") == 3
    seen = [plan.decide("get_run", "k") for _ in range(4)]
    assert [(d.before, d.after) for d in seen] == [
        ("500", None),
        ("500", None),
        (None, "drop_after"),
        (None, None),
    ]
    decision = plan.decide("list_runs", "k")
    assert (decision.before, decision.retry_after) == ("429", 9)
    assert not plan.active


def test_random_faults_repeat_for_a_seed() -> None:
    def outcomes(seed: int) -> list[str | None]:
        plan = FaultPlan(
            NetworkConditions(error_rate=0.3, rate_limit_rate=0.2, drop_rate=0.1, seed=seed)
        )
        return [plan.decide("get_run", None).before for _ in range(400)]

    first = outcomes(1)
    assert first == outcomes(1)
    assert first != outcomes(2)
    share = {kind: first.count(kind) / 400 for kind in ("500", "503", "429", "drop", None)}
    assert 0.2 < share["500"] + share["503"] < 0.4
    assert 0.12 < share["429"] < 0.28
    assert 0.05 < share["drop"] < 0.16
    assert 0.3 < share[None] < 0.5


def test_random_faults_only_hit_the_chosen_operations() -> None:
    plan = FaultPlan(NetworkConditions(error_rate=1.0, ops=frozenset({"get_run"})))
    assert plan.decide("list_runs", None).before is None
    assert plan.decide("get_run", None).before in ("500", "503")


def test_the_per_key_rate_limit_is_a_token_bucket() -> None:
    now = [100.0]
    plan = FaultPlan(NetworkConditions(rate_limit_per_key=2), monotonic=lambda: now[0])
    assert [plan.decide("list_runs", "a").before for _ in range(3)] == [None, None, "429"]
    assert plan.decide("list_runs", "b").before is None  # another key has its own bucket
    limited = plan.decide("list_runs", "a")
    assert (limited.before, limited.retry_after) == ("429", 1)
    now[0] += 0.5  # one token back
    assert plan.decide("list_runs", "a").before is None
    assert plan.decide("list_runs", "a").before == "429"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"error_rate": 1.5}, "between 0 and 1"),
        ({"error_rate": 0.6, "drop_rate": 0.6}, "<= 1"),
        ({"ops": ["nope"]}, "unknown operation"),
        ({"latency_ms": -1}, "negative"),
        ({"part_bandwidth": 0}, "positive"),
    ],
)
def test_conditions_are_checked(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        NetworkConditions(**kwargs)  # type: ignore[arg-type]


def test_faults_are_checked() -> None:
    with pytest.raises(ValueError, match="fault kind"):
        Fault("418")
    with pytest.raises(ValueError, match="at least 1"):
        Fault("500", times=0)
    with pytest.raises(ValueError, match="unknown operation"):
        FaultPlan().inject("get_runs", Fault("500"))


def test_conditions_round_trip_through_json() -> None:
    conditions = NetworkConditions(
        latency_ms=5,
        part_bandwidth=1000,
        link_bandwidth=4000,
        error_rate=0.1,
        ops=frozenset({"get_run"}),
        seed=3,
    )
    assert NetworkConditions.from_json(conditions.to_json()) == conditions
    with pytest.raises(ValueError, match="unknown condition"):
        NetworkConditions.from_json({"latency": 5})


# --- over HTTP ------------------------------------------------------------------------------


@pytest.fixture
def quiet_server(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Fails the test if the server logged a warning, an error or a traceback."""
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    return caplog


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [("500", 500, "internal"), ("503", 503, "unavailable"), ("429", 429, "rate_limited")],
)
async def test_error_faults(
    a_run: Http, small: FakeService, kind: str, status: int, code: str
) -> None:
    small.inject("list_runs", Fault(kind, times=2, retry_after=7))
    for _ in range(2):
        reply = await a_run.get("/api/v1/runs")
        assert reply.status == status
        assert reply.code == code
        if kind != "500":
            assert reply.headers["Retry-After"] == "7"
    if kind == "429":
        assert reply.json["error"]["retryAfter"] == 7
    assert (await a_run.get("/api/v1/runs")).status == 200
    assert (await a_run.get("/api/v1/projects/p_a/builds")).status == 200  # other ops untouched
    assert [r.status for r in small.requests_for("list_runs")] == [status, status, 200]


async def test_drop_before_the_work(
    a_run: Http, small: FakeService, quiet_server: pytest.LogCaptureFixture
) -> None:
    small.inject("run_test", Fault("drop"))
    with pytest.raises(aiohttp.ClientError):
        await a_run.post("/api/v1/tests/t_web/run")
    assert not small.backend.runs
    assert small.requests_for("run_test")[-1].status == 0
    assert (await a_run.post("/api/v1/tests/t_web/run")).status == 201
    assert_quiet(quiet_server)


async def test_drop_after_the_work(
    a_run: Http, small: FakeService, quiet_server: pytest.LogCaptureFixture
) -> None:
    small.inject("run_test", Fault("drop_after"))
    with pytest.raises(aiohttp.ClientError):
        await a_run.post("/api/v1/tests/t_web/run")
    assert len(small.backend.runs) == 1  # the run started; the answer was lost
    assert (await a_run.get("/api/v1/runs")).status == 200
    assert_quiet(quiet_server)


async def test_500_after_the_work(a_run: Http, small: FakeService) -> None:
    run_id = (await a_run.post("/api/v1/tests/t_web/run")).json["runId"]
    small.inject("stop_run", Fault("500_after"))
    reply = await a_run.post(f"/api/v1/runs/{run_id}/stop")
    assert reply.status == 500
    assert (await a_run.get(f"/api/v1/runs/{run_id}")).json["run"]["status"] == "cancelled"


async def test_a_part_dropped_mid_body_is_not_stored(
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
    quiet_server: pytest.LogCaptureFixture,
) -> None:
    part = 1 << 20
    service = await fake_service_factory(
        SMALL_SEED, clock="manual", settings=ServiceSettings(part_bytes=part)
    )
    client = clients(service, "k-run")
    started = await client.post(
        "/api/v1/projects/p_a/builds", json={"fileName": "a.apk", "size": 2 * part}
    )
    build_id = started.json["id"]
    first = await client.call("PUT", f"/api/v1/builds/{build_id}/parts/1", data=b"a" * part)
    # aiohttp resends an idempotent request (GET, PUT, DELETE) once when its connection drops,
    # so it takes two drops in a row for the caller to see one.
    service.inject("upload_part", Fault("drop", times=2))
    with pytest.raises(aiohttp.ClientError):
        await client.call("PUT", f"/api/v1/builds/{build_id}/parts/1", data=b"b" * part)
    service.inject("upload_part", Fault("drop", times=2))
    with pytest.raises(aiohttp.ClientError):
        await client.call("PUT", f"/api/v1/builds/{build_id}/parts/2", data=b"c" * part)
    assert [r.status for r in service.requests_for("upload_part")] == [200, 0, 0, 0, 0]
    build = service.backend.builds[build_id]
    assert build.uploaded == {1: (first.json["etag"], part)}
    assert [p.name for p in build.directory.iterdir()] == ["a.apk"]
    assert build.path.read_bytes() == b"a" * part
    # The service keeps working after the drops.
    again = await client.call("PUT", f"/api/v1/builds/{build_id}/parts/2", data=b"c" * part)
    assert again.status == 200
    assert_quiet(quiet_server)


async def test_random_faults_over_http_repeat_for_a_seed(
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
) -> None:
    conditions = NetworkConditions(error_rate=0.2, rate_limit_rate=0.2, drop_rate=0.2, seed=11)

    async def statuses() -> tuple[list[int], list[int]]:
        """(what the client saw, what the server answered): 0 for a dropped connection."""
        service = await fake_service_factory(SMALL_SEED, clock="manual", conditions=conditions)
        client = clients(service, "k-run")
        seen = []
        for _ in range(30):
            try:
                seen.append((await client.get("/api/v1/runs")).status)
            except aiohttp.ClientError:
                seen.append(0)
        return seen, [r.status for r in service.requests]

    first = await statuses()
    assert first == await statuses()
    client_view, server_view = first
    assert {0, 200, 429} <= set(server_view)
    assert set(server_view) & {500, 503}
    # A drop the client does not see was resent by aiohttp on a new connection.
    assert len(server_view) == 30 + server_view.count(0) - client_view.count(0)


async def test_conditions_change_at_runtime(a_run: Http, small: FakeService) -> None:
    small.conditions = NetworkConditions(error_rate=1.0, ops=frozenset({"get_build"}))
    assert (await a_run.get("/api/v1/builds/ab_ios_1")).status in (500, 503)
    assert (await a_run.get("/api/v1/runs")).status == 200
    small.conditions = NetworkConditions()
    assert (await a_run.get("/api/v1/builds/ab_ios_1")).status == 200


async def test_rate_limit_per_key(
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
) -> None:
    service = await fake_service_factory(
        SMALL_SEED, clock="manual", conditions=NetworkConditions(rate_limit_per_key=1)
    )
    first = await clients(service, "k-run").get("/api/v1/runs")
    second = await clients(service, "k-run").get("/api/v1/runs")
    other = await clients(service, "k-edit").get("/api/v1/runs")
    assert (first.status, second.status, other.status) == (200, 429, 200)
    assert second.headers["Retry-After"] == "1"


async def test_rate_limit_buckets_only_known_keys(
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
) -> None:
    # One request per 100 s and key: a second request of a bucketed key would be a 429.
    service = await fake_service_factory(
        SMALL_SEED, clock="manual", conditions=NetworkConditions(rate_limit_per_key=0.01)
    )
    statuses = [
        (await clients(service, key).get("/api/v1/runs")).status
        for key in ["random-1", "random-1", *(f"random-{n}" for n in range(2, 200))]
    ]
    # Unknown keys are refused as unknown, every time: never counted, never rate limited.
    assert set(statuses) == {401}
    assert len(service._plan._buckets) == 0
    known = [(await clients(service, "k-run").get("/api/v1/runs")).status for _ in range(2)]
    assert known == [200, 429]
    assert len(service._plan._buckets) == 1


PART = 64 * 1024


async def shaped(
    factory: FakeServiceFactory, clients: Callable[..., Http], conditions: NetworkConditions
) -> tuple[FakeService, Http]:
    """The small seed's service in parts of PART bytes under `conditions`, and a run key's
    client of it."""
    service = await factory(
        SMALL_SEED, clock="manual", settings=ServiceSettings(part_bytes=PART), conditions=conditions
    )
    return service, clients(service, "k-run")


async def test_latency_and_part_bandwidth(
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
) -> None:
    part = PART
    _, client = await shaped(
        fake_service_factory, clients, NetworkConditions(latency_ms=40, part_bandwidth=400_000)
    )
    began = time.monotonic()
    await client.get("/api/v1/runs")
    assert time.monotonic() - began >= 0.04
    build_id = (
        await client.post("/api/v1/projects/p_a/builds", json={"fileName": "a.apk", "size": part})
    ).json["id"]
    began = time.monotonic()
    stored = await client.call("PUT", f"/api/v1/builds/{build_id}/parts/1", data=b"x" * part)
    assert stored.status == 200
    assert time.monotonic() - began >= 0.04 + part / 400_000  # the latency, then the body


async def test_concurrent_requests_meet_injected_faults_once(
    a_run: Http, small: FakeService
) -> None:
    small.inject("list_runs", Fault("503", times=3))
    replies = await asyncio.gather(*(a_run.get("/api/v1/runs") for _ in range(8)))
    assert sorted(r.status for r in replies) == [200] * 5 + [503] * 3


def test_numbers_from_a_command_line_are_made_whole() -> None:
    conditions = NetworkConditions(retry_after=1.5, part_bandwidth=1e6)
    assert (conditions.retry_after, conditions.part_bandwidth) == (2, 1_000_000)
    assert Fault("429", retry_after=0.2).retry_after == 1


def test_the_link_hands_out_its_time_in_turn_at_the_rate_in_force() -> None:
    from asyncclient.testing._conditions import Link

    now = [100.0]
    rate: list[int | None] = [1000]
    link = Link(lambda: rate[0], lambda: now[0])
    # Two readers take 500 bytes each at once: the second waits for the first's half second.
    assert (link.take(500), link.take(500)) == (0.5, 1.0)
    now[0] = 101.0  # the link is free again
    rate[0] = 2000  # its capacity doubled
    assert link.take(1000) == 0.5
    now[0] = 102.0
    rate[0] = None  # no cap: nothing waits
    assert link.take(10_000) == 0.0
    assert link.bytes == 2000  # what crossed a capped link


async def test_the_link_is_shared_by_every_upload(
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
) -> None:
    part = PART
    service, client = await shaped(
        fake_service_factory, clients, NetworkConditions(link_bandwidth=512 * 1024)
    )
    builds = [
        (
            await client.post(
                "/api/v1/projects/p_a/builds", json={"fileName": f"{n}.apk", "size": part}
            )
        ).json["id"]
        for n in range(4)
    ]
    began = time.monotonic()
    stored = await asyncio.gather(
        *(
            client.call("PUT", f"/api/v1/builds/{build_id}/parts/1", data=b"x" * part)
            for build_id in builds
        )
    )
    assert [answer.status for answer in stored] == [200] * 4
    # Four parts at once share the link: together no faster than its rate (a lower bound).
    assert time.monotonic() - began >= 4 * part / (512 * 1024) * 0.95
    assert service._plan.link.bytes == 4 * part
    assert service.conditions.to_json()["linkBandwidth"] == 512 * 1024
