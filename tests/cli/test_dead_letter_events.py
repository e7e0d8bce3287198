"""How a dead-lettered Pub/Sub message becomes its service's request again (no emulator)."""

from __future__ import annotations

import base64
import json
import re

import click
import pytest

from dedup import testing
from dedup.cli.dead_letter_events import NotACloudEvent, redrive_request
from dedup.cli.dead_letters import needs_token, target_url
from dedup.cli.pubsub_rest import Message, subscription_name

FORWARDED = {
    "CloudPubSubDeadLetterSourceDeliveryCount": "5",
    "CloudPubSubDeadLetterSourceSubscription": "eventarc-sub",
    "CloudPubSubDeadLetterSourceSubscriptionProject": "p",
    "CloudPubSubDeadLetterSourceTopicPublishTime": "2026-01-02T03:04:05.678Z",
}


def test_binary_cloud_event_keeps_its_id_headers_and_body() -> None:
    """A Firestore event's ce-* attributes become its headers again, the data its body; the
    dead-letter attributes are dropped."""
    event = testing.firestore_event("posts/p1", None, {"a": 1}, project="p")
    message = Message("ack", "99", "t", event.body, {**event.headers, **FORWARDED})
    request = redrive_request(message)
    assert request.event_id == event.id
    assert request.body == event.body
    assert dict(request.headers) == {k.lower() if k.startswith("ce-") else k: v
                                     for k, v in event.headers.items()}  # fmt: skip
    assert request.subject == "documents/posts/p1"


def test_a_pubsub_triggers_message_becomes_message_published_under_the_dead_letters_id() -> None:
    """The user's own message: the messagePublished event of the source subscription's topic,
    its id the dead letter's message id (Pub/Sub keeps no other), its original publish time."""
    message = Message("ack", "77", "later", b"hello", {"eventKey": "k", **FORWARDED})
    request = redrive_request(message, "projects/p/topics/webhooks")
    body = json.loads(request.body)
    assert request.event_id == "77" == body["message"]["messageId"]
    assert request.source == "//pubsub.googleapis.com/projects/p/topics/webhooks"
    assert body["message"]["attributes"] == {"eventKey": "k"}
    assert base64.b64decode(body["message"]["data"]) == b"hello"
    assert (
        body["message"]["publishTime"] == FORWARDED["CloudPubSubDeadLetterSourceTopicPublishTime"]
    )
    assert body["subscription"] == "projects/p/subscriptions/eventarc-sub"


def test_structured_mode_is_posted_as_is() -> None:
    """A structured CloudEvent keeps its body and content type."""
    envelope = {"id": "e", "type": "t", "source": "s", "specversion": "1.0", "data": {}}
    data = json.dumps(envelope).encode()
    message = Message("ack", "1", "t", data, {"Content-Type": "application/cloudevents+json"})
    request = redrive_request(message)
    assert (request.event_id, request.body) == ("e", data)


@pytest.mark.parametrize(
    ("attributes", "topic", "says"),
    [
        ({"ce-id": "x"}, None, "no ce-source, ce-type, ce-specversion"),
        ({}, None, "no ce-* attributes"),
        ({"Content-Type": "application/cloudevents+json"}, None, "not JSON"),
    ],
)
def test_what_is_no_event_says_why(
    attributes: dict[str, str], topic: str | None, says: str
) -> None:
    """A message that cannot be rebuilt raises `NotACloudEvent` naming what is missing."""
    with pytest.raises(NotACloudEvent, match=re.escape(says)):
        redrive_request(Message("ack", "1", "t", b"junk", attributes), topic)


def test_subscription_names_and_urls() -> None:
    """A subscription is an id with a project or a full name; the URL is http(s); no ID token
    goes to the local machine or with the emulator."""
    assert subscription_name("a-dead-letter", "p") == "projects/p/subscriptions/a-dead-letter"
    assert subscription_name("projects/q/subscriptions/s", None) == "projects/q/subscriptions/s"
    with pytest.raises(click.BadParameter):
        subscription_name("topics/x", "p")
    with pytest.raises(click.UsageError):
        subscription_name("a-dead-letter", None)
    with pytest.raises(click.BadParameter):
        target_url("ftp://x")
    assert needs_token("https://s-1.europe-west1.run.app", emulator=False)
    assert not needs_token("http://127.0.0.1:8080/", emulator=False)
    assert not needs_token("https://s-1.europe-west1.run.app", emulator=True)
