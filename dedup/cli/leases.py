"""A record's lease as seen at a database read time: live, expired (stuck), released, none."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from dedup.record import Record, State


class LeaseStatus(StrEnum):
    """A record's lease as seen at a database read time."""

    LIVE = "live"
    """A delivery holds the lease and it has not expired: a handler may be running."""
    EXPIRED = "expired"
    """The lease expired: its owner is presumed dead; the next delivery takes it over."""
    RELEASED = "released"
    """In progress with no lease: the next delivery runs the handler."""
    NONE = "none"
    """A final record (sent, failed, dead, unknown): no lease."""


def lease_status(record: Record, now: datetime) -> LeaseStatus:
    """The lease of `record` at `now` (a database read time)."""
    if record.lease_live(now):
        return LeaseStatus.LIVE
    if record.has_lease:
        return LeaseStatus.EXPIRED
    return LeaseStatus.RELEASED if record.state is State.IN_PROGRESS else LeaseStatus.NONE


def is_stuck(record: Record, now: datetime) -> bool:
    """In progress with an expired lease: only a redelivery (or `release`) moves it on."""
    return record.state is State.IN_PROGRESS and lease_status(record, now) is LeaseStatus.EXPIRED
