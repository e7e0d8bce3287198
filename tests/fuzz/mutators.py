"""Hypothesis strategies that spoil a good CloudEvent request in the ways a hostile or broken
caller would: headers dropped or replaced, bodies cut, flipped or replaced, Pub/Sub JSON fields
set to any JSON value, Firestore documents renamed to odd paths or filled with odd values.

A strategy draws a `Mutation` (an `HttpEvent` -> `HttpEvent` function) with a short label for
the statistics; several may be chained.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from demo.events import HttpEvent
from tests.functions.mutations import (
    DROP,
    nested_json,
    renamed,
    with_body,
    with_envelope,
    with_fields,
    with_header,
    with_message,
    without,
)


@dataclass(frozen=True)
class Labelled:
    """A mutation and what it did, for the statistics and failure messages."""

    label: str
    apply: Callable[[HttpEvent], HttpEvent]


CE_HEADERS = [
    "ce-id", "ce-type", "ce-source", "ce-specversion", "ce-time", "ce-subject", "ce-location",
    "ce-project", "ce-database", "ce-namespace", "ce-document", "Content-Type",
]  # fmt: skip
ODD_TEXT = [
    "", " ", ".", "..", "/", "a/b", "__x__", "%2F", "%E6%97%A5", "null", "0", "-1", "true",
    "[]", "{}", "\u00e6\u0097\u00a5", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00",
    "2026-02-30T00:00:00Z", "2026-01-01T00:00:00.1234567891Z", "1999-12-31T23:59:60Z",
    "application/json", "application/protobuf", "application/cloudevents+json",
    "application/cloudevents-batch+json", "text/plain; charset=utf-8", "(default)", "other",
    "google.cloud.pubsub.topic.v1.messagePublished",
    "google.cloud.firestore.document.v1.written", "1.0", "0.3", "posts/p", "users/ann",
    "documents/posts/p", "//pubsub.googleapis.com/projects/demo-exactly-once/topics/other",
    "zqecho-" + "x" * 300,
]  # fmt: skip
ODD_SEGMENTS = ["posts", "outbox", "users", "triggerEvents", "p", ".", "..", "__x__", "", "日本"]
JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.sampled_from(ODD_TEXT),
    st.text(max_size=20),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
HEADER_VALUES = st.sampled_from(ODD_TEXT) | st.text(
    st.characters(min_codepoint=32, max_codepoint=255), max_size=40
)


@st.composite
def header_mutation(draw: st.DrawFn) -> Labelled:
    """Drop a CloudEvent header or set it to an odd value."""
    header = draw(st.sampled_from(CE_HEADERS))
    if draw(st.booleans()):
        return Labelled(f"drop {header}", without(header))
    value = draw(HEADER_VALUES)
    return Labelled(f"set {header}", with_header(header, value))


@st.composite
def body_mutation(draw: st.DrawFn) -> Labelled:
    """Cut, flip, extend or replace the body's bytes."""
    kind = draw(st.sampled_from(["cut", "flip", "append", "replace", "nest"]))
    if kind == "replace":
        return Labelled("replace body", with_body(draw(st.binary(max_size=64))))
    if kind == "nest":
        return Labelled("nested body", with_body(nested_json(draw(st.integers(1, 6000)))))
    where = draw(st.floats(min_value=0, max_value=1))

    def apply(e: HttpEvent) -> HttpEvent:
        at = int(where * len(e.body))
        if kind == "cut":
            return HttpEvent(e.id, e.headers, e.body[:at])
        if kind == "append":
            return HttpEvent(e.id, e.headers, e.body + b"\x00garbage")
        flipped = bytearray(e.body)
        if flipped:
            flipped[min(at, len(flipped) - 1)] ^= 0xFF
        return HttpEvent(e.id, e.headers, bytes(flipped))

    return Labelled(f"{kind} body", apply)


MESSAGE_FIELDS = [
    "data", "attributes", "messageId", "message_id", "publishTime", "publish_time",
    "orderingKey", "ordering_key", "extra",
]  # fmt: skip


