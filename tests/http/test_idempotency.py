"""The framework-free parts of an idempotent request (`dedup.http.idempotency`): unit tests."""

from __future__ import annotations

import pytest

from dedup.http.idempotency import (
    InvalidKey,
    NotStored,
    StoredResponse,
    fingerprint,
    parse_key,
    scoped_event_id,
)
from dedup.kernel.room import storable_result
from dedup.kernel.transitions import MAX_RESULT_BYTES


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("abc", "abc"),
        ('"abc"', "abc"),
        ("  8e03978e-40d5-43e8-bc93-6894a57f9324 ", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ('"a b"', "a b"),
        ('"say \\"hi\\" \\\\o/"', 'say "hi" \\o/'),
        ("x" * 255, "x" * 255),
    ],
)
def test_accepted_keys(raw: str, key: str) -> None:
    """The sf-string form and a bare token give the key; 255 characters are accepted."""
    assert parse_key(raw) == key


@pytest.mark.parametrize(
    "raw", ["", '""', "x" * 256, "a b", "clé", '"clé"', '"open', '"a\\b"', '"a"b', 'a"b', "a\tb"]
)
def test_refused_keys(raw: str) -> None:
    """Anything else is refused, with a reason that never echoes the value."""
    with pytest.raises(InvalidKey) as refused:
        parse_key(raw)
    assert str(refused.value)
    if len(raw) > 5:
        assert raw not in str(refused.value)


def test_scoped_ids_cannot_collide() -> None:
    """Distinct (uid, key) pairs give distinct event ids; anonymous ids are the key."""
    assert scoped_event_id("a:b", "c") != scoped_event_id("a", "b:c")
    assert scoped_event_id("a%3Ab", "c") != scoped_event_id("a:b", "c")
    assert scoped_event_id(None, "k") == "k"


def test_fingerprint_is_canonical_for_json_only() -> None:
    """JSON bodies compare canonically; other bodies byte for byte; method and path count."""
    a = fingerprint("POST", "/", b'{"a": 1, "b": 2}', json_body=True)
    assert a == fingerprint("post", "/", b'{"b":2,"a":1}', json_body=True)
    assert a != fingerprint("PUT", "/", b'{"a": 1, "b": 2}', json_body=True)
    assert a != fingerprint("POST", "/x", b'{"a": 1, "b": 2}', json_body=True)
    assert fingerprint("POST", "/", b"a b", json_body=False) != fingerprint(
        "POST", "/", b"a  b", json_body=False
    )


def test_a_response_round_trips_through_its_stored_form() -> None:
    """What is stored gives back status, body bytes, content type and Location."""
    response = StoredResponse(201, b"\x00\xff{}", "application/json", "/orders/1")
    assert StoredResponse.from_result(response.to_result()) == response


def test_a_response_too_large_to_store_becomes_a_stub_that_fits() -> None:
    """A body too large for a record is stored as status, size and sha256, which
    `storable_result` keeps (it would drop the whole result otherwise)."""
    body = b"\x01" * MAX_RESULT_BYTES  # its length as Firestore counts bytes: too large
    result = StoredResponse(200, body, "application/octet-stream", None).to_result()
    assert storable_result(result) == result
    stub = StoredResponse.from_result(result)
    assert isinstance(stub, NotStored)
    assert (stub.status, stub.size) == (200, len(body))


def test_a_result_that_is_not_an_http_response_is_not_stored() -> None:
    """A record without a response (dead, or written by something else) replays nothing."""
    assert StoredResponse.from_result(None) == NotStored(None, None, None)
    assert StoredResponse.from_result({"other": 1}) == NotStored(None, None, None)
