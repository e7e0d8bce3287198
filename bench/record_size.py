"""The size of each record write of a fresh lease-mode delivery, as Firestore counts a document
(`dedup.platform.firestore_values.document_size`): the claim (the record as the claim's create
leaves it) and the outcome (as "sent" leaves it), read back from the emulator at each point.

Firestore Enterprise edition bills writes in write units of 1 KiB of the document written,
index entries included (https://cloud.google.com/firestore/enterprise/pricing); the Standard
edition bills one write per document whatever its size. `record_write_bytes` in results.json.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, dedup_key
from dedup.platform.firestore_values import document_size

SUFFIX = "benchSize"
WRITE_UNIT_BYTES = 1024
"""Enterprise edition: one write unit per 1 KiB (or part of one) of data written."""


def write_units(size: int) -> int:
    """Enterprise write units of a write of `size` bytes."""
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def measure(client: firestore.Client) -> dict[str, Any]:
    """`{"claim": bytes, "outcome": bytes, "write_units": {...}}` of one fresh lease-mode
    delivery whose handler returns nothing, with a typical Pub/Sub-sized event id."""
    config = DedupConfig(collection="benchRecordSize")
    dedup = Deduplicator(config, client=client)
    event_id = str(uuid.uuid4().int)[:16]  # Pub/Sub message ids are 16 digits
    path = f"{config.collection}/{dedup_key(event_id, SUFFIX)}"
    seen: dict[str, int] = {}

    def size_now() -> int:
        snapshot = client.document(path).get()
        if not snapshot.exists:
            raise RuntimeError(f"no record at {path} to size")
        return document_size(path, snapshot.to_dict() or {})

    def handler(delivery: Delivery) -> None:
        seen["claim"] = size_now()

    dedup.run(event_id, SUFFIX, handler)
    seen["outcome"] = size_now()
    return {
        "claim": seen["claim"],
        "outcome": seen["outcome"],
        "write_units": {name: write_units(size) for name, size in seen.items()},
    }
