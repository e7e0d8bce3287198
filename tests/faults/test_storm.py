"""Storms of duplicate deliveries on a freshly started Firestore emulator.

A cold emulator answers plain precondition writes under load with "Transaction lock timeout"
(ABORTED) and DEADLINE_EXCEEDED: exactly the store errors that, hitting "sent" after the
handler ran, used to leave the lease to expire for another copy to run the effect again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from google.cloud import firestore

from dedup import DedupConfig, DedupError, Deduplicator, Delivery, Mode
from demo.own_firestore import own_firestore
from tests.faults.support import unique

EVENTS = 20
COPIES = 50
INSTANCES = 10
REDELIVERY_DELAY_SECONDS = 0.1
GIVE_UP_SECONDS = 240.0

pytestmark = pytest.mark.own_emulators  # starts a Firestore emulator of its own


def storm(clients: list[firestore.Client], mode: Mode) -> tuple[Counter[str], Counter[str], int]:
    """20 events x 50 copies over 10 instances; each copy is redelivered 0.1 s after it raised,
    until it is acknowledged. Returns (handler runs per key, errors by type, copies acked)."""
    instances = [
        Deduplicator(DedupConfig(cache_size=0, lease_seconds=60), client=c) for c in clients
    ]
    counter = clients[0].collection("effects")
    runs: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    lock = threading.Lock()
    gate = threading.Event()
    run_id = unique()

    def handler(delivery: Delivery) -> None:
        with lock:
            runs[delivery.key] += 1
        effect = counter.document(delivery.key)
        if delivery.transaction is not None:
            delivery.transaction.set(effect, {"n": firestore.Increment(1)}, merge=True)
        elif delivery.batch is not None:
            delivery.batch.set(effect, {"n": firestore.Increment(1)}, merge=True)

    def copy(index: int) -> bool:
        instance = instances[(index // EVENTS) % INSTANCES]  # each event's copies on every one
        event_id = f"{run_id}-{index % EVENTS}"
        gate.wait()
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while time.monotonic() < deadline:
            try:
                instance.run(event_id, "storm", handler, mode=mode)
                return True
            except DedupError as exc:
                with lock:
                    errors[type(exc).__name__] += 1
                time.sleep(REDELIVERY_DELAY_SECONDS)
        return False

    with ThreadPoolExecutor(EVENTS * COPIES) as pool:
        futures = [pool.submit(copy, i) for i in range(EVENTS * COPIES)]
        gate.set()
        acked = sum(f.result() for f in futures)
    if mode is not Mode.LEASE:  # atomic modes: the handler may run again inside a retried
        # transaction; what counts is what committed
        runs = Counter({s.id: int((s.to_dict() or {}).get("n", 0)) for s in counter.stream()})
    return runs, errors, acked


@pytest.mark.parametrize("mode", [Mode.LEASE, Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_a_storm_on_a_cold_emulator_runs_each_effect_exactly_once(
    mode: Mode, tmp_path: Path
) -> None:
    """It is impossible for a store error under load to run an effect twice: 20 events x 50
    concurrent copies over 10 instances, started right after the emulator, give exactly one
    effect per event and every copy is acknowledged. Once a mode: the store errors on "sent"
    that a storm may or may not raise are injected every time by
    tests/dedup/test_holes.py::test_store_errors_on_mark_sent_are_retried_not_reported."""
    with own_firestore(tmp_path) as emulator:
        clients = [emulator.client() for _ in range(INSTANCES)]
        runs, errors, acked = storm(clients, mode)
    print(f"{mode.value} storm: errors {dict(errors)}")
    assert acked == EVENTS * COPIES
    assert len(runs) == EVENTS
    assert set(runs.values()) == {1}, runs
