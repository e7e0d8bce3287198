"""Durable steps under real process deaths, on the Firestore emulator: a worker delivering an
order of five steps (2 transactional, 2 keyed, 1 at most once: `tests.dedup.steps_worker`)
SIGKILLs itself at each step boundary in turn; then three copies of the same event, each its
own deduplicator, deliver it concurrently until it is done.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import pytest
from google.cloud import firestore

from dedup import Deduplicator, LeaseHeld, OutcomeKind
from tests.dedup.steps_worker import (
    BOUNDARY_COUNT,
    CONFIG,
    COPY_CONFIG,
    EFFECTS,
    KEYS,
    SUFFIX,
    order_handler,
)
from tests.dedup.support import ROOT

COPIES = 3


def killed_at(event_id: str, boundary: int) -> subprocess.Popen[bytes]:
    """A worker delivering `event_id` that SIGKILLs itself at step boundary `boundary`."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.dedup.steps_worker", event_id, "--kill-at", str(boundary)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def deliver_until_done(client: firestore.Client, event_id: str, outcomes: list[str]) -> None:
    """One copy: deliver until the event is done, as the platform retries a `LeaseHeld`."""
    dedup = Deduplicator(COPY_CONFIG, client=client)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            outcome = dedup.run(event_id, SUFFIX, order_handler(client))
        except LeaseHeld:
            time.sleep(0.3)
            continue
        outcomes.append(outcome.kind.value)
        return
    outcomes.append("not done")


def count(client: firestore.Client, collection: str, doc: str) -> int:
    return int((client.collection(collection).document(doc).get().to_dict() or {}).get("n", 0))


@pytest.mark.timeout(240)
def test_every_step_boundary_survives_a_sigkill(firestore_client: firestore.Client) -> None:
    """For a process killed at any step boundary, then three concurrent copies: each
    transactional step's write is applied exactly once, each keyed step reaches its receiver
    under exactly one key (at least once; twice only when killed between its call and its
    record), and the at-most-once step is never applied twice."""
    run = uuid.uuid4().hex[:8]
    events = {boundary: f"order-{run}-{boundary}" for boundary in range(1, BOUNDARY_COUNT + 1)}
    workers = [killed_at(event, boundary) for boundary, event in events.items()]
    for worker in workers:
        assert worker.wait(timeout=120) == -9, "the worker was not killed at its boundary"
    time.sleep(CONFIG.lease_seconds + 0.5)  # the killed deliveries' leases expire
    outcomes: dict[int, list[str]] = {boundary: [] for boundary in events}
    threads = [
        threading.Thread(target=deliver_until_done, args=(firestore_client, event, outcomes[b]))
        for b, event in events.items()
        for _ in range(COPIES)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keyed_twice = {4: "charge", 9: "notify"}  # killed after the call, before its record
    for boundary, event in events.items():
        done = sorted(outcomes[boundary])
        assert done.count(OutcomeKind.RAN.value) == 1, (boundary, done)
        assert set(done) <= {OutcomeKind.RAN.value, OutcomeKind.DUPLICATE.value}, (boundary, done)
        assert count(firestore_client, EFFECTS, f"{event}-reserve") == 1, boundary
        assert count(firestore_client, EFFECTS, f"{event}-ledger") == 1, boundary
        assert count(firestore_client, EFFECTS, f"{event}-receipt") == 1, boundary  # never 2
        keys = {
            d.id: d.to_dict() or {}
            for d in firestore_client.collection(KEYS)
            .where(filter=firestore.FieldFilter("event", "==", event))
            .stream()
        }
        steps = sorted(k["step"] for k in keys.values())
        assert steps == ["charge", "notify"], (boundary, keys)  # one key per keyed step
        for key in keys.values():
            twice = keyed_twice.get(boundary) == key["step"]
            assert key["calls"] == (2 if twice else 1), (boundary, key)
