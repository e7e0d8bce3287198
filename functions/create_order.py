"""`create_order` (HTTP) and `create_order_callable` (callable): place an order once per
(caller, idempotency key), however often the client retries.

Both take `{"item": non-empty string, "quantity": integer 1-100}` from a signed-in Firebase
user and create `orders/{orderId}` with `uid`, `item`, `quantity`, `createdAt`, in transaction
mode: the order, the stored response and the dedup marker commit together, so there is no
window in which an order exists without its response or the other way round.

* `create_order` (`https_fn.on_request`, POST, key in the `Idempotency-Key` header): 201
  `{"orderId", "item", "quantity"}` with `Location: /orders/<orderId>`; 400 problem+json for an
  invalid order (stored: a replay gives the same 400); everything else as `dedup.http` says.
* `create_order_callable` (`https_fn.on_call`, key in the data field `idempotencyKey`): the
  same map; `HttpsError` invalid-argument for an invalid order (stored and replayed); a
  malformed request body invalid-argument before any record (`dedup.http.callable_body`); the
  other refusals as `dedup.http.CALLABLE_CODES` says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import flask
from firebase_functions import https_fn
from google.cloud import firestore

from dedup import Delivery, Mode
from dedup.http import (
    IdempotentRequest,
    ensure_firebase_app,
    idempotent_callable,
    idempotent_http,
    problem_response,
)
from dedup.http.callable_body import strict_callable

SUFFIX = "create_order"
CALLABLE_SUFFIX = "create_order_callable"
ORDERS = "orders"
MAX_QUANTITY = 100


@dataclass(frozen=True)
class Order:
    """A valid order request."""

    item: str
    quantity: int


class InvalidOrder(ValueError):
    """The order request is not `{"item": non-empty string, "quantity": integer 1-100}`."""


def parse_order(data: object) -> Order:
    """The order in a request body; `InvalidOrder` says what is wrong. Other fields (such as
    a callable's `idempotencyKey`) are ignored."""
    if not isinstance(data, dict):
        raise InvalidOrder('send a JSON object {"item": "...", "quantity": 1}')
    item, quantity = data.get("item"), data.get("quantity")
    if not isinstance(item, str) or not item.strip():
        raise InvalidOrder("`item` must be a non-empty string")
    if isinstance(quantity, bool) or not isinstance(quantity, int):
        raise InvalidOrder(f"`quantity` must be an integer from 1 to {MAX_QUANTITY}")
    if not 1 <= quantity <= MAX_QUANTITY:
        raise InvalidOrder(f"`quantity` must be an integer from 1 to {MAX_QUANTITY}")
    return Order(item, quantity)


def place_order(delivery: Delivery, uid: str, order: Order) -> str:
    """Create `orders/{orderId}` in the delivery's transaction; returns the new order id.

    The id is fresh on every attempt: only the attempt whose transaction commits (with the
    dedup marker) leaves an order behind.
    """
    assert delivery.transaction is not None, "create_order runs in transaction mode"
    ref = delivery.client.collection(ORDERS).document()
    delivery.transaction.create(
        ref,
        {
            "uid": uid,
            "item": order.item,
            "quantity": order.quantity,
            "createdAt": firestore.SERVER_TIMESTAMP,
        },
    )
    return ref.id


def _order_answer(order_id: str, order: Order) -> dict[str, Any]:
    return {"orderId": order_id, "item": order.item, "quantity": order.quantity}


@https_fn.on_request(invoker="public")
@idempotent_http(SUFFIX, mode=Mode.TRANSACTION)
def create_order(call: IdempotentRequest) -> flask.Response:
    """Create the order of a signed-in user's POST; 201 with its id, or 400 if invalid."""
    try:
        order = parse_order(call.json)
    except InvalidOrder as invalid:
        return problem_response(400, "invalid-order", "Invalid order", str(invalid))
    assert call.uid is not None  # the endpoint is not anonymous
    order_id = place_order(call.delivery, call.uid, order)
    return flask.Response(
        json.dumps(_order_answer(order_id, order)),
        201,
        content_type="application/json",
        headers={"Location": f"/{ORDERS}/{order_id}"},
    )


# firebase-functions verifies a callable's ID token through the default firebase_admin app
# before the handler runs: it exists from the moment this module is loaded (no network call).
ensure_firebase_app()


@strict_callable  # a malformed body is invalid-argument, not firebase-functions' 500 INTERNAL
@https_fn.on_call(invoker="public")
@idempotent_callable(CALLABLE_SUFFIX, mode=Mode.TRANSACTION)
def create_order_callable(
    request: https_fn.CallableRequest[Any], delivery: Delivery
) -> dict[str, Any]:
    """The same operation as a callable: returns the order, or raises invalid-argument."""
    try:
        order = parse_order(request.data)
    except InvalidOrder as invalid:
        raise https_fn.HttpsError(
            https_fn.FunctionsErrorCode.INVALID_ARGUMENT, str(invalid)
        ) from None
    uid = request.auth.uid if request.auth is not None else None
    assert uid is not None  # the endpoint is not anonymous: idempotent_callable checked
    return _order_answer(place_order(delivery, uid, order), order)
