"""Client CPU per call: AsyncSession.get_build against bare aiohttp doing the same request.
The emulator runs in a separate process, so time.process_time() here measures only the client.

    .venv/bin/python benchmarks/bench_session.py [--calls 5000] [--rounds 5] [--concurrency 8]
    .venv/bin/python benchmarks/bench_session.py --networks tls     # over HTTPS only
    .venv/bin/python benchmarks/bench_session.py --telemetry sdk    # OpenTelemetry's SDK on
    .venv/bin/python benchmarks/bench_session.py --telemetry job    # and inside a job's trace
    .venv/bin/python benchmarks/bench_session.py --instructions 800  # under valgrind, exact
    .venv/bin/python benchmarks/bench_session.py --service "plain service"  # a service not ours

By default it measures over plain HTTP, then over HTTPS (the emulator with a throwaway CA; both
sides trust it), each side by side.

Both sides send the same headers over a connector with the same limit, read the body and parse
the JSON; the session also validates the id, runs its retry wrapper and builds a Build. Rounds
alternate which side goes first; the figure is the median CPU per call over the rounds.

--instructions N counts the CPU instructions of N calls instead of timing them: each side runs in
a process of its own under valgrind's cachegrind, once with N calls and once with none, and the
difference over N is its instructions per call. The count does not move from run to run (the
CPU figures move by 10 %), though it leaves out what the caches cost.

--telemetry job adds a third side: the session's calls made inside a `--wait` job's
telemetry (asyncclient.cli._telemetry.job_telemetry) with no OTEL_* variable set, as a CI job
without an exporter runs; --telemetry sdk-job the same with the SDK on, the job's span current
and each call asking which run it served.

--telemetry sdk sets up OpenTelemetry's SDK as an application would (a tracer provider with a
batch span processor, a meter provider with a reader), exporting to nowhere so that only the
making of spans and metrics is measured: each call then makes its operation span, a CLIENT
span per attempt, a traceparent, a duration and (on a retry) a count. The bare side stays bare.
"""

import argparse
import asyncio
import json
import ssl
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import Emulator, PlainService

from asyncclient import AsyncSession


async def _drive(call: Callable[[], Awaitable[object]], calls: int, concurrency: int) -> float:
    """CPU seconds per call for `calls` calls made by `concurrency` workers."""
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    started = time.process_time()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return (time.process_time() - started) / calls


async def bench_session(
    url: str,
    key: str,
    build_id: str,
    calls: int,
    concurrency: int,
    limit: int,
    ca_file: str | None = None,
) -> float:
    async with AsyncSession(
        key, url, connection_limit=limit, ca_file=ca_file, proxy="direct"
    ) as session:
        for _ in range(50):  # warm the connections and code paths
            await session.get_build(build_id)
        return await _drive(lambda: session.get_build(build_id), calls, concurrency)


async def bench_in_job(*args: object) -> float:
    """bench_session inside a --wait job's telemetry, as the command runs its calls."""
    import io

    from asyncclient.cli._output import Output
    from asyncclient.cli._telemetry import job_telemetry

    out = Output(quiet=True, stdout=io.StringIO(), stderr=io.StringIO())
    async with job_telemetry(out, "p_bench", project="p_bench"):
        return await bench_session(*args)  # type: ignore[arg-type]


async def bench_bare(
    url: str,
    key: str,
    build_id: str,
    calls: int,
    concurrency: int,
    limit: int,
    agent: str,
    ca_file: str | None = None,
) -> float:
    headers = {"Authorization": f"Bearer {key}", "User-Agent": agent, "Accept": "application/json"}
    target = f"{url}/api/v1/builds/{build_id}"
    timeout = aiohttp.ClientTimeout(total=30.0, connect=10.0)
    tls = ssl.create_default_context(cafile=ca_file) if ca_file else True
    connector = aiohttp.TCPConnector(limit=limit, ssl=tls)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def one() -> object:
            async with http.get(target, headers=headers, allow_redirects=False) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"bare aiohttp got {resp.status}")
                return json.loads(body)["build"]

        for _ in range(50):
            await one()
        return await _drive(one, calls, concurrency)


async def measure(args: argparse.Namespace, url: str, key: str, ca_file: str | None = None) -> None:
    async with AsyncSession(key, url, ca_file=ca_file, proxy="direct") as probe:
        build_id = args.build_id or (await probe.list_builds("p_demo")).builds[0].id
        agent = probe._t.headers["User-Agent"]  # the bare side sends the very same headers
    ours: list[float] = []
    bare: list[float] = []
    job: list[float] = []
    with_job = args.telemetry in ("job", "sdk-job")
    for round_no in range(args.rounds):
        order = ("bare", "ours", "job") if round_no % 2 == 0 else ("job", "ours", "bare")
        for side in order:
            if side == "job":
                if with_job:
                    job.append(
                        await bench_in_job(
                            url, key, build_id, args.calls, args.concurrency, args.limit, ca_file
                        )
                    )
            elif side == "bare":
                bare.append(
                    await bench_bare(
                        url, key, build_id, args.calls, args.concurrency, args.limit, agent, ca_file
                    )
                )
            else:
                ours.append(
                    await bench_session(
                        url, key, build_id, args.calls, args.concurrency, args.limit, ca_file
                    )
                )
        in_job = f"   in a job {job[-1] * 1e6:7.1f} us/call" if job else ""
        print(
            f"round {round_no + 1}: bare {bare[-1] * 1e6:7.1f} us/call   "
            f"AsyncSession {ours[-1] * 1e6:7.1f} us/call{in_job}"
        )
    bare_median = statistics.median(bare)
    ours_median = statistics.median(ours)
    over = "HTTPS" if url.startswith("https://") else "plain HTTP"
    print(
        f"\n{args.calls} get_build calls over {over} x {args.rounds} rounds, concurrency "
        f"{args.concurrency}, connection limit {args.limit} (client CPU, median of rounds)"
    )
    print(f"bare aiohttp   {bare_median * 1e6:7.1f} us/call")
    print(f"AsyncSession   {ours_median * 1e6:7.1f} us/call")
    print(f"ratio          {ours_median / bare_median:7.2f}x  (target <= 1.10x)")
    if job:
        job_median = statistics.median(job)
        rounds = [j / o for j, o in zip(job, ours, strict=True)]
        print(f"in a job       {job_median * 1e6:7.1f} us/call")
        print(
            f"in a job / AsyncSession  {statistics.median(rounds):5.2f}x  (median of rounds: "
            "unchanged within noise when about 1.00x)"
        )


