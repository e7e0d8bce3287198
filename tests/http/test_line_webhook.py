"""`receive_line_webhook` served in this process, publishing to the Pub/Sub emulator: the
signature check, the refusals, and each event of a batch published once with its `eventKey`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.pubsub_v1 import PubsubMessage

from tests.http.support import line_body, line_headers, problem
from tests.http.test_create_order import records

pytestmark = pytest.mark.shared_emulators  # the Pub/Sub emulator

Serve = Callable[..., FlaskClient]


def ids(count: int) -> list[str]:
    return [f"01H{uuid.uuid4().hex[:20].upper()}" for _ in range(count)]


def test_a_forged_signature_is_401_and_touches_nothing(
    line: FlaskClient,
    firestore_client: firestore.Client,
    published: Callable[[], list[PubsubMessage]],
) -> None:
    """A body signed with another secret, a tampered body, or no signature: 401, no record,
    nothing published."""
    body = line_body(*ids(2))
    forged = [
        line_headers(body, secret="not-the-channel-secret"),
        line_headers(body + b" "),
        {"Content-Type": "application/json"},
        {**line_headers(body), "X-Line-Signature": "%%%"},
    ]
    for headers in forged:
        response = line.post("/", data=body, headers=headers)
        assert response.status_code == 401
        assert problem(response)["type"].endswith("bad-signature")
    assert records(firestore_client) == []
    assert published() == []


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"events": {}}', b'{"events": [1]}', b'{"events": [{"type": "x"}]}'],
)
def test_a_signed_malformed_body_is_400_and_touches_nothing(
    line: FlaskClient, firestore_client: firestore.Client, body: bytes
) -> None:
    """Signed, but not a batch of events with ids: 400, before any record."""
    response = line.post("/", data=body, headers=line_headers(body))
    assert response.status_code == 400
    assert problem(response)["type"].endswith("malformed-webhook")
    assert records(firestore_client) == []


def test_the_verification_request_is_200(
    line: FlaskClient, published: Callable[[], list[PubsubMessage]]
) -> None:
    """LINE's "Verify" button sends an empty `events` list: 200, nothing published."""
    body = json.dumps({"destination": "U1", "events": []}).encode()
    assert line.post("/", data=body, headers=line_headers(body)).status_code == 200
    assert published() == []


def test_each_event_is_published_once_with_its_event_key(
    line: FlaskClient,
    firestore_client: firestore.Client,
    published: Callable[[], list[PubsubMessage]],
) -> None:
    """A batch of 3 events: 3 messages, route=line, eventKey=webhookEventId, one event each;
    LINE's redeliveries of the batch (isRedelivery: true) publish nothing more."""
    event_ids = ids(3)
    body = line_body(*event_ids)
    assert line.post("/", data=body, headers=line_headers(body)).status_code == 200
    redelivered = line_body(*event_ids, redelivery=True)
    for _ in range(2):
        response = line.post("/", data=redelivered, headers=line_headers(redelivered))
        assert response.status_code == 200
    messages = published()
    assert sorted(m.attributes["eventKey"] for m in messages) == sorted(event_ids)
    for message in messages:
        assert message.attributes["route"] == "line"
        payload = json.loads(message.data)
        [event] = payload["events"]
        assert event["webhookEventId"] == message.attributes["eventKey"]
        assert payload["destination"] == json.loads(body)["destination"]
    assert [r["state"] for r in records(firestore_client)] == ["sent"] * 3


def test_without_a_channel_secret_it_refuses_everything(
    line: FlaskClient, monkeypatch: pytest.MonkeyPatch, firestore_client: firestore.Client
) -> None:
    """A missing LINE_CHANNEL_SECRET is a configuration error (500, logged), never a pass."""
    monkeypatch.delenv("LINE_CHANNEL_SECRET")
    body = line_body(*ids(1))
    response = line.post("/", data=body, headers=line_headers(body))
    assert response.status_code == 500
    assert problem(response)["type"].endswith("not-configured")
    assert records(firestore_client) == []
