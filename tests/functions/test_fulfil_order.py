"""`fulfil_order`, served from main.py as the platform serves it, on the Firestore emulator: an
order's stock reserved, its payment charged and its receipt sent, each once, whatever the
copies, retries, refusals and crashes.

Copies of one order's event are delivered at once and failed copies retried
(`demo.platform.deliver_at_least_once`); the payment and mail services are the recording
receiver. The crash test runs the function's own steps (`fulfil_order.fulfil`) through
`dedup.testing`, dying at every boundary of every step, then delivers the order again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, OutcomeKind, testing
from dedup.errors import ConfigError
from dedup.kernel.delivery import Step
from demo.events import HttpEvent, firestore_event
from demo.platform import DeliveryLog, deliver_at_least_once
from demo.receiver import Receiver
from functions import fulfil_order
from functions.runtime import check_function_settings
from tests.conftest import PROJECT
from tests.dedup.support import standing_clock
from tests.functions.conftest import InProcessFunction

COPIES = 6
PRICE = 350
CHARGE, RECEIPT = "/payments", "/receipts"


@pytest.fixture
def shop(monkeypatch: pytest.MonkeyPatch, receiver: Receiver, firestore_client: Any) -> Any:
    """The services at the receiver, 10 coffees in stock and no tea; the Firestore client."""
    monkeypatch.setenv("PAYMENTS_URL", f"{receiver.base_url}{CHARGE}")
    monkeypatch.setenv("RECEIPTS_URL", f"{receiver.base_url}{RECEIPT}")
    fulfil_order.urls.cache_clear()
    firestore_client.document("stock/coffee").set({"available": 10, "price": PRICE})
    firestore_client.document("stock/tea").set({"available": 0, "price": 250})
    yield firestore_client
    fulfil_order.urls.cache_clear()


def placed(db: firestore.Client, order_id: str, fields: dict[str, Any]) -> HttpEvent:
    """Create `orders/<order_id>`; the `created` event of that write."""
    ref = db.document(f"orders/{order_id}")
    ref.set({"uid": "ann", **fields})
    return firestore_event(ref.path, None, ref.get(), project=PROJECT, change="created")


def delivered(function: InProcessFunction, event: HttpEvent) -> DeliveryLog:
    """`COPIES` copies of `event` at once, each failed copy retried until it answers 2xx."""
    log = DeliveryLog()
    deliver_at_least_once(function, event, log, copies=COPIES)
    assert log.undelivered == [], log.statuses
    return log


def fields(db: firestore.Client, path: str) -> dict[str, Any]:
    return db.document(path).get().to_dict() or {}


def key(order_id: str, step: str) -> str:
    return f"order-{order_id}-fulfil_order/{step}"


pytestmark = pytest.mark.needs_emulators


def test_copies_and_redeliveries_reserve_charge_and_mail_once(
    serve: Callable[[str], InProcessFunction], shop: Any, receiver: Receiver, unique: str
) -> None:
    """Six copies at once, then two more later: 3 coffees off the stock and one reservation,
    one charge of 3 x the price under the charge's key, one receipt, the order fulfilled."""
    function = serve("fulfil_order")
    event = placed(shop, unique, {"item": "coffee", "quantity": 3})
    delivered(function, event)
    assert [function.deliver(event) for _ in range(2)] == [200, 200]

    assert fields(shop, "stock/coffee")["available"] == 7
    assert fields(shop, f"reservations/{unique}")["quantity"] == 3
    [charge] = receiver.attempts_to(CHARGE)
    assert charge.idempotency_key == key(unique, "charge")
    assert charge.body == (b'{"orderId": "%s", "uid": "ann", "amount": 1050}' % unique.encode())
    [receipt] = receiver.attempts_to(RECEIPT)
    assert receipt.idempotency_key == key(unique, "send_receipt")
    order = fields(shop, f"orders/{unique}")
    assert (order["status"], order["amount"], order["receipt"]) == ("fulfilled", 1050, "sent")
    record = fields(shop, f"triggerEvents/order-{unique}-fulfil_order")
    assert record["state"] == "sent"
    assert sorted(record["steps"], key=lambda n: record["steps"][n]["index"]) == [
        "reserve_stock", "charge", "send_receipt", "close_order",
    ]  # fmt: skip


