"""The Firestore document event: its body is the protobuf `DocumentEventData`, each field
encoded as the `Value` Firestore writes into the event."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from dedup.testing.event import HttpEvent, project_or_default, rfc3339

if TYPE_CHECKING:
    from google.cloud import firestore

__all__ = ["FIRESTORE_TYPES", "FirestoreChange", "firestore_event"]

FirestoreChange = Literal["written", "created", "updated", "deleted"]
"""The change a Firestore document event is about."""
FIRESTORE_TYPES: Mapping[str, str] = {
    change: f"google.cloud.firestore.document.v1.{change}"
    for change in ("written", "created", "updated", "deleted")
}
"""The CloudEvent type of each Firestore change."""


def _document(value: Any, name: str, now: datetime) -> Any:
    """A document's fields (a mapping, or a `DocumentSnapshot` with its own times) as the
    event's protobuf `Document`; None for no document (absent, or a missing snapshot)."""
    from google.events.cloud.firestore import Document

    if value is None:
        return None
    if hasattr(value, "to_dict") and hasattr(value, "exists"):  # a DocumentSnapshot
        if not value.exists:
            return None
        fields = value.to_dict() or {}
        created, updated = value.create_time or now, value.update_time or now
    else:
        fields, created, updated = dict(value), now, now
    return Document(
        name=name,
        fields={key: _value(field) for key, field in fields.items()},
        create_time=created,
        update_time=updated,
    )


_SCALARS: tuple[tuple[type, str], ...] = (
    (bool, "boolean_value"),
    (int, "integer_value"),
    (float, "double_value"),
    (str, "string_value"),
    (bytes, "bytes_value"),
    (datetime, "timestamp_value"),
)
"""Each scalar type a field may hold, and the `Value` field that carries it (in this order)."""


def _value(value: Any) -> Any:
    """A field's value as the event's protobuf `Value` (what Firestore writes into the event):
    null, bool, int, float, str, bytes, a time, a geo point, a map or a list of those."""
    from google.events.cloud.firestore import ArrayValue, MapValue, Value
    from google.type import latlng_pb2

    if value is None:
        return Value(null_value=0)
    for kind, field in _SCALARS:  # bool before int: a bool is an int
        if isinstance(value, kind):
            return Value(**{field: value})
    if isinstance(value, Mapping):
        return Value(map_value=MapValue(fields={k: _value(v) for k, v in value.items()}))
    if isinstance(value, list | tuple):
        return Value(array_value=ArrayValue(values=[_value(v) for v in value]))
    if hasattr(value, "latitude") and hasattr(value, "longitude"):  # firestore.GeoPoint
        point = latlng_pb2.LatLng(latitude=value.latitude, longitude=value.longitude)
        return Value(geo_point_value=point)
    raise TypeError(
        f"a Firestore event field cannot hold a {type(value).__name__} here: use null, bool, "
        "int, float, str, bytes, a datetime, a GeoPoint, a map or a list"
    )


def firestore_event(
    path: str,
    before: Mapping[str, Any] | firestore.DocumentSnapshot[Any] | None,
    after: Mapping[str, Any] | firestore.DocumentSnapshot[Any] | None,
    *,
    project: str | None = None,
    change: FirestoreChange = "written",
    event_id: str | None = None,
    database: str = "(default)",
    location: str = "us-central1",
) -> HttpEvent:
    """The Firestore CloudEvent for a write of document `path` (`posts/p1`) from `before` to
    `after` (None: no document), each a mapping of fields or a `DocumentSnapshot` read from
    the emulator (its create and update times are kept; a mapping gets the current time).
    The body is the protobuf `DocumentEventData`, with the attributes `location`, `project`,
    `database`, `namespace` and `document` firebase-functions reads."""
    from google.events.cloud.firestore import DocumentEventData

    project = project_or_default(project)
    now = datetime.now(UTC)
    name = f"projects/{project}/databases/{database}/documents/{path}"
    data = DocumentEventData()
    if (old := _document(before, name, now)) is not None:
        data.old_value = old
    if (new := _document(after, name, now)) is not None:
        data.value = new
    event_id = event_id or str(uuid.uuid4())
    headers = {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-type": FIRESTORE_TYPES[change],
        "ce-source": f"//firestore.googleapis.com/projects/{project}/databases/{database}",
        "ce-subject": f"documents/{path}",
        "ce-time": rfc3339(now),
        "ce-location": location,
        "ce-project": project,
        "ce-database": database,
        "ce-namespace": "(default)",
        "ce-document": path,
        "Content-Type": "application/protobuf",
    }
    return HttpEvent(event_id, headers, DocumentEventData.serialize(data), f"{change} {path}")
