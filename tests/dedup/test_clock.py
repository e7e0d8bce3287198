"""Clock skew: an instance clock off by minutes changes no claim outcome."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from dedup import Deduplicator, Delivery, LeaseHeld, Mode, OutcomeKind, State
from dedup.store import SERVER_TIMESTAMP, new_record

SKEWS = [timedelta(minutes=-5), timedelta(0), timedelta(minutes=5)]


def _lease(client: firestore.Client, key: str, started: object) -> None:
    fields = new_record(
        event_id=key.split("-")[0],
        suffix="s",
        mode=Mode.LEASE,
        state=State.IN_PROGRESS,
        owner="other",
        lease_seconds=60,
        payload_hash=None,
        expire_at=datetime.now(UTC) + timedelta(days=7),
    )
    fields["leaseStartedAt"] = started
    client.collection("triggerEvents").document(key).create(fields)


@pytest.mark.parametrize("skew", SKEWS, ids=["minus5min", "exact", "plus5min"])
def test_skewed_instance_neither_steals_nor_waits_on_a_dead_lease(
    firestore_client: firestore.Client, skew: timedelta
) -> None:
    """With the instance clock shifted ±5 min: a live lease still raises LeaseHeld, a lease
    that expired on the database clock is still taken over, fresh and sent events behave the
    same. Lease judgement uses only the database's read time."""

    def skewed_clock() -> datetime:
        return datetime.now(UTC) + skew

    from dedup import DedupConfig

    dedup = Deduplicator(DedupConfig(clock=skewed_clock), client=firestore_client)
    ran: list[str] = []

    def handler(delivery: Delivery) -> None:
        ran.append(delivery.key)

    _lease(firestore_client, "live-s", SERVER_TIMESTAMP)  # 60 s lease starting now
    _lease(
        firestore_client, "dead-s", datetime.now(UTC) - timedelta(minutes=2)
    )  # expired 1 min ago

    with pytest.raises(LeaseHeld):
        dedup.run("live", "s", handler)
    assert dedup.run("dead", "s", handler).kind is OutcomeKind.RAN
    assert dedup.run("fresh", "s", handler).kind is OutcomeKind.RAN
    assert (
        Deduplicator(DedupConfig(clock=skewed_clock), client=firestore_client)
        .run("fresh", "s", handler)
        .kind
        is OutcomeKind.DUPLICATE
    )
    assert ran == ["dead-s", "fresh-s"]
