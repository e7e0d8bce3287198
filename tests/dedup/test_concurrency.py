"""Concurrency: many simultaneous deliveries of one event, across threads and processes."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from google.cloud import firestore

from dedup import Deduplicator, Delivery, LeaseHeld, Mode, OutcomeKind
from tests.dedup.support import start_worker

MakeDedup = Callable[..., Deduplicator]
THREADS = 50
PROCESSES = 4


def _create(effects: firestore.CollectionReference, key: str) -> None:
    """The handlers' effect: one new document in `effects`."""
    effects.document().create({"k": key})


def _deliver_concurrently(count: int, deliver: Callable[[], OutcomeKind]) -> Counter[str]:
    """Start `count` deliveries at once (a barrier) and tally outcomes and exceptions."""
    barrier = threading.Barrier(count)
    results: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        try:
            result = deliver().value
        except LeaseHeld:
            result = "LeaseHeld"
        except Exception as exc:  # anything else is a bug the test must report
            result = f"unexpected {type(exc).__name__}: {exc}"
        with lock:
            results.append(result)

    threads = [threading.Thread(target=worker) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Counter(results)


def test_fifty_threads_lease_mode_run_the_handler_once(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """It is impossible for two of 50 simultaneous deliveries to both run the handler; every
    other delivery is a duplicate or LeaseHeld, nothing else."""
    dedup = make_dedup()
    effects = firestore_client.collection("effects")

    def handler(delivery: Delivery) -> None:
        effects.document().create({"key": delivery.key})
        time.sleep(0.2)

    tally = _deliver_concurrently(THREADS, lambda: dedup.run("e1", "s", handler).kind)
    assert tally["ran"] == 1
    assert set(tally) <= {"ran", "duplicate", "duplicate_cached", "LeaseHeld"}
    assert len(list(effects.list_documents())) == 1


def test_fifty_separate_instances_lease_mode_run_the_handler_once(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """Same with one Deduplicator per delivery (no shared cache): only Firestore decides."""
    effects = firestore_client.collection("effects")
    instances = [make_dedup() for _ in range(THREADS)]
    handed = iter(instances)
    lock = threading.Lock()

    def deliver() -> OutcomeKind:
        with lock:
            dedup = next(handed)
        return dedup.run("e1", "s", lambda d: _create(effects, d.key)).kind

    tally = _deliver_concurrently(THREADS, deliver)
    assert tally["ran"] == 1
    assert set(tally) <= {"ran", "duplicate", "LeaseHeld"}
    assert len(list(effects.list_documents())) == 1


def test_fifty_threads_transaction_mode_commit_the_effect_once(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """Transaction mode: 50 simultaneous deliveries increment the counter exactly once, and
    every delivery returns normally (no contention error escapes)."""
    dedup = make_dedup()
    counter = firestore_client.collection("counters").document("posts")

    def handler(delivery: Delivery) -> None:
        assert delivery.transaction is not None
        delivery.transaction.set(counter, {"n": firestore.Increment(1)}, merge=True)

    tally = _deliver_concurrently(
        THREADS, lambda: dedup.run("e1", "s", handler, mode=Mode.TRANSACTION).kind
    )
    assert tally["ran"] == 1
    assert set(tally) <= {"ran", "duplicate", "duplicate_cached"}
    assert counter.get().to_dict() == {"n": 1}


def test_fifty_threads_write_only_mode_commit_the_effect_once(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """Write-only mode: the handler's batch commits once with the marker; the rest are
    duplicates."""
    counter = firestore_client.collection("counters").document("posts")
    instances = [make_dedup() for _ in range(THREADS)]
    handed = iter(instances)
    lock = threading.Lock()

    def handler(delivery: Delivery) -> None:
        assert delivery.batch is not None
        delivery.batch.set(counter, {"n": firestore.Increment(1)}, merge=True)

    def deliver() -> OutcomeKind:
        with lock:
            dedup = next(handed)
        return dedup.run("e1", "s", handler, mode=Mode.WRITE_ONLY).kind

    tally = _deliver_concurrently(THREADS, deliver)
    assert tally["ran"] == 1
    assert set(tally) <= {"ran", "duplicate"}
    assert counter.get().to_dict() == {"n": 1}


@pytest.mark.parametrize(
    ("mode", "flavor"),
    [
        (Mode.LEASE, "sync"),
        (Mode.TRANSACTION, "sync"),
        *((mode, "async") for mode in Mode),  # async handlers, each on its own loop
    ],
)
def test_four_processes_run_the_handler_once(
    firestore_client: firestore.Client, mode: Mode, flavor: str
) -> None:
    """Four processes delivering the same event at the same instant: one effect; the others
    skip or raise LeaseHeld, and no other error escapes."""
    start_at = str(time.time() + 3.0)  # after every process has imported and connected
    extra = ["--async"] if flavor == "async" else []
    workers = [
        start_worker("e1", "s", "--start-at", start_at, "--mode", mode.value, *extra)
        for _ in range(PROCESSES)
    ]
    results = []
    for worker in workers:
        stdout, _ = worker.communicate(timeout=60)
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    outcomes = Counter(r.get("outcome") or r.get("error") for r in results)
    assert outcomes["ran"] == 1, results
    assert set(outcomes) <= {"ran", "duplicate", "LeaseHeld"}, results
    effects = [d for d in firestore_client.collection("effects").list_documents()]
    assert len(effects) == 1
