"""Firestore's values as the simulated store keeps them: what the client can encode, what the
server refuses, and how large a document is.

Firestore's size rules and refusals live in one place, the library's own
`dedup.platform.firestore_values` (each rule cited there): the server here refuses what
`field_name_refusal` and `refusal` refuse and measures documents with its sizes
(`tests/sim/test_values.py` checks the two agree). What this module adds is what that one does
not model:

* **Encoding** (client side, before any RPC): google-cloud-firestore's `encode_value` takes
  None, bool, int, float, str, bytes, datetime, lists (and tuples, sets, frozensets, sent as
  arrays: read back as lists), maps with string keys and the `SERVER_TIMESTAMP` sentinel;
  anything else (a `Decimal`) raises `TypeError` before the request leaves
  (google/cloud/firestore_v1/_helpers.py, `encode_value`). So the server never sees what the
  client cannot encode, and checks the rest as stored: `round_trip=False` (a tuple is an
  array).
* **Decoding**: what Firestore gives back for a value it takes is what the client library
  decodes from what it encoded (`_round_trip`): a `GeoPoint(35, 139)` is read back as
  `GeoPoint(35.0, 139.0)`, a `Vector`'s numbers as floats, a timestamp with a zone other than
  UTC (or none) as an aware UTC `DatetimeWithNanoseconds`, an `IntEnum` as an `int`. The store
  keeps that, so a replay reads what Firestore would return. The kernel's own UTC timestamps
  are kept as they are.
* **Speed**: a handler's long result (`[0] * 170_000`) is written on every retry of its
  write, and the module measures it item by item (about a microsecond each). A long list of
  numbers of one type (`int` or `float`) is measured at C speed and judged by the module on
  its two extremes and one item: its size is `len` times the module's size of one item (every
  number is the same size to it), its verdict the module's on `[min, max]` (a number's only
  refusal is its range). Any other long list is measured by the module once while it lives,
  kept by identity (the simulator's handlers never change a value they returned).

Not modelled: the 40,000 index entries a document may produce, and document references
(nothing here writes them).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.vector import Vector

from dedup.platform import firestore_values as fv

SERVER_TIMESTAMP = firestore.SERVER_TIMESTAMP
MAX_DOCUMENT_BYTES = fv.MAX_DOCUMENT_BYTES
_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
_TAKEN = frozenset({type(None), bool, float, datetime, DatetimeWithNanoseconds})
"""Exact types `dedup.platform.firestore_values.refusal` takes whatever their value as the
server checks them (`round_trip=False`: a datetime without a timezone is stored)."""
_AS_IS = _SCALARS
"""What `encode` sends as it is, by exact type (a timestamp is looked at: `encode`)."""
LONG = 1000
"""A list at least this long is measured once while it lives (`_long`)."""

_LONG: dict[tuple[int, str], tuple[Any, Any]] = {}
"""(id, what) of long lists seen lately: (the list, what was found of it)."""


def _numbers(items: list[Any]) -> list[Any] | None:
    """`[min, max]` of a list of numbers of one type (`int` or `float`, not `bool`), else None:
    to `dedup.platform.firestore_values` each such number is the same size, and refused only
    for its range."""
    kinds = frozenset(map(type, items))
    if kinds == {int} or kinds == {float}:
        return [min(items), max(items)]
    return None


def _long(items: list[Any], what: str, measure: Callable[[list[Any]], Any]) -> Any:
    """`measure(items)`, kept by the list's identity while the list lives."""
    found = _LONG.get((id(items), what))
    if found is None or found[0] is not items:
        if len(_LONG) > 64:
            _LONG.clear()
        found = _LONG[(id(items), what)] = (items, measure(items))
    return found[1]


def _scalars(items: list[Any]) -> bool:
    """Every item is a scalar (checked at C speed, once for a long list)."""
    if len(items) < LONG:
        return frozenset(map(type, items)) <= _SCALARS
    return bool(_long(items, "scalars", lambda i: frozenset(map(type, i)) <= _SCALARS))


