"""A user's Pub/Sub function written the README's way (the platform's decorator over
`@trigger_once`), its records in the tests' in-memory store: the delivery whose path
`tests/dedup/test_delivery_depth.py` measures."""

from typing import Any

from firebase_functions import pubsub_fn

from dedup import DedupConfig, Deduplicator, Delivery, trigger_once
from tests.memory_store import MemoryStore

DEDUP = Deduplicator(DedupConfig(), records=MemoryStore())


@pubsub_fn.on_message_published(topic="jobs")
@trigger_once("depthJob", deduplicator=DEDUP)
def on_job(event: Any, delivery: Delivery) -> None:
    """No effect: only dedup's own work is on the path."""
