"""`dedup.platform.firestore_values`: sizes as Firestore's storage-size page counts them (its
own worked example, https://firebase.google.com/docs/firestore/storage-size), and the values
Firestore or its client refuses. tests/dedup/test_red_team_values.py checks both on the
emulator: a document of exactly 1 MiB by this measure is stored, one byte more is not, and
every refusal below is refused there too."""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore import SERVER_TIMESTAMP, GeoPoint
from google.cloud.firestore_v1.vector import Vector

from dedup import RecordRefused, StoreUnavailable
from dedup.kernel.store import ConditionalTries, StoreBase
from dedup.platform.firestore_values import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_FIELD_PATH_BYTES,
    document_name_size,
    document_refusal,
    document_size,
    field_name_refusal,
    map_size,
    refusal,
    string_size,
    value_size,
)

TASK = {"type": "Personal", "done": False, "priority": 1, "description": "Learn Cloud Firestore"}
"""The storage-size page's example document, `users/jeff/tasks/my_task_id`."""


class Color(StrEnum):
    RED = "red"


class Level(IntEnum):
    ONE = 1


def test_the_docs_example_document_measures_as_the_docs_say() -> None:
    """String sizes (`tasks` 6, `description` 12), the name (6 + 5 + 6 + 11 + 16 = 44), each
    field (14, 6, 17, 34: 71 together) and the document (44 + 71 + 32 = 147)."""
    assert (string_size("tasks"), string_size("description")) == (6, 12)
    assert document_name_size("users/jeff/tasks/my_task_id") == 44
    fields = {name: string_size(name) + value_size(value) for name, value in TASK.items()}
    assert fields == {"type": 14, "done": 6, "priority": 17, "description": 34}
    assert map_size(TASK) == 71
    assert document_size("users/jeff/tasks/my_task_id", TASK) == 147


def test_every_type_measures_as_its_row_of_the_table() -> None:
    """Integer and double 8, boolean and null 1, timestamp 8, geopoint 16, bytes their
    length, a reference its document name, a vector 8 per dimension, a string UTF-8 + 1, an
    array the sum of its values, a map its keys' string sizes and its values."""
    client = firestore.Client(project="p", credentials=AnonymousCredentials())
    assert value_size(7) == value_size(2.5) == value_size(datetime.now(UTC)) == 8
    assert value_size(True) == value_size(None) == 1
    assert value_size(GeoPoint(1, 2)) == 16
    assert value_size(b"\x00" * 10) == 10
    assert value_size(client.document("users/jeff")) == 6 + 5 + 16
    assert value_size(Vector([1.0, 2.0, 3.0])) == 24
    assert value_size("é") == 3  # two bytes of UTF-8, + 1
    assert value_size([1, "ab", None]) == 8 + 3 + 1
    assert value_size({"a": {"bc": 1}}) == 2 + 3 + 8
    assert value_size(SERVER_TIMESTAMP) == 8  # the timestamp it becomes
    assert value_size((1, 2)) == value_size({1, 2}) == 16  # written as arrays


def test_an_integer_is_eight_bytes_whatever_json_says() -> None:
    """The red team's result: 170,000 zeros are 340,001 bytes of JSON, within the old 512 KiB
    limit, and 1,360,000 bytes to Firestore, past its 1 MiB document."""
    zeros = {"zeros": [0] * 170_000}
    assert len(json.dumps(zeros["zeros"], separators=(",", ":"))) == 340_001
    assert value_size(zeros) == 6 + 1_360_000 > MAX_DOCUMENT_BYTES


def test_value_size_refuses_what_the_client_cannot_encode() -> None:
    with pytest.raises(TypeError, match="Decimal"):
        value_size({"price": Decimal("1.5")})
    with pytest.raises(TypeError):
        value_size({1: "a"})


REFUSED: list[tuple[Any, str]] = [
    (Decimal("9.99"), "a Decimal: the Firestore client cannot encode it"),
    ({"at": date(2024, 1, 1)}, "a date at ['at']: the Firestore client cannot encode it"),
    (bytearray(b"x"), "a bytearray: the Firestore client cannot encode it"),
    ([[1, 2]], "a list directly inside an array at [0]: Firestore refuses nested arrays"),
    ({"a": [{"b": [[1]]}]}, "at ['a'][0]['b'][0]: Firestore refuses nested arrays"),
    ({"__s0__": 1}, "the map key '__s0__': Firestore reserves names matching __.*__"),
    ({"a": {"__x__": 1}}, "the map key '__x__' at ['a']"),
    ({"": 1}, "an empty map key"),
    ({1: "a"}, "an int map key"),
    ({"k": "\ud800"}, "a str with a lone surrogate at ['k']"),
    (2**63, "an int outside 64 bits"),
    (-(2**63) - 1, "an int outside 64 bits"),
    (SERVER_TIMESTAMP, "the write sentinel"),
    ({"x" * (MAX_FIELD_PATH_BYTES + 1): 1}, "a field path of 1501 bytes"),
]
"""Values Firestore or its client refuses, and the phrase `refusal` gives."""

CONVERTED: list[tuple[Any, str]] = [
    ({1, 2}, "a set: Firestore would store it and return a list"),
    (frozenset({1}), "a frozenset: Firestore would store it and return a list"),
    ((1, 2), "a tuple: Firestore would store it and return a list"),
    ({"at": datetime(2024, 1, 1)}, "a datetime without a timezone at ['at']"),  # noqa: DTZ001
    (Color.RED, "a Color: Firestore would store it and return a str"),
    (Level.ONE, "a Level: Firestore would store it and return an int"),
    (OrderedDict(a=1), "an OrderedDict: Firestore would store it and return a dict"),
]
"""Values Firestore stores as another type: refused where a replay must return the same."""


