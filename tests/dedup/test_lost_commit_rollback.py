"""A transaction-mode commit whose response is lost, and whose rollback then fails too, on the
Firestore emulator: the commit may have landed, so the delivery reads the record and, finding
its own marker, reports the run it made (one effect, the record `sent`), instead of giving up
with `StoreUnavailable` on the rollback's error and leaving the truth to a redelivery.

The client library rolls a transaction back on any error, its commit's included, and would
raise a failed rollback's error in place of the commit's; dedup's bounded transactions log the
rollback's error and raise the commit's (`dedup.platform.firestore_internals`), which
`commit_failure` reads: a transient one means the commit may have landed.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Mode, OutcomeKind, State
from tests.dedup.grpc_faults import Fault, faulty_client

ROLLBACK_FAULTS = [Fault.DEADLINE, Fault.HANG, Fault.DENY]


@pytest.mark.parametrize("rollback", ROLLBACK_FAULTS, ids=[f.value for f in ROLLBACK_FAULTS])
def test_a_lost_commit_is_read_back_whatever_its_rollback_raised(
    rollback: Fault, firestore_client: firestore.Client
) -> None:
    def plan(method: str, n: int) -> Fault:
        if method == "Commit" and n == 1:
            return Fault.LOSE_RESPONSE  # applied: the marker and the handler's write are in
        if method == "Rollback":
            return rollback
        return Fault.PASS

    dedup = Deduplicator(
        DedupConfig(rpc_timeout_seconds=2, lease_seconds=30, cache_size=0),
        client=faulty_client(plan),
    )
    event = f"lost-{uuid.uuid4().hex[:8]}"
    effects: list[str] = []

    def handler(delivery: Any) -> dict[str, str]:
        effects.append(delivery.key)
        counter = firestore_client.collection("counters").document(event)
        delivery.transaction.set(counter, {"n": firestore.Increment(1)}, merge=True)
        return {"done": "yes"}

    outcome = dedup.run(event, "count", handler, mode=Mode.TRANSACTION)
    assert outcome.kind is OutcomeKind.RAN
    record = firestore_client.collection("triggerEvents").document(f"{event}-count").get()
    assert record.get("state") == State.SENT
    counter = firestore_client.collection("counters").document(event).get().to_dict()
    assert counter == {"n": 1}
    again = Deduplicator(DedupConfig(cache_size=0), client=firestore_client)
    assert again.run(event, "count", handler, mode=Mode.TRANSACTION).kind is (OutcomeKind.DUPLICATE)


def test_a_failed_handler_is_recorded_whatever_its_rollback_raised(
    firestore_client: firestore.Client,
) -> None:
    """The handler read in its transaction, then raised; the client rolls the transaction back,
    and the rollback is denied. The handler's error is what the attempt failed of (its attempt
    recorded on the record, the error raised for the platform's retry), not a store outage
    read from the rollback's error."""

    def plan(method: str, n: int) -> Fault:
        return Fault.DENY if method == "Rollback" else Fault.PASS

    dedup = Deduplicator(
        DedupConfig(rpc_timeout_seconds=2, lease_seconds=30, cache_size=0),
        client=faulty_client(plan),
    )
    event = f"failed-{uuid.uuid4().hex[:8]}"

    def handler(delivery: Any) -> None:
        ref = firestore_client.collection("counters").document(event)
        list(delivery.transaction.get(ref))  # the read begins the transaction
        raise ValueError("the handler failed")

    with pytest.raises(ValueError, match="the handler failed"):
        dedup.run(event, "fails", handler, mode=Mode.TRANSACTION)
    record = firestore_client.collection("triggerEvents").document(f"{event}-fails").get()
    assert record.exists
    assert record.get("attempts") == 1
    assert "the handler failed" in record.get("lastError")
