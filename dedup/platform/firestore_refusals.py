"""Values as Firestore and its Python client refuse them: pure functions, no I/O, importing no
module of `dedup` (`dedup.platform.firestore_values` gives every name here under its path too).

`refusal` says why a value cannot be written, from the quotas page
(https://firebase.google.com/docs/firestore/quotas#limits) and the client's encoder, each rule
seen refused by the emulator or the client:

* a map key that is not a string, is empty, is not valid Unicode text (a lone surrogate), or
  matches `__.*__` (reserved); a field path (the keys from the document down, joined by ".")
  longer than `MAX_FIELD_PATH_BYTES`;
* an array directly inside an array (`Cannot convert an array value in an array value`), and
  a `Vector` directly inside an array (`Cannot convert a vector value in an array value`);
* maps and arrays nested deeper than `MAX_DEPTH` (the document's own fields are depth 1);
* an integer outside 64 bits, a string that is not valid Unicode text, a string or bytes over
  `MAX_FIELD_VALUE_BYTES`, an aware `datetime` outside years 1 to 9999 once in UTC (the
  client raises `OverflowError` encoding it);
* any type the client cannot encode (`Decimal`, `date`, `bytearray`, a `Mapping` that is not a
  `dict`, any other object), or a write sentinel such as `SERVER_TIMESTAMP` where a value is
  meant.

With `round_trip=True` (the default) it also refuses what Firestore would store as something
else, so that reading the value back gives what was written: a `tuple`, `set` or `frozenset`
(stored as an array, read back as a `list`, a set in hash order), a `datetime` without a
timezone (read back as an aware UTC one), and subclasses of `str`, `int`, `float`, `bytes`,
`dict` and `list` (an `IntEnum` is read back as an `int`).

The functions never raise on any value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.base_document import BaseDocumentReference
from google.cloud.firestore_v1.transforms import Sentinel
from google.cloud.firestore_v1.vector import Vector

MAX_FIELD_VALUE_BYTES = 1_048_487
"""The largest field value: 1 MiB - 89 bytes (the quotas page); enforced here on strings and
bytes, whose UTF-8 bytes or length may not pass it (the emulator takes 1,048,487 characters of
ASCII, not one more)."""

MAX_FIELD_PATH_BYTES = 1_500
"""The longest field path, in UTF-8 bytes of its names joined by "."."""

MAX_DEPTH = 20
"""The deepest maps and arrays may nest in a document, its own fields' values at depth 1: a
field holding 20 maps one inside the other is stored, an array inside the 20th is not."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_ARRAYS = (list, tuple, set, frozenset)
"""What the Python client writes as an array (`firestore_sizes.ARRAYS`: this module imports none
of `dedup`'s)."""
_CONTAINERS = (dict, *_ARRAYS)
_Place = tuple[Any, str | int] | None
"""Where an item is inside the value `refusal` checks: None for the value itself, else (its
container's place, its key or its index), written out only for a refusal (`_place`)."""
_NEVER_REFUSED = frozenset({float, bool, type(None)})
"""Exact types `refusal` takes at any place and depth, whatever their value (an `int` is
refused only outside 64 bits)."""
_INT_OR_NEVER_REFUSED = _NEVER_REFUSED | {int}
_TAKEN_NAMES: set[str] = set()  # map keys `_name_refused` took (a record's come back each write)


def field_name_refusal(name: object) -> str | None:
    """Why Firestore refuses `name` as a field name (a map key), or None when it takes it."""
    found = _name_refused(name)
    return None if found is None else f"{found[0]}: {found[1]}"


def refusal(value: Any, *, at: Sequence[str] = (), round_trip: bool = True) -> str | None:
    """Why `value` cannot be written to Firestore as it is, or None when it can (see the
    module docstring): what is refused, where inside `value`, and why, such as
    "a Decimal at ['price']: the Firestore client cannot encode it".

    `at`: the field path of `value` in its document (`("steps", "charge", "value")`; empty: a
    field of the document itself), from which its depth and its keys' field paths are
    counted. `round_trip=False` accepts what Firestore stores as something else (a tuple or a
    set as an array: a handler's result, read back as JSON-like data)."""
    if not isinstance(value, _CONTAINERS):  # no place inside it, no depth to count
        found = _value_refused(value, 1, False, round_trip)
        return None if found is None else f"{found[0]}: {found[1]}"
    base_depth = max(len(at) - 1, 0)
    base_path = len(".".join(at).encode("utf-8", "surrogatepass"))
    stack: list[tuple[Any, _Place, int, int, bool]] = [
        (value, None, base_depth + 1, base_path, False)
    ]
    while stack:
        item, where, depth, path_bytes, in_array = stack.pop()
        found = _value_refused(item, depth, in_array, round_trip)
        if found is None and isinstance(item, dict):
            for key, child in item.items():
                found = _name_refused(key)
                if found is not None:
                    break
                length = path_bytes + (1 if path_bytes else 0) + len(key.encode("utf-8"))
                inside = (where, key)
                if length > MAX_FIELD_PATH_BYTES:
                    where, found = (
                        inside,
                        (
                            f"a field path of {length} bytes",
                            f"Firestore's limit is {MAX_FIELD_PATH_BYTES}",
                        ),
                    )
                    break
                if _holds_or_refused(child, round_trip):
                    stack.append((child, inside, depth + 1, length, False))
        elif found is None and isinstance(item, _ARRAYS) and not _scalars_taken(item):
            children: Iterable[Any] = item
            for index, child in enumerate(children):
                if _holds_or_refused(child, round_trip):
                    stack.append((child, (where, index), depth + 1, path_bytes, True))
        if found is not None:
            what, why = found
            return f"{what}{f' at {_place(where)}' if where else ''}: {why}"
    return None


