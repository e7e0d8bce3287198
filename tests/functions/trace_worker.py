"""Play LINE → `receive_line_webhook` → Pub/Sub → `forward_webhook` → receiver in one process,
on the emulators, and print what the trace looked like as one JSON object.

    python -m tests.functions.trace_worker sdk|api EVENT_ID SUBSCRIPTION

`sdk`: an OpenTelemetry SDK with an in-memory exporter is the global tracer provider (what
DEDUP_OTEL=1 installs, minus the Cloud exporters); "LINE" sends its request from a CLIENT span.
`api`: no SDK at all; "LINE" sends a fixed `traceparent`. Both functions are served by
functions-framework from main.py, as on an instance; the message really goes through the Pub/Sub
emulator (pulled from SUBSCRIPTION and delivered as the CloudEvent Eventarc would push). Each
function is then delivered its input a second time: LINE redelivering from a new trace, and
Pub/Sub redelivering the message. Its own process because the global tracer provider can be set
once per process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import functions_framework
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dedup.platform import propagation
from demo.events import pubsub_event
from demo.pubsub import pull_all
from tests.conftest import PROJECT
from tests.http.support import line_body, line_headers

MAIN = str(Path(__file__).resolve().parents[2] / "main.py")
API_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
"""What "LINE" sends without an SDK."""
REDELIVERY_TRACEPARENT = "00-11111111111111111111111111111111-2222222222222222-01"
"""LINE's redelivery: another request, another trace."""


def main(mode: str, event_id: str, subscription: str) -> None:
    """Run the chain once, then each delivery again; print spans, headers and attributes."""
    spans = InMemorySpanExporter()
    if mode == "sdk":
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)
    line = functions_framework.create_app(
        target="receive_line_webhook", source=MAIN, signature_type="http"
    ).test_client()
    forward = functions_framework.create_app(
        target="forward_webhook", source=MAIN, signature_type="cloudevent"
    ).test_client()
    body = line_body(event_id)
    if mode == "sdk":
        with trace.get_tracer("line").start_as_current_span(
            "LINE webhook", kind=trace.SpanKind.CLIENT
        ) as client:
            headers = {**line_headers(body), **propagation.headers()}
            client_span = trace.format_span_id(client.get_span_context().span_id)
    else:
        headers = {**line_headers(body), "traceparent": API_TRACEPARENT}
        client_span = API_TRACEPARENT.split("-")[2]
    statuses = [line.post("/", data=body, headers=headers).status_code]
    [message] = pull_all(subscription)
    event = pubsub_event(
        "webhooks",
        message.data,
        project=PROJECT,
        message_id=message.message_id,
        attributes=dict(message.attributes),
    )
    for _ in range(2):  # the message, then Pub/Sub's redelivery of it
        statuses.append(forward.post("/", data=event.body, headers=dict(event.headers)).status_code)
    redelivered = {**line_headers(body), "traceparent": REDELIVERY_TRACEPARENT}
    statuses.append(line.post("/", data=body, headers=redelivered).status_code)
    print(
        json.dumps(
            {
                "statuses": statuses,
                "client_span": client_span,
                "sent_traceparent": headers["traceparent"],
                "attributes": dict(message.attributes),
                "spans": [_span(s) for s in spans.get_finished_spans()],
            }
        )
    )


def _span(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": trace.format_trace_id(span.context.trace_id),
        "span_id": trace.format_span_id(span.context.span_id),
        "parent_id": trace.format_span_id(span.parent.span_id) if span.parent else None,
        "outcome": (span.attributes or {}).get("dedup.outcome"),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
    }


if __name__ == "__main__":
    main(*sys.argv[1:4])
