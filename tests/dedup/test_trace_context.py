"""Every entrance continues its caller's trace: the delivery span's parent is the caller's span,
read from the carrier of `dedup.platform.propagation`'s table; a replayed HTTP answer and a
duplicate delivery are span events naming the original delivery's trace, which the record keeps.

SDK providers with an in-memory exporter are handed to each deduplicator's `Telemetry`;
nothing global is set. Records on the Firestore emulator.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import flask
import pytest
from cloudevents.http import CloudEvent
from firebase_functions import https_fn
from firebase_functions.https_fn import CallableRequest
from google.cloud import firestore
from google.cloud.firestore import AsyncClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dedup import AsyncDeduplicator, DedupConfig, Deduplicator, Delivery, SuffixRegistry
from dedup.aio import AsyncDelivery
from dedup.entrances.triggers import trigger_once
from dedup.http import IdempotentRequest, idempotent_callable, idempotent_http
from dedup.tasks import TASK_NAME_HEADER, task_once
from dedup.telemetry import Telemetry

PROJECT = "demo-exactly-once"
TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"
PUBSUB_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"


class Spans:
    """An in-memory exporter behind a `Telemetry`, and deduplicators wired to it."""

    def __init__(self, client: firestore.Client) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.telemetry = Telemetry(tracer_provider=provider)
        self.client = client

    def dedup(self, **settings: Any) -> Deduplicator:
        config = DedupConfig(project=PROJECT, cache_size=0, **settings)
        return Deduplicator(config, client=self.client, telemetry=self.telemetry)

    def anonymous_entrance(self) -> dict[str, Any]:
        """Keywords of an anonymous HTTP or callable entrance observed by these spans."""
        dedup = self.dedup(on_payload_mismatch="raise")
        return {"anonymous": True, "deduplicator": dedup, "registry": SuffixRegistry()}

    def deliveries(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith("dedup ")]


@pytest.fixture
def spans(firestore_client: firestore.Client) -> Spans:
    return Spans(firestore_client)


def parent(span: ReadableSpan) -> tuple[str, str]:
    """(trace id, parent span id) of a delivery span."""
    assert span.parent is not None
    assert span.parent.is_remote
    return trace.format_trace_id(span.context.trace_id), trace.format_span_id(span.parent.span_id)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_http_continues_the_callers_trace_and_a_replay_names_it(spans: Spans) -> None:
    """`idempotent_http`: the span's parent is the request's `traceparent`; the same key from
    another trace is replayed, with a `dedup.replayed` event naming the first trace. Cloud
    Trace's header works where no `traceparent` is sent."""
    suffix = unique("trace_http").replace("-", "_")

    @idempotent_http(suffix, **spans.anonymous_entrance())
    def handler(call: IdempotentRequest) -> flask.Response:
        return flask.Response("{}", 201, content_type="application/json")

    app = flask.Flask(__name__)
    key = str(uuid.uuid4())

    def post(headers: dict[str, str]) -> flask.Response:
        sent = {"Content-Type": "application/json", "Idempotency-Key": key, **headers}
        with app.test_request_context("/", method="POST", data=b"{}", headers=sent):
            return handler(flask.request)

    assert post({"traceparent": TRACEPARENT}).status_code == 201
    other = "1" * 32
    replayed = post({"X-Cloud-Trace-Context": f"{other}/12345;o=1"})
    assert replayed.headers.get("Idempotent-Replayed") == "true"
    first, second = spans.deliveries()
    assert parent(first) == (TRACE, SPAN)
    assert parent(second) == (other, f"{12345:016x}")
    [event] = second.events
    assert (event.name, dict(event.attributes or {})) == (
        "dedup.replayed",
        {"dedup.original_trace_id": TRACE},
    )


