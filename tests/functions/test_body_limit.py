"""The body size limit holds on a real functions-framework server, on the bytes it reads:
`Transfer-Encoding: chunked` (no Content-Length) cannot carry a larger event past it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
import requests
from google.cloud import firestore

from demo.events import HttpEvent, firestore_event, pubsub_event
from demo.receiver import Receiver
from demo.serve import served_function
from functions.boundary import MAX_FIRESTORE_BODY, MAX_PUBSUB_BODY
from tests.conftest import PROJECT
from tests.functions.mutations import with_fields

MB = 1024 * 1024


def chunks(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """The body as a generator: `requests` then sends it chunked, without a Content-Length."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def post(url: str, event: HttpEvent, *, chunked: bool) -> int | None:
    """The status, or None when the server closed the connection while refusing."""
    try:
        return requests.post(
            url,
            data=chunks(event.body) if chunked else event.body,
            headers=dict(event.headers),
            timeout=60,
        ).status_code
    except requests.ConnectionError:
        return None


def big_post_event(db: firestore.Client, size: int) -> HttpEvent:
    ref = db.document("posts/big")
    ref.set({"authorId": "ann", "published": True})
    event = firestore_event(ref.path, None, ref.get(), project=PROJECT)
    return with_fields({"pad": {"string_value": "x" * size}})(event)


def big_message_event(size: int) -> HttpEvent:
    event = pubsub_event("webhooks", b"{}", project=PROJECT, message_id="big")
    envelope = json.loads(event.body)
    envelope["message"]["data"] = base64.b64encode(b" " * size).decode()
    envelope["message"]["attributes"] = {"contentType": "text/plain"}
    return HttpEvent(event.id, event.headers, json.dumps(envelope).encode())


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_oversized_events_are_refused_on_a_real_server(
    chunked: bool, firestore_client: firestore.Client, receiver: Receiver
) -> None:
    """A 5 MB Firestore event and a 15 MB Pub/Sub event are refused (413, or the connection
    closed mid-upload) with or without Content-Length: no record, no effect."""
    firestore_event_ = big_post_event(firestore_client, 5 * MB)
    pubsub_event_ = big_message_event(11 * MB)
    assert len(firestore_event_.body) > MAX_FIRESTORE_BODY
    assert len(pubsub_event_.body) > MAX_PUBSUB_BODY
    with served_function("sync_published_count") as counter:
        assert post(counter.url, firestore_event_, chunked=chunked) in (413, None)
    with served_function("forward_webhook") as forwarder:
        assert post(forwarder.url, pubsub_event_, chunked=chunked) in (413, None)
    assert list(firestore_client.collection("triggerEvents").list_documents()) == []
    assert not firestore_client.document("users/ann").get().exists
    assert receiver.attempts_to("/webhooks/default") == []
