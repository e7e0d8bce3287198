"""relay_outbox and dedup.outbox: a message is published if and only if its transaction commits,
and once however often the outbox event is delivered."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.api_core.exceptions import ServiceUnavailable
from google.cloud import firestore, pubsub_v1

import dedup.outbox
import functions.relay_outbox
from dedup.outbox import enqueue
from demo.events import firestore_event
from demo.pubsub import pull_all
from functions.relay_outbox import MARK_ATTEMPTS
from tests.conftest import PROJECT
from tests.functions.conftest import InProcessFunction
from tests.functions.mutations import renamed

pytestmark = pytest.mark.shared_emulators  # the Pub/Sub emulator


@pytest.fixture
def topic() -> Iterator[tuple[str, str]]:
    """A fresh topic and a subscription that sees everything published to it."""
    name = f"orders-{uuid.uuid4().hex[:8]}"
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic_path = publisher.create_topic(name=publisher.topic_path(PROJECT, name)).name
    subscription = subscriber.create_subscription(
        name=subscriber.subscription_path(PROJECT, name), topic=topic_path
    ).name
    yield name, subscription
    subscriber.delete_subscription(subscription=subscription)
    publisher.delete_topic(topic=topic_path)


@pytest.fixture
def relay(serve: Callable[[str], InProcessFunction]) -> InProcessFunction:
    return serve("relay_outbox")


def enqueue_in_transaction(
    db: firestore.Client, topic: str, *, fail: bool = False
) -> firestore.DocumentReference:
    refs: list[firestore.DocumentReference] = []

    @firestore.transactional
    def work(transaction: firestore.Transaction) -> None:
        transaction.set(db.collection("orders").document("o1"), {"total": 3})
        refs.append(enqueue(transaction, topic, b'{"orderId": "o1"}', {"kind": "order"}))
        if fail:
            raise RuntimeError("declined")

    with contextlib.suppress(RuntimeError):
        work(db.transaction())
    return refs[-1]


def test_committed_message_is_published_once(
    firestore_client: firestore.Client, relay: InProcessFunction, topic: tuple[str, str]
) -> None:
    """Eight concurrent copies plus repeats of the outbox event: one message, marked published."""
    name, subscription = topic
    outbox = enqueue_in_transaction(firestore_client, name)
    event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
    statuses = relay.deliver_concurrently(event, 8)
    while 200 not in statuses:  # the platform retries copies that met a live lease
        statuses.append(relay.deliver(event))
    assert relay.deliver(event) == 200
    [published] = pull_all(subscription)
    assert published.data == b'{"orderId": "o1"}'
    assert dict(published.attributes) == {"kind": "order", "outboxId": outbox.id}
    marked = outbox.get().to_dict() or {}
    assert marked["messageId"] == published.message_id
    assert marked["publishedAt"] is not None


def test_the_message_continues_the_trace_of_the_outbox_event(
    firestore_client: firestore.Client, relay: InProcessFunction, topic: tuple[str, str]
) -> None:
    """A binary-mode Firestore event's `ce-traceparent` (Eventarc's `traceparent` extension) is
    the relay delivery's parent; the published message carries that trace on (API only, no SDK:
    the caller's context unchanged), and the relay's record keeps its trace id."""
    name, subscription = topic
    outbox = enqueue_in_transaction(firestore_client, name)
    event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
    traceparent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    traced = dataclasses.replace(event, headers={**event.headers, "ce-traceparent": traceparent})
    assert relay.deliver(traced) == 200
    [published] = pull_all(subscription)
    assert dict(published.attributes) == {
        "kind": "order",
        "outboxId": outbox.id,
        "traceparent": traceparent,
    }
    [record] = (
        firestore_client.collection("triggerEvents")
        .where(filter=firestore.FieldFilter("subject", "==", outbox.path))
        .get()
    )
    assert record.get("traceId") == traceparent.split("-")[1]


def test_rolled_back_transaction_leaves_nothing_to_publish(
    firestore_client: firestore.Client, topic: tuple[str, str]
) -> None:
    """A transaction that fails leaves no outbox document, so the relay never fires."""
    name, _subscription = topic
    outbox = enqueue_in_transaction(firestore_client, name, fail=True)
    assert not outbox.get().exists
    assert not firestore_client.document("orders/o1").get().exists
    assert list(firestore_client.collection("outbox").stream()) == []


def test_document_without_topic_is_a_terminal_failure(
    firestore_client: firestore.Client, relay: InProcessFunction
) -> None:
    """An outbox document with no topic is recorded as failed and acknowledged."""
    ref = firestore_client.collection("outbox").document("bad")
    ref.set({"data": b"x"})
    event = firestore_event(ref.path, None, ref.get(), project=PROJECT, change="created")
    assert relay.deliver(event) == 200
    assert relay.deliver(event) == 200
    records = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert [r["state"] for r in records] == ["failed"]
    assert "topic" in records[0]["lastError"]


def test_enqueue_refuses_bad_input_before_writing(firestore_client: firestore.Client) -> None:
    """Invalid topics and non-string attributes raise ValueError; nothing is written."""
    transaction = firestore_client.transaction()
    with pytest.raises(ValueError, match="not a Pub/Sub topic"):
        enqueue(transaction, "a/b", b"x")
    with pytest.raises(ValueError, match="strings"):
        enqueue(transaction, "orders", b"x", {"n": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="set by the relay"):
        enqueue(transaction, "orders", b"x", {"outboxId": "forged"})
    for name in ("topic", "data", "ordering_key", "retry", "timeout", "googRoute", ""):
        with pytest.raises(ValueError, match=r"reserved|non-empty"):
            enqueue(transaction, "orders", b"x", {name: "v"})
    assert list(firestore_client.collection("outbox").stream()) == []


@pytest.mark.parametrize("name", ["outboxId", "retry", "timeout", "ordering_key", "googX"])
def test_a_document_with_a_reserved_attribute_is_a_terminal_failure(
    name: str,
    firestore_client: firestore.Client,
    relay: InProcessFunction,
    topic: tuple[str, str],
) -> None:
    """A document written without `enqueue` whose attributes use a reserved name (it would
    clash with a keyword of `publish()`, or with the relay's own `outboxId`): recorded failed
    on the first delivery, acknowledged, nothing published, every redelivery 200."""
    topic_name, subscription = topic
    ref = firestore_client.collection("outbox").document(f"reserved-{uuid.uuid4().hex[:8]}")
    ref.set({"topic": topic_name, "data": b"x", "attributes": {name: "v", "kind": "order"}})
    event = firestore_event(ref.path, None, ref.get(), project=PROJECT, change="created")
    assert [relay.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert pull_all(subscription) == []
    records = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert [r["state"] for r in records] == ["failed"]
    assert records[0]["attempts"] == 1
    assert "reserved" in records[0]["lastError"]


def test_document_deleted_before_it_is_marked_is_published_once(
    firestore_client: firestore.Client, relay: InProcessFunction, topic: tuple[str, str]
) -> None:
    """A failure after the publish never repeats it: the outbox document deleted before the
    relay marks it still ends the delivery `sent`, and redeliveries publish nothing more."""
    name, subscription = topic
    outbox = enqueue_in_transaction(firestore_client, name)
    event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
    outbox.delete()
    assert [relay.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert len(pull_all(subscription)) == 1
    [record] = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert record["state"] == "sent"
    assert not outbox.get().exists, "the mark must not resurrect a deleted outbox document"


@pytest.mark.parametrize("failures", [1, MARK_ATTEMPTS])
def test_mark_failures_never_publish_again(
    failures: int,
    firestore_client: firestore.Client,
    relay: InProcessFunction,
    topic: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The mark failing (UNAVAILABLE injected on the client, the emulator stays the store) once
    or on every try: one publish, the delivery acknowledged, redeliveries publish nothing."""
    name, subscription = topic
    outbox = enqueue_in_transaction(firestore_client, name)
    event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
    real_update = firestore.DocumentReference.update
    injected: list[str] = []

    def flaky_update(self: firestore.DocumentReference, *args: Any, **kwargs: Any) -> Any:
        if self.path == outbox.path and len(injected) < failures:
            injected.append(self.path)
            raise ServiceUnavailable("injected: the mark's commit was not applied")
        return real_update(self, *args, **kwargs)

    monkeypatch.setattr(firestore.DocumentReference, "update", flaky_update)
    assert [relay.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert len(injected) == failures
    [published] = pull_all(subscription)
    marked = outbox.get().to_dict() or {}
    if failures < MARK_ATTEMPTS:
        assert marked["messageId"] == published.message_id
    else:
        assert "messageId" not in marked
        assert "could not be marked published" in caplog.text


def test_event_for_another_document_is_refused_untouched(
    firestore_client: firestore.Client, relay: InProcessFunction, topic: tuple[str, str]
) -> None:
    """A created event for `users/ann` (not `outbox/{id}`) or for `outbox/../triggerEvents/k`
    is refused: nothing published, nothing written to that document, no record."""
    name, subscription = topic
    for path in ["users/ann", "outbox/../triggerEvents/k", "outbox/a/b/c"]:
        ref = firestore_client.document("users/ann")
        ref.set({"topic": name, "data": b"x"})
        event = renamed(path)(
            firestore_event(ref.path, None, ref.get(), project=PROJECT, change="created")
        )
        assert relay.deliver(event) == 400, path
        assert ref.get().to_dict() == {"topic": name, "data": b"x"}
    assert pull_all(subscription) == []
    assert list(firestore_client.collection("triggerEvents").list_documents()) == []


def test_the_relay_points_to_the_one_description_of_its_republish_window() -> None:
    """`relay_outbox`'s docstring sends the reader to `dedup.outbox`'s for when a message is
    published again, and that one names every cause and the consumer's key; the relay's no
    longer names the crash alone nor calls the publish exactly once."""
    relay = functions.relay_outbox.__doc__ or ""
    assert "`dedup.outbox`'s docstring" in relay
    assert "consumers key on `outboxId`" in relay
    assert "crashes after publishing" not in relay
    assert "exactly once" not in relay.split("\n\n")[0]
    window = " ".join((dedup.outbox.__doc__ or "").split())
    for cause in (
        "a publish Pub/Sub accepted whose answer the relay did not get",
        "the Pub/Sub client library's own retry",
        "a relay that died (crash, timeout, instance stopped) after the publish",
        "a record write refused after the publish",
        "Pub/Sub itself delivers each message at least once",
        "consumers that must not see a message twice deduplicate on it",
    ):
        assert cause in window, cause
