"""A function as a library user writes one, on a 2-second lease, served by functions-framework
for `tests/dedup/test_testing_until_done.py`: one keyed step, each call of which increments
`effects/<delivery.key>.n`, so a doubled effect shows as n == 2."""

from typing import Any

from firebase_functions import firestore_fn
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, SuffixRegistry, trigger_once
from tests.dedup.support import standing_clock

LEASE_SECONDS = 2
"""Short, so that a crashed delivery's lease expires within the test."""
CONFIG = DedupConfig(
    lease_seconds=LEASE_SECONDS, cache_size=0, min_retry_seconds=0, budget_clock=standing_clock
)
"""The function's config; the test hands it to `deliver_until_done`. Its deliveries' own clock
stands still (`tests.dedup.support.standing_clock`): with a 2 s lease, a busy machine's pause
between the claim and the step would make the delivery the test crashes give its lease back
before it reaches the step (and `crash_at_step` would find no crash)."""
REGISTRY = SuffixRegistry()
"""The test loads this file twice (an import, and functions-framework's load of its path)."""


def _effect(delivery: Delivery) -> None:
    delivery.client.document(f"effects/{delivery.key}").set(
        {"n": firestore.Increment(1)}, merge=True
    )


@firestore_fn.on_document_created(document="untilDone/{orderId}")
@trigger_once("tUntilDone", deduplicator=Deduplicator(CONFIG), registry=REGISTRY)
def on_created(event: Any, delivery: Delivery) -> None:
    delivery.step("effect", _effect, delivery)
