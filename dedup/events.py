"""Adapters from a platform's event object to what deduplication needs.

Supported event objects:

* `firebase_functions.firestore_fn.Event` (Firestore triggers): the CloudEvent `id`; the
  document path from `event.document`.
* `firebase_functions.core.CloudEvent[MessagePublishedData]` (`pubsub_fn`): the message's
  `message_id`. The emulators give each delivery a fresh CloudEvent id; the message id is
  stable (and equals the CloudEvent id in production).
* `cloudevents` `CloudEvent` (functions-framework `@cloud_event`): for the type
  `google.cloud.pubsub.topic.v1.messagePublished`, `data["message"]["messageId"]` (or
  `"message_id"`); otherwise the `id` attribute. The document path of a Firestore CloudEvent
  comes from its `document` extension attribute, or a subject `documents/<path>`.

The payload fingerprint is the sha256 of a canonical rendering (sorted-key JSON):
Pub/Sub: message data and sorted attributes, trace context left out (the same for both
Pub/Sub adapters);
Firestore: document path plus the before/after update times and data;
other CloudEvents: the data (bytes as they are, anything else as canonical JSON).

Every other event a firebase-functions decorator passes (Storage, Realtime Database, Firebase
Alerts, Remote Config, Test Lab, Data Connect, Eventarc custom events) is a
`firebase_functions.core.CloudEvent`: its `id` is the key, its data (dataclasses as their
fields) the payload, and its subject the one its kind gives (`dedup.kinds`: Storage
`buckets/<bucket>/objects/<name>`, Realtime Database `refs/<path>`, else the CloudEvent's). A
raw CloudEvent of those types gets the same subject.

A scheduled run (`scheduler_fn.ScheduledEvent`) is keyed by the job name and the
`X-CloudScheduler-ScheduleTime` header of the request being served, with the subject
`jobs/<job>/runs/<schedule time>`. firebase-functions puts the current time in the event when
that header is missing or does not parse, which is no identity: such a request raises
`MissingEventId` naming the header (logged at ERROR), before any record is read or written.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from cloudevents.abstract import CloudEvent as RawCloudEvent
from firebase_functions import core as ff_core
from firebase_functions import firestore_fn, pubsub_fn

from dedup.errors import MissingEventId
from dedup.kinds import kind_of
from dedup.propagation import is_trace_attribute

SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
"""The header Cloud Scheduler sets to the run's scheduled time (unix-cron schedules)."""
JOB_NAME_HEADER = "X-CloudScheduler-JobName"
"""The header Cloud Scheduler sets to the job's name."""
logger = logging.getLogger(__name__)

PUBSUB_EVENT_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
FIRESTORE_TYPES = "google.cloud.firestore.document.v1."

SUPPORTED_EVENTS = (
    "the event of every firebase-functions event trigger (firestore_fn, pubsub_fn, storage_fn, "
    "db_fn, eventarc_fn, alerts_fn and firebase_functions.alerts, remote_config_fn, "
    "test_lab_fn, dataconnect_fn, scheduler_fn), "
    "cloudevents CloudEvent (functions_framework.cloud_event)"
)


class EventInfo(NamedTuple):
    """What the deduplicator needs from one event."""

    event_id: str | None
    """The id deliveries of one event share (None/empty is rejected later, loudly)."""
    payload: bytes
    """Canonical rendering of the payload; its sha256 is the fingerprint."""
    event_time: datetime | None
    """When the event happened (timezone-aware), if the event says."""
    document_path: str | None
    """Path of the Firestore document the event is about (`users/u1`), if any."""
    subject: str | None = None
    """What the event is about, recorded for operators (`dedup list --subject`): the document
    path of a Firestore event, `topics/<topic>/messages/<message id>` of a Pub/Sub message
    (the topic read from the event's `source`), the one its kind gives for the other kinds
    (`dedup.kinds`: `buckets/<bucket>/objects/<name>`, `refs/<path>`,
    `jobs/<job>/runs/<schedule time>`, else the CloudEvent subject), or None."""
    database: str | None = None
    """The Firestore database the event came from (its `database` attribute), if any: the
    records follow it unless DEDUP_DATABASE is set (docs/named-databases.md)."""
    source: str | None = None
    """The CloudEvent `source` (which service and resource sent it), kept on the record; for a
    scheduled run, the job (`jobs/<job>`)."""


