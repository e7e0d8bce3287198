"""One trace from the client to the effect: LINE → `receive_line_webhook` → Pub/Sub →
`forward_webhook` → receiver, on the emulators, with and without an OpenTelemetry SDK.

The chain runs in a subprocess (`tests.functions.trace_worker`), whose global tracer provider
is an SDK with an in-memory exporter (or nothing at all); the receiver is this process's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import SubscriberClient

from demo.pubsub import ensure_topic
from demo.receiver import Receiver
from tests.conftest import PROJECT
from tests.functions.trace_worker import API_TRACEPARENT, REDELIVERY_TRACEPARENT
from tests.http.support import LINE_SECRET

ROOT = Path(__file__).resolve().parents[2]
LINE_SPAN, FORWARD_SPAN = "dedup receive_line_webhook", "dedup forward_webhook"


@pytest.fixture
def subscription(firestore_host: str) -> Iterator[str]:
    """A fresh subscription to `webhooks`: what receive_line_webhook publishes in this test."""
    name = f"trace-{uuid.uuid4().hex[:8]}"
    ensure_topic(PROJECT, "webhooks", subscription=name)
    path = SubscriberClient().subscription_path(PROJECT, name)
    yield path
    SubscriberClient().delete_subscription(subscription=path)


def chain(mode: str, event_id: str, subscription: str) -> dict[str, Any]:
    # No key cache: each redelivery reads the record, as on another instance.
    env = {**os.environ, "LINE_CHANNEL_SECRET": LINE_SECRET, "DEDUP_CACHE_SIZE": "0"}
    env.pop("DEDUP_OTEL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.functions.trace_worker", mode, event_id, subscription],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["statuses"] == [200, 200, 200, 200], result
    return result


def parent_of(traceparent: str) -> tuple[str, str]:
    """(trace id, parent span id) of a W3C `traceparent` (its flags left aside)."""
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def trace_ids(client: firestore.Client, event_id: str, message_id: str) -> tuple[Any, Any]:
    """The `traceId` of the two records: the LINE event's and the forwarded message's."""
    line = client.document(f"triggerEvents/{event_id}-receive_line_webhook").get()
    forwarded = client.document(f"triggerEvents/{message_id}-forward_webhook").get()
    return line.get("traceId"), forwarded.get("traceId")


def test_with_the_sdk_the_chain_is_one_trace_with_its_parent_links(
    subscription: str, receiver: Receiver, firestore_client: firestore.Client
) -> None:
    """Every span of the chain has LINE's trace id; each hop's span is the child of the one
    before (LINE's client span → the ingress delivery → the forward delivery → the receiver's
    traceparent); redeliveries are `dedup.duplicate` events naming the original trace."""
    event_id = f"01H{uuid.uuid4().hex[:20].upper()}"
    result = chain("sdk", event_id, subscription)
    spans = result["spans"]
    by_name = {s["name"]: [x for x in spans if x["name"] == s["name"]] for s in spans}
    [client] = by_name["LINE webhook"]
    trace_id = client["trace_id"]
    ingress, redelivered_line = by_name[LINE_SPAN]
    forward, redelivered_message = by_name[FORWARD_SPAN]
    assert (ingress["outcome"], forward["outcome"]) == ("ran", "ran")
    assert ingress["trace_id"] == forward["trace_id"] == redelivered_message["trace_id"] == trace_id
    assert ingress["parent_id"] == client["span_id"] == result["client_span"]
    assert parent_of(result["attributes"]["traceparent"]) == (trace_id, ingress["span_id"])
    assert forward["parent_id"] == ingress["span_id"]
    [applied] = receiver.applied("/webhooks/line")
    assert parent_of(applied.headers["traceparent"]) == (trace_id, forward["span_id"])
    # The redeliveries: Pub/Sub's is in the same trace; LINE's comes from a new one.
    original = {"dedup.original_trace_id": trace_id}
    assert redelivered_message["outcome"].startswith("duplicate")
    assert redelivered_message["events"] == [{"name": "dedup.duplicate", "attributes": original}]
    assert redelivered_line["trace_id"] == REDELIVERY_TRACEPARENT.split("-")[1]
    assert redelivered_line["outcome"] == "duplicate"
    assert redelivered_line["events"] == [{"name": "dedup.duplicate", "attributes": original}]
    assert trace_ids(firestore_client, event_id, event_id) == (trace_id, trace_id)


def test_without_an_sdk_the_api_alone_carries_the_callers_context(
    subscription: str, receiver: Receiver, firestore_client: firestore.Client
) -> None:
    """No SDK, no DEDUP_OTEL: nothing is recorded, yet the caller's traceparent reaches the
    message and the receiver unchanged, and both records name the caller's trace."""
    event_id = f"01H{uuid.uuid4().hex[:20].upper()}"
    result = chain("api", event_id, subscription)
    assert result["spans"] == []
    assert result["attributes"]["traceparent"] == API_TRACEPARENT
    [applied] = receiver.applied("/webhooks/line")
    assert applied.headers["traceparent"] == API_TRACEPARENT
    trace_id = API_TRACEPARENT.split("-")[1]
    assert trace_ids(firestore_client, event_id, event_id) == (trace_id, trace_id)
