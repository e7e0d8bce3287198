"""Trace context in and out (`dedup.platform.propagation`), with the OpenTelemetry API alone: every
carrier of the module's table is read, a malformed one is ignored, and what is sent carries
the current context."""

from __future__ import annotations

import json
from typing import Any

import flask
import pytest
from cloudevents.http import CloudEvent
from opentelemetry import trace
from opentelemetry.context import Context

from dedup.kinds import describe
from dedup.platform import propagation

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"
PUBSUB_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"


def ids(found: Context | None) -> tuple[str, str, bool]:
    """(trace id, span id, sampled) of the span a context carries."""
    assert found is not None
    span_context = trace.get_current_span(found).get_span_context()
    assert span_context.is_remote
    return (
        trace.format_trace_id(span_context.trace_id),
        trace.format_span_id(span_context.span_id),
        span_context.trace_flags.sampled,
    )


def pubsub_event(attributes: dict[str, str], **extensions: str) -> CloudEvent:
    message = {"data": "", "attributes": attributes, "messageId": "m1"}
    return CloudEvent(
        {"type": PUBSUB_TYPE, "source": "//pubsub.googleapis.com/projects/p/topics/t", "id": "1"}
        | extensions,
        {"message": message},
    )


def test_w3c_headers_any_case_with_tracestate() -> None:
    """`traceparent` (any case) is read with its `tracestate`."""
    found = propagation.from_headers({"TraceParent": TRACEPARENT, "tracestate": "vendor=1"})
    assert ids(found) == (TRACE, SPAN, True)
    assert trace.get_current_span(found).get_span_context().trace_state.get("vendor") == "1"


def test_cloud_trace_header_when_no_traceparent() -> None:
    """Google's front end header: hex trace id, decimal span id, `o=1` sampled."""
    found = propagation.from_headers({"X-Cloud-Trace-Context": f"{TRACE}/13224283948570235697;o=1"})
    assert ids(found) == (TRACE, f"{13224283948570235697:016x}", True)
    unsampled = propagation.from_headers({"X-Cloud-Trace-Context": f"{TRACE}/5"})
    assert ids(unsampled) == (TRACE, f"{5:016x}", False)
    both = {"traceparent": TRACEPARENT, "X-Cloud-Trace-Context": f"{'1' * 32}/5;o=1"}
    assert ids(propagation.from_headers(both))[0] == TRACE  # W3C first


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"traceparent": "garbage"},
        {"traceparent": f"00-{'0' * 32}-{SPAN}-01"},
        {"X-Cloud-Trace-Context": f"{TRACE}/0;o=1"},
        {"X-Cloud-Trace-Context": "not/a;o=1"},
        {"X-Cloud-Trace-Context": f"{TRACE}/{2**64};o=1"},
    ],
)
def test_a_missing_or_malformed_carrier_is_no_context(headers: dict[str, str]) -> None:
    """Nothing usable: None (the delivery starts a new trace), never an error."""
    assert propagation.from_headers(headers) is None


@pytest.mark.parametrize(
    "attributes",
    [
        {"traceparent": TRACEPARENT},
        {"googclient_traceparent": TRACEPARENT},
        {
            "googclient_OpenTelemetrySpanContext": json.dumps(
                {"traceId": TRACE, "spanId": SPAN, "traceFlags": 1}
            )
        },
    ],
)
def test_pubsub_message_attributes(attributes: dict[str, str]) -> None:
    """Each way a publisher writes its context into the message attributes is read, from the
    raw CloudEvent and from firebase-functions' event alike."""
    assert ids(propagation.from_message_attributes(attributes)) == (TRACE, SPAN, True)
    event = pubsub_event(attributes)
    assert ids(propagation.from_event(event)) == (TRACE, SPAN, True)


def test_message_attributes_come_before_the_cloud_event_extension() -> None:
    """A Pub/Sub event: the publisher's context (attributes) wins over the push's."""
    other = f"00-{'2' * 32}-{SPAN}-01"
    assert (
        ids(propagation.from_event(pubsub_event({"traceparent": TRACEPARENT}, traceparent=other)))[
            0
        ]
        == TRACE
    )
    assert ids(propagation.from_event(pubsub_event({}, traceparent=other)))[0] == "2" * 32


def test_a_bad_legacy_span_context_is_ignored() -> None:
    """Not JSON, not an object, ids of the wrong shape: no context."""
    for value in [
        "{",
        "[]",
        json.dumps({"traceId": "x", "spanId": SPAN}),
        json.dumps({"traceId": TRACE}),
    ]:
        assert (
            propagation.from_message_attributes({"googclient_OpenTelemetrySpanContext": value})
            is None
        )


def test_cloud_event_extension_and_the_served_requests_ce_header() -> None:
    """A CloudEvent's `traceparent` extension; for an event object without extensions, the
    `ce-traceparent` header of the request being served."""
    event = CloudEvent({"type": "t", "source": "s", "id": "1", "traceparent": TRACEPARENT}, {})
    assert ids(propagation.from_event(event)) == (TRACE, SPAN, True)
    app = flask.Flask(__name__)
    with app.test_request_context("/", headers={"ce-traceparent": TRACEPARENT}):
        assert ids(propagation.from_event(object())) == (TRACE, SPAN, True)
        assert propagation.from_current_request() is None  # not an HTTP caller's header
    with app.test_request_context("/", headers={"traceparent": TRACEPARENT}):
        assert ids(propagation.from_current_request()) == (TRACE, SPAN, True)
    assert propagation.from_event(object()) is None


def test_what_is_sent_carries_the_current_context_without_an_sdk() -> None:
    """The API alone: inside `continued`, spans are non-recording but carry the caller's
    context, so headers and attributes sent from there name the caller's trace."""
    assert propagation.headers() == {}
    assert propagation.current_trace_id() is None
    caller = propagation.from_headers({"traceparent": TRACEPARENT})
    with propagation.continued(caller), trace.NoOpTracer().start_as_current_span("inner"):
        assert propagation.headers() == {"traceparent": TRACEPARENT}
        assert propagation.message_attributes() == {"traceparent": TRACEPARENT}
        assert propagation.current_trace_id() == TRACE
    assert propagation.headers() == {}
    with propagation.continued(None):
        assert propagation.headers() == {}


def test_trace_attributes_are_not_part_of_a_messages_fingerprint() -> None:
    """A message published again from another trace is the same message."""
    plain: dict[str, Any] = {"route": "line"}
    traced = {**plain, "traceparent": TRACEPARENT, "googclient_traceparent": TRACEPARENT}
    assert describe(pubsub_event(plain)).payload == describe(pubsub_event(traced)).payload
    assert describe(pubsub_event(plain)).payload != describe(pubsub_event({"route": "x"})).payload
