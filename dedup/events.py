"""From a platform's event object to what deduplication needs (`describe`), by looking its
kind up in `dedup.kinds`.

Supported event objects:

* every event a firebase-functions event trigger passes (`firestore_fn`, `pubsub_fn`,
  `storage_fn`, `db_fn`, `eventarc_fn`, `alerts_fn` and `firebase_functions.alerts`,
  `remote_config_fn`, `test_lab_fn`, `dataconnect_fn`): a `firebase_functions.core.CloudEvent`,
  whose kind is found by its CloudEvent `type`;
* a scheduled run (`scheduler_fn.ScheduledEvent`), found by its class;
* a `cloudevents` `CloudEvent` (functions-framework `@cloud_event`), found by its `type`
  attribute.

Each kind's module says what its key, subject and payload are (docs/usage.md has the table).
The payload fingerprint is the sha256 of the kind's canonical rendering (sorted-key JSON): a
different event under a reused id is refused as a payload mismatch.
"""

from __future__ import annotations

from cloudevents.abstract import CloudEvent as RawCloudEvent
from firebase_functions import core as ff_core

from dedup.kinds import EventInfo, kind_of, kind_of_class
from dedup.kinds.pubsub import subject as pubsub_subject
from dedup.kinds.schedule import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER

__all__ = [
    "JOB_NAME_HEADER",
    "SCHEDULE_TIME_HEADER",
    "SUPPORTED_EVENTS",
    "EventInfo",
    "describe",
    "pubsub_subject",
]

SUPPORTED_EVENTS = (
    "the event of every firebase-functions event trigger (firestore_fn, pubsub_fn, storage_fn, "
    "db_fn, eventarc_fn, alerts_fn and firebase_functions.alerts, remote_config_fn, "
    "test_lab_fn, dataconnect_fn, scheduler_fn), "
    "cloudevents CloudEvent (functions_framework.cloud_event)"
)


def describe(event: object) -> EventInfo:
    """Extract id, canonical payload, time, subject and source from a supported event, as its
    kind (`dedup.kinds`) reads them.

    Raises `TypeError` naming the supported event types for anything else, and
    `MissingEventId` for a scheduled run without a usable schedule time.
    """
    if isinstance(event, RawCloudEvent):
        attributes = event.get_attributes()
        event_type = attributes.get("type")
        kind = kind_of(event_type if isinstance(event_type, str) else None)
        return kind.read_cloud_event(attributes, event.get_data())
    if isinstance(event, ff_core.CloudEvent):
        return kind_of(event.type).read_event(event)
    scheduled = kind_of_class(event)
    if scheduled is None:
        raise TypeError(
            f"trigger_once cannot deduplicate a {type(event).__module__}."
            f"{type(event).__qualname__}: supported events are {SUPPORTED_EVENTS}; for "
            "anything else call Deduplicator.run(event_id, suffix, handler) yourself"
        )
    return scheduled.read_event(event)