def test_a_charge_answered_503_is_retried_under_its_key_and_the_stock_kept(
    serve: Callable[[str], InProcessFunction], shop: Any, receiver: Receiver, unique: str
) -> None:
    """The payment service fails once: the retry replays the recorded reservation (the stock
    moves once) and charges again under the same key, applied once."""
    receiver.fail(CHARGE, 503)
    log = delivered(serve("fulfil_order"), placed(shop, unique, {"item": "coffee", "quantity": 2}))
    assert log.statuses[500] >= 1  # the failed charge gave the lease back; the platform retried
    assert fields(shop, "stock/coffee")["available"] == 8
    charges = receiver.attempts_to(CHARGE)
    assert [a.status for a in charges] == [503, 200]
    assert {a.idempotency_key for a in charges} == {key(unique, "charge")}
    assert len(receiver.applied(RECEIPT)) == 1
    assert fields(shop, f"orders/{unique}")["status"] == "fulfilled"


def test_a_receipt_that_failed_is_not_sent_again_and_the_order_says_so(
    serve: Callable[[str], InProcessFunction],
    shop: Any,
    receiver: Receiver,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At most once: the mail service answers 503, and the retry does not send the receipt
    again; the order is fulfilled with `receipt: "unknown"`, and a WARNING names it."""
    receiver.fail(RECEIPT, 503)
    with caplog.at_level(logging.WARNING, logger="functions.fulfil_order"):
        delivered(serve("fulfil_order"), placed(shop, unique, {"item": "coffee", "quantity": 1}))
    assert [a.status for a in receiver.attempts_to(RECEIPT)] == [503]
    assert len(receiver.applied(CHARGE)) == 1
    order = fields(shop, f"orders/{unique}")
    assert (order["status"], order["receipt"]) == ("fulfilled", "unknown")
    assert any(unique in r.getMessage() and "not sent again" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_an_item_out_of_stock_is_rejected_with_nothing_charged(
    serve: Callable[[str], InProcessFunction], shop: Any, receiver: Receiver, unique: str
) -> None:
    """No tea left: the order is rejected, no reservation, no charge, no receipt."""
    delivered(serve("fulfil_order"), placed(shop, unique, {"item": "tea", "quantity": 1}))
    order = fields(shop, f"orders/{unique}")
    assert (order["status"], order["reason"]) == ("rejected", "0 tea left, 1 ordered")
    assert not shop.document(f"reservations/{unique}").get().exists
    assert fields(shop, "stock/tea")["available"] == 0
    assert receiver.attempts == []


def test_a_refused_payment_gives_the_stock_back(
    serve: Callable[[str], InProcessFunction], shop: Any, receiver: Receiver, unique: str
) -> None:
    """A 402 is final: recorded as the charge's value, the stock released, the order rejected,
    no receipt; the payment service was asked once."""
    receiver.fail(CHARGE, 402)
    delivered(serve("fulfil_order"), placed(shop, unique, {"item": "coffee", "quantity": 4}))
    assert fields(shop, "stock/coffee")["available"] == 10
    assert not shop.document(f"reservations/{unique}").get().exists
    assert [a.status for a in receiver.attempts_to(CHARGE)] == [402]
    assert receiver.attempts_to(RECEIPT) == []
    order = fields(shop, f"orders/{unique}")
    assert order["status"] == "rejected"
    assert "402" in order["reason"]


@pytest.mark.parametrize("order", [{"quantity": 1}, {"item": "coffee", "quantity": 0},
                                   {"item": "a/b", "quantity": 1}, {"item": "coffee"}])  # fmt: skip
def test_an_order_that_is_not_one_fails_for_good(
    serve: Callable[[str], InProcessFunction],
    shop: Any,
    receiver: Receiver,
    unique: str,
    order: dict[str, Any],
) -> None:
    """No item, a quantity out of range, an item that names no document: recorded `failed`,
    answered 200 (not retried), no effect."""
    assert serve("fulfil_order").deliver(placed(shop, unique, order)) == 200
    assert fields(shop, f"triggerEvents/order-{unique}-fulfil_order")["state"] == "failed"
    assert fields(shop, "stock/coffee")["available"] == 10
    assert receiver.attempts == []


BOUNDARIES = [
    (1, Step.BEFORE_STEP), (1, Step.AFTER_STEP_RECORD),  # reserve_stock, transactional
    (2, Step.BEFORE_STEP), (2, Step.AFTER_STEP_CALL), (2, Step.AFTER_STEP_RECORD),  # charge
    (3, Step.BEFORE_STEP), (3, Step.AFTER_STEP_CALL), (3, Step.AFTER_STEP_RECORD),  # receipt
    (4, Step.BEFORE_STEP), (4, Step.AFTER_STEP_RECORD),  # close_order, transactional
]  # fmt: skip
"""Every boundary the fulfilled order's four steps have (a transactional step's call and
record are one commit)."""


@pytest.mark.parametrize(("step", "at"), BOUNDARIES, ids=[f"{s}-{a.value}" for s, a in BOUNDARIES])
def test_a_delivery_dying_at_any_step_boundary_leaves_each_effect_once(
    shop: Any, receiver: Receiver, unique: str, step: int, at: Step
) -> None:
    """The process dies at the boundary; the delivery that takes over once its lease expired
    finishes the order: the stock moved once, every charge under the one key (a second POST
    only when the death fell between the charge and its record), the receipt sent once, or
    marked unknown when the death fell inside it."""
    placed(shop, unique, {"item": "coffee", "quantity": 2})
    order = fulfil_order.order_of(unique, shop.document(f"orders/{unique}").get())
    # A 2 s lease, waited out by deliver_after_crash on the database clock; the deliveries' own
    # clock stands still, so a busy machine's pause between a claim (or a step's record, which
    # renews the lease) and the next step never makes the delivery give its lease back.
    dedup = Deduplicator(DedupConfig(lease_seconds=2, budget_clock=standing_clock), client=shop)

    def handler(delivery: Any) -> None:
        fulfil_order.fulfil(order, delivery)

    event_id = f"order-{unique}"
    outcome = testing.deliver_after_crash(
        dedup, event_id, fulfil_order.SUFFIX, handler, step=step, at=at
    )
    assert outcome.kind is OutcomeKind.RAN
    assert fields(shop, "stock/coffee")["available"] == 8
    charges = receiver.applied(CHARGE)
    assert len(charges) == (2 if (step, at) == (2, Step.AFTER_STEP_CALL) else 1)
    assert {a.idempotency_key for a in charges} == {key(unique, "charge")}
    assert len(receiver.applied(RECEIPT)) == 1
    interrupted = (step, at) == (3, Step.AFTER_STEP_CALL)
    order_fields = fields(shop, f"orders/{unique}")
    assert order_fields["status"] == "fulfilled"
    assert order_fields["receipt"] == ("unknown" if interrupted else "sent")


def test_an_instance_refuses_to_start_without_either_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PAYMENTS_URL or RECEIPTS_URL missing or not http(s): the start-up check names it."""
    good = "https://example.com/x"
    for payments, receipts, named in ((None, good, "PAYMENTS_URL"), ("ftp://x", good,
                                      "PAYMENTS_URL"), (good, "", "RECEIPTS_URL")):  # fmt: skip
        for name, value in (("PAYMENTS_URL", payments), ("RECEIPTS_URL", receipts)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        fulfil_order.urls.cache_clear()
        with pytest.raises(ConfigError, match=named):
            check_function_settings({"FUNCTION_TARGET": "fulfil_order"})
    fulfil_order.urls.cache_clear()
