"""Helpers for the dedup tests: deduplicators on the emulator, record and effect readers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Record

EFFECTS = "effects"

MakeDedup = Callable[..., Deduplicator]


@pytest.fixture
def make_dedup(firestore_client: firestore.Client) -> MakeDedup:
    """Build a Deduplicator on the emulator client; keyword arguments go to DedupConfig."""

    def make(**settings: Any) -> Deduplicator:
        return Deduplicator(DedupConfig(**settings), client=firestore_client)

    return make


@pytest.fixture
def read_record(firestore_client: firestore.Client) -> Callable[[str], Record | None]:
    """Read `triggerEvents/<key>` as a Record (None if absent)."""

    def read(key: str) -> Record | None:
        return Record.from_snapshot(
            firestore_client.collection("triggerEvents").document(key).get()
        )

    return read


@pytest.fixture
def count_effects(firestore_client: firestore.Client) -> Callable[[], int]:
    """How many effect documents handlers created (ignoring the workers' warm-up read)."""

    def count() -> int:
        return sum(1 for _ in firestore_client.collection(EFFECTS).list_documents())

    return count
