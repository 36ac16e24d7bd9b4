import asyncio
import json
import os
import urllib.request

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from prometheus_client import generate_latest

from asyncclient import AsyncSession


def one_line(span: ReadableSpan) -> str:
    """A span as one line: the console exporter's own format is a page of JSON."""
    shown = ("http.response.status_code", "error.type", "http.request.resend_count")
    attributes = span.attributes or {}
    said = " ".join(f"{key}={attributes[key]}" for key in shown if key in attributes)
    return f"{span.kind.name:<8} {span.name} {said}\n"


# What an application sets up once, at startup.
tracing = TracerProvider()
tracing.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
trace.set_tracer_provider(tracing)
metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))


def answer_503(times: int) -> None:
    """The emulator's own route: its next `times` answers to get_build are 503s."""
    fault = {"op": "get_build", "kind": "503", "times": times, "retryAfter": 0}
    request = urllib.request.Request(
        os.environ["ASYNCCLIENT_BASE_URL"] + "/_emulator/faults",
        data=json.dumps(fault).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request).close()


async def main() -> None:
    answer_503(2)
    async with AsyncSession() as session:
        build = await session.get_build("ab_demo_ios_100")
    print(build.id, build.status)


asyncio.run(main())
# What Prometheus would scrape (prometheus_client.start_http_server(9464) serves it).
wanted = ("http_client_request_duration_seconds_count", "asyncclient_client_")
for line in generate_latest().decode().splitlines():
    if line.startswith(wanted):
        print(line)
