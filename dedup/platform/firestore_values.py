"""Values and documents as Firestore counts, refuses and reads them back: pure functions, no
I/O. A value's size is `dedup.platform.firestore_sizes`', why Firestore refuses it
`dedup.platform.firestore_refusals`'; this module gives every name of the two under its own path,
and owns what needs both (`document_refusal`) and what a read gives back (`as_stored`,
`references`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.base_document import BaseDocumentReference
from google.cloud.firestore_v1.vector import Vector

from dedup.platform.firestore_refusals import INT64_MAX as INT64_MAX
from dedup.platform.firestore_refusals import INT64_MIN as INT64_MIN
from dedup.platform.firestore_refusals import MAX_DEPTH as MAX_DEPTH
from dedup.platform.firestore_refusals import MAX_FIELD_PATH_BYTES as MAX_FIELD_PATH_BYTES
from dedup.platform.firestore_refusals import MAX_FIELD_VALUE_BYTES as MAX_FIELD_VALUE_BYTES
from dedup.platform.firestore_refusals import field_name_refusal as field_name_refusal
from dedup.platform.firestore_refusals import refusal as refusal
from dedup.platform.firestore_refusals import shown
from dedup.platform.firestore_sizes import ARRAYS as ARRAYS
from dedup.platform.firestore_sizes import BOOLEAN_BYTES as BOOLEAN_BYTES
from dedup.platform.firestore_sizes import DOCUMENT_EXTRA as DOCUMENT_EXTRA
from dedup.platform.firestore_sizes import DOCUMENT_NAME_EXTRA as DOCUMENT_NAME_EXTRA
from dedup.platform.firestore_sizes import FLOAT_BYTES as FLOAT_BYTES
from dedup.platform.firestore_sizes import GEOPOINT_BYTES as GEOPOINT_BYTES
from dedup.platform.firestore_sizes import INTEGER_BYTES as INTEGER_BYTES
from dedup.platform.firestore_sizes import MAX_DOCUMENT_BYTES as MAX_DOCUMENT_BYTES
from dedup.platform.firestore_sizes import NULL_BYTES as NULL_BYTES
from dedup.platform.firestore_sizes import TIMESTAMP_BYTES as TIMESTAMP_BYTES
from dedup.platform.firestore_sizes import VECTOR_DIMENSION_BYTES as VECTOR_DIMENSION_BYTES
from dedup.platform.firestore_sizes import document_name_size as document_name_size
from dedup.platform.firestore_sizes import document_size as document_size
from dedup.platform.firestore_sizes import map_size as map_size
from dedup.platform.firestore_sizes import string_size as string_size
from dedup.platform.firestore_sizes import value_size as value_size


def document_refusal(
    path: str, fields: Mapping[str, Any], *, round_trip: bool = True
) -> str | None:
    """Why Firestore refuses the document at `path` holding `fields` (each name a field of the
    document itself), or None: a field name or value `refusal` refuses, or a document over
    `MAX_DOCUMENT_BYTES`."""
    for name, value in fields.items():
        reason = field_name_refusal(name) or refusal(value, at=(name,), round_trip=round_trip)
        if reason is not None:
            return f"field {shown(name)}: {reason}"
    size = document_size(path, fields)
    if size > MAX_DOCUMENT_BYTES:
        return f"a document of {size} bytes, over Firestore's {MAX_DOCUMENT_BYTES} (1 MiB)"
    return None


_KEPT = frozenset({type(None), bool, int, float, str, bytes})
"""Exact types a read gives back as they were written (`as_stored`)."""


def as_stored(value: Any, document: Callable[[str], Any]) -> Any:
    """`value` as a read of the record gives it back, for a value `refusal` takes: what a
    replay of a step hands the handler, so that its first run gets the same (same types, same
    values) and fingerprints and branches agree. A `GeoPoint`'s and a `Vector`'s numbers become
    floats, a timestamp an aware UTC `DatetimeWithNanoseconds` (microseconds: Firestore keeps
    no finer), a tuple a list, a document reference `document(its path)` (the reading
    client's `document`); the rest is kept. See `references` for a reference no read of the
    record could decode."""
    kind = type(value)
    if kind in _KEPT:
        return value
    if isinstance(value, GeoPoint):
        return GeoPoint(float(value.latitude), float(value.longitude))
    if isinstance(value, Vector):
        return Vector([float(x) for x in value])
    if isinstance(value, BaseDocumentReference):
        return document(value.path)
    if isinstance(value, datetime):
        utc = value.astimezone(UTC)
        return DatetimeWithNanoseconds(  # type: ignore[no-untyped-call,unused-ignore]
            *utc.timetuple()[:6], nanosecond=utc.microsecond * 1000, tzinfo=UTC
        )
    if isinstance(value, dict):
        return {key: as_stored(item, document) for key, item in value.items()}
    if isinstance(value, ARRAYS):
        return [as_stored(item, document) for item in value]
    return value


def references(value: Any) -> Iterator[BaseDocumentReference]:
    """Every document reference inside `value` (maps and arrays walked; an array of scalars
    skipped at C speed). A read of the record decodes a reference only on a client of its own
    project and database, else raises: the kernel refuses to write any other
    (`dedup.kernel.room.unreadable_reference`)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseDocumentReference):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, ARRAYS) and not set(map(type, item)) <= _KEPT:
            stack.extend(item)
