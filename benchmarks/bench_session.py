"""Client CPU per call: AsyncSession.get_build against bare aiohttp doing the same request.
The emulator runs in a separate process, so time.process_time() here measures only the client.

    .venv/bin/python benchmarks/bench_session.py [--calls 5000] [--rounds 5] [--concurrency 8]
    .venv/bin/python benchmarks/bench_session.py --networks tls     # over HTTPS only
    .venv/bin/python benchmarks/bench_session.py --telemetry sdk    # OpenTelemetry's SDK on

By default it measures over plain HTTP, then over HTTPS (the emulator with a throwaway CA; both
sides trust it), each side by side.

Both sides send the same headers over a connector with the same limit, read the body and parse
the JSON; the session also validates the id, runs its retry wrapper and builds a Build. Rounds
alternate which side goes first; the figure is the median CPU per call over the rounds.

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

from _support import Emulator

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
    for round_no in range(args.rounds):
        order = ("bare", "ours") if round_no % 2 == 0 else ("ours", "bare")
        for side in order:
            if side == "bare":
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
        print(
            f"round {round_no + 1}: bare {bare[-1] * 1e6:7.1f} us/call   "
            f"AsyncSession {ours[-1] * 1e6:7.1f} us/call"
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


def main(args: argparse.Namespace) -> None:
    if args.telemetry == "sdk":
        telemetry_on()
        print("OpenTelemetry SDK on: spans and metrics made (exported nowhere)")
    if args.url:
        asyncio.run(measure(args, args.url, args.key, args.ca_file))
        return
    for network in [n.strip() for n in args.networks.split(",") if n.strip()]:
        print(f"\n--- over {'HTTPS' if network == 'tls' else 'plain HTTP'} ---")
        with Emulator(tls=network == "tls") as emu:
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
        "--telemetry", choices=("off", "sdk"), default="off", help="OpenTelemetry's SDK on or off"
    )
    parser.add_argument("--build-id", help="build to fetch (default: the newest of p_demo)")
    main(parser.parse_args())
