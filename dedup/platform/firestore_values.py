"""Values and documents as Firestore counts and refuses them: pure functions, no I/O.

**Sizes** follow Firestore's documented storage-size rules
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

**Refusals** (`refusal`): what Firestore or its Python client refuses, from the quotas page
and the client's encoder, each seen refused by the emulator or the client:

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

Nothing here touches the network; the functions never raise on any value (`value_size` raises
`TypeError` for a value the client cannot encode: ask `refusal` first).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.base_document import BaseDocumentReference
from google.cloud.firestore_v1.transforms import SERVER_TIMESTAMP, Sentinel
from google.cloud.firestore_v1.vector import Vector

MAX_DOCUMENT_BYTES = 1_048_576
"""The largest document Firestore stores: 1 MiB, measured by `document_size`."""

MAX_FIELD_VALUE_BYTES = 1_048_487
"""The largest field value: 1 MiB - 89 bytes (the quotas page); enforced here on strings and
bytes, whose UTF-8 bytes or length may not pass it (the emulator takes 1,048,487 characters of
ASCII, not one more)."""

MAX_FIELD_PATH_BYTES = 1_500
"""The longest field path, in UTF-8 bytes of its names joined by "."."""

MAX_DEPTH = 20
"""The deepest maps and arrays may nest in a document, its own fields' values at depth 1: a
field holding 20 maps one inside the other is stored, an array inside the 20th is not."""

DOCUMENT_NAME_EXTRA = 16
"""Bytes a document name adds to the string sizes of its path's ids."""

DOCUMENT_EXTRA = 32
"""Bytes a document adds to its name's and fields' sizes."""

INTEGER_BYTES = FLOAT_BYTES = TIMESTAMP_BYTES = 8
BOOLEAN_BYTES = NULL_BYTES = 1
GEOPOINT_BYTES = 16
VECTOR_DIMENSION_BYTES = 8

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_ARRAYS = (list, tuple, set, frozenset)
"""What the Python client writes as an array."""
_CONTAINERS = (dict, *_ARRAYS)
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
_Place = tuple[Any, str | int] | None
"""Where an item is inside the value `refusal` checks: None for the value itself, else (its
container's place, its key or its index), written out only for a refusal (`_place`)."""
_NEVER_REFUSED = frozenset({float, bool, type(None)})
"""Exact types `refusal` takes at any place and depth, whatever their value (an `int` is
refused only outside 64 bits)."""
_INT_OR_NEVER_REFUSED = _NEVER_REFUSED | {int}
_TAKEN_NAMES: set[str] = set()  # map keys `_name_refused` took (a record's come back each write)


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
        elif isinstance(item, _ARRAYS):
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


def document_refusal(
    path: str, fields: Mapping[str, Any], *, round_trip: bool = True
) -> str | None:
    """Why Firestore refuses the document at `path` holding `fields` (each name a field of the
    document itself), or None: a field name or value `refusal` refuses, or a document over
    `MAX_DOCUMENT_BYTES`."""
    for name, value in fields.items():
        reason = field_name_refusal(name) or refusal(value, at=(name,), round_trip=round_trip)
        if reason is not None:
            return f"field {_shown(name)}: {reason}"
    size = document_size(path, fields)
    if size > MAX_DOCUMENT_BYTES:
        return f"a document of {size} bytes, over Firestore's {MAX_DOCUMENT_BYTES} (1 MiB)"
    return None


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
    if isinstance(value, _ARRAYS):
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
        elif isinstance(item, _ARRAYS) and not set(map(type, item)) <= _KEPT:
            stack.extend(item)


def _place(where: _Place) -> str:
    """`where` as text: `['steps'][3]`."""
    parts: list[str] = []
    while where is not None:
        where, part = where
        parts.append(f"[{part}]" if isinstance(part, int) else f"[{_shown(part)}]")
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
        return f"the map key {_shown(name)}", "Firestore reserves names matching __.*__"
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


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _shown(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "...'"
