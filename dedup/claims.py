"""The claim decision: what a delivery does after reading its record, in every mode.

Each condition is named and checked on its own; `decide` combines them in one order that a
reviewer can follow line by line. Leases are judged on the database's read time only (never
an instance clock). Nothing here touches Firestore.

| record                                        | claim     |
|-----------------------------------------------|-----------|
| absent                                        | CREATE    |
| sent, failed or dead                          | SKIP      |
| a lease that is live at the read time         | WAIT      |
| a lease that expired (its owner crashed)      | BURY if attempts are used up, else TAKE_OVER |
| no lease (released, or an atomic attempt failed) | TAKE_OVER |

A released record is taken over even when its attempts are used up: every flow buries an
exhausted record itself instead of releasing it, so a released one was handed back on purpose
(`dedup release`) and the operator asked for one more run.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from dedup.record import Record, State


def record_absent(record: Record | None) -> bool:
    """No record: nobody has started this event for this function."""
    return record is None


def record_sent(record: Record) -> bool:
    """The effect is done and recorded: every other delivery is a duplicate."""
    return record.state is State.SENT


def record_finished(record: Record) -> bool:
    """Failed (terminal) or dead (poison): skipped like a duplicate, the state is reported."""
    return record.state in (State.FAILED, State.DEAD)


def lease_live(record: Record, read_time: datetime) -> bool:
    """A delivery holds a lease that has not expired on the database clock."""
    return record.lease_live(read_time)


def lease_expired(record: Record, read_time: datetime) -> bool:
    """A lease is held but expired on the database clock: its owner is presumed dead."""
    return record.has_lease and not record.lease_live(read_time)


def lease_released(record: Record) -> bool:
    """No lease: the last attempt failed and gave it back, or an operator released it."""
    return not record.has_lease


def attempts_exhausted(record: Record, max_attempts: int) -> bool:
    """The record already used every allowed attempt: the event is poison."""
    return record.attempts >= max_attempts


class Claim(Enum):
    """What a delivery does after reading the record."""

    CREATE = "create"
    """Write the record (lease mode: with our lease; atomic modes: the marker, with the writes)."""
    SKIP = "skip"
    """Final record: report a duplicate, run nothing."""
    WAIT = "wait"
    """Someone's lease is live: raise `LeaseHeld`, the platform retries later."""
    TAKE_OVER = "take_over"
    """Start a new attempt on the existing record, guarded by its update time."""
    BURY = "bury"
    """Mark the record dead: its last allowed attempt crashed."""


def decide(record: Record | None, read_time: datetime, max_attempts: int) -> Claim:
    """The decision for a record read at `read_time` (database clock), in every mode."""
    if record is None or record_absent(record):
        return Claim.CREATE
    if record_sent(record) or record_finished(record):
        return Claim.SKIP
    if lease_live(record, read_time):
        return Claim.WAIT
    if lease_expired(record, read_time):
        return Claim.BURY if attempts_exhausted(record, max_attempts) else Claim.TAKE_OVER
    if lease_released(record):
        return Claim.TAKE_OVER
    raise AssertionError(f"unreachable claim state for {record!r}")  # pragma: no cover


def written_by(record: Record | None, owner: str) -> bool:
    """The record's last transition was written by the delivery holding `owner`.

    Owner tokens are fresh per attempt (uuid4), so a match proves the write is ours: a write
    whose response was lost is recognised instead of being taken for someone else's.
    """
    return record is not None and record.owner == owner


def belongs_to(record: Record, event_id: str, suffix: str) -> bool:
    """The record was written for this event id and suffix (fields missing: not judged)."""
    return (not record.event_id or record.event_id == event_id) and (
        not record.suffix or record.suffix == suffix
    )