def describe(event: object) -> EventInfo:
    """Extract id, canonical payload, time and document path from a supported event.

    Raises `TypeError` naming the supported event types for anything else.
    """
    if isinstance(event, firestore_fn.Event):
        return _firestore_event(event)
    if isinstance(event, ff_core.CloudEvent) and isinstance(
        event.data, pubsub_fn.MessagePublishedData
    ):
        message = event.data.message
        return EventInfo(
            event_id=message.message_id,
            payload=_pubsub_payload(message.data, message.attributes),
            event_time=_aware(event.time),
            document_path=None,
            subject=pubsub_subject(event.source, message.message_id),
            source=_text(event.source),
        )
    if _is_scheduled(event):
        return _scheduled_run(event)
    if isinstance(event, ff_core.CloudEvent):
        return _sdk_cloud_event(event)
    if isinstance(event, RawCloudEvent):
        return _raw_cloud_event(event)
    raise TypeError(
        f"trigger_once cannot deduplicate a {type(event).__module__}.{type(event).__qualname__}: "
        f"supported events are {SUPPORTED_EVENTS}; for anything else call "
        "Deduplicator.run(event_id, suffix, handler) yourself"
    )


def _firestore_event(event: firestore_fn.Event[Any]) -> EventInfo:
    data = event.data
    if isinstance(data, ff_core.Change):
        rendered = {"before": _snapshot(data.before), "after": _snapshot(data.after)}
    else:
        rendered = {"value": _snapshot(data)}
    rendered["document"] = event.document
    return EventInfo(
        event_id=event.id,
        payload=_canonical(rendered),
        event_time=_aware(event.time),
        document_path=event.document,
        subject=event.document,
        database=getattr(event, "database", None) or None,
        source=_text(getattr(event, "source", None)),
    )


def _sdk_cloud_event(event: ff_core.CloudEvent[Any]) -> EventInfo:
    """Any other firebase-functions event: its id, its data, the subject its kind gives."""
    data = event.data
    plain = _plain(data)
    return EventInfo(
        event_id=event.id,
        payload=plain if isinstance(plain, bytes) else _canonical(plain),
        event_time=_aware(event.time),
        document_path=None,
        subject=kind_of(event.type).subject(event.subject, plain),
        source=_text(event.source),
    )


