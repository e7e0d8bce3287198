"""The simulated store measures and refuses values as the library's own module of Firestore's
rules does (`dedup.platform.firestore_values`), so the idea of those rules lives in one place:
the simulator's shortcuts (a long list measured once while it lives) give the same sizes and
verdicts, and the server refuses exactly what the module refuses of what the client encodes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core import exceptions as api

from dedup.platform import firestore_values as fv
from sim.server import PESSIMISTIC, Server, Write
from sim.values import LONG, document_size, encode, refusal

WHEN = datetime(2030, 1, 1, tzinfo=UTC)

DOCUMENTS: list[dict[str, Any]] = [
    {},
    {"state": "sent", "attempts": 3, "sent": True, "lastError": None, "at": WHEN},
    {"result": {"zeros": [0] * (LONG * 3)}, "name": "é" * 10},
    {"result": {"mixed": [1, 2.5, "x", None, True, b"ab"] * LONG}},
    {"steps": {"s0": {"index": 0, "value": {"items": [{"a": 1}, {"b": [1, 2]}]}}}},
    {"tuple": (1, 2, 3), "set": {"a"}},
]


@pytest.mark.parametrize("data", DOCUMENTS)
def test_sizes_are_the_library_s(data: dict[str, Any]) -> None:
    path = "triggerEvents/e1-fn"
    assert document_size(path, encode(data)) == fv.document_size(path, data)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"m": value}
    return value


REFUSED_OR_NOT: list[dict[str, Any]] = [
    {"ok": [1, 2, {"a": [3]}]},
    {"nested": [[1, 2], [3]]},
    {"long nested": [0] * LONG + [[1]]},
    {"long ints": {"zeros": [0] * LONG + [2**64]}},
    {"long floats": {"zeros": [0.5] * LONG}},
    {"__reserved__": 1},
    {"map": {"__s0__": {"index": 0}}},
    {"": 1},
    {"big int": 2**64},
    {"deep": nested(fv.MAX_DEPTH)},
    {"deep": nested(fv.MAX_DEPTH + 1)},
    {"long path": {"k" * 1_600: 1}},
    {"text": "x" * (fv.MAX_FIELD_VALUE_BYTES + 1)},
    {"tuple": (1, 2)},
]


@pytest.mark.parametrize("data", REFUSED_OR_NOT, ids=lambda d: next(iter(d)))
def test_the_server_refuses_what_the_library_refuses(data: dict[str, Any]) -> None:
    path = "triggerEvents/e1-fn"
    expected = fv.document_refusal(path, data, round_trip=False)
    assert (refusal(encode(data)) is None) == (expected is None)
    server = Server(PESSIMISTIC)
    if expected is None:
        server.commit([Write("create", path, encode(data))], 1)
    else:
        with pytest.raises(api.InvalidArgument):
            server.commit([Write("create", path, encode(data))], 1)


def test_a_document_over_the_library_s_limit_is_refused() -> None:
    path = "triggerEvents/e1-fn"
    room = fv.MAX_DOCUMENT_BYTES - fv.document_size(path, {"a": "", "b": ""})
    fits = {"a": "x" * (room // 2), "b": "x" * (room - room // 2)}
    assert fv.document_size(path, fits) == fv.MAX_DOCUMENT_BYTES
    server = Server(PESSIMISTIC)
    server.commit([Write("create", path, fits)], 1)
    with pytest.raises(api.InvalidArgument, match="maximum entity size"):
        server.commit([Write("set", path, {**fits, "c": None})], 2)
