"""Clock skew: an instance clock off by minutes changes no claim outcome."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, LeaseHeld, OutcomeKind
from dedup.kernel.transitions import SERVER_TIMESTAMP
from tests.dedup.support import write_foreign_lease

SKEWS = [timedelta(minutes=-5), timedelta(0), timedelta(minutes=5)]


@pytest.mark.parametrize("skew", SKEWS, ids=["minus5min", "exact", "plus5min"])
def test_skewed_instance_neither_steals_nor_waits_on_a_dead_lease(
    firestore_client: firestore.Client, skew: timedelta
) -> None:
    """With the instance clock shifted ±5 min: a live lease still raises LeaseHeld, a lease
    that expired on the database clock is still taken over, fresh and sent events behave the
    same. Lease judgement uses only the database's read time."""

    def skewed_clock() -> datetime:
        return datetime.now(UTC) + skew

    dedup = Deduplicator(DedupConfig(clock=skewed_clock), client=firestore_client)
    ran: list[str] = []

    def handler(delivery: Delivery) -> None:
        ran.append(delivery.key)

    write_foreign_lease(firestore_client, "live-s", started=SERVER_TIMESTAMP)  # 60 s from now
    write_foreign_lease(  # a 60 s lease that expired a minute ago
        firestore_client, "dead-s", started=datetime.now(UTC) - timedelta(minutes=2)
    )

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
