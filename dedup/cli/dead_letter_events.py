"""A dead-lettered Pub/Sub message turned back into the CloudEvent request its service got.

On the Cloud Run path (`make deploy-run`) Eventarc carries every event to a service through a
Pub/Sub push subscription, and after its `--max-delivery-attempts` Pub/Sub forwards the message
to `<service>-dead-letter`. What lands there is one of three shapes, told apart here:

* a **binary-mode CloudEvent** (Firestore, Storage... events): `ce-id`, `ce-source`,
  `ce-type`, `ce-specversion` attributes (names case-insensitive), `Content-Type` the data's
  type, the data as the message body. Rebuilt: each `ce-*` attribute as a `ce-*` header,
  `Content-Type` as is, the data as the body. The id is the event's own: the key survives.
* a **structured-mode CloudEvent**: a `Content-Type` attribute of `application/cloudevents...`.
  Rebuilt: the data as the body, with that `Content-Type`.
* anything else: **the user's own message** of a Pub/Sub trigger. Rebuilt: the
  `google.cloud.pubsub.topic.v1.messagePublished` CloudEvent of the message, published to the
  topic of the subscription it was dead-lettered from (binary mode, JSON body).

The binding of CloudEvents to Pub/Sub attributes (`ce-` prefix, `Content-Type` for
`datacontenttype`, structured mode recognised by its content type) is the CloudEvents
"Pub/Sub Protocol Binding", section 3.

The attributes Pub/Sub adds when it forwards a message (`CloudPubSubDeadLetter*`) are left out
of the rebuilt request. Pub/Sub forwards a message by publishing a new one ("it wraps the
original message in a new one", Pub/Sub's "Handle message failures" page): the dead letter has
a message id of its own, and none of its attributes keeps the original one; the emulator does
the same. So a rebuilt messagePublished event carries the dead letter's message id, and its
publish time is the original's (`CloudPubSubDeadLetterSourceTopicPublishTime`). docs/deploy.md
says what that means for the dedup key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from dedup.cli.pubsub_rest import Message
from dedup.kinds import pubsub

DEAD_LETTER_PREFIX = "CloudPubSubDeadLetter"
"""The attributes Pub/Sub adds to a message it forwards to a dead-letter topic."""
DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
"""How many delivery attempts the message had before it was dead-lettered."""
SOURCE_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
"""The id of the subscription the message was dead-lettered from."""
SOURCE_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
"""The project of that subscription."""
SOURCE_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"
"""When the original message was published to its topic."""
REQUIRED = ("id", "source", "type", "specversion")
"""The CloudEvent attributes every event has."""
STRUCTURED = "application/cloudevents"
"""The media type prefix of a structured-mode CloudEvent."""


class NotACloudEvent(ValueError):
    """The message cannot be turned into its service's request; the message says why. The
    command reports it and leaves the message on the subscription."""


@dataclass(frozen=True)
class Redrive:
    """The request that delivers a dead-lettered event to its service again."""

    event_id: str
    """The CloudEvent id."""
    event_type: str
    """The CloudEvent type."""
    source: str
    """The CloudEvent source."""
    subject: str | None
    """The CloudEvent subject, where the event has one."""
    headers: Mapping[str, str]
    """The `ce-*` headers (binary mode) and `Content-Type`."""
    body: bytes
    """The request body."""


def source_subscription(message: Message) -> str | None:
    """`projects/P/subscriptions/S` the message was dead-lettered from, if it says."""
    subscription = message.attributes.get(SOURCE_SUBSCRIPTION)
    project = message.attributes.get(SOURCE_PROJECT)
    if not subscription:
        return None
    if subscription.startswith("projects/"):
        return subscription
    return f"projects/{project}/subscriptions/{subscription}" if project else None


def delivery_count(message: Message) -> int | None:
    """The `CloudPubSubDeadLetterSourceDeliveryCount` attribute, if it is a number."""
    count = message.attributes.get(DELIVERY_COUNT, "")
    return int(count) if count.isdigit() else None


def own_attributes(message: Message) -> dict[str, str]:
    """The message's attributes without the ones Pub/Sub added when dead-lettering it."""
    return {k: v for k, v in message.attributes.items() if not k.startswith(DEAD_LETTER_PREFIX)}


