"""End to end: writes to the Firestore emulator and messages on the Pub/Sub emulator fire the
Python functions in the Functions emulator, which deliver their effects.

These tests run before every other test of the session, and must: the Functions emulator
cannot switch its background triggers back on once another test has switched them off
(re-enabling registers every trigger twice, so each write is delivered twice under two event
ids). `tests/conftest.py` sorts them first and asserts the order (`emulator_triggers`).
"""

from __future__ import annotations

import json
import uuid

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from dedup.outbox import enqueue
from demo.pubsub import ensure_topic, pull_all
from demo.receiver import Receiver
from tests.conftest import PROJECT
from tests.waiting import eventually

pytestmark = pytest.mark.e2e


def test_publishing_a_post_counts_it_and_notifies_followers(
    firestore_client: firestore.Client, receiver: Receiver
) -> None:
    """A post written by the test fires both post functions in the emulator."""
    users = firestore_client.collection("users")
    users.document("ann").set({"followers": ["ben"]})
    users.document("ben").set({"fcmToken": "token-ben"})
    firestore_client.document("posts/p1").set({"authorId": "ann", "published": True})

    def published_count() -> object:
        return (users.document("ann").get().to_dict() or {}).get("publishedPostCount")

    eventually(lambda: published_count() == 1, "users/ann.publishedPostCount is 1")
    eventually(
        lambda: len(receiver.applied("/notify")) == 1, "one notification reached the receiver"
    )
    [notice] = receiver.applied("/notify")
    assert json.loads(notice.body)["tokens"] == ["token-ben"]
    assert notice.idempotency_key == "post-p1-send_post_notification"
    firestore_client.document("posts/p1").delete()
    eventually(lambda: published_count() == 0, "the deleted post is uncounted")


def test_webhook_message_is_forwarded(receiver: Receiver) -> None:
    """A message published to `webhooks` reaches the `line` route's receiver."""
    topic = ensure_topic(PROJECT, "webhooks")
    body = json.dumps({"events": [{"type": "follow"}]}).encode()
    message_id = PublisherClient().publish(topic, body, route="line").result(timeout=30)
    eventually(lambda: receiver.applied("/webhooks/line"), "the webhook reached /webhooks/line")
    [forwarded] = receiver.applied("/webhooks/line")
    assert forwarded.body == body
    assert forwarded.idempotency_key == f"{message_id}-forward_webhook"


def test_outbox_message_is_relayed(firestore_client: firestore.Client) -> None:
    """A message enqueued in a committed transaction arrives on its topic, marked published."""
    name = f"orders-{uuid.uuid4().hex[:8]}"
    ensure_topic(PROJECT, name, subscription=name)
    refs: list[firestore.DocumentReference] = []

    @firestore.transactional
    def place(transaction: firestore.Transaction) -> None:
        refs.append(enqueue(transaction, name, b"order o1"))

    place(firestore_client.transaction())
    eventually(
        lambda: (refs[0].get().to_dict() or {}).get("messageId"),
        "the outbox document is marked published",
    )
    [message] = pull_all(SubscriberClient().subscription_path(PROJECT, name))
    assert message.data == b"order o1"
    assert message.attributes["outboxId"] == refs[0].id
