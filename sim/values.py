"""Firestore's values as the simulated store keeps them: what the client can encode, what the
server refuses, and how large a document is.

Each rule is Firestore's documented one:

* **Encoding** (client side, before any RPC): google-cloud-firestore's `encode_value` takes
  None, bool, int, float, str, bytes, datetime, lists (and tuples, sets, frozensets, sent as
  arrays: read back as lists), maps with string keys and the `SERVER_TIMESTAMP` sentinel;
  anything else (a `Decimal`) raises `TypeError` before the request leaves
  (google/cloud/firestore_v1/_helpers.py, `encode_value`).
* **Refusals** (server side, `INVALID_ARGUMENT`, nothing of the commit applied):
  - an array directly inside an array: "an array cannot contain another array value"
    (https://firebase.google.com/docs/firestore/manage-data/data-types, Arrays);
  - a field name matching `__.*__`: reserved
    (https://firebase.google.com/docs/firestore/quotas, "Constraints on field names");
  - maps and arrays nested deeper than 20 levels ("Maximum depth of fields in a map or
    array: 20", same page);
  - a document over 1 MiB, 1,048,576 bytes ("Maximum size for a document", same page).
* **Sizes** (https://firebase.google.com/docs/firestore/storage-size): a string is its UTF-8
  bytes + 1; a boolean and a null 1; an integer, a float and a timestamp 8; bytes their length;
  an array the sum of its values; a map the sum of its keys (as strings) and values. A
  document name is the sum of its collection and document ids (as strings) + 16; a document
  is its name + the sum of its field names (as strings) and values + 32.

Not modelled: the 40,000 index entries a document may produce, the 1,500-byte field path,
GeoPoints, references and vectors (nothing here writes them).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore

SERVER_TIMESTAMP = firestore.SERVER_TIMESTAMP
_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


_LONG: dict[int, tuple[Any, frozenset[type]]] = {}
"""The item types of long lists seen lately, by identity: a long result is written again on
every retry of its write, and each check would cost milliseconds."""


def _kinds(items: Any) -> frozenset[type]:
    if len(items) < 1000:
        return frozenset(map(type, items))
    found = _LONG.get(id(items))
    if found is None or found[0] is not items:
        if len(_LONG) > 64:
            _LONG.clear()
        found = _LONG[id(items)] = (items, frozenset(map(type, items)))
    return found[1]


def _scalars(items: Any) -> bool:
    """Every item is a scalar (checked at C speed: a 170,000-item list costs milliseconds)."""
    return _kinds(items) <= _SCALARS


MAX_DOCUMENT_BYTES = 1_048_576
MAX_DEPTH = 20
_RESERVED = re.compile(r"(?s)__.*__")


class Refused(Exception):
    """The server refuses a write as INVALID_ARGUMENT (`reason` says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(value: Any) -> Any:
    """`value` as the client sends it (a copy: tuples and sets become lists); `TypeError` for
    what the client cannot encode, as `encode_value` raises it."""
    kind = type(value)
    if kind in _SCALARS or value is SERVER_TIMESTAMP:
        return value
    if kind is dict:
        return {
            (k if type(k) is str else _key(k)): (v if type(v) in _SCALARS else encode(v))
            for k, v in value.items()
        }
    if isinstance(value, dict):
        return {_key(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        if type(value) is list and _scalars(value):
            return value  # shared, not copied: the simulator's handlers never change a value
        if _scalars(value):
            return list(value)
        return [encode(v) for v in value]
    if isinstance(value, str | int | float | bytes | datetime):
        return value
    raise TypeError("Cannot convert to a Firestore Value", value, "Invalid type", type(value))


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError("Cannot convert to a Firestore Value", key, "Invalid type", type(key))
    return key


_NAMES_SEEN: dict[str, bool] = {}


def _reserved(name: str) -> bool:
    found = _NAMES_SEEN.get(name)
    if found is None:
        found = _NAMES_SEEN[name] = _RESERVED.fullmatch(name) is not None
        if len(_NAMES_SEEN) > 10_000:
            _NAMES_SEEN.clear()
    return found


def refusal(fields: dict[str, Any]) -> str | None:
    """Why the server refuses a write of `fields` (reserved names, nested arrays, depth), or
    None; the document's size is checked on the result (`document_size`)."""
    for name, value in fields.items():
        if _reserved(name):
            return f"field name {name!r} is reserved"
        if not isinstance(value, dict | list):
            continue
        found = _refusal_in(value, 1, in_array=False)
        if found is not None:
            return f"{name}: {found}"
    return None


def _refusal_in(value: Any, depth: int, *, in_array: bool) -> str | None:
    if isinstance(value, dict):
        if depth > MAX_DEPTH:
            return "maps and arrays nest deeper than 20 levels"
        for key, item in value.items():
            if _reserved(key):
                return f"field name {key!r} is reserved"
            found = _refusal_in(item, depth + 1, in_array=False)
            if found is not None:
                return found
    elif isinstance(value, list):
        if in_array:
            return "Cannot convert an array value in an array value"
        if depth > MAX_DEPTH:
            return "maps and arrays nest deeper than 20 levels"
        if _scalars(value):
            return None
        for item in value:
            if isinstance(item, dict | list):
                found = _refusal_in(item, depth + 1, in_array=True)
                if found is not None:
                    return found
    return None


def value_size(value: Any) -> int:
    """The storage size of one value (storage-size rules above)."""
    kind = type(value)
    if kind is str:
        return len(value.encode("utf-8", "surrogatepass")) + 1
    if kind is int or kind is float:
        return 8
    if kind is bool or value is None:
        return 1
    if kind is list:
        kinds = _kinds(value)
        if kinds <= {int, float}:
            return 8 * len(value)
        return sum(value_size(v) for v in value)
    if kind is dict:
        total = 0
        for k, v in value.items():
            total += len(k.encode("utf-8", "surrogatepass")) + 1
            kv = type(v)
            if kv is int or kv is float or kv is datetime or kv is DatetimeWithNanoseconds:
                total += 8
            elif kv is str:
                total += len(v.encode("utf-8", "surrogatepass")) + 1
            elif v is None or kv is bool:
                total += 1
            else:
                total += value_size(v)
        return total
    if kind is bytes:
        return len(value)
    if isinstance(value, datetime):
        return 8
    return value_size(encode(value))


def name_size(path: str) -> int:
    """The size of a document's name: its ids, each as a string, + 16."""
    return sum(len(part.encode("utf-8", "surrogatepass")) + 1 for part in path.split("/")) + 16


def document_size(path: str, data: dict[str, Any]) -> int:
    """The storage size of the document at `path` holding `data`."""
    return name_size(path) + value_size(data) + 32


def frozen(value: Any) -> Any:
    """A copy of an encoded value that later changes to the caller's objects cannot reach."""
    kind = type(value)
    if kind is dict:
        return {k: frozen(v) for k, v in value.items()}
    if kind is list:
        return value if _scalars(value) else [frozen(v) for v in value]
    return value
