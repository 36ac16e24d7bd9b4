"""A stand-in for an OpenTelemetry collector: takes OTLP over HTTP (protobuf) on
127.0.0.1:4318 and shows what it got at http://127.0.0.1:4318/show: the span
tree, each job with its trace id (the one the job's summary names), then each
metric's total. A real collector (Jaeger, Tempo, ...) takes the same."""

from collections import Counter, defaultdict

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

TREE = ("asyncclient.job", "asyncclient.test", "asyncclient.run")
SHOWN = (
    "test.suite.name",
    "test.suite.run.status",
    "test.case.name",
    "test.case.result.status",
    "asyncclient.run.status",
    "asyncclient.run.kind",
)
spans = []
totals = {}


def value(any_value):
    return getattr(any_value, any_value.WhichOneof("value") or "string_value")


async def traces(request):
    message = ExportTraceServiceRequest.FromString(await request.read())
    for resource in message.resource_spans:
        for scope in resource.scope_spans:
            spans.extend(scope.spans)
    return web.Response(content_type="application/x-protobuf")


async def metrics(request):
    message = ExportMetricsServiceRequest.FromString(await request.read())
    for resource in message.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                total = 0
                for point in getattr(metric, kind).data_points:
                    if kind == "histogram":
                        total += point.sum
                    else:
                        total += point.as_double or point.as_int
                # Cumulative points: the latest export holds the whole total.
                totals[f"{metric.name} ({metric.unit})"] = total
    return web.Response(content_type="application/x-protobuf")


async def show(request):
    children = defaultdict(list)
    for span in spans:
        children[span.parent_span_id].append(span)
    lines = []

    def walk(parent, depth):
        indent = "  " * depth
        requests = Counter()
        for span in sorted(children[parent], key=lambda s: s.start_time_unix_nano):
            if span.name not in TREE:  # a request: counted under the span it served
                requests[span.name] += 1
                continue
            said = [f"{a.key}={value(a.value)}" for a in span.attributes]
            said = [pair for pair in said if pair.split("=")[0] in SHOWN]
            if depth == 0:  # a job: its trace, as its summary names it
                said.insert(0, f"trace={span.trace_id.hex()}")
            lines.append(f"{indent}{span.name} {' '.join(said)}")
            walk(span.span_id, depth + 1)
        if requests:
            counts = [f"{name} x{count}" for name, count in sorted(requests.items())]
            lines.append(f"{indent}requests: {', '.join(counts)}")

    walk(b"", 0)
    for name, total in sorted(totals.items()):
        if name.startswith("asyncclient."):
            lines.append(f"{name} {total:g}")
    return web.Response(text="\n".join(lines) + "\n")


app = web.Application()
app.add_routes(
    [
        web.post("/v1/traces", traces),
        web.post("/v1/metrics", metrics),
        web.get("/show", show),
    ]
)
web.run_app(app, host="127.0.0.1", port=4318)
