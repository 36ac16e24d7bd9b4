"""An OTLP/HTTP receiver on loopback that decodes what the exporters send (opentelemetry-proto)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


@attrs.define
class Span:
    name: str
    span_id: str
    parent_id: str
    trace_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@attrs.define
class Receiver:
    """An OTLP/HTTP receiver: what it was sent, decoded."""

    url: str = ""
    spans: list[Span] = attrs.Factory(list)
    resources: list[dict[str, Any]] = attrs.Factory(list)
    points: list[tuple[str, str, dict[str, Any], Any]] = attrs.Factory(list)
    requests: int = 0

    async def traces(self, request: web.Request) -> web.Response:
        self.requests += 1
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            self.resources.append(_attributes(resource_spans.resource.attributes))
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        Span(
                            span.name,
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.trace_id.hex(),
                            _attributes(span.attributes),
                            [(e.name, _attributes(e.attributes)) for e in span.events],
                            span.status.code,
                        )
                    )
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    async def metrics(self, request: web.Request) -> web.Response:
        self.requests += 1
        message = metrics_service_pb2.ExportMetricsServiceRequest()
        message.ParseFromString(await request.read())
        for resource_metrics in message.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        value = point.sum if kind == "histogram" else point.as_double
                        if kind == "sum" and point.WhichOneof("value") == "as_int":
                            value = point.as_int
                        self.points.append(
                            (metric.name, metric.unit, _attributes(point.attributes), value)
                        )
        answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]

    def children(self, parent: Span, name: str | None = None) -> list[Span]:
        return [
            span
            for span in self.spans
            if span.parent_id == parent.span_id and (name is None or span.name == name)
        ]


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Receiver]:
    """A Receiver listening on a free loopback port until the block ends."""
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.traces)
    app.router.add_post("/v1/metrics", found.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    found.url = f"http://127.0.0.1:{port}"
    try:
        yield found
    finally:
        await runner.cleanup()
