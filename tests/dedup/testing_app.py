"""A function written as a library user writes one, served over HTTP by
`tests/dedup/test_testing_helpers.py` to show `dedup.testing` end to end: each effect is an
increment of `effects/<delivery.key>.n`, so a doubled effect shows as n == 2."""

from typing import Any

from firebase_functions import firestore_fn, pubsub_fn
from google.cloud import firestore

from dedup import Delivery, SuffixRegistry, trigger_once

REGISTRY = SuffixRegistry()
"""The test may load this file more than once; each load registers its suffixes afresh."""


def _effect(delivery: Delivery) -> None:
    delivery.client.document(f"effects/{delivery.key}").set(
        {"n": firestore.Increment(1)}, merge=True
    )


@firestore_fn.on_document_created(document="orders/{orderId}")
@trigger_once("tOrder", registry=REGISTRY)
def on_order(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@pubsub_fn.on_message_published(topic="jobs")
@trigger_once("tJob", registry=REGISTRY)
def on_job(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


def echo(cloud_event: Any) -> None:
    """A bare CloudEvent function (functions-framework's `cloudevent` signature)."""