def test_callable_continues_the_callers_trace(spans: Spans) -> None:
    """`idempotent_callable`: the raw request's `traceparent` is the parent; a replay names it."""
    suffix = unique("trace_call").replace("-", "_")

    @idempotent_callable(suffix, **spans.anonymous_entrance())
    def handler(request: CallableRequest[Any], delivery: Delivery) -> dict[str, str]:
        return {"ok": "yes"}

    app = flask.Flask(__name__)
    data = {"idempotencyKey": str(uuid.uuid4())}
    for _ in range(2):
        with app.test_request_context("/", method="POST", headers={"traceparent": TRACEPARENT}):
            raw = flask.request._get_current_object()  # type: ignore[attr-defined]
            assert handler(https_fn.CallableRequest(raw_request=raw, data=data)) == {"ok": "yes"}
    first, second = spans.deliveries()
    assert parent(first) == parent(second) == (TRACE, SPAN)
    assert [e.name for e in second.events] == ["dedup.replayed"]


def test_task_dispatch_continues_the_trace_of_its_headers(spans: Spans) -> None:
    """`task_once`: the dispatch's request headers carry the context (the relay puts it there)."""
    suffix = unique("trace_task").replace("-", "_")

    @task_once(suffix, deduplicator=spans.dedup(), registry=SuffixRegistry())
    def handler(request: CallableRequest[Any], delivery: Delivery) -> None:
        pass

    app = flask.Flask(__name__)
    headers = {TASK_NAME_HEADER: unique("task"), "traceparent": TRACEPARENT}
    with app.test_request_context("/", method="POST", headers=headers):
        raw = flask.request._get_current_object()  # type: ignore[attr-defined]
        handler(CallableRequest(raw_request=raw, data={}))
    [span] = spans.deliveries()
    assert parent(span) == (TRACE, SPAN)


def test_events_continue_the_trace_of_their_extension_or_message_attributes(
    spans: Spans, firestore_client: firestore.Client
) -> None:
    """`trigger_once`: a CloudEvent's `traceparent` extension; a Pub/Sub message's attributes.
    A redelivery is a `dedup.duplicate` event naming the original trace, kept on the record."""
    suffix = unique("trace_event").replace("-", "_")
    dedup = spans.dedup()

    @trigger_once(suffix, deduplicator=dedup, registry=SuffixRegistry())
    def handler(event: Any, delivery: Delivery) -> None:
        pass

    event_id = unique("e")
    handler(
        CloudEvent({"type": "t", "source": "s", "id": event_id, "traceparent": TRACEPARENT}, {})
    )
    message = {
        "data": "",
        "attributes": {"googclient_traceparent": f"00-{'3' * 32}-{SPAN}-01"},
        "messageId": event_id,
    }
    source = "//pubsub.googleapis.com/projects/p/topics/t"
    handler(CloudEvent({"type": PUBSUB_TYPE, "source": source, "id": "x"}, {"message": message}))
    first, second = spans.deliveries()
    assert parent(first) == (TRACE, SPAN)
    assert parent(second) == ("3" * 32, SPAN)
    [event] = second.events
    assert (event.name, dict(event.attributes or {})) == (
        "dedup.duplicate",
        {"dedup.original_trace_id": TRACE},
    )
    record = firestore_client.document(f"triggerEvents/{event_id}-{suffix}").get()
    assert record.get("traceId") == TRACE


def test_async_handlers_continue_the_trace_too(spans: Spans) -> None:
    """The async path of `trigger_once` attaches the same context."""
    suffix = unique("trace_async").replace("-", "_")

    async def run() -> None:
        dedup = AsyncDeduplicator(
            DedupConfig(project=PROJECT, cache_size=0),
            client=AsyncClient(project=PROJECT),
            telemetry=spans.telemetry,
        )

        @trigger_once(suffix, deduplicator=dedup, registry=SuffixRegistry())
        async def handler(event: Any, delivery: AsyncDelivery) -> None:
            pass

        attributes = {"type": "t", "source": "s", "id": unique("e"), "traceparent": TRACEPARENT}
        await handler(CloudEvent(attributes, json.loads("{}")))

    asyncio.run(run())
    [span] = spans.deliveries()
    assert parent(span) == (TRACE, SPAN)
