"""A receipt mail sent once per order: lease mode, HTTP through the library's sender."""

import json
import os

from firebase_functions import firestore_fn

from dedup import Delivery, trigger_once
from dedup.send import post_once


@firestore_fn.on_document_created(document="orders/{orderId}")
@trigger_once("send_receipt")  # lease mode, the default
def send_receipt(
    event: firestore_fn.Event[firestore_fn.DocumentSnapshot | None], delivery: Delivery
) -> None:
    order = event.data.to_dict() if event.data is not None else None
    if order is None:
        return
    # post_once sends `Idempotency-Key: <delivery.key>`, the same on every retry, so the mail
    # service drops copies. A 5xx, 408/425/429, timeout or refused connection raises
    # ReceiverUnavailable: the lease is released and the platform retries. Any other 4xx
    # (a 401 for a revoked token, a 400 for a bad address) raises TerminalError: recorded as
    # failed, not retried. Error messages never show the URL's token.
    post_once(
        os.environ["RECEIPTS_URL"],
        json.dumps({"order": event.params["orderId"], "to": order.get("email")}).encode(),
        content_type="application/json",
        idempotency_key=delivery.key,
    )
