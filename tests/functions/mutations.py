"""Ways to spoil a good CloudEvent request, shared by the boundary tests and the fuzz suite.

Each mutation takes an `HttpEvent` and returns another; none touches Firestore.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from google.events.cloud.firestore import DocumentEventData

from demo.events import HttpEvent
from tests.conftest import PROJECT

Mutation = Callable[[HttpEvent], HttpEvent]
DROP = object()
"""As a field value in `with_message`/`with_envelope`: remove the field."""


def without(header: str) -> Mutation:
    """The request without `header`."""
    return lambda e: HttpEvent(e.id, {k: v for k, v in e.headers.items() if k != header}, e.body)


def with_header(header: str, value: str) -> Mutation:
    """The request with `header` set to `value`."""
    return lambda e: HttpEvent(e.id, {**e.headers, header: value}, e.body)


def with_body(body: bytes) -> Mutation:
    """The request with another body."""
    return lambda e: HttpEvent(e.id, e.headers, body)


def truncated(e: HttpEvent) -> HttpEvent:
    """The request with half its body."""
    return HttpEvent(e.id, e.headers, e.body[: len(e.body) // 2])


def _set(target: dict[str, Any], fields: dict[str, Any]) -> None:
    for key, value in fields.items():
        if value is DROP:
            target.pop(key, None)
        else:
            target[key] = value


def with_envelope(**fields: Any) -> Mutation:
    """A Pub/Sub request whose JSON envelope has `fields` set (or dropped, with DROP)."""

    def mutate(e: HttpEvent) -> HttpEvent:
        envelope = json.loads(e.body)
        _set(envelope, fields)
        return HttpEvent(e.id, e.headers, json.dumps(envelope).encode())

    return mutate


def with_message(**fields: Any) -> Mutation:
    """A Pub/Sub request whose message has `fields` set (or dropped, with DROP)."""

    def mutate(e: HttpEvent) -> HttpEvent:
        envelope = json.loads(e.body)
        _set(envelope["message"], fields)
        return HttpEvent(e.id, e.headers, json.dumps(envelope).encode())

    return mutate


def renamed(path: str, *, project: str = PROJECT) -> Mutation:
    """A Firestore request about `path` throughout: headers and the data's document names agree,
    so only the path itself can be wrong."""

    def mutate(e: HttpEvent) -> HttpEvent:
        data = DocumentEventData.deserialize(e.body)
        name = f"projects/{project}/databases/(default)/documents/{path}"
        for version in (data.value, data.old_value):
            if version:
                version.name = name
        headers = {**e.headers, "ce-document": path, "ce-subject": f"documents/{path}"}
        return HttpEvent(e.id, headers, DocumentEventData.serialize(data))

    return mutate


def with_fields(raw_fields: dict[str, Any]) -> Mutation:
    """A Firestore request whose new document version holds `raw_fields` (protobuf `Value`s as
    dicts, e.g. `{"x": {"reference_value": "nope"}}`), possibly undecodable."""

    def mutate(e: HttpEvent) -> HttpEvent:
        data = DocumentEventData.deserialize(e.body)
        as_json = json.loads(DocumentEventData.to_json(data, preserving_proto_field_name=True))
        as_json["value"]["fields"].update(raw_fields)
        rebuilt = DocumentEventData.from_json(json.dumps(as_json))
        return HttpEvent(e.id, e.headers, DocumentEventData.serialize(rebuilt))

    return mutate


def nested_json(depth: int) -> bytes:
    """A JSON document nested `depth` levels deep."""
    return b"[" * depth + b"]" * depth
