"""`fulfil_order`: when an order is created, reserve its stock, charge it and send its receipt,
each effect once, as durable steps of one handler (docs/steps.md).

Fires when `orders/{orderId}` is created (`create_order` and `create_order_callable` write
`{"uid", "item", "quantity", "createdAt"}`), keyed by the order: once per order. The steps:

1. `reserve_stock`, transactional (exactly once): in one transaction with its record, read
   `stock/{item}` (`{"available": int, "price": int}`, the price in the currency's smallest
   unit), take the quantity off `available` and write `reservations/{orderId}`. Its value is
   the amount to charge, or why the order cannot be served (no such item, not enough stock):
   recorded, it decides the rest the same way on every delivery.
2. `charge`, keyed: POST `{"orderId", "uid", "amount"}` to `PAYMENTS_URL` with
   `Idempotency-Key: delivery.step_key("charge")`. Called again only if a crash fell between
   the POST and its record, and then with the same key, so the payment service applies it
   once. A refusal (a 4xx other than 408/425/429) is recorded as the step's value, and the
   stock is given back in `release_stock` (transactional); a 5xx or a timeout is retried.
3. `send_receipt`, at most once (`on_interrupted="skip"`): POST the receipt to
   `RECEIPTS_URL` (with the step's key too). A mail service may honour no key, so a receipt
   whose start is recorded is never sent again: a delivery that finds it started and not
   recorded sent (the process died while sending it, or the POST failed: a 503 or a timeout
   cannot tell "not sent" from "sent, answer lost") gets `StepInterrupted`, logs a WARNING
   naming the order, and marks the order `receipt: "unknown"`, for support to check and
   resend. A mail service that honours `Idempotency-Key` makes this a keyed step instead.
4. `close_order`, transactional: `orders/{orderId}.status` is "fulfilled" (with `amount` and
   `receipt`: "sent" or "unknown") or "rejected" (with `reason`).

Bad input: an order without `item` (a Firestore document id) and `quantity` (an integer from 1
to 100) is a terminal failure: recorded `failed`, not retried. `PAYMENTS_URL` and
`RECEIPTS_URL` are checked at start-up (http:// or https://); the error names the variable.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from firebase_functions import firestore_fn
from google.cloud import firestore
from google.cloud.firestore import DocumentSnapshot

from dedup import Delivery, StepInterrupted, TerminalError, trigger_once
from dedup.errors import ConfigError
from functions.boundary import validated
from functions.http_delivery import post_once
from functions.ids import id_problem
from functions.runtime import startup_check

SUFFIX = "fulfil_order"
logger = logging.getLogger(__name__)
MAX_QUANTITY = 100
"""The largest quantity `create_order` accepts."""


@dataclass(frozen=True)
class Order:
    """The fields of an order this function fulfils."""

    order_id: str
    uid: str
    item: str
    quantity: int


@startup_check(SUFFIX)  # a bad setting fails at start-up, not on the first order
@cache
def urls() -> tuple[str, str]:
    """(PAYMENTS_URL, RECEIPTS_URL), checked once per instance; `ConfigError` names a variable
    that is missing or not an http(s) URL."""
    found = []
    for name in ("PAYMENTS_URL", "RECEIPTS_URL"):
        url = os.environ.get(name, "").strip()
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"{name} must be an http:// or https:// URL (got {url or 'nothing'!r}); set it "
                "in .env.<project> (or .env.local for the emulator)"
            )
        found.append(url)
    return found[0], found[1]


def order_of(order_id: str, snapshot: DocumentSnapshot | None) -> Order:
    """The order in the created document; `TerminalError` unless it has an `item` that names a
    stock document and a `quantity` from 1 to `MAX_QUANTITY`."""
    data = (snapshot.to_dict() if snapshot is not None else None) or {}
    item, quantity, uid = data.get("item"), data.get("quantity"), data.get("uid")
    if id_problem(item) is not None or not isinstance(item, str):
        raise TerminalError(f"order {order_id}: `item` must name a stock document")
    if isinstance(quantity, bool) or not isinstance(quantity, int):
        raise TerminalError(f"order {order_id}: `quantity` must be an integer")
    if not 1 <= quantity <= MAX_QUANTITY:
        raise TerminalError(f"order {order_id}: `quantity` must be from 1 to {MAX_QUANTITY}")
    return Order(order_id, uid if isinstance(uid, str) else "", item, quantity)


def reserve_stock(transaction: Any, db: firestore.Client, order: Order) -> dict[str, Any]:
    """Take the order's quantity off `stock/{item}` and write `reservations/{orderId}`, in the
    step's transaction; `{"amount": price x quantity}`, or `{"rejected": why}` (nothing
    written) when the item is unknown or short."""
    stock_ref = db.collection("stock").document(order.item)
    stock = stock_ref.get(transaction=transaction).to_dict() or {}
    available, price = stock.get("available"), stock.get("price")
    if not (isinstance(available, int) and isinstance(price, int)):
        return {"rejected": f"no stock of {order.item}"}
    if available < order.quantity:
        return {"rejected": f"{available} {order.item} left, {order.quantity} ordered"}
    transaction.update(stock_ref, {"available": available - order.quantity})
    transaction.set(
        db.collection("reservations").document(order.order_id),
        {"item": order.item, "quantity": order.quantity, "reservedAt": firestore.SERVER_TIMESTAMP},
    )
    return {"amount": price * order.quantity}


def release_stock(transaction: Any, db: firestore.Client, order: Order) -> None:
    """Give the reserved quantity back to `stock/{item}` and delete the reservation."""
    transaction.update(
        db.collection("stock").document(order.item),
        {"available": firestore.Increment(order.quantity)},
    )
    transaction.delete(db.collection("reservations").document(order.order_id))


def charge(order: Order, amount: int, key: str) -> dict[str, Any]:
    """POST the payment under `key`: `{"paid": True}`, or `{"refused": why}` when the payment
    service refuses it for good. A retryable answer raises `ReceiverUnavailable`."""
    body = {"orderId": order.order_id, "uid": order.uid, "amount": amount}
    try:
        post(urls()[0], body, key)
    except TerminalError as refused:
        return {"refused": str(refused)}
    return {"paid": True}


def send_receipt(order: Order, amount: int, key: str) -> None:
    """POST the receipt: the order, what was bought and what it cost."""
    body = {"orderId": order.order_id, "uid": order.uid, "item": order.item,
            "quantity": order.quantity, "amount": amount}  # fmt: skip
    post(urls()[1], body, key)


def post(url: str, body: dict[str, Any], key: str) -> None:
    """POST `body` as JSON with `Idempotency-Key: key` (`functions.http_delivery`)."""
    post_once(url, json.dumps(body).encode(), content_type="application/json", idempotency_key=key)


def close_order(
    transaction: Any, db: firestore.Client, order: Order, fields: dict[str, Any]
) -> str:
    """Write the order's outcome `fields` onto it; its `status`, or "deleted" when the order is
    gone (nothing written: the order is not created again)."""
    ref = db.collection("orders").document(order.order_id)
    if not ref.get(transaction=transaction).exists:
        return "deleted"
    transaction.update(ref, fields)
    return str(fields["status"])


def fulfil(order: Order, delivery: Delivery) -> None:
    """The handler's steps for `order` (see the module docstring)."""
    db = delivery.client
    reserved = delivery.step("reserve_stock", reserve_stock, db, order, transactional=True)
    if "rejected" in reserved:
        closed = {"status": "rejected", "reason": reserved["rejected"]}
        delivery.step("close_order", close_order, db, order, closed, transactional=True)
        return
    amount = int(reserved["amount"])
    paid = delivery.step("charge", charge, order, amount, delivery.step_key("charge"))
    if "refused" in paid:
        delivery.step("release_stock", release_stock, db, order, transactional=True)
        closed = {"status": "rejected", "reason": paid["refused"]}
        delivery.step("close_order", close_order, db, order, closed, transactional=True)
        return
    receipt = "sent"
    try:
        key = delivery.step_key("send_receipt")
        delivery.step("send_receipt", send_receipt, order, amount, key, on_interrupted="skip")
    except StepInterrupted:
        logger.warning(
            "order %s: an earlier delivery started its receipt and never recorded it sent (it "
            "died, or the mail service failed): not sent again; check with the mail service "
            "and resend it by hand",
            order.order_id,
        )
        receipt = "unknown"
    closed = {"status": "fulfilled", "amount": amount, "receipt": receipt}
    delivery.step("close_order", close_order, db, order, closed, transactional=True)


@validated
@firestore_fn.on_document_created(document="orders/{orderId}")
@trigger_once(SUFFIX, event_id_from=lambda event: f"order-{event.params['orderId']}")
def fulfil_order(event: firestore_fn.Event[DocumentSnapshot | None], delivery: Delivery) -> None:
    """Fulfil the created order, each of its steps once per order."""
    fulfil(order_of(event.params["orderId"], event.data), delivery)