@st.composite
def pubsub_mutation(draw: st.DrawFn) -> Labelled:
    """Set or drop a field of the envelope, the message or its attributes."""
    where = draw(st.sampled_from(["envelope", "message", "attributes"]))
    value: Any = DROP if draw(st.booleans()) and where != "attributes" else draw(JSON_VALUES)
    if where == "envelope":
        field = draw(st.sampled_from(["message", "subscription", "extra"]))
        return Labelled(f"envelope.{field}", _tolerant(with_envelope(**{field: value})))
    if where == "message":
        field = draw(st.sampled_from(MESSAGE_FIELDS))
        return Labelled(f"message.{field}", _tolerant(with_message(**{field: value})))
    name = draw(st.sampled_from(["route", "contentType", "other"]))

    def apply(e: HttpEvent) -> HttpEvent:
        envelope = json.loads(e.body)
        attributes = envelope["message"].get("attributes")
        if isinstance(attributes, dict):
            attributes[name] = value
        return HttpEvent(e.id, e.headers, json.dumps(envelope).encode())

    return Labelled(f"attributes.{name}", _tolerant(apply))


FIRESTORE_VALUES = st.one_of(
    st.fixed_dictionaries({"string_value": st.sampled_from(ODD_TEXT) | st.text(max_size=20)}),
    st.fixed_dictionaries({"integer_value": st.integers(-(2**63), 2**63 - 1).map(str)}),
    st.fixed_dictionaries({"boolean_value": st.booleans()}),
    st.fixed_dictionaries({"null_value": st.just("NULL_VALUE")}),
    st.fixed_dictionaries({"double_value": st.floats(allow_nan=True)}),
    st.fixed_dictionaries({"bytes_value": st.binary(max_size=8).map(lambda b: b.hex())}),
    st.fixed_dictionaries(
        {"reference_value": st.sampled_from(ODD_TEXT).map(str) | st.just(
            "projects/demo-exactly-once/databases/(default)/documents/users/ann"
        )}
    ),
    st.fixed_dictionaries(
        {"array_value": st.fixed_dictionaries({"values": st.lists(
            st.fixed_dictionaries({"string_value": st.sampled_from(ODD_TEXT)}), max_size=3
        )})}
    ),
    st.fixed_dictionaries({"timestamp_value": st.sampled_from(["2026-01-01T00:00:00Z"])}),
)  # fmt: skip
BUSINESS_FIELDS = ["authorId", "published", "followers", "topic", "data", "attributes", "x"]


@st.composite
def firestore_mutation(draw: st.DrawFn) -> Labelled:
    """Rename the document to an odd path, or set a field of the new version to an odd value."""
    if draw(st.booleans()):
        segments = draw(st.lists(st.sampled_from(ODD_SEGMENTS), min_size=1, max_size=5))
        path = "/".join(segments)
        return Labelled("rename document", _tolerant(renamed(path)))
    field = draw(st.sampled_from(BUSINESS_FIELDS))
    value = draw(FIRESTORE_VALUES)
    return Labelled(f"field {field}", _tolerant(with_fields({field: value})))


def _tolerant(mutation: Callable[[HttpEvent], HttpEvent]) -> Callable[[HttpEvent], HttpEvent]:
    """The mutation, or the event unchanged when it cannot apply (say, a value protobuf's JSON
    form refuses): the suite spoils requests, it does not test the protobuf library."""

    def apply(e: HttpEvent) -> HttpEvent:
        try:
            return mutation(e)
        except Exception:
            return e

    return apply


def mutations(kind: str) -> st.SearchStrategy[list[Labelled]]:
    """One to three mutations for an event of `kind` ("firestore" or "pubsub")."""
    own = firestore_mutation() if kind == "firestore" else pubsub_mutation()
    one = st.one_of(header_mutation(), body_mutation(), own, own)
    return st.lists(one, min_size=1, max_size=3)
