"""Run deliveries in a process whose OpenTelemetry SDK `functions.observability.install` set
up (global providers, gRPC client instrumentation), with in-memory exporters; print what they
recorded as one JSON object.

    python -m tests.dedup.otel_worker EVENT_ID

Its own process because the global providers can be set once per process, and the gRPC
instrumentation reports to the global tracer provider only.
"""

from __future__ import annotations

import json
import sys

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dedup import DedupConfig, Deduplicator, Delivery
from functions.observability import install


def ok(delivery: Delivery) -> None:
    """A handler that succeeds."""


def main(event_id: str) -> None:
    """Deliver `event_id` twice (ran, then duplicate from another instance); print the spans
    and the metric points."""
    spans = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    install(SimpleSpanProcessor(spans), reader)
    Deduplicator(DedupConfig(project="demo-exactly-once")).run(event_id, "s", ok)
    Deduplicator(DedupConfig(project="demo-exactly-once", cache_size=0)).run(event_id, "s", ok)
    data = reader.get_metrics_data()
    points = [
        {"name": metric.name, "attributes": dict(point.attributes or {})}
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    ]
    finished = [
        {
            "name": span.name,
            "span_id": span.context.span_id if span.context else None,
            "parent_id": span.parent.span_id if span.parent else None,
            "attributes": dict(span.attributes or {}),
        }
        for span in spans.get_finished_spans()
    ]
    print(json.dumps({"spans": finished, "points": points}))


if __name__ == "__main__":
    main(sys.argv[1])
