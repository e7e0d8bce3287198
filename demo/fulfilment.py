"""The orders' second act: `fulfil_order` reserves each order's stock, charges it and sends its
receipt, three effects of one handler, each a durable step (docs/steps.md).

The orders `create_order` and `create_order_callable` placed (2 coffees each) are delivered to
`fulfil_order` as their `created` events, `COPIES` copies at once, each failed copy retried,
then two orders the story writes itself: a tea, of which there is none, and a coffee whose
payment is refused. On the way, the payment service answers the first charge with a 503 (the
retry charges under the same key; the stock is not reserved again) and the mail service the
second receipt with a 503 (not sent again: at most once; the order says `receipt: "unknown"`).

Effects are counted where they land: `reservations/` and `stock/` in Firestore, `/payments` and
`/receipts` at the receiver, and each order's `status`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from google.cloud import firestore

from demo.events import firestore_event
from demo.http_story import Outcome
from demo.platform import DeliveryLog, Endpoint, deliver_at_least_once
from demo.receiver import Receiver

PAYMENTS_PATH = "/payments"
RECEIPTS_PATH = "/receipts"
STOCK = {"coffee": {"available": 10, "price": 350}, "tea": {"available": 0, "price": 250}}
"""What the shop has (`stock/{item}`), prices in cents."""


def play_fulfilment(
    project: str, db: firestore.Client, function: Endpoint, log: DeliveryLog, receiver: Receiver
) -> Outcome:
    """Deliver every placed order to `fulfil_order` (see the module docstring); the row."""
    for item, stock in STOCK.items():
        db.collection("stock").document(item).set(stock)
    placed = [doc for doc in db.collection("orders").stream() if "item" in (doc.to_dict() or {})]
    tea = _order(db, {"uid": "demo", "item": "tea", "quantity": 1})
    refused = _order(db, {"uid": "demo", "item": "coffee", "quantity": 1})

    def deliver(order: firestore.DocumentSnapshot) -> None:
        path = order.reference.path
        event = firestore_event(path, None, order, project=project, change="created")
        deliver_at_least_once(function, event, log)

    for n, order in enumerate(placed):
        if n == 0:
            receiver.fail(PAYMENTS_PATH, 503)  # retried: charged under the same key
        if n == 1:
            receiver.fail(RECEIPTS_PATH, 503)  # at most once: not sent again
        deliver(order)
    deliver(tea)
    receiver.fail(PAYMENTS_PATH, 402)  # refused: the stock goes back
    deliver(refused)
    return _count(db, receiver, log, [o.id for o in placed], tea.id, refused.id)


def _order(db: firestore.Client, fields: dict[str, Any]) -> firestore.DocumentSnapshot:
    ref = db.collection("orders").document()
    ref.set(fields)
    return ref.get()


def _count(
    db: firestore.Client,
    receiver: Receiver,
    log: DeliveryLog,
    placed: list[str],
    tea: str,
    refused: str,
) -> Outcome:
    """The row: reservations + charges + receipts, against what each order should have had."""
    reservations = [doc.id for doc in db.collection("reservations").stream()]
    charges = receiver.applied(PAYMENTS_PATH)
    receipts = receiver.applied(RECEIPTS_PATH)
    charged = Counter(str(a.idempotency_key).partition("-fulfil_order/")[0] for a in charges)
    statuses = {order: (db.document(f"orders/{order}").get().to_dict() or {}) for order in placed}
    statuses.update({o: db.document(f"orders/{o}").get().to_dict() or {} for o in (tea, refused)})
    coffee = (db.document("stock/coffee").get().to_dict() or {}).get("available")
    problems: list[str] = []
    if sorted(reservations) != sorted(placed):
        problems.append(f"reservations {sorted(reservations)}, orders {sorted(placed)}")
    if coffee != STOCK["coffee"]["available"] - 2 * len(placed):
        problems.append(f"{coffee} coffees left after {len(placed)} orders of 2")
    if charged != Counter({f"order-{order}": 1 for order in placed}):
        problems.append(f"charges under {dict(charged)}")
    unknown = [o for o in placed if statuses[o].get("receipt") == "unknown"]
    if len(unknown) != 1 or len(receipts) != len(placed) - 1:
        problems.append(f"{len(receipts)} receipts, {len(unknown)} orders with receipt unknown")
    if any(statuses[o].get("status") != "fulfilled" for o in placed):
        problems.append(f"placed orders' status: {[statuses[o].get('status') for o in placed]}")
    if [statuses[o].get("status") for o in (tea, refused)] != ["rejected", "rejected"]:
        problems.append(f"the tea and the refused payment: {statuses[tea]}, {statuses[refused]}")
    detail = (
        f"{len(placed)} orders: reservations/ {len(reservations)} (coffee 10 -> {coffee}); "
        f"POST {PAYMENTS_PATH} {len(charges)}, {len(charged)} keys (a 503 retried under its "
        f"key; a 402 gave the stock back); POST {RECEIPTS_PATH} {len(receipts)} (one 503: not "
        "resent, receipt unknown); no tea in stock: rejected, not charged"
    )
    expected = 3 * len(placed) - 1  # reserved, charged, receipt; one receipt lost to its 503
    effects = len(reservations) + len(charges) + len(receipts)
    return Outcome(log, effects, expected, detail, problems)