def telemetry_on() -> None:
    """OpenTelemetry's SDK, set up as an application would, exporting nowhere."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Nowhere(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Nowhere()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


async def _calls_alone(url: str, key: str, build_id: str, side: str, calls: int) -> None:
    """`calls` calls of one side after the same warm-up, for --instructions."""
    limit = 64
    async with AsyncSession(key, url, connection_limit=limit, proxy="direct") as session:
        agent = session._t.headers["User-Agent"]
        headers = {
            "Authorization": f"Bearer {key}",
            "User-Agent": agent,
            "Accept": "application/json",
        }
        target = f"{url}/api/v1/builds/{build_id}"
        timeout = aiohttp.ClientTimeout(total=30.0, connect=10.0)
        connector = aiohttp.TCPConnector(limit=limit)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

            async def bare() -> object:
                async with http.get(target, headers=headers, allow_redirects=False) as resp:
                    return json.loads(await resp.read())["build"]

            async def ours() -> object:
                return await session.get_build(build_id)

            call = ours if side == "ours" else bare
            for _ in range(50):
                await call()
            if calls:
                await _drive(call, calls, 8)


def instructions(url: str, key: str, calls: int) -> None:
    """Instructions per call of each side, counted by valgrind (see the docstring)."""
    import re
    import shutil
    import subprocess

    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (apt install valgrind)")

    async def newest() -> str:
        async with AsyncSession(key, url, proxy="direct") as probe:
            return (await probe.list_builds("p_demo")).builds[0].id

    build_id = asyncio.run(newest())
    counted: dict[tuple[str, int], int] = {}
    for side in ("bare", "ours"):
        for n in (0, calls):
            done = subprocess.run(
                [
                    "valgrind",
                    "--tool=cachegrind",
                    "--cache-sim=no",
                    "--cachegrind-out-file=/dev/null",
                    sys.executable,
                    __file__,
                    "--count-side",
                    side,
                    "--calls",
                    str(n),
                    "--url",
                    url,
                    "--key",
                    key,
                    "--build-id",
                    build_id,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
            assert found is not None, done.stderr[-500:]
            counted[side, n] = int(found.group(1).replace(",", ""))
    per = {side: (counted[side, calls] - counted[side, 0]) / calls for side in ("bare", "ours")}
    print(f"\n{calls} get_build calls over plain HTTP, concurrency 8 (instructions per call)")
    print(f"bare aiohttp   {per['bare']:9,.0f}")
    print(f"AsyncSession   {per['ours']:9,.0f}")
    print(f"ratio          {per['ours'] / per['bare']:9.3f}x")


def main(args: argparse.Namespace) -> None:
    if args.count_side:
        asyncio.run(_calls_alone(args.url, args.key, args.build_id, args.count_side, args.calls))
        return
    if args.instructions:
        counted = PlainService() if args.service == "plain service" else Emulator()
        with counted as emu:
            print(f"against the {args.service}")
            instructions(emu.url, emu.run_key, args.instructions)
        return
    if args.telemetry in ("sdk", "sdk-job"):
        telemetry_on()
        print("OpenTelemetry SDK on: spans and metrics made (exported nowhere)")
    if args.url:
        asyncio.run(measure(args, args.url, args.key, args.ca_file))
        return
    for network in [n.strip() for n in args.networks.split(",") if n.strip()]:
        tls = network == "tls"
        print(f"\n--- over {'HTTPS' if tls else 'plain HTTP'}, against the {args.service} ---")
        service = PlainService(tls=tls) if args.service == "plain service" else Emulator(tls=tls)
        with service as emu:
            asyncio.run(measure(args, emu.url, emu.run_key, emu.ca_file))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--limit", type=int, default=64, help="connection limit of both sides")
    parser.add_argument("--url", help="measure against this running service instead")
    parser.add_argument("--key", default="demo-run", help="API key for --url")
    parser.add_argument("--ca-file", help="CA file for an https --url")
    parser.add_argument("--networks", default="plain,tls", help="plain, tls or both (default)")
    parser.add_argument(
        "--telemetry",
        choices=("off", "sdk", "job", "sdk-job"),
        default="off",
        help="OpenTelemetry's SDK on or off; job: a side inside a --wait job's telemetry",
    )
    parser.add_argument("--build-id", help="build to fetch (default: the newest of p_demo)")
    parser.add_argument(
        "--service",
        choices=("emulator", "plain service"),
        default="emulator",
        help="what answers: the emulator, or benchmarks/plain_service.py (not ours: fixed "
        "answers in the spec's shapes, nothing hashed)",
    )
    parser.add_argument(
        "--instructions", type=int, metavar="N", help="count instructions of N calls (valgrind)"
    )
    parser.add_argument("--count-side", choices=("bare", "ours"), help=argparse.SUPPRESS)
    main(parser.parse_args())
