"""CloudEvents as Google's platform delivers them, built from real emulator state.

The demo and the tests play the at-least-once platform: they take a document snapshot read
from the Firestore emulator, or a message published to the Pub/Sub emulator, build the
CloudEvent Eventarc would deliver for it, and deliver that same event several times.

* Firestore: binary content mode, `application/protobuf` body (`DocumentEventData`), and the
  attributes `location`, `project`, `database`, `namespace`, `document` that
  firebase-functions reads.
* Pub/Sub: `application/json` body `{"message": {...}, "subscription": ...}` carrying the
  message id under both spellings, as the push endpoint does.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.types import Document as FirestoreDocument
from google.events.cloud.firestore import Document as EventDocument
from google.events.cloud.firestore import DocumentEventData

FIRESTORE_TYPES = {
    "written": "google.cloud.firestore.document.v1.written",
    "created": "google.cloud.firestore.document.v1.created",
    "updated": "google.cloud.firestore.document.v1.updated",
    "deleted": "google.cloud.firestore.document.v1.deleted",
}
PUBSUB_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
FirestoreChange = Literal["written", "created", "updated", "deleted"]


@dataclass(frozen=True)
class HttpEvent:
    """One CloudEvent as an HTTP request: headers and body, ready to POST again and again."""

    id: str
    headers: Mapping[str, str]
    body: bytes
    description: str = field(default="", compare=False)

    def with_id(self, event_id: str) -> HttpEvent:
        """The same event under another id (what the emulators do to each Pub/Sub delivery)."""
        return HttpEvent(event_id, {**self.headers, "ce-id": event_id}, self.body, self.description)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _event_document(
    snapshot: firestore.DocumentSnapshot | None, project: str
) -> EventDocument | None:
    """A snapshot as the event's protobuf `Document` (same wire format as Firestore's own)."""
    if snapshot is None or not snapshot.exists:
        return None
    name = f"projects/{project}/databases/(default)/documents/{snapshot.reference.path}"
    native = FirestoreDocument(
        name=name,
        fields=_helpers.encode_dict(snapshot.to_dict() or {}),
        create_time=snapshot.create_time,
        update_time=snapshot.update_time,
    )
    return EventDocument.deserialize(FirestoreDocument.serialize(native))


def firestore_event(
    path: str,
    before: firestore.DocumentSnapshot | None,
    after: firestore.DocumentSnapshot | None,
    *,
    project: str,
    change: FirestoreChange = "written",
    event_id: str | None = None,
) -> HttpEvent:
    """The Firestore CloudEvent for a write of document `path` from `before` to `after`."""
    data = DocumentEventData()
    if (old := _event_document(before, project)) is not None:
        data.old_value = old
    if (new := _event_document(after, project)) is not None:
        data.value = new
    event_id = event_id or str(uuid.uuid4())
    headers = {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-type": FIRESTORE_TYPES[change],
        "ce-source": f"//firestore.googleapis.com/projects/{project}/databases/(default)",
        "ce-subject": f"documents/{path}",
        "ce-time": _now(),
        "ce-location": "us-central1",
        "ce-project": project,
        "ce-database": "(default)",
        "ce-namespace": "(default)",
        "ce-document": path,
        "Content-Type": "application/protobuf",
    }
    body = DocumentEventData.serialize(data)
    return HttpEvent(event_id, headers, body, f"{change} {path}")


def pubsub_event(
    topic: str,
    data: bytes,
    *,
    project: str,
    message_id: str,
    attributes: Mapping[str, str] | None = None,
    event_id: str | None = None,
) -> HttpEvent:
    """The Pub/Sub CloudEvent for message `message_id` published to `topic`."""
    published = _now()
    message = {
        "data": base64.b64encode(data).decode(),
        "attributes": dict(attributes or {}),
        "messageId": message_id,
        "message_id": message_id,
        "publishTime": published,
        "publish_time": published,
    }
    body = json.dumps(
        {"message": message, "subscription": f"projects/{project}/subscriptions/eventarc-{topic}"}
    ).encode()
    event_id = event_id or message_id
    headers = {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-type": PUBSUB_TYPE,
        "ce-source": f"//pubsub.googleapis.com/projects/{project}/topics/{topic}",
        "ce-time": published,
        "Content-Type": "application/json",
    }
    return HttpEvent(event_id, headers, body, f"message {message_id} on {topic}")
