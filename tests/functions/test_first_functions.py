"""The "your first function" examples of docs/http.md and docs/tasks.md
(docs/examples/create_refund.py, docs/examples/send_invoice.py) work as shown, tested as the
docs tell a user to test theirs: with the fixtures of tests/plugin.py, nothing copied."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from demo.receiver import Receiver
from tests.conftest import RECEIVER_URL
from tests.plugin import TaskFunction, User, new_key, request_headers, task_dispatch

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
REFUND = str(EXAMPLES / "create_refund.py")
INVOICE = str(EXAMPLES / "send_invoice.py")


@pytest.fixture
def refunds(
    http_function: Callable[..., FlaskClient], monkeypatch: pytest.MonkeyPatch
) -> FlaskClient:
    """`create_refund`, served with the variable its .env lines give it."""
    monkeypatch.setenv("REFUND_LIMIT", "5000")
    return http_function("create_refund", source=REFUND)


def test_a_retried_refund_is_made_once_and_answered_the_same(
    refunds: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """The same request sent three times with one key: one refund, three identical answers
    (the retries marked replayed)."""
    key, body = new_key(), {"orderId": "o1", "amount": 1200}
    answers = [refunds.post("/", json=body, headers=request_headers(user, key)) for _ in range(3)]
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert len({a.get_data() for a in answers}) == 1
    assert [a.headers.get("Idempotent-Replayed") for a in answers] == [None, "true", "true"]
    [refund] = list(firestore_client.collection("refunds").stream())
    assert answers[0].get_json() == {"refundId": refund.id, "orderId": "o1", "amount": 1200}
    assert refund.to_dict() == {"uid": user.uid, "orderId": "o1", "amount": 1200}


def test_an_invalid_refund_gets_a_stored_problem_and_writes_nothing(
    refunds: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Over the limit: 400 problem+json from `problem_response`, replayed for the key."""
    key, body = new_key(), {"orderId": "o1", "amount": 9999}
    first = refunds.post("/", json=body, headers=request_headers(user, key))
    assert first.status_code == 400
    assert first.headers["Content-Type"].startswith("application/problem+json")
    assert first.get_json()["type"] == "urn:exactly-once:problem:invalid-refund"
    again = refunds.post("/", json=body, headers=request_headers(user, key))
    assert (again.status_code, again.get_data()) == (400, first.get_data())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert list(firestore_client.collection("refunds").stream()) == []


def test_a_task_dispatched_again_and_again_sends_one_invoice(
    task_function: Callable[..., TaskFunction],
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    firestore_client: firestore.Client,
) -> None:
    """Ten dispatches of one task, five at once: one POST, keyed by the task name; a task
    with bad data is recorded failed and answered 200 (not retried)."""
    monkeypatch.setenv("INVOICE_URL", f"{RECEIVER_URL}/invoices")
    invoices = task_function("sendInvoice", source=INVOICE)
    task = task_dispatch("task-1", {"orderId": "o1"}, queue="sendInvoice")
    assert set(invoices.dispatch_concurrently(task, 5)) <= {200, 429}
    assert [invoices.dispatch(task) for _ in range(5)] == [200] * 5
    [sent] = receiver.applied("/invoices")
    assert sent.idempotency_key == "task-1-send_invoice"
    assert json.loads(sent.body) == {"orderId": "o1"}

    bad = task_dispatch("task-2", {"order": "o2"}, queue="sendInvoice")
    assert invoices.dispatch(bad) == 200
    record = firestore_client.document("triggerEvents/task-2-send_invoice").get().to_dict()
    assert (record or {}).get("state") == "failed"
    assert len(receiver.applied("/invoices")) == 1
