"""A user's Pub/Sub function written the README's way (the platform's decorator over
`@trigger_once`): the delivery whose path `tests/dedup/test_delivery_depth.py` measures.
`on_job` keeps its records where a deployed function does, in Firestore through a
`RecordStore` over a sync client (the emulator's); `on_job_in_memory` in the tests' in-memory
store, which the flows reach the same way."""

from typing import Any

from firebase_functions import pubsub_fn
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, trigger_once
from tests.emulator_env import PROJECT
from tests.memory_store import MemoryStore

FIRESTORE = Deduplicator(DedupConfig(), client_factory=lambda: firestore.Client(project=PROJECT))
IN_MEMORY = Deduplicator(DedupConfig(), records=MemoryStore())


@pubsub_fn.on_message_published(topic="jobs")
@trigger_once("depthJob", deduplicator=FIRESTORE)
def on_job(event: Any, delivery: Delivery) -> None:
    """No effect: only dedup's own work is on the path."""


@pubsub_fn.on_message_published(topic="jobs")
@trigger_once("depthJobInMemory", deduplicator=IN_MEMORY)
def on_job_in_memory(event: Any, delivery: Delivery) -> None:
    """No effect: only dedup's own work is on the path."""
