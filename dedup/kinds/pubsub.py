"""Pub/Sub messages (`pubsub_fn.on_message_published`, and
`google.cloud.pubsub.topic.v1.messagePublished` CloudEvents): everything the project knows
about them.

* **Reading.** The key is the message's `message_id` (`messageId` in a raw event): the
  emulators give each delivery a fresh CloudEvent id, while the message id is stable (and
  equals the CloudEvent id in production). The subject is `topics/<topic>/messages/<id>`, the
  topic read from the event's `source`. The payload is the message data and its sorted
  attributes, trace context left out (`dedup.platform.propagation`): a message published again from
  another trace is the same message.
* **Boundary** (`check_request`): `application/json` (batch mode too), the trigger's topic in
  the function's project (`GOOGLE_CLOUD_PROJECT` or `GCLOUD_PROJECT`, when set), a `message`
  with only the fields Pub/Sub sends, base64 `data`, a non-empty message id and an RFC 3339
  publish time in either spelling (`messageId`/`message_id`, `publishTime`/`publish_time`: the
  same value when both are sent), string attributes, a non-empty `subscription`; then
  firebase-functions' own parse (which reads the snake_case spelling: the boundary adds it).
* **Deploy.** `--trigger-topic` (gcloud), the topic filter (firebase-tools), in the region.
* **Retry.** Pub/Sub push redelivers any non-2xx for the retry window.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from dedup.kinds.base import (
    RFC3339,
    Declared,
    Deploy,
    EventInfo,
    Kind,
    Malformed,
    aware,
    canonical,
    media_type,
    own_subject,
    parsed_by_sdk,
    path_of_document,
    raw_info,
    sdk_reader,
    text,
)
from dedup.platform.propagation import is_trace_attribute

TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
MAX_BODY = 14 * 1024 * 1024
"""A message is at most 10 MB, base64 in a JSON envelope makes it 4/3 larger."""
SOURCE = r"//pubsub\.googleapis\.com/projects/([^/]+)/topics/([^/]+)"
MESSAGE_FIELDS = frozenset(
    {"data", "attributes", "messageId", "message_id", "publishTime", "publish_time", "orderingKey"}
)
"""What a push message carries; firebase-functions fails on any other field."""


# --- Building -------------------------------------------------------------------------------


def push_body(
    message_id: str,
    data: bytes,
    attributes: Mapping[str, str],
    published: str,
    subscription: str,
    *,
    ordering_key: str = "",
) -> dict[str, Any]:
    """The JSON body a Pub/Sub push (Eventarc's transport) posts for one message:
    `{"message": {...}, "subscription": ...}`, with the message id and the publish time under
    both spellings firebase-functions reads, and only the fields of `MESSAGE_FIELDS`."""
    message: dict[str, Any] = {
        "data": base64.b64encode(data).decode(),
        "attributes": dict(attributes),
        "messageId": message_id,
        "message_id": message_id,
        "publishTime": published,
        "publish_time": published,
    }
    if ordering_key:
        message["orderingKey"] = ordering_key
    return {"message": message, "subscription": subscription}


# --- Reading --------------------------------------------------------------------------------


def read_event(event: Any) -> EventInfo:
    """A `CloudEvent[MessagePublishedData]` of `pubsub_fn`: keyed by its message id (an SDK
    event of this type carrying other data is read as any other CloudEvent)."""
    message = getattr(event.data, "message", None)
    if message is None:
        return sdk_reader(own_subject)(event)
    return EventInfo(
        event_id=message.message_id,
        payload=payload(message.data, message.attributes),
        event_time=aware(event.time),
        document_path=None,
        subject=subject(event.source, message.message_id),
        source=text(event.source),
    )


def read_cloud_event(attributes: Mapping[str, Any], data: Any) -> EventInfo:
    """A raw Pub/Sub CloudEvent: keyed by `data.message.messageId` (or `message_id`)."""
    document_path = path_of_document(attributes)
    raw_subject = attributes.get("subject")
    fallback = document_path or (raw_subject if isinstance(raw_subject, str) else None) or None
    if not isinstance(data, Mapping):
        return raw_info(attributes, data, document_path=document_path, subject=fallback)
    message = data.get("message") or {}
    event_id = message.get("messageId") or message.get("message_id")
    found = subject(attributes.get("source"), str(event_id)) if event_id is not None else None
    return raw_info(
        attributes,
        data,
        document_path=document_path,
        subject=found or fallback,
        event_id=event_id,
        payload=payload(message.get("data"), message.get("attributes") or {}),
    )


def subject(source: object, message_id: str | None) -> str | None:
    """`topics/<topic>/messages/<message id>` for a message published to the topic named in a
    Pub/Sub CloudEvent's `source` (`//pubsub.googleapis.com/projects/<p>/topics/<topic>`);
    `messages/<message id>` when the source names no topic; None without a message id."""
    if not message_id:
        return None
    topic = None
    if isinstance(source, str) and "/topics/" in source:
        topic = source.rsplit("/topics/", 1)[1].strip("/") or None
    return f"topics/{topic}/messages/{message_id}" if topic else f"messages/{message_id}"


def payload(data: Any, attributes: Mapping[str, str]) -> bytes:
    """Data and attributes, without the trace context (`dedup.platform.propagation`): a message
    published again, from another trace, is the same message."""
    kept = {k: v for k, v in attributes.items() if not is_trace_attribute(k)}
    return canonical({"data": data, "attributes": dict(sorted(kept.items()))})


# --- Boundary -------------------------------------------------------------------------------


def check_request(raw: Any, declared: Declared) -> Any:
    """`raw` checked as a push of `declared`'s topic (`Malformed` if not), then parsed by
    firebase-functions (which rewrites the raw data in place: it runs once, here)."""
    from dedup.platform.firebase_internals import parse_pubsub_event

    topic = declared.filters.get("topic")
    if media_type(raw) != "application/json":
        raise Malformed("Pub/Sub events are read as application/json only", 415)
    project = os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("GCLOUD_PROJECT")
    source = re.fullmatch(SOURCE, str(raw.get("source")))
    other_project = source is not None and project is not None and source.group(1) != project
    if source is None or source.group(2) != topic or other_project:
        where = f" in project {project}" if project else ""
        raise Malformed(f"the event's source is not this function's topic {topic}{where}")
    data = raw.get_data()
    message = data.get("message") if isinstance(data, Mapping) else None
    if not isinstance(message, MutableMapping):
        raise Malformed("the Pub/Sub event has no `message` object")
    assert isinstance(data, Mapping)
    subscription = data.get("subscription")
    if not isinstance(subscription, str) or not subscription:
        raise Malformed("the Pub/Sub event's subscription is not a non-empty string")
    if not set(message) <= MESSAGE_FIELDS:
        raise Malformed("the Pub/Sub message has a field Pub/Sub does not send")
    message_id = one_spelling(message, "messageId", "message_id")
    if not isinstance(message_id, str) or not message_id:
        raise Malformed("the Pub/Sub message id is not a non-empty string")
    publish_time = one_spelling(message, "publishTime", "publish_time")
    if not isinstance(publish_time, str) or not re.fullmatch(RFC3339, publish_time):
        raise Malformed("the Pub/Sub publish time is missing or not an RFC 3339 timestamp")
    if not isinstance(message.get("orderingKey", ""), str):
        raise Malformed("the Pub/Sub orderingKey is not a string")
    attributes = message.get("attributes", {})
    if not isinstance(attributes, Mapping) or not all(
        isinstance(v, str) for v in attributes.values()
    ):
        raise Malformed("the Pub/Sub attributes are not a map of strings")
    if "data" not in message or not isinstance(message["data"], str):
        raise Malformed("the Pub/Sub message has no data string")
    try:
        base64.b64decode(message["data"], validate=True)
    except (binascii.Error, ValueError):
        raise Malformed("the Pub/Sub message data is not base64") from None
    return parsed_by_sdk(lambda: parse_pubsub_event(raw))


def one_spelling(message: MutableMapping[str, Any], camel: str, snake: str) -> Any:
    """The value a push message gives under `camel`, `snake` or both (`Malformed` when both are
    sent and differ), also set under `snake`, the spelling firebase-functions reads."""
    value = message.get(snake, message.get(camel))
    if camel in message and snake in message and message[camel] != message[snake]:
        raise Malformed(f"the Pub/Sub {camel} and {snake} differ")
    if value is not None:
        message[snake] = value
    return value


def topic_flags(trigger: Mapping[str, Any]) -> list[str]:
    """gcloud's trigger of a Pub/Sub function: its topic."""
    return [f"--trigger-topic={str(trigger['eventFilters']['topic']).rsplit('/', 1)[-1]}"]


KIND = Kind(
    "pubsub",
    (TYPE,),
    read_event,
    read_cloud_event,
    check_request=check_request,
    body_limit=MAX_BODY,
    deploy=Deploy(gcloud_trigger=topic_flags, gcloud_location=False),
)
