"""forward_webhook: each message reaches its route's receiver once, unchanged."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest
from google.cloud import firestore

from demo.events import HttpEvent, pubsub_event
from demo.receiver import Receiver
from functions.forward_webhook import parse_routes
from tests.conftest import PROJECT
from tests.functions.conftest import InProcessFunction, start_instance
from tests.functions.mutations import nested_json

LINE, DEFAULT = "/webhooks/line", "/webhooks/default"
BODY = json.dumps({"destination": "U123", "events": [{"type": "message", "text": "hi"}]}).encode()


def message(message_id: str, body: bytes = BODY, **attributes: str) -> HttpEvent:
    return pubsub_event(
        "webhooks", body, project=PROJECT, message_id=message_id, attributes=attributes
    )


@pytest.fixture
def forwarder(serve: Callable[[str], InProcessFunction]) -> InProcessFunction:
    return serve("forward_webhook")


def test_each_message_is_forwarded_once_to_its_route(
    unique: str, forwarder: InProcessFunction, receiver: Receiver
) -> None:
    """Routes pick receivers, unknown routes go to default; redeliveries under new CloudEvent
    ids (as the emulator makes them) are still one message, forwarded once, body unchanged."""
    events = [
        message(f"m1-{unique}", route="line"),
        message(f"m2-{unique}"),
        message(f"m3-{unique}", route="nope"),
    ]
    for event in events:
        for copy in range(3):
            assert forwarder.deliver(event.with_id(f"{event.id}-delivery-{copy}")) == 200
    [line] = receiver.applied(LINE)
    assert line.body == BODY
    assert line.content_type == "application/json"
    assert line.idempotency_key == f"m1-{unique}-forward_webhook"
    assert sorted(r.idempotency_key or "" for r in receiver.applied(DEFAULT)) == [
        f"m2-{unique}-forward_webhook",
        f"m3-{unique}-forward_webhook",
    ]


def test_content_type_is_kept(
    unique: str, forwarder: InProcessFunction, receiver: Receiver
) -> None:
    """A form-encoded body is forwarded as it came, with its content type."""
    body = b"a=1&b=2"
    assert (
        forwarder.deliver(
            message(f"m1-{unique}", body, contentType="application/x-www-form-urlencoded")
        )
        == 200
    )
    [forwarded] = receiver.applied(DEFAULT)
    assert (forwarded.body, forwarded.content_type) == (body, "application/x-www-form-urlencoded")


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_receiver_failures_are_retried_then_forwarded_once(
    unique: str, forwarder: InProcessFunction, receiver: Receiver, status: int
) -> None:
    """A retryable answer fails the delivery; the platform's retry forwards it, same key."""
    receiver.fail(LINE, status, times=2)
    event = message(f"m1-{unique}", route="line")
    assert [forwarder.deliver(event) for _ in range(4)] == [500, 500, 200, 200]
    [forwarded] = receiver.applied(LINE)
    assert forwarded.idempotency_key == f"m1-{unique}-forward_webhook"


def test_receiver_refusal_is_terminal(
    unique: str,
    forwarder: InProcessFunction,
    receiver: Receiver,
    firestore_client: firestore.Client,
) -> None:
    """A 4xx is recorded as failed, acknowledged, and never retried."""
    receiver.fail(LINE, 404, times=10)
    event = message(f"m1-{unique}", route="line")
    assert [forwarder.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert len(receiver.attempts_to(LINE)) == 1
    record = firestore_client.document(f"triggerEvents/m1-{unique}-forward_webhook").get().to_dict()
    assert record is not None
    assert record["state"] == "failed"


def test_body_that_is_not_json_is_terminal(
    unique: str,
    forwarder: InProcessFunction,
    receiver: Receiver,
    firestore_client: firestore.Client,
) -> None:
    """A JSON-typed body that does not parse is a recorded terminal failure, never forwarded."""
    assert forwarder.deliver(message(f"m1-{unique}", b"{not json")) == 200
    assert receiver.applied() == []
    record = firestore_client.document(f"triggerEvents/m1-{unique}-forward_webhook").get().to_dict()
    assert record is not None
    assert record["state"] == "failed"
    assert "not JSON" in record["lastError"]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (None, "WEBHOOK_ROUTES is not set"),
        ("{oops", "not valid JSON"),
        ('{"line": "https://x"}', "'default' entry"),
        ('{"default": "ftp://x"}', "http:// or https://"),
    ],
)
def test_bad_routes_are_refused_with_a_clear_message(raw: str | None, says: str) -> None:
    """Every malformed WEBHOOK_ROUTES gets a message that says what is expected."""
    with pytest.raises(ValueError, match=says):
        parse_routes(raw)


def test_instance_refuses_to_start_without_routes() -> None:
    """Serving forward_webhook without WEBHOOK_ROUTES fails at start-up, naming the variable."""
    env = {k: v for k, v in os.environ.items() if k != "WEBHOOK_ROUTES"}
    result = start_instance("forward_webhook", env)
    assert result.returncode != 0
    assert "WEBHOOK_ROUTES is not set" in result.stderr


def test_body_nested_too_deep_to_check_is_terminal(
    unique: str,
    forwarder: InProcessFunction,
    receiver: Receiver,
    firestore_client: firestore.Client,
) -> None:
    """A JSON body nested 20,000 levels (RecursionError when checked: Python 3.13's json goes
    deeper than 3.12's, which stopped at 5,000) is a recorded terminal failure on the first
    attempt, never a 500 retried until the record is `dead`."""
    event = message(f"m1-{unique}", nested_json(20000))
    assert [forwarder.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert receiver.applied() == []
    record = firestore_client.document(f"triggerEvents/m1-{unique}-forward_webhook").get().to_dict()
    assert record is not None
    assert (record["state"], record["attempts"]) == ("failed", 1)
