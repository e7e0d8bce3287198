"""Crash recovery: a process killed while holding the lease."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from google.cloud import firestore

from dedup import Deduplicator, Delivery, LeaseHeld, Mode, OutcomeKind, Record, State
from tests.dedup.support import KILLED_LEASE_SECONDS, start_worker

LEASE_SECONDS = KILLED_LEASE_SECONDS  # held off past a busy machine's pauses (support.py)


def test_sigkilled_owner_blocks_until_its_lease_expires_then_the_event_runs_once(
    firestore_client: firestore.Client, make_dedup: Callable[..., Deduplicator]
) -> None:
    """A SIGKILLed owner's lease holds redeliveries off (LeaseHeld) until it expires on the
    database clock; then exactly one redelivery runs the handler, as attempt 2."""
    worker = start_worker("e1", "s", "--lease", str(LEASE_SECONDS), "--hang")
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "STARTED"
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    killed_at = time.monotonic()

    attempts: list[int] = []

    def handler(delivery: Delivery) -> None:
        attempts.append(delivery.attempt)

    with pytest.raises(LeaseHeld):
        make_dedup().run("e1", "s", handler)

    outcome = None
    while outcome is None:
        assert time.monotonic() - killed_at < LEASE_SECONDS + 10, "lease never expired"
        try:
            outcome = make_dedup().run("e1", "s", handler)
        except LeaseHeld:
            time.sleep(0.25)
    assert outcome.kind is OutcomeKind.RAN
    assert attempts == [2]
    assert make_dedup().run("e1", "s", handler).kind is OutcomeKind.DUPLICATE
    record = Record.from_snapshot(
        firestore_client.collection("triggerEvents").document("e1-s").get()
    )
    assert record is not None
    assert (record.state, record.attempts) == (State.SENT, 2)


@pytest.mark.parametrize("mode", [Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_an_atomic_attempt_killed_before_its_commit_leaves_nothing(
    mode: Mode,
    firestore_client: firestore.Client,
    make_dedup: Callable[..., Deduplicator],
    count_effects: Callable[[], int],
) -> None:
    """An atomic-mode process SIGKILLed inside its handler (writes buffered, commit not sent)
    leaves no effect and no record: the redelivery runs at once, as attempt 1 (a crashed
    attempt is not counted in these modes), and the effect commits exactly once."""
    worker = start_worker("e1", "s", "--hang", "--mode", mode.value)
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "STARTED"
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert count_effects() == 0
    assert firestore_client.collection("triggerEvents").document("e1-s").get().exists is False

    def handler(delivery: Delivery) -> None:
        ref = firestore_client.collection("effects").document()
        writer = delivery.transaction if delivery.transaction is not None else delivery.batch
        assert writer is not None
        writer.create(ref, {"key": delivery.key, "attempt": delivery.attempt})

    outcome = make_dedup().run("e1", "s", handler, mode=mode)
    assert (outcome.kind, outcome.attempt) == (OutcomeKind.RAN, 1)
    assert count_effects() == 1