def encode(value: Any) -> Any:
    """`value` as the client sends it (a copy: tuples and sets become lists); `TypeError` for
    what the client cannot encode, as `encode_value` raises it."""
    kind = type(value)
    if kind in _SCALARS or value is SERVER_TIMESTAMP:
        return value
    if kind is dict:
        return {
            (k if type(k) is str else _key(k)): (
                v
                if type(v) in _AS_IS
                or v is SERVER_TIMESTAMP
                or (type(v) is datetime and v.tzinfo is UTC)
                else encode(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, dict):
        return {_key(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        if type(value) is list and _scalars(value):
            return value  # shared, not copied: the simulator's handlers never change a value
        if _scalars(list(value)):
            return list(value)
        return [encode(v) for v in value]
    if kind is datetime and value.tzinfo is UTC:
        return value  # the kernel's own timestamps: kept as they are, as before
    if isinstance(value, str | int | float | bytes | datetime | GeoPoint | Vector):
        return _round_trip(value)
    raise TypeError("Cannot convert to a Firestore Value", value, "Invalid type", type(value))


def as_read(value: Any) -> Any:
    """An encoded value as a read gives it back, timestamps included: a UTC `datetime` (kept
    as it is by `encode`, as the kernel's own timestamps) is read back as a
    `DatetimeWithNanoseconds`. For the user's values in a record (`sim.records.USER_FIELDS`);
    `value` itself when nothing changes."""
    kind = type(value)
    if kind is datetime:
        return _round_trip(value)
    if kind is dict:
        changed = {k: as_read(v) for k, v in value.items()}
        return value if all(changed[k] is value[k] for k in value) else changed
    if kind is list:
        if _scalars(value):
            return value
        items = [as_read(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _round_trip(value: Any) -> Any:
    """`value` as a read gives it back: the client library's own encoding and decoding (a
    `GeoPoint`'s and a `Vector`'s numbers as floats, a timestamp as an aware UTC
    `DatetimeWithNanoseconds` to the microsecond, a subclass of `int` or `str` as the plain
    type). Firestore keeps only what its `Value` holds."""
    return _helpers.decode_value(_helpers.encode_value(value), None)


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError("Cannot convert to a Firestore Value", key, "Invalid type", type(key))
    return key


def refusal(fields: dict[str, Any]) -> str | None:
    """Why the server refuses a write of `fields` (as encoded; nested maps for an update's
    field paths), as `INVALID_ARGUMENT`, or None: `dedup.platform.firestore_values`' refusals
    of names and values. The document's size is checked on the result (`document_size`)."""
    for name, value in fields.items():
        reason = fv.field_name_refusal(name)
        # SERVER_TIMESTAMP is a transform the server applies, not a value
        if reason is None and value is not SERVER_TIMESTAMP:
            reason = _value_refusal(value, name)
        if reason is not None:
            return f"field {name!r}: {reason}"
    return None


def _value_refusal(value: Any, name: str) -> str | None:
    kind = type(value)
    if kind in _TAKEN or (kind is int and fv.INT64_MIN <= value <= fv.INT64_MAX):
        return None
    if type(value) is dict and any(
        type(v) is list and len(v) >= LONG for v in value.values()
    ):  # a long result: its lists measured once
        for key, item in value.items():
            reason = fv.field_name_refusal(key) or _value_refusal_at(item, (name, key))
            if reason is not None:
                return reason
        return None
    return fv.refusal(value, at=(name,), round_trip=False)


def _value_refusal_at(value: Any, at: tuple[str, ...]) -> str | None:
    if type(value) is list and len(value) >= LONG:
        return _long(
            value, f"refusal{at}", lambda v: fv.refusal(_numbers(v) or v, at=at, round_trip=False)
        )
    return fv.refusal(value, at=at, round_trip=False)


def value_size(value: Any) -> int:
    """The storage size of one value (`dedup.platform.firestore_values.value_size`; a map's
    long lists measured once while they live)."""
    kind = type(value)
    if kind is dict:
        for v in value.values():
            if (type(v) is list or type(v) is dict) and _holds_long(v):
                return sum(fv.string_size(k) + value_size(v) for k, v in value.items())
    if kind is list and len(value) >= LONG:
        return int(_long(value, "size", _list_size))
    return fv.value_size(value)


def _holds_long(value: Any) -> bool:
    """`value` is a long list, or a map holding one (as a handler's result does)."""
    if type(value) is list:
        return len(value) >= LONG
    return type(value) is dict and any(type(v) is list and len(v) >= LONG for v in value.values())


def _list_size(items: list[Any]) -> int:
    extremes = _numbers(items)
    return fv.value_size(items) if extremes is None else len(items) * fv.value_size(extremes[0])


def document_size(path: str, data: dict[str, Any]) -> int:
    """The storage size of the document at `path` holding `data`
    (`dedup.platform.firestore_values.document_size`)."""
    return fv.document_name_size(path) + value_size(data) + fv.DOCUMENT_EXTRA
