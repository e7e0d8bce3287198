"""Functions on a named Firestore database, served in-process by tests/named (functions-framework
loads this file as a function source, as it loads main.py).

`count_order` keeps its records in the database its events come from (the default);
`count_order_records_elsewhere` keeps them in `(default)`, as DEDUP_DATABASE=(default) would,
while its handler writes to the event's database: a transaction cannot span both, so every
delivery is refused with `DatabaseMismatch` and nothing is committed.
"""

from __future__ import annotations

from typing import Any

from firebase_functions import firestore_fn
from google.cloud import firestore

from dedup import DedupConfig, Mode, SuffixRegistry, TransactionDelivery, trigger_once

NAMED_DATABASE = "dedup-named"
PROJECT = "demo-exactly-once"
COUNTS = "orderCounts"
REGISTRY = SuffixRegistry()

Event = firestore_fn.Event[firestore_fn.DocumentSnapshot | None]


def _count(transaction: firestore.Transaction, client: firestore.Client, event: Event) -> None:
    ref = client.collection(COUNTS).document(event.params["orderId"])
    transaction.set(ref, {"n": firestore.Increment(1)}, merge=True)


@firestore_fn.on_document_created(document="orders/{orderId}", database=NAMED_DATABASE)
@trigger_once("named_orders", mode=Mode.TRANSACTION, registry=REGISTRY)
def count_order(event: Event, delivery: Any) -> None:
    """Count the order once, in the named database, with the record in the same commit."""
    assert isinstance(delivery, TransactionDelivery)
    _count(delivery.transaction, delivery.client, event)


@firestore_fn.on_document_created(document="orders/{orderId}", database=NAMED_DATABASE)
@trigger_once(
    "named_orders_elsewhere",
    mode=Mode.TRANSACTION,
    registry=REGISTRY,
    config=DedupConfig(project=PROJECT, database="(default)"),
)
def count_order_records_elsewhere(event: Event, delivery: Any) -> None:
    """Try to count the order in the event's database while the records live in (default)."""
    assert isinstance(delivery, TransactionDelivery)
    named = firestore.Client(project=PROJECT, database=event.database)
    _count(delivery.transaction, named, event)
