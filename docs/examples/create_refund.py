"""Your first HTTP function: refund an order once per Idempotency-Key, however often the
client retries (docs/http.md)."""

import json
import os

import flask
from firebase_functions import https_fn

from dedup import Mode
from dedup.http import IdempotentRequest, idempotent_http, problem_response


@https_fn.on_request(invoker="public")
@idempotent_http("create_refund", mode=Mode.TRANSACTION)
def create_refund(call: IdempotentRequest) -> flask.Response:
    body = call.json if isinstance(call.json, dict) else {}
    order_id, amount = body.get("orderId"), body.get("amount")
    limit = int(os.environ["REFUND_LIMIT"])  # from .env (deploys) and .env.local (emulator)
    if not isinstance(order_id, str) or not isinstance(amount, int) or not 0 < amount <= limit:
        # 4xx answers are stored too: a retry with this key gets this same 400
        return problem_response(
            400,
            "invalid-refund",
            "Invalid refund",
            f'send {{"orderId": "<id>", "amount": 1-{limit}}}',
        )
    assert call.delivery.transaction is not None  # transaction mode
    refund = call.delivery.client.collection("refunds").document()
    # Written in the transaction that stores the answer and the record: all or nothing.
    call.delivery.transaction.create(
        refund, {"uid": call.uid, "orderId": order_id, "amount": amount}
    )
    answer = {"refundId": refund.id, "orderId": order_id, "amount": amount}
    return flask.Response(json.dumps(answer), 201, content_type="application/json")