def is_cloud_event(message: Message) -> bool:
    """The message carries a CloudEvent (binary: a `ce-id` attribute; or structured)."""
    attributes = {k.lower(): v for k, v in own_attributes(message).items()}
    return "ce-id" in attributes or _content_type(attributes).startswith(STRUCTURED)


def redrive_request(message: Message, topic: str | None = None) -> Redrive:
    """The request `message`'s service got, rebuilt (the table of the module docstring);
    `topic` (`projects/P/topics/T`) is the topic of the subscription it was dead-lettered
    from, needed only for a message that is no CloudEvent. `NotACloudEvent` says what is
    missing."""
    attributes = own_attributes(message)
    lowered = {k.lower(): v for k, v in attributes.items()}
    content_type = _content_type(lowered)
    if content_type.startswith(STRUCTURED):
        return _structured(message, content_type)
    if "ce-id" in lowered:
        return _binary(message, attributes, content_type)
    return _message_published(message, attributes, topic)


def _content_type(lowered: Mapping[str, str]) -> str:
    return lowered.get("content-type") or lowered.get("ce-datacontenttype") or ""


def _binary(message: Message, attributes: Mapping[str, str], content_type: str) -> Redrive:
    ce = {k[3:].lower(): v for k, v in attributes.items() if k.lower().startswith("ce-")}
    ce.pop("datacontenttype", None)
    missing = [name for name in REQUIRED if not ce.get(name)]
    if missing:
        raise NotACloudEvent(
            f"message {message.message_id} has ce-* attributes but no "
            f"{', '.join('ce-' + m for m in missing)}: it is no binary-mode CloudEvent"
        )
    headers = {f"ce-{name}": value for name, value in sorted(ce.items())}
    if content_type:
        headers["Content-Type"] = content_type
    return Redrive(ce["id"], ce["type"], ce["source"], ce.get("subject"), headers, message.data)


def _structured(message: Message, content_type: str) -> Redrive:
    try:
        envelope = json.loads(message.data)
    except ValueError as exc:
        raise NotACloudEvent(
            f"message {message.message_id} says {content_type} but its data is not JSON"
        ) from exc
    if not isinstance(envelope, dict):
        raise NotACloudEvent(f"message {message.message_id}: its data is no CloudEvent object")
    missing = [name for name in REQUIRED if not isinstance(envelope.get(name), str)]
    if missing:
        raise NotACloudEvent(
            f"message {message.message_id} is a structured CloudEvent without {', '.join(missing)}"
        )
    subject = envelope.get("subject")
    return Redrive(
        envelope["id"], envelope["type"], envelope["source"],
        subject if isinstance(subject, str) else None,
        {"Content-Type": content_type}, message.data,
    )  # fmt: skip


def _message_published(
    message: Message, attributes: Mapping[str, str], topic: str | None
) -> Redrive:
    subscription = source_subscription(message)
    if subscription is None or topic is None:
        raise NotACloudEvent(
            f"message {message.message_id} has no ce-* attributes and no "
            f"{SOURCE_SUBSCRIPTION} whose topic is known: neither a CloudEvent nor a "
            "dead-lettered message of a Pub/Sub trigger"
        )
    if not message.message_id:
        raise NotACloudEvent("a message without a message id")
    published = message.attributes.get(SOURCE_PUBLISH_TIME) or message.publish_time
    push = pubsub.push_body(
        message.message_id, message.data, attributes, published, subscription,
        ordering_key=message.ordering_key,
    )  # fmt: skip
    source = f"//pubsub.googleapis.com/{topic}"
    headers = {
        "ce-id": message.message_id,
        "ce-source": source,
        "ce-specversion": "1.0",
        "ce-type": pubsub.TYPE,
        "ce-time": published,
        "Content-Type": "application/json",
    }
    body = json.dumps(push).encode()
    return Redrive(message.message_id, pubsub.TYPE, source, None, headers, body)
