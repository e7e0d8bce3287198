"""Bad input at the HTTP boundary of each function: refused with a clear 4xx and one log line,
no dedup record created, no effect, and the function serves the next good event."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient

from demo.events import HttpEvent, firestore_event, pubsub_event
from demo.receiver import Receiver
from tests.conftest import PROJECT
from tests.functions.conftest import InProcessFunction

Mutation = Callable[[HttpEvent], HttpEvent]


def without(header: str) -> Mutation:
    return lambda e: HttpEvent(e.id, {k: v for k, v in e.headers.items() if k != header}, e.body)


def with_header(header: str, value: str) -> Mutation:
    return lambda e: HttpEvent(e.id, {**e.headers, header: value}, e.body)


def with_body(body: bytes) -> Mutation:
    return lambda e: HttpEvent(e.id, e.headers, body)


def truncated(e: HttpEvent) -> HttpEvent:
    return HttpEvent(e.id, e.headers, e.body[: len(e.body) // 2])


TEN_MB = b"x" * (10 * 1024 * 1024)

COMMON: dict[str, tuple[Mutation, int]] = {
    "missing id": (without("ce-id"), 400),
    "empty id": (with_header("ce-id", ""), 400),
    "unknown event type": (with_header("ce-type", "com.example.unknown"), 400),
    "wrong content type": (with_header("Content-Type", "text/plain"), 415),
}
FIRESTORE_ONLY: dict[str, tuple[Mutation, int]] = {
    "protobuf without content type": (without("Content-Type"), 415),  # the default is JSON
    "10 MB body": (with_body(TEN_MB), 413),  # more than two 1 MiB documents
    "truncated protobuf": (truncated, 400),
    "garbage protobuf": (with_body(b"\xff\xfe\xfd not a protobuf \x00\x01"), 400),
    "JSON where protobuf is expected": (with_body(b'{"value": {"fields": {}}}'), 400),
    "no document attribute": (without("ce-document"), 400),
}
PUBSUB_ONLY: dict[str, tuple[Mutation, int]] = {
    "no message id": (
        with_body(json.dumps({"message": {"data": "", "publish_time": "2026-01-01T00:00:00Z"}})
                  .encode()),
        400,
    ),
    "10 MB body": (with_body(TEN_MB), 400),  # a message may be 10 MB, but this is not JSON
    "data not base64": (
        with_body(json.dumps({"message": {"data": "%%% not base64 %%%", "message_id": "m",
                                          "publish_time": "2026-01-01T00:00:00Z"}}).encode()),
        400,
    ),
    "JSON that is not JSON": (with_body(b"{truncated"), 400),
    "no message": (with_body(b'{"subscription": "s"}'), 400),
}  # fmt: skip


@dataclass
class Case:
    """A function: how to make a good event for it, how to count its effects, its own faults."""

    good: Callable[[firestore.Client, str], HttpEvent]
    effects: Callable[[firestore.Client, Receiver], int]
    faults: dict[str, tuple[Mutation, int]]


def post_event(db: firestore.Client, unique: str) -> HttpEvent:
    ref = db.collection("posts").document(f"p-{unique}")
    before = ref.get()
    ref.set({"authorId": "ann", "published": True})
    return firestore_event(ref.path, before, ref.get(), project=PROJECT)


def outbox_event(db: firestore.Client, unique: str) -> HttpEvent:
    publisher = PublisherClient()
    publisher.create_topic(name=publisher.topic_path(PROJECT, f"boundary-{unique}"))
    ref = db.collection("outbox").document(f"o-{unique}")
    ref.set({"topic": f"boundary-{unique}", "data": b"x"})
    return firestore_event(ref.path, None, ref.get(), project=PROJECT, change="created")


def webhook_event(db: firestore.Client, unique: str) -> HttpEvent:
    return pubsub_event("webhooks", b'{"events": []}', project=PROJECT, message_id=f"m-{unique}")


def counter_effects(db: firestore.Client, receiver: Receiver) -> int:
    ann = db.document("users/ann").get().to_dict() or {}
    return int(ann.get("publishedPostCount", 0))


def notice_effects(db: firestore.Client, receiver: Receiver) -> int:
    return len(receiver.requests("/notify"))


def webhook_effects(db: firestore.Client, receiver: Receiver) -> int:
    return len(receiver.requests())


def relay_effects(db: firestore.Client, receiver: Receiver) -> int:
    return sum(
        1 for doc in db.collection("outbox").stream() if "messageId" in (doc.to_dict() or {})
    )


CASES = {
    "sync_published_count": Case(post_event, counter_effects, FIRESTORE_ONLY),
    "send_post_notification": Case(post_event, notice_effects, FIRESTORE_ONLY),
    "relay_outbox": Case(outbox_event, relay_effects, FIRESTORE_ONLY),
    "forward_webhook": Case(webhook_event, webhook_effects, PUBSUB_ONLY),
}
PARAMS = [
    pytest.param(function, name, mutation, status, id=f"{function}: {name}")
    for function, case in CASES.items()
    for name, (mutation, status) in {**COMMON, **case.faults}.items()
]


@pytest.mark.parametrize(("function", "name", "mutation", "status"), PARAMS)
def test_bad_input_is_refused_without_trace(
    function: str,
    name: str,
    mutation: Mutation,
    status: int,
    serve: Callable[[str], InProcessFunction],
    firestore_client: firestore.Client,
    receiver: Receiver,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A malformed request gets its 4xx and one log line; nothing is recorded or done; the
    next good event is served."""
    case = CASES[function]
    firestore_client.document("users/ann").set({"followers": ["ben"]})
    firestore_client.document("users/ben").set({"fcmToken": "token-ben"})
    served = serve(function)
    good = case.good(firestore_client, unique)
    caplog.set_level(logging.INFO)
    caplog.clear()

    bad = mutation(good)
    response = served.client.post("/", data=bad.body, headers=dict(bad.headers))

    assert response.status_code == status, response.get_data(as_text=True)[:300]
    assert len(response.get_data()) < 1000, "the refusal must not echo the request"
    refusals = [r for r in caplog.records if getattr(r, "outcome", None) == "refused"]
    assert len(refusals) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a refusal"
    assert list(firestore_client.collection("triggerEvents").list_documents()) == []
    assert case.effects(firestore_client, receiver) == 0

    assert served.deliver(good) == 200
    assert case.effects(firestore_client, receiver) == 1


@pytest.mark.parametrize(
    "event_id",
    ["a/b/c", "..", ".", "__reserved__", "~tilde", "événement-日本-🎉", "x" * 2048],
    ids=["slashes", "dot-dot", "dot", "reserved", "tilde", "unicode", "2 KB"],
)
def test_unusual_ids_are_deduplicated_not_refused(
    event_id: str,
    serve: Callable[[str], InProcessFunction],
    firestore_client: firestore.Client,
    receiver: Receiver,
) -> None:
    """An id Firestore cannot use as a document id is mapped to a safe one: the event runs once."""
    served = serve("forward_webhook")
    # Each id is used by this test alone, so the served function's memory of sent keys (which
    # outlives a test) cannot answer for it.
    # The message id is the dedup id; the CloudEvent id travels in an HTTP header, ASCII only.
    message_id = event_id
    event = pubsub_event(
        "webhooks", b"{}", project=PROJECT, message_id=message_id, event_id=f"ce-{len(event_id)}"
    )
    assert [served.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert len(receiver.requests()) == 1
    [record] = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert record["eventId"] == message_id
    assert record["state"] == "sent"
