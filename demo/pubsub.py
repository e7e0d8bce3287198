"""Pub/Sub emulator helpers for the demo and the tests: topics, and draining a subscription."""

from __future__ import annotations

from contextlib import suppress

from google.api_core.exceptions import AlreadyExists
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.types import PubsubMessage


def ensure_topic(project: str, topic: str, *, subscription: str | None = None) -> str:
    """Create `topic` (and a `subscription` to it) unless they exist; the topic's path."""
    publisher = PublisherClient()
    path = publisher.topic_path(project, topic)
    with suppress(AlreadyExists):
        publisher.create_topic(name=path)
    if subscription is not None:
        subscriber = SubscriberClient()
        with suppress(AlreadyExists):
            subscriber.create_subscription(
                name=subscriber.subscription_path(project, subscription), topic=path
            )
    return path


def pull_all(subscription_path: str) -> list[PubsubMessage]:
    """Every message waiting on the subscription, acknowledged.

    Uses `return_immediately`, which the emulator honours (production Pub/Sub deprecates it):
    an empty answer means the subscription is drained.
    """
    subscriber = SubscriberClient()
    messages: list[PubsubMessage] = []
    while True:
        request = {
            "subscription": subscription_path,
            "max_messages": 100,
            "return_immediately": True,
        }
        received = subscriber.pull(request=request, timeout=10).received_messages
        if not received:
            return messages
        messages.extend(m.message for m in received)
        ack_ids = [m.ack_id for m in received]
        subscriber.acknowledge(request={"subscription": subscription_path, "ack_ids": ack_ids})
