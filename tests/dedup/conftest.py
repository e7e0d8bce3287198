"""Helpers for the dedup tests: deduplicators on the emulator, record and effect readers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.cloud import firestore
from google.cloud.firestore import AsyncClient

from dedup import AsyncDeduplicator, DedupConfig, Deduplicator, Record
from tests.conftest import PROJECT

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


MakeAsyncDedup = Callable[..., AsyncDeduplicator]


@pytest.fixture
def make_async_dedup(firestore_host: str) -> MakeAsyncDedup:
    """Build an AsyncDeduplicator on the emulator (an AsyncClient per event loop, made on its
    first delivery); keyword arguments go to DedupConfig."""

    def make(**settings: Any) -> AsyncDeduplicator:
        return AsyncDeduplicator(
            DedupConfig(**settings), client_factory=lambda: AsyncClient(project=PROJECT)
        )

    return make
