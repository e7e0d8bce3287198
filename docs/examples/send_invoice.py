"""Your first task-queue function: send an order's invoice once per task, however often Cloud
Tasks dispatches it (docs/tasks.md)."""

import json
import os
from typing import Any

from firebase_functions import tasks_fn

from dedup import Delivery, TerminalError
from dedup.send import post_once
from dedup.tasks import task_once


# The deployed name is also the queue id: letters, digits and hyphens only, hence camelCase.
@tasks_fn.on_task_dispatched()
@task_once("send_invoice")
def sendInvoice(request: tasks_fn.CallableRequest[Any], delivery: Delivery) -> None:  # noqa: N802
    order_id = request.data.get("orderId") if isinstance(request.data, dict) else None
    if not isinstance(order_id, str) or not order_id:
        # Recorded failed and answered 200: Cloud Tasks does not retry bad data.
        raise TerminalError('the task data must be {"orderId": "<id>"}')
    # Idempotency-Key <task name>-send_invoice, the same on every dispatch of the task; a 5xx
    # or a refused connection releases the lease and Cloud Tasks dispatches again.
    post_once(
        os.environ["INVOICE_URL"],  # from .env (deploys) and .env.local (emulator)
        json.dumps({"orderId": order_id}).encode(),
        content_type="application/json",
        idempotency_key=delivery.key,
    )