def _plain(data: Any) -> Any:
    """`data` with every dataclass (the SDK's event data types) turned into its fields."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return dataclasses.asdict(data)
    if isinstance(data, bytearray):
        return bytes(data)
    return data


def _is_scheduled(event: object) -> bool:
    # scheduler_fn is only looked at once loaded: an event of its type cannot exist before.
    module = sys.modules.get("firebase_functions.scheduler_fn")
    return module is not None and isinstance(event, module.ScheduledEvent)


def _scheduled_run(event: Any) -> EventInfo:
    """A Cloud Scheduler run: the job and the schedule time of the request being served."""
    raw = _request_header(SCHEDULE_TIME_HEADER)
    scheduled = _parse_time(raw.replace("Z", "+00:00") if raw else None)
    if scheduled is None:
        why = (
            f"a scheduled run needs the {SCHEDULE_TIME_HEADER} header (an RFC 3339 time, which "
            f"Cloud Scheduler sets for unix-cron schedules); this request "
            f"{'has none' if raw is None else 'has one that does not parse'}, so nothing runs "
            f"(firebase-functions would use the current time, which is no identity). To run a "
            f"job by hand, set {SCHEDULE_TIME_HEADER} and {JOB_NAME_HEADER} (docs/usage.md)"
        )
        logger.error(why)
        raise MissingEventId(why)
    at = scheduled.astimezone(UTC).isoformat().replace("+00:00", "Z")
    job = event.job_name or _request_header(JOB_NAME_HEADER) or "unnamed-job"
    return EventInfo(
        event_id=f"{job}@{at}",
        payload=_canonical({"job": job, "scheduleTime": at}),
        event_time=scheduled,
        document_path=None,
        subject=f"jobs/{job}/runs/{at}",
        source=f"jobs/{job}",
    )


def _request_header(name: str) -> str | None:
    """Header `name` of the HTTP request being served (None outside a request, or absent)."""
    flask = sys.modules.get("flask")
    if flask is None or not flask.has_request_context():
        return None
    value = flask.request.headers.get(name)
    return value if isinstance(value, str) else None


def _raw_cloud_event(event: RawCloudEvent) -> EventInfo:
    attributes = event.get_attributes()
    data = event.get_data()
    event_id: Any = attributes.get("id")
    document_path = _path_of_document(attributes)
    subject = document_path
    if attributes.get("type") == PUBSUB_EVENT_TYPE and isinstance(data, Mapping):
        message = data.get("message") or {}
        event_id = message.get("messageId") or message.get("message_id")
        payload = _pubsub_payload(message.get("data"), message.get("attributes") or {})
        if event_id is not None:
            subject = pubsub_subject(attributes.get("source"), str(event_id))
    elif isinstance(data, bytes | bytearray):
        payload = bytes(data)
    else:
        payload = _canonical(data)
    if subject is None and not str(attributes.get("type", "")).startswith(FIRESTORE_TYPES):
        raw_subject = attributes.get("subject")
        subject = kind_of(attributes.get("type")).subject(
            raw_subject if isinstance(raw_subject, str) else None, data
        )
    return EventInfo(
        event_id=None if event_id is None else str(event_id),
        payload=payload,
        event_time=_parse_time(attributes.get("time")),
        document_path=document_path,
        subject=subject,
        database=_database(attributes),
        source=_text(attributes.get("source")),
    )


def _text(value: object) -> str | None:
    """A string attribute as recorded (None when absent, empty or not a string)."""
    return value if isinstance(value, str) and value else None


def pubsub_subject(source: object, message_id: str | None) -> str | None:
    """`topics/<topic>/messages/<message id>` for a message published to the topic named in a
    Pub/Sub CloudEvent's `source` (`//pubsub.googleapis.com/projects/<p>/topics/<topic>`);
    `messages/<message id>` when the source names no topic; None without a message id."""
    if not message_id:
        return None
    topic = None
    if isinstance(source, str) and "/topics/" in source:
        topic = source.rsplit("/topics/", 1)[1].strip("/") or None
    return f"topics/{topic}/messages/{message_id}" if topic else f"messages/{message_id}"


def _path_of_document(attributes: Mapping[str, Any]) -> str | None:
    document = attributes.get("document")
    if isinstance(document, str) and document:
        return document
    subject = attributes.get("subject")
    if isinstance(subject, str) and subject.startswith("documents/"):
        return subject.removeprefix("documents/")
    return None


def _database(attributes: Mapping[str, Any]) -> str | None:
    database = attributes.get("database")
    return database if isinstance(database, str) and database else None


def _pubsub_payload(data: Any, attributes: Mapping[str, str]) -> bytes:
    """Data and attributes, without the trace context (`dedup.propagation`): a message
    published again, from another trace, is the same message."""
    kept = {k: v for k, v in attributes.items() if not is_trace_attribute(k)}
    return _canonical({"data": data, "attributes": dict(sorted(kept.items()))})


def _snapshot(snapshot: Any) -> Any:
    if snapshot is None or not getattr(snapshot, "exists", False):
        return None
    return {"updateTime": snapshot.update_time, "data": snapshot.to_dict()}


def _canonical(value: Any) -> bytes:
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
    )
    return text.encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    path = getattr(value, "path", None)  # DocumentReference
    if isinstance(path, str):
        return {"ref": path}
    if hasattr(value, "latitude") and hasattr(value, "longitude"):  # GeoPoint
        return {"lat": value.latitude, "lng": value.longitude}
    if hasattr(value, "to_map_value"):  # Vector
        return list(value)
    return repr(value)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return _aware(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        return _aware(datetime.fromisoformat(value))
    except ValueError:
        return None
