"""The README's code examples (docs/examples/*.py, included by `make docs`) work as shown.

Each example is served exactly as functions-framework serves a deployed function and receives
real CloudEvents, duplicates included, on the emulators.
"""

from __future__ import annotations

import json
from pathlib import Path

import functions_framework
import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from demo.events import HttpEvent, firestore_event
from demo.receiver import Receiver
from tests.conftest import PROJECT, RECEIVER_URL

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def served(example: str, target: str) -> FlaskClient:
    """The function `target` of docs/examples/`example`, behind functions-framework."""
    app = functions_framework.create_app(
        target=target, source=str(EXAMPLES / example), signature_type="cloudevent"
    )
    return app.test_client()


def deliver(client: FlaskClient, event: HttpEvent) -> int:
    """POST the CloudEvent as the platform does; the status it would see."""
    return client.post("/", data=event.body, headers=dict(event.headers)).status_code


def created(db: firestore.Client, path: str, fields: dict[str, object]) -> HttpEvent:
    """Create `path` and return the `created` CloudEvent of that write."""
    ref = db.document(path)
    ref.set(fields)
    return firestore_event(path, None, ref.get(), project=PROJECT, change="created")


def test_receipt_is_posted_once_with_the_key_and_a_401_is_not_retried(
    firestore_client: firestore.Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three deliveries of one order event make one POST carrying `Idempotency-Key`; a
    receiver answering 401 fails the event for good (acknowledged, recorded `failed`)
    instead of retrying it until it is dead."""
    monkeypatch.setenv("RECEIPTS_URL", f"{RECEIVER_URL}/receipts?token=secret")
    client = served("send_receipt.py", "send_receipt")

    event = created(firestore_client, "orders/o1", {"email": "ann@example.com"})
    assert [deliver(client, event) for _ in range(3)] == [200, 200, 200]
    [attempt] = receiver.attempts_to("/receipts")
    assert attempt.idempotency_key == f"{event.headers['ce-id']}-send_receipt"
    assert json.loads(attempt.body) == {"order": "o1", "to": "ann@example.com"}

    receiver.fail("/receipts", 401)
    refused = created(firestore_client, "orders/o2", {"email": "bob@example.com"})
    assert deliver(client, refused) == 200  # acknowledged: no retry of a final answer
    assert deliver(client, refused) == 200
    assert len(receiver.attempts_to("/receipts")) == 2  # the refused one was tried once
    key = f"{refused.headers['ce-id']}-send_receipt"
    record = firestore_client.document(f"triggerEvents/{key}").get().to_dict() or {}
    assert record["state"] == "failed"
    assert "secret" not in record["lastError"]


def test_post_count_moves_once_even_when_the_stats_document_lacks_the_field(
    firestore_client: firestore.Client,
) -> None:
    """Duplicates of one created post add 1 once; a stats document without `total` (or no
    stats document) counts as 0 instead of raising."""
    client = served("count_posts.py", "count_posts")
    stats = firestore_client.document("stats/posts")
    stats.set({"title": "posts"})  # exists, no `total`
    event = created(firestore_client, "posts/p1", {"title": "hello"})
    assert [deliver(client, event) for _ in range(3)] == [200, 200, 200]
    assert (stats.get().to_dict() or {}).get("total") == 1

    stats.delete()
    second = created(firestore_client, "posts/p2", {"title": "again"})
    assert deliver(client, second) == 200
    assert (stats.get().to_dict() or {}).get("total") == 1