def _place(where: _Place) -> str:
    """`where` as text: `['steps'][3]`."""
    parts: list[str] = []
    while where is not None:
        where, part = where
        parts.append(f"[{part}]" if isinstance(part, int) else f"[{shown(part)}]")
    return "".join(reversed(parts))


def _holds_or_refused(child: Any, round_trip: bool) -> bool:
    """`child` is a map or an array (its depth and items to check), or a scalar refused
    wherever it is: the ones `refusal` must visit. A scalar taken is passed at once."""
    if type(child) in _NEVER_REFUSED:
        return False
    if isinstance(child, (*_CONTAINERS, Vector)):  # a Vector: refused inside an array
        return True
    return _value_refused(child, 1, False, round_trip) is not None


def _scalars_taken(items: Iterable[Any]) -> bool:
    """Every item of the array `items` is a scalar `refusal` takes anywhere (a `float`, a
    `bool`, None, a 64-bit `int`: exact types), checked at C speed: nothing inside to visit."""
    kinds = set(map(type, items))
    if not kinds <= _INT_OR_NEVER_REFUSED:
        return False
    if int not in kinds:
        return True
    ints = items if kinds <= {int, bool} else [i for i in items if type(i) is int]
    return min(ints) >= INT64_MIN and max(ints) <= INT64_MAX


def _name_refused(name: object) -> tuple[str, str] | None:
    """(what, why) Firestore refuses `name` as a map key, or None (a `str` taken: remembered)."""
    if type(name) is str and name in _TAKEN_NAMES:
        return None
    if not isinstance(name, str):
        return f"{_a(type(name).__name__)} map key", "field names are strings"
    if not name:
        return "an empty map key", "field names are never empty"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "a map key with a lone surrogate", "field names are valid Unicode text"
    if len(name) >= 4 and name.startswith("__") and name.endswith("__"):  # __.*__
        return f"the map key {shown(name)}", "Firestore reserves names matching __.*__"
    if type(name) is str and len(_TAKEN_NAMES) < 4096:
        _TAKEN_NAMES.add(name)
    return None


def _value_refused(
    item: Any, depth: int, in_array: bool, round_trip: bool
) -> tuple[str, str] | None:
    """(what, why) `item` itself (not what it holds) cannot be written at `depth`, or None."""
    exact = type(item)  # first what is taken at once, by exact type; then every rule
    if exact in _NEVER_REFUSED or (exact is int and INT64_MIN <= item <= INT64_MAX):
        return None
    if depth <= MAX_DEPTH and (exact is dict or (exact is list and not in_array)):
        return None
    kind = exact.__name__
    if isinstance(item, str):  # first: no str is also a container or a number
        try:
            size = len(item.encode("utf-8"))
        except UnicodeEncodeError:
            return "a str with a lone surrogate", "Firestore stores valid Unicode text"
        if size > MAX_FIELD_VALUE_BYTES:
            return f"a str of {size} bytes", f"Firestore's limit is {MAX_FIELD_VALUE_BYTES}"
        return _subclass(item, str, round_trip)
    if isinstance(item, _CONTAINERS):
        if in_array and isinstance(item, _ARRAYS):
            return f"{_a(kind)} directly inside an array", "Firestore refuses nested arrays"
        if depth > MAX_DEPTH:
            return f"{_a(kind)} nested {depth} deep", f"Firestore's limit is {MAX_DEPTH} levels"
        if round_trip and type(item) not in (dict, list):
            stored = "a dict" if isinstance(item, dict) else "a list"
            return _a(kind), f"Firestore would store it and return {stored}"
        return None
    if item is None or isinstance(item, bool):
        return None
    if isinstance(item, int):
        if not INT64_MIN <= item <= INT64_MAX:
            return "an int outside 64 bits", "Firestore stores 64-bit integers"
        return _subclass(item, int, round_trip)
    if isinstance(item, float):
        return _subclass(item, float, round_trip)
    if isinstance(item, bytes):
        if getattr(item, "subtype", None) is not None:
            return f"{_a(kind)} with a BSON subtype", "a dedup record stores plain bytes"
        if len(item) > MAX_FIELD_VALUE_BYTES:
            return f"{len(item)} bytes", f"Firestore's limit is {MAX_FIELD_VALUE_BYTES}"
        return _subclass(item, bytes, round_trip)
    if isinstance(item, datetime):
        if item.tzinfo is not None and _outside_utc(item):
            return "a datetime outside year 1 to 9999 in UTC", (
                "Firestore's timestamps end there (its client cannot encode it)"
            )
        if round_trip and item.tzinfo is None:
            return "a datetime without a timezone", (
                "Firestore would store it as UTC and return an aware datetime (give it a tzinfo)"
            )
        return None
    if isinstance(item, Vector) and in_array:
        return "a Vector directly inside an array", "Firestore refuses vectors in arrays"
    if isinstance(item, GeoPoint | BaseDocumentReference | Vector):
        return None
    if isinstance(item, Sentinel):
        return f"the write sentinel {item.description!r}", "it is not a value"
    return _a(kind), "the Firestore client cannot encode it"


def _outside_utc(moment: datetime) -> bool:
    """The aware `moment` falls outside `datetime`'s years (1 to 9999) once in UTC."""
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return True
    return False


def _subclass(item: Any, base: type, round_trip: bool) -> tuple[str, str] | None:
    if round_trip and type(item) is not base:
        return _a(type(item).__name__), f"Firestore would store it and return {_a(base.__name__)}"
    return None


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def shown(key: object) -> str:
    """`key` as a refusal names it: its `repr`, cut to 40 characters."""
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "...'"
