"""Values and documents as Firestore measures them: pure functions, no I/O, importing no module
of `dedup` (`dedup.platform.firestore_values` gives every name here under its path too).

Sizes follow Firestore's documented storage-size rules
(https://firebase.google.com/docs/firestore/storage-size):

| value                            | size                                               |
|----------------------------------|----------------------------------------------------|
| string                           | its UTF-8 bytes + 1                                |
| integer, floating-point number   | 8                                                  |
| boolean, null                    | 1                                                  |
| date and time (timestamp)        | 8                                                  |
| geographical point               | 16                                                 |
| bytes                            | their length                                       |
| reference                        | the referenced document's name size                |
| vector                           | 8 per dimension                                    |
| array                            | the sum of its values' sizes                       |
| map                              | the sum of its keys' string sizes and its values'  |

A document name's size is the sum of the string sizes of the collection ids and document ids
of its path, + 16 (`users/jeff/tasks/my_task_id`: 6 + 5 + 6 + 11 + 16 = 44). A document's size
is its name's size, + the string size of each field name, + each field value's size, + 32; a
document holds at most 1 MiB, `MAX_DOCUMENT_BYTES` = 1,048,576 bytes
(https://firebase.google.com/docs/firestore/quotas#limits). The Firestore emulator measures
the same way: a document of exactly 1,048,576 bytes by these rules is accepted, one byte more
is refused (`maximum entity size`).

`value_size` raises `TypeError` for a value the client cannot encode: ask
`dedup.platform.firestore_refusals.refusal` first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.base_document import BaseDocumentReference
from google.cloud.firestore_v1.transforms import SERVER_TIMESTAMP
from google.cloud.firestore_v1.vector import Vector

MAX_DOCUMENT_BYTES = 1_048_576
"""The largest document Firestore stores: 1 MiB, measured by `document_size`."""

DOCUMENT_NAME_EXTRA = 16
"""Bytes a document name adds to the string sizes of its path's ids."""

DOCUMENT_EXTRA = 32
"""Bytes a document adds to its name's and fields' sizes."""

INTEGER_BYTES = FLOAT_BYTES = TIMESTAMP_BYTES = 8
BOOLEAN_BYTES = NULL_BYTES = 1
GEOPOINT_BYTES = 16
VECTOR_DIMENSION_BYTES = 8

ARRAYS = (list, tuple, set, frozenset)
"""What the Python client writes as an array."""
_FIXED: dict[type, int] = {
    int: INTEGER_BYTES,
    float: FLOAT_BYTES,
    bool: BOOLEAN_BYTES,
    type(None): NULL_BYTES,
    datetime: TIMESTAMP_BYTES,
    DatetimeWithNanoseconds: TIMESTAMP_BYTES,
}
"""Scalars of one size whatever their value, by exact type: an array holding only these is
measured by counting its items' types (at C speed), not item by item."""


def string_size(text: str) -> int:
    """A string's size: its UTF-8 bytes + 1 (lone surrogates counted as 3 bytes each, as
    `surrogatepass` encodes them; `refusal` refuses them)."""
    return len(text.encode("utf-8", "surrogatepass")) + 1


def document_name_size(path: str) -> int:
    """The size of the name of the document at `path` (`collection/id/collection/id...`, no
    leading `projects/...`): the string size of each id of the path, + 16."""
    return sum(string_size(part) for part in path.strip("/").split("/")) + DOCUMENT_NAME_EXTRA


def value_size(value: Any) -> int:
    """The size of `value` as Firestore stores it (the module's table). A tuple, set or
    frozenset counts as the array the client writes, `SERVER_TIMESTAMP` as the timestamp it
    becomes. Raises `TypeError` for a value the client cannot encode (see `refusal`)."""
    size = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _FIXED:
            size += _FIXED[kind]
        elif kind is str:
            size += string_size(item)
        elif isinstance(item, dict):
            if set(map(type, item)) <= {str}:  # the keys' UTF-8 bytes, + 1 each
                size += len("".join(item).encode("utf-8", "surrogatepass")) + len(item)
            else:
                for key in item:
                    if not isinstance(key, str):
                        raise TypeError(
                            f"the Firestore client cannot encode a {type(key).__name__} key"
                        )
                    size += string_size(key)
            size += _sized(item.values(), stack)
        elif isinstance(item, ARRAYS):
            kinds = set(map(type, item))
            if len(kinds) == 1 and kinds <= _FIXED.keys():
                size += len(item) * _FIXED[kinds.pop()]
            elif kinds <= _FIXED.keys():
                size += sum(_FIXED[k] * n for k, n in Counter(map(type, item)).items())
            else:
                size += _sized(item, stack)
        else:
            size += _scalar_size(item)
    return size


def _sized(items: Iterable[Any], stack: list[Any]) -> int:
    """The size of those of `items` whose exact type tells it (`_FIXED`, `str`); the others
    are put on `stack`, in order, for `value_size` to measure."""
    size = 0
    for item in items:
        kind = type(item)
        if kind in _FIXED:
            size += _FIXED[kind]
        elif kind is str:
            size += len(item.encode("utf-8", "surrogatepass")) + 1
        else:
            stack.append(item)
    return size


def map_size(fields: Mapping[str, Any]) -> int:
    """The size of a map, or of a document's fields: each key's string size and each value's
    size (`value_size`)."""
    return sum(string_size(name) + value_size(value) for name, value in fields.items())


def document_size(path: str, fields: Mapping[str, Any]) -> int:
    """The size of the document at `path` holding `fields` (each name a field of the document
    itself, not a dotted path): name + fields + 32. At most `MAX_DOCUMENT_BYTES` is stored."""
    return document_name_size(path) + map_size(fields) + DOCUMENT_EXTRA


def _scalar_size(item: Any) -> int:
    if item is None or isinstance(item, bool):
        return BOOLEAN_BYTES if item is not None else NULL_BYTES
    if isinstance(item, int):
        return INTEGER_BYTES
    if isinstance(item, float):
        return FLOAT_BYTES
    if isinstance(item, str):
        return string_size(item)
    if isinstance(item, bytes):
        return len(item)
    if isinstance(item, datetime | DatetimeWithNanoseconds):
        return TIMESTAMP_BYTES
    if isinstance(item, GeoPoint):
        return GEOPOINT_BYTES
    if isinstance(item, BaseDocumentReference):
        return document_name_size(item.path)
    if isinstance(item, Vector):
        return VECTOR_DIMENSION_BYTES * len(item)
    if item is SERVER_TIMESTAMP:
        return TIMESTAMP_BYTES  # the commit time it becomes
    raise TypeError(f"the Firestore client cannot encode a {type(item).__name__}")
