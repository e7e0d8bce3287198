"""Trace context in and out: a delivery continues its caller's trace and passes it on.

OpenTelemetry API only, so it works with or without an SDK (DEDUP_OTEL): without one, the
delivery's span is a non-recording span that carries the caller's context, and what the
handler sends carries that context onward unchanged. Where the caller's context is read:

=======================  ==================================================================
Entrance                 Carrier, first one present wins
=======================  ==================================================================
HTTP, callable, task     W3C `traceparent` (+ `tracestate`) header; else Cloud Trace's
                         `X-Cloud-Trace-Context` (`TRACE_ID/SPAN_ID;o=1`, Google's front end)
Pub/Sub message          message attributes: `traceparent` (+ `tracestate`); the Pub/Sub
                         client libraries' `googclient_traceparent` (Python, Go, Java) or
                         `googclient_OpenTelemetrySpanContext` (Node's JSON span context);
                         then the CloudEvent's own `traceparent`
other CloudEvent         the `traceparent` extension attribute (+ `tracestate`); for an event
                         object that dropped its extensions (firebase-functions' own), the
                         `ce-traceparent` header of the request being served
=======================  ==================================================================

A malformed carrier is ignored (the delivery starts a new trace), never an error.
What is sent: `headers()` and `message_attributes()` give the current context as W3C
`traceparent`/`tracestate`, for an HTTP request, a Cloud Task's headers or a Pub/Sub message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
CLOUD_TRACE_HEADER = "X-Cloud-Trace-Context"
PUBSUB_CLIENT_PREFIX = "googclient_"
"""Prefix the Pub/Sub client libraries put before the propagator's keys in message attributes."""
PUBSUB_LEGACY_SPAN_CONTEXT = "googclient_OpenTelemetrySpanContext"
"""Attribute of the Node Pub/Sub client's OpenTelemetry support: a JSON span context."""
CLOUD_EVENT_HEADER_PREFIX = "ce-"
"""Binary-mode CloudEvents carry their attributes as `ce-<name>` request headers."""

_TRACE_ATTRIBUTES = frozenset({TRACEPARENT, TRACESTATE})
_W3C = TraceContextTextMapPropagator()
_CLOUD_TRACE = r"(?P<trace>[0-9a-fA-F]{32})/(?P<span>\d{1,20})(?:;o=(?P<o>\d+))?"
_HEX32 = r"[0-9a-f]{32}"
_HEX16 = r"[0-9a-f]{16}"


class Headers(Protocol):
    """Request headers (Flask's, a dict): looked up by name."""

    def get(self, key: str, /) -> str | None: ...


def from_headers(headers: Headers | Mapping[str, str]) -> Context | None:
    """The caller's context from HTTP headers: W3C, else `X-Cloud-Trace-Context`; or None."""
    found = _w3c(_lookup(headers, TRACEPARENT), _lookup(headers, TRACESTATE))
    return found if found is not None else _cloud_trace(_lookup(headers, CLOUD_TRACE_HEADER))


def from_current_request() -> Context | None:
    """The caller's context from the headers of the Flask request being served (HTTP and
    callable functions), or None outside a request."""
    request = _served_request()
    return None if request is None else from_headers(request.headers)


def from_message_attributes(attributes: Mapping[str, Any] | None) -> Context | None:
    """The publisher's context from Pub/Sub message attributes (module table), or None."""
    if not attributes:
        return None
    for prefix in ("", PUBSUB_CLIENT_PREFIX):
        found = _w3c(attributes.get(prefix + TRACEPARENT), attributes.get(prefix + TRACESTATE))
        if found is not None:
            return found
    return _legacy_span_context(attributes.get(PUBSUB_LEGACY_SPAN_CONTEXT))


def from_event(event: object) -> Context | None:
    """The context an event carries (module table), or None: for a Pub/Sub event the message
    attributes first, then the CloudEvent's `traceparent` attribute."""
    found = from_message_attributes(_message_attributes(event))
    if found is not None:
        return found
    get_attributes = getattr(event, "get_attributes", None)
    if callable(get_attributes):  # a cloudevents CloudEvent keeps its extension attributes
        attributes = get_attributes()
        return _w3c(attributes.get(TRACEPARENT), attributes.get(TRACESTATE))
    return _from_served_request()


