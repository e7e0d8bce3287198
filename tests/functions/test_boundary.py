"""Bad input at the HTTP boundary of each function: refused with a clear 4xx and one log line,
no dedup record created, no effect, and the function serves the next good event."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient

from dedup import dedup_key
from demo.events import HttpEvent, firestore_event, pubsub_event
from demo.receiver import Receiver
from tests.conftest import PROJECT
from tests.functions.conftest import InProcessFunction
from tests.functions.mutations import (
    DROP,
    Mutation,
    nested_json,
    renamed,
    truncated,
    with_body,
    with_envelope,
    with_fields,
    with_header,
    with_message,
    without,
)

TEN_MB = b"x" * (10 * 1024 * 1024)
TIME = "2026-01-01T00:00:00Z"
DEEP = nested_json(5000)
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]+(?:Error|Exception)\b")

COMMON: dict[str, tuple[Mutation, int]] = {
    "missing id": (without("ce-id"), 400),
    "empty id": (with_header("ce-id", ""), 400),
    "unknown event type": (with_header("ce-type", "com.example.unknown"), 400),
    "wrong content type": (with_header("Content-Type", "text/plain"), 415),
    "unparseable time": (with_header("ce-time", "yesterday"), 400),
    "time with trailing garbage": (with_header("ce-time", TIME + "garbage"), 400),
    "duplicated time": (with_header("ce-time", f"{TIME}, {TIME}"), 400),
    "impossible date": (with_header("ce-time", "2026-13-45T25:61:61Z"), 400),
}
FIRESTORE_ONLY: dict[str, tuple[Mutation, int]] = {
    "protobuf without content type": (without("Content-Type"), 415),  # the default is JSON
    "10 MB body": (with_body(TEN_MB), 413),  # more than two 1 MiB documents
    "truncated protobuf": (truncated, 400),
    "garbage protobuf": (with_body(b"\xff\xfe\xfd not a protobuf \x00\x01"), 400),
    "JSON where protobuf is expected": (with_body(b'{"value": {"fields": {}}}'), 400),
    "JSON body as application/json": (
        lambda e: with_header("Content-Type", "application/json")(
            with_body(b'{"value": {"fields": {}}}')(e)
        ),
        415,
    ),
    "no document attribute": (without("ce-document"), 400),
    "no location": (without("ce-location"), 400),
    "no project": (without("ce-project"), 400),
    "no namespace": (without("ce-namespace"), 400),
    "no database": (without("ce-database"), 400),
    "no subject": (without("ce-subject"), 400),
    "project with a slash": (with_header("ce-project", "a/b"), 400),
    "another database": (with_header("ce-database", "other"), 400),
    "document 'posts/'": (with_header("ce-document", "posts/"), 400),
    "document not the one in the data": (with_header("ce-document", "posts/other"), 400),
    "subject not the document": (with_header("ce-subject", "documents/posts/other"), 400),
    "no document version": (with_body(b""), 400),
    "undecodable reference": (with_fields({"r": {"reference_value": "not-a-reference"}}), 400),
    "reference to another project": (
        with_fields({"r": {"reference_value": "projects/x/databases/(default)/documents/a/b"}}),
        400,
    ),
    "other collection": (renamed("users/ann"), 400),
    "odd segments": (renamed("posts/a/b"), 400),
    "one segment": (renamed("posts"), 400),
    "sub-collection": (renamed("posts/a/b/c"), 400),
    "dot-dot in path": (renamed("posts/../triggerEvents/x"), 400),
    "outbox dot-dot": (renamed("outbox/../triggerEvents/x"), 400),
    "dot id": (renamed("posts/."), 400),
    "reserved id": (renamed("outbox/__x__"), 400),
}
PUBSUB_ONLY: dict[str, tuple[Mutation, int]] = {
    "no message id": (
        with_body(json.dumps({"message": {"data": "", "publish_time": TIME}}).encode()),
        400,
    ),
    "10 MB body": (with_body(TEN_MB), 400),  # a message may be 10 MB, but this is not JSON
    "data not base64": (with_message(data="%%% not base64 %%%"), 400),
    "JSON that is not JSON": (with_body(b"{truncated"), 400),
    "no message": (with_body(b'{"subscription": "s"}'), 400),
    "publish_time not RFC 3339": (with_message(publish_time="2026-1-1 0:00"), 400),
    "publish_time a number": (with_message(publish_time=5), 400),
    "no data": (with_message(data=DROP), 400),
    "data null": (with_message(data=None), 400),
    "unknown message field": (with_message(extra="x"), 400),
    "attributes null": (with_message(attributes=None), 400),
    "message_id a number": (with_message(message_id=5, messageId=5), 400),
    "messageId and message_id differ": (with_message(messageId="other"), 400),
    "publishTime and publish_time differ": (with_message(publishTime="2026-01-02T00:00:00Z"), 400),
    "no publish time in either spelling": (with_message(publishTime=DROP, publish_time=DROP), 400),
    "no subscription": (with_envelope(subscription=DROP), 400),
    "subscription null": (with_envelope(subscription=None), 400),
    "route a map": (with_message(attributes={"route": {"a": "b"}}), 400),
    "contentType a list": (with_message(attributes={"contentType": ["a"]}), 400),
    "route a number": (with_message(attributes={"route": 5}), 400),
    "orderingKey a map": (with_message(orderingKey={}), 400),
    "another topic": (
        with_header("ce-source", f"//pubsub.googleapis.com/projects/{PROJECT}/topics/other"), 400),
    "its topic's name in another project": (
        with_header("ce-source", "//pubsub.googleapis.com/projects/elsewhere/topics/webhooks"),
        400),
    "batch content type in binary mode": (
        with_header("Content-Type", "application/cloudevents-batch+json"), 415),
    "envelope nested 5,000 levels": (with_body(b'{"message": ' + DEEP + b"}"), 400),
    "attributes nested 900 levels": (with_message(attributes=json.loads(nested_json(900))), 400),
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


def order_event(db: firestore.Client, unique: str) -> HttpEvent:
    db.document("stock/coffee").set({"available": 10, "price": 350})
    ref = db.collection("orders").document(f"o-{unique}")
    ref.set({"uid": "ann", "item": "coffee", "quantity": 1})
    return firestore_event(ref.path, None, ref.get(), project=PROJECT, change="created")


def webhook_event(db: firestore.Client, unique: str) -> HttpEvent:
    return pubsub_event("webhooks", b'{"events": []}', project=PROJECT, message_id=f"m-{unique}")


def counter_effects(db: firestore.Client, receiver: Receiver) -> int:
    ann = db.document("users/ann").get().to_dict() or {}
    return int(ann.get("publishedPostCount", 0))


def notice_effects(db: firestore.Client, receiver: Receiver) -> int:
    return len(receiver.applied("/notify"))


def webhook_effects(db: firestore.Client, receiver: Receiver) -> int:
    return len(receiver.applied())


def charge_effects(db: firestore.Client, receiver: Receiver) -> int:
    return len(receiver.applied("/payments"))


def relay_effects(db: firestore.Client, receiver: Receiver) -> int:
    return sum(
        1 for doc in db.collection("outbox").stream() if "messageId" in (doc.to_dict() or {})
    )


CASES = {
    "sync_published_count": Case(post_event, counter_effects, FIRESTORE_ONLY),
    "send_post_notification": Case(post_event, notice_effects, FIRESTORE_ONLY),
    "relay_outbox": Case(outbox_event, relay_effects, FIRESTORE_ONLY),
    "forward_webhook": Case(webhook_event, webhook_effects, PUBSUB_ONLY),
    "fulfil_order": Case(order_event, charge_effects, FIRESTORE_ONLY),
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
    assert not EXCEPTION_NAME.search(response.get_data(as_text=True)), response.get_data()
    refusals = [r for r in caplog.records if getattr(r, "outcome", None) == "refused"]
    assert len(refusals) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a refusal"
    assert list(firestore_client.collection("triggerEvents").list_documents()) == []
    assert case.effects(firestore_client, receiver) == 0

    assert served.deliver(good) == 200
    assert case.effects(firestore_client, receiver) == 1


@pytest.mark.parametrize(
    "dropped",
    [("message_id", "publish_time"), ("messageId", "publishTime")],
    ids=["camelCase only", "snake_case only"],
)
def test_either_spelling_of_the_message_id_and_publish_time_is_read(
    dropped: tuple[str, str],
    serve: Callable[[str], InProcessFunction],
    firestore_client: firestore.Client,
    receiver: Receiver,
    unique: str,
) -> None:
    """A push whose message has only `messageId`/`publishTime` (Eventarc's documented example),
    or only `message_id`/`publish_time`, is read and forwarded once, keyed by the message id;
    the same message with both spellings is then a duplicate."""
    served = serve("forward_webhook")
    both = webhook_event(firestore_client, unique)
    one = with_message(**dict.fromkeys(dropped, DROP))(both)
    assert not set(dropped) & set(json.loads(one.body)["message"])
    assert served.deliver(one) == 200
    assert served.deliver(both) == 200
    assert len(receiver.applied()) == 1
    [record] = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert (record["eventId"], record["state"]) == (f"m-{unique}", "sent")


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
    assert len(receiver.applied()) == 1
    [record] = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert record["eventId"] == message_id
    assert record["state"] == "sent"


def test_answers_name_no_exception_and_echo_no_header(
    serve: Callable[[str], InProcessFunction], firestore_client: firestore.Client, unique: str
) -> None:
    """A 100 KB content type, an event type or a body that does not parse: the answer is short,
    in the project's words, with no exception type and none of the values sent."""
    served = serve("forward_webhook")
    good = webhook_event(firestore_client, unique)
    marker = "zq" + "x" * 100_000
    for bad in [
        with_header("Content-Type", f"text/{marker}")(good),
        with_header("ce-type", f"com.example.{marker}")(good),
        with_body(b'{"message": {"data": "' + marker.encode() + b"")(good),
        with_body(b"\xff\xfe" + marker.encode())(good),
    ]:
        response = served.client.post("/", data=bad.body, headers=dict(bad.headers))
        text = response.get_data(as_text=True)
        assert 400 <= response.status_code < 500, text[:300]
        assert len(text) < 1000
        assert "zq" not in text, "the answer must not echo the request"
        assert not EXCEPTION_NAME.search(text), text
        assert set(json.loads(text)) == {"error"}


def test_emulator_health_probe_is_logged_at_info(
    serve: Callable[[str], InProcessFunction], caplog: pytest.LogCaptureFixture
) -> None:
    """The Functions emulator's `GET /__/health` at worker start is a 405 logged at INFO; any
    other refused request, a GET / included, stays a WARNING."""
    served = serve("sync_published_count")
    caplog.set_level(logging.INFO)
    for path, level in [("/__/health", logging.INFO), ("/", logging.WARNING)]:
        caplog.clear()
        assert served.client.get(path).status_code == 405
        [refusal] = [r for r in caplog.records if getattr(r, "outcome", None) == "refused"]
        assert refusal.levelno == level, path


@pytest.mark.parametrize(
    "header",
    ["posts/%E6%97%A5%E6%9C%AC-", "posts/日本-".encode().decode("latin-1"), "posts/日本-"],
    ids=["percent-encoded", "utf-8 read as latin-1", "as is"],
)
def test_non_ascii_document_is_the_one_in_the_data(
    header: str,
    unique: str,
    serve: Callable[[str], InProcessFunction],
    firestore_client: firestore.Client,
    receiver: Receiver,
) -> None:
    """However the header spells a non-ASCII document, the function sees the document the data
    names: one post, one key, one notice."""
    firestore_client.document("users/ann").set({"followers": ["ben"]})
    firestore_client.document("users/ben").set({"fcmToken": "token-ben"})
    ref = firestore_client.document(f"posts/日本-{unique}")
    ref.set({"authorId": "ann", "published": True})
    event = firestore_event(ref.path, None, ref.get(), project=PROJECT)
    spelled = with_header("ce-subject", f"documents/{header}{unique}")(
        with_header("ce-document", header + unique)(event)
    )
    served = serve("send_post_notification")
    assert served.deliver(spelled) == 200
    assert served.deliver(event) == 200
    [notice] = receiver.applied("/notify")
    assert notice.idempotency_key == dedup_key(f"post-日本-{unique}", "send_post_notification")
    assert json.loads(notice.body)["postId"] == f"日本-{unique}"
