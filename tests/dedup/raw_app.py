"""Raw CloudEvent functions (functions-framework's own decorators, no firebase-functions) over
`@trigger_once`, one sync and one async: dedup recognises each event's kind by its CloudEvent
`type`. Each effect is an increment of `effects/<delivery.key>.n`."""

from typing import Any

import functions_framework
import functions_framework.aio
from google.cloud import firestore

from dedup import AsyncDelivery, Delivery, SuffixRegistry, trigger_once

REGISTRY = SuffixRegistry()
"""The test loads this file once per app; each load registers its suffixes afresh."""


@functions_framework.cloud_event
@trigger_once("rawSync", registry=REGISTRY)
def raw_sync(event: Any, delivery: Delivery) -> None:
    """Count the event."""
    delivery.client.document(f"effects/{delivery.key}").set(
        {"n": firestore.Increment(1)}, merge=True
    )


@functions_framework.aio.cloud_event
@trigger_once("rawAsync", registry=REGISTRY)
async def raw_async(event: Any, delivery: AsyncDelivery) -> None:
    """Count the event, awaiting Firestore."""
    await delivery.client.document(f"effects/{delivery.key}").set(
        {"n": firestore.Increment(1)}, merge=True
    )