@contextmanager
def continued(parent: Context | None) -> Iterator[None]:
    """Make `parent` the current context inside the block (nothing changes for None): spans
    started inside, the delivery's first, are its children."""
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


def headers() -> dict[str, str]:
    """The current context as W3C headers (`traceparent`, `tracestate` if any); `{}` when
    there is none. For an HTTP request or a Cloud Task's headers."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier


def message_attributes() -> dict[str, str]:
    """The current context as Pub/Sub message attributes (`traceparent`, `tracestate`)."""
    return headers()


def is_trace_attribute(name: str) -> bool:
    """True for a message attribute that carries trace context, not message content."""
    return name in _TRACE_ATTRIBUTES or name.startswith(PUBSUB_CLIENT_PREFIX)


def current_trace_id() -> str | None:
    """The current span's trace id as 32 lowercase hex digits, or None without a context."""
    span_context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(span_context.trace_id) if span_context.is_valid else None


def _lookup(headers: Headers | Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None and isinstance(headers, Mapping):  # a plain dict is case-sensitive
        value = next((v for k, v in headers.items() if k.lower() == name.lower()), None)
    return value if isinstance(value, str) else None


def _w3c(traceparent: object, tracestate: object) -> Context | None:
    if not isinstance(traceparent, str) or not traceparent:
        return None
    carrier = {TRACEPARENT: traceparent}
    if isinstance(tracestate, str) and tracestate:
        carrier[TRACESTATE] = tracestate
    return _valid(_W3C.extract(carrier, context=Context()))


def _cloud_trace(value: str | None) -> Context | None:
    match = re.fullmatch(_CLOUD_TRACE, value.strip()) if value else None
    if match is None:
        return None
    span_id = int(match["span"])
    if not 0 < span_id < 2**64:
        return None
    sampled = TraceFlags.SAMPLED if match["o"] == "1" else TraceFlags.DEFAULT
    return _remote(int(match["trace"], 16), span_id, sampled)


def _legacy_span_context(value: object) -> Context | None:
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    trace_id, span_id = parsed.get("traceId"), parsed.get("spanId")
    if not (isinstance(trace_id, str) and re.fullmatch(_HEX32, trace_id)):
        return None
    if not (isinstance(span_id, str) and re.fullmatch(_HEX16, span_id)):
        return None
    flags = parsed.get("traceFlags")
    sampled = TraceFlags.SAMPLED if flags == 1 else TraceFlags.DEFAULT
    return _remote(int(trace_id, 16), int(span_id, 16), sampled)


def _remote(trace_id: int, span_id: int, flags: int) -> Context | None:
    span_context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
    return _valid(trace.set_span_in_context(NonRecordingSpan(span_context), Context()))


def _valid(found: Context) -> Context | None:
    return found if trace.get_current_span(found).get_span_context().is_valid else None


def _message_attributes(event: object) -> Mapping[str, Any] | None:
    message = getattr(getattr(event, "data", None), "message", None)
    if message is not None:  # firebase-functions' CloudEvent[MessagePublishedData]
        attributes = getattr(message, "attributes", None)
        return attributes if isinstance(attributes, Mapping) else None
    get_data = getattr(event, "get_data", None)
    data = get_data() if callable(get_data) else None
    if isinstance(data, Mapping) and isinstance(data.get("message"), Mapping):
        attributes = data["message"].get("attributes")
        return attributes if isinstance(attributes, Mapping) else None
    return None


def _served_request() -> Any:
    """The Flask request being served, or None."""
    try:
        import flask
    except ImportError:  # pragma: no cover - flask comes with functions-framework
        return None
    return flask.request if flask.has_request_context() else None


def _from_served_request() -> Context | None:
    """`ce-traceparent` of the request being served, for event objects without extensions."""
    request = _served_request()
    if request is None:
        return None
    request_headers = request.headers
    return _w3c(
        request_headers.get(CLOUD_EVENT_HEADER_PREFIX + TRACEPARENT),
        request_headers.get(CLOUD_EVENT_HEADER_PREFIX + TRACESTATE),
    )
