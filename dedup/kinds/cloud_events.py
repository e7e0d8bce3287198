"""The kinds read straight from their CloudEvent: Cloud Storage, Realtime Database, Firebase
Alerts, Remote Config, Test Lab, Data Connect, and any other type (Eventarc custom events, or
a type newer than this table). Each is one row below.

For all of them the key is the CloudEvent `id` and the payload the event's data (the SDK's
dataclasses as their fields; a raw event's bytes as they are). The subject: Storage
`buckets/<bucket>/objects/<name>`, Realtime Database `refs/<path>`, every other the
CloudEvent's own. None has a strict boundary of its own: `trigger_once` answers 400 what
firebase-functions cannot parse (`dedup.entrances.answers`). All are pushed by Eventarc over
Pub/Sub, which redelivers any non-2xx for the retry window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dedup.kinds.base import (
    Deploy,
    Kind,
    Subject,
    cloud_event_reader,
    field,
    own_subject,
    sdk_reader,
)

STORAGE_TYPES = "google.cloud.storage.object.v1."
STORAGE_FINALIZED = STORAGE_TYPES + "finalized"
ALERT_TYPE = "google.firebase.firebasealerts.alerts.v1.published"


def storage_subject(subject: str | None, data: Any) -> str | None:
    """`buckets/<bucket>/objects/<name>`, from the object's metadata."""
    bucket, name = field(data, "bucket"), field(data, "name")
    if bucket and name:
        return f"buckets/{bucket}/objects/{name}"
    return subject or None


def database_subject(subject: str | None, data: Any) -> str | None:
    """`refs/<path>`: the reference the event is about."""
    if subject and subject.startswith("refs/"):
        return subject
    return f"refs/{subject.strip('/')}" if subject else None


def storage_flags(trigger: Mapping[str, Any]) -> list[str]:
    """`--trigger-bucket` for a finalize trigger (gcloud's own form); any other Storage event
    by its type and bucket."""
    bucket = trigger["eventFilters"]["bucket"]
    if trigger["eventType"] == STORAGE_FINALIZED:
        return [f"--trigger-bucket={bucket}"]
    return [
        f"--trigger-event-filters=type={trigger['eventType']}",
        f"--trigger-event-filters=bucket={bucket}",
    ]


def _row(name: str, types: tuple[str, ...], subject: Subject = own_subject, **more: Any) -> Kind:
    return Kind(name, types, sdk_reader(subject), cloud_event_reader(subject), **more)


STORAGE = _row(
    "storage",
    (STORAGE_TYPES,),
    storage_subject,
    apis=("storage.googleapis.com",),
    deploy=Deploy(
        location="bucket",
        gcloud_trigger=storage_flags,
        service_agent=(
            "service-{number}@gs-project-accounts.iam.gserviceaccount.com",
            "roles/pubsub.publisher",
        ),
    ),
)
DATABASE = _row(
    "database",
    ("google.firebase.database.ref.v1.",),
    database_subject,
    apis=("firebasedatabase.googleapis.com",),
)
ALERTS = _row(
    "alerts",
    (ALERT_TYPE,),
    apis=("firebasealerts.googleapis.com",),
    deploy=Deploy(location="global"),
)
REMOTE_CONFIG = _row(
    "remote_config",
    ("google.firebase.remoteconfig.remoteConfig.v1.updated",),
    apis=("firebaseremoteconfig.googleapis.com",),
)
TEST_LAB = _row(
    "test_lab",
    ("google.firebase.testlab.testMatrix.v1.completed",),
    apis=("testing.googleapis.com",),
)
DATACONNECT = _row(
    "dataconnect",
    ("google.firebase.dataconnect.connector.v1.mutationExecuted",),
    apis=("firebasedataconnect.googleapis.com",),
)
CUSTOM = _row("custom", ())
"""Any other CloudEvent type: an Eventarc custom event, or a type newer than this table."""

KINDS = (STORAGE, DATABASE, ALERTS, REMOTE_CONFIG, TEST_LAB, DATACONNECT)