@pytest.mark.parametrize(("value", "phrase"), REFUSED + CONVERTED)
def test_refusal_names_the_type_where_it_is_and_why(value: Any, phrase: str) -> None:
    found = refusal(value)
    assert found is not None
    assert phrase in found


@pytest.mark.parametrize(("value", "phrase"), REFUSED)
def test_what_firestore_refuses_is_refused_in_every_mode(value: Any, phrase: str) -> None:
    assert phrase in (refusal(value, round_trip=False) or "")


@pytest.mark.parametrize(("value", "phrase"), CONVERTED)
def test_a_result_may_hold_what_firestore_converts(value: Any, phrase: str) -> None:
    """A handler's result is read back as JSON-like data: a tuple stored as a list serves."""
    assert refusal(value, round_trip=False) is None


def test_what_firestore_stores_as_it_is_is_accepted() -> None:
    client = firestore.Client(project="p", credentials=AnonymousCredentials())
    value = {
        "s": "text",
        "i": -(2**63),
        "f": float("nan"),
        "b": b"\x00",
        "t": datetime.now(UTC),
        "g": GeoPoint(1, 2),
        "r": client.document("users/jeff"),
        "v": Vector([1.0]),
        "l": [1, {"m": [2]}, None, True],
        "dots.and spaces": {"`": 1},
    }
    assert refusal(value) is None


def test_depth_counts_from_the_document() -> None:
    """Twenty maps one inside the other are stored as a field of the document; an array
    inside the twentieth is not. A step's value sits three deep (`steps.<name>.value`)."""

    def nested(depth: int, leaf: Any) -> Any:
        for _ in range(depth):
            leaf = {"m": leaf}
        return leaf

    assert refusal(nested(MAX_DEPTH, 1)) is None
    assert "nested 21 deep" in (refusal(nested(MAX_DEPTH, [1])) or "")
    at = ("steps", "charge", "value")
    assert refusal(nested(MAX_DEPTH - 2, 1), at=at) is None
    assert "nested 21 deep" in (refusal(nested(MAX_DEPTH - 2, [1]), at=at) or "")


def test_a_field_path_is_counted_from_the_document() -> None:
    assert refusal({"k" * (MAX_FIELD_PATH_BYTES - 2): 1}, at=("a",)) is None
    assert "1501 bytes" in (refusal({"k" * (MAX_FIELD_PATH_BYTES - 1): 1}, at=("a",)) or "")


def test_field_names_and_documents() -> None:
    assert field_name_refusal("__s0__") is not None
    assert field_name_refusal("s0") is None
    path, limit = "c/d", MAX_DOCUMENT_BYTES
    base = document_size(path, {"a": []})
    fits = {"a": [0] * ((limit - base) // 8)}
    assert document_size(path, fits) <= limit
    assert document_refusal(path, fits) is None
    over = {"a": [0] * ((limit - base) // 8 + 1)}
    assert "over Firestore's 1048576" in (document_refusal(path, over) or "")
    assert "field '__x__'" in (document_refusal(path, {"__x__": 1}) or "")


@pytest.mark.parametrize(
    "error",
    [api_exceptions.InvalidArgument("400 bad"), TypeError("no"), ValueError("out of range")],
)
def test_a_record_write_refused_as_invalid_is_terminal(error: Exception) -> None:
    """A conditional write refused as invalid (`InvalidArgument`), or that the client could
    not encode (`TypeError`, `ValueError`), is `RecordRefused`, a `TerminalError`: never
    `StoreUnavailable`, which the platform would retry into the same refusal."""
    store = StoreBase[Any](object(), "triggerEvents", rpc_timeout_seconds=1)
    tries = ConditionalTries(store, "record step s of", "e1-s", None)
    with pytest.raises(RecordRefused, match="triggerEvents/e1-s") as raised:
        tries.after(error)
    assert not isinstance(raised.value, StoreUnavailable)
    assert raised.value.__cause__ is error


def test_a_long_array_is_measured_and_checked_as_item_by_item() -> None:
    """An array of numbers, booleans, nulls or timestamps is taken by its items' types at once
    (a handler's result of 170,000 zeros): its size is still each item's, an int outside 64
    bits in it is still refused at its place, and a map key refused still wins over a value
    refused before it in the same map (keys are checked first)."""
    moment = datetime(2024, 1, 1, tzinfo=UTC)
    assert value_size([0] * 170_000) == 8 * 170_000
    assert value_size([1, 2.5, True, None, moment, "ab"]) == 8 + 8 + 1 + 1 + 8 + 3
    assert value_size({"ab": [0, None], "c": {"d": False}}) == 3 + 9 + 2 + 2 + 1
    assert refusal({"zeros": [0] * 170_000}, at=("result",), round_trip=False) is None
    zeros = [0] * 1_000
    zeros[417] = 2**63
    assert refusal({"zeros": zeros}) == (
        "an int outside 64 bits at ['zeros'][417]: Firestore stores 64-bit integers"
    )
    assert "at ['a'][1]" in (refusal({"a": [0.5, -(2**63) - 1, None]}) or "")
    assert (refusal({"a": Decimal(1), "__b__": 1}) or "").startswith("the map key '__b__'")
