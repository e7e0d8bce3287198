"""Every claim decision, in every mode: after reading the record (`decide`, from named
conditions), after an ambiguous take-over, a handler's error, a failed atomic commit and a fenced
write that found the record changed. Leases are judged on the database's read time only. No I/O.
Why each rule holds: docs/guarantees.md.

| the record read (`decide`)                   | claim                                             |
|----------------------------------------------|---------------------------------------------------|
| absent                                       | CREATE                                            |
| sent, failed, dead or unknown                | SKIP                                              |
| a lease live at the read time                | WAIT                                              |
| a lease that expired (its owner crashed)     | MARK_DEAD if attempts are used up, else TAKE_OVER |
| no lease (released, or an atomic try failed) | TAKE_OVER, even with attempts used up             |

Attempts are used up after `max_attempts` *and* `min_retry_seconds` (`AttemptLimit`). A
take-over is ambiguous (`takeover_ambiguous`) when the lease expired or was given back
`ambiguous`; what it does then:

| `reconcile(delivery)` returned | `on_ambiguous` | next (`after_ambiguity`)             |
|--------------------------------|----------------|--------------------------------------|
| True (the effect happened)     | any            | RECONCILED: sent, `reconciled: true` |
| False (it did not)             | any            | RUN: the handler runs                |
| None, or no `reconcile`        | "rerun"        | RUN: the handler runs, same key      |
| None, or no `reconcile`        | "skip"         | SKIP: unknown, acknowledged          |

| the handler's error (`after_failure`)         | the record                       | the platform |
|-----------------------------------------------|----------------------------------|--------------|
| terminal (`TerminalError`, `InvalidArgument`) | FAILED                           | stops        |
| any other, attempts used up (`AttemptLimit`)  | DEAD                             | stops        |
| any other, attempts left                      | RELEASED (in progress, no lease) | retries      |

An atomic commit that raised (`after_commit_failure`; a handler that raised inside it counts
as a refusal of an unchanged record):

| the record read after the commit     | the commit failed with             | next      |
|--------------------------------------|------------------------------------|-----------|
| carries this attempt's owner         | anything                           | LANDED    |
| (not read)                           | other Firestore errors (permission)| GIVE_UP   |
| unchanged since the attempt read it  | a first InvalidArgument            | FRESH_TRY |
| unchanged since the attempt read it  | another refusal                    | REFUSED   |
| changed (another delivery wrote it)  | a refusal                          | AGAIN     |
| not this attempt's                   | contention or an outage            | BACK_OFF  |

An owner's outcome write that found the record changed (`after_fenced_conflict`):

| the record                                           | next     |
|------------------------------------------------------|----------|
| written by this owner, in the wanted state, no lease | LANDED   |
| written by this owner, still in progress             | REFRESH  |
| anything else (another delivery took it over)        | LOST     |
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from google.api_core import exceptions as api_exceptions

from dedup.errors import TerminalError
from dedup.kernel.record import GIVEN_UP, RERUN, Record, State
from dedup.kernel.store_errors import CommitFailed, commit_failure


def record_absent(record: Record | None) -> bool:
    """No record: nobody has started this event for this function."""
    return record is None


def record_sent(record: Record) -> bool:
    """The effect is done and recorded: every other delivery is a duplicate."""
    return record.state is State.SENT


def record_finished(record: Record) -> bool:
    """Failed (terminal), dead (poison) or unknown (an ambiguous delivery skipped on purpose):
    skipped like a duplicate, the state is reported."""
    return record.state in GIVEN_UP


def lease_live(record: Record, read_time: datetime) -> bool:
    """A delivery holds a lease that has not expired on the database clock."""
    return record.lease_live(read_time)


def lease_expired(record: Record, read_time: datetime) -> bool:
    """A lease is held but expired on the database clock: its owner is presumed dead."""
    return record.has_lease and not record.lease_live(read_time)


def lease_released(record: Record) -> bool:
    """No lease: the last attempt failed and gave it back, or an operator released it."""
    return not record.has_lease


def release_ambiguous(record: Record) -> bool:
    """No lease, given back `ambiguous` (an unstarted take-over's give-back, `dedup release`)."""
    return lease_released(record) and record.ambiguous


def takeover_ambiguous(record: Record, read_time: datetime) -> bool:
    """Taking this record over is ambiguous: its lease expired (its owner may have produced
    the effect), or it was given back `release_ambiguous`."""
    return lease_expired(record, read_time) or release_ambiguous(record)


@dataclass(frozen=True)
class AttemptLimit:
    """When an event that keeps failing is given up as poison (`dead`): after `max_attempts`
    attempts and `min_retry_seconds` after its first (database clock)."""

    max_attempts: int
    """Attempts before the record may become dead (DEDUP_MAX_ATTEMPTS)."""
    min_retry_seconds: float = 0.0
    """How long since the first attempt before it may (DEDUP_MIN_RETRY_SECONDS)."""

    def used_up(self, attempts: int, age_seconds: float) -> bool:
        """`attempts` attempts, the first `age_seconds` ago, leave no more."""
        return attempts >= self.max_attempts and age_seconds >= self.min_retry_seconds


def retry_age(record: Record | None, read_time: datetime) -> float:
    """Seconds from the record's first attempt to `read_time` (database clock); 0 without a
    record (this is the first attempt) or a first-attempt time."""
    if record is None or record.first_attempt_at is None:
        return 0.0
    return max(0.0, (read_time - record.first_attempt_at).total_seconds())


def attempts_exhausted(record: Record, read_time: datetime, limit: AttemptLimit) -> bool:
    """The record already used every allowed attempt, for long enough: the event is poison."""
    return limit.used_up(record.attempts, retry_age(record, read_time))


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
    MARK_DEAD = "mark_dead"
    """Mark the record dead: its last allowed attempt crashed."""


def decide(record: Record | None, read_time: datetime, limit: AttemptLimit) -> Claim:
    """The decision for a record read at `read_time` (database clock), in every mode."""
    if record is None or record_absent(record):
        return Claim.CREATE
    if record_sent(record) or record_finished(record):
        return Claim.SKIP
    if lease_live(record, read_time):
        return Claim.WAIT
    if lease_expired(record, read_time):
        return Claim.MARK_DEAD if attempts_exhausted(record, read_time, limit) else Claim.TAKE_OVER
    if lease_released(record):
        return Claim.TAKE_OVER
    raise AssertionError(f"unreachable claim state for {record!r}")  # pragma: no cover


class AfterAmbiguity(Enum):
    """What an ambiguous take-over does once `reconcile` answered (`after_ambiguity`)."""

    RECONCILED = "reconciled"
    """The effect happened: record "sent" with `reconciled: true`; the handler does not run."""
    RUN = "run"
    """Run the handler (it did not happen, or on_ambiguous="rerun" and nobody could tell)."""
    SKIP = "skip"
    """Nobody could tell and on_ambiguous="skip": record `unknown`, acknowledge."""


def after_ambiguity(verdict: bool | None, on_ambiguous: str) -> AfterAmbiguity:
    """The next step of an ambiguous take-over whose `reconcile` returned `verdict` (None when
    it could not tell, or there is no `reconcile`)."""
    if verdict is True:
        return AfterAmbiguity.RECONCILED
    if verdict is False or on_ambiguous == RERUN:
        return AfterAmbiguity.RUN
    return AfterAmbiguity.SKIP


def written_by(record: Record | None, owner: str) -> bool:
    """The record's last transition was written by the delivery holding `owner` (a fresh
    uuid4 per attempt)."""
    return record is not None and record.owner == owner


def belongs_to(record: Record, event_id: str, suffix: str) -> bool:
    """The record was written for this event id and suffix (fields missing: not judged)."""
    return (not record.event_id or record.event_id == event_id) and (
        not record.suffix or record.suffix == suffix
    )


def error_terminal(error: BaseException) -> bool:
    """A handler error that no retry can cure: `TerminalError`, or Firestore refusing the
    handler's data as invalid (`InvalidArgument`: a bad document id, a value too large), unless
    that InvalidArgument only stands for an earlier error it chains (`commit_failure`: a
    library transaction's refused rollback raised over its commit's DEADLINE_EXCEEDED)."""
    if isinstance(error, TerminalError):
        return True
    if not isinstance(error, api_exceptions.InvalidArgument):
        return False
    failure = commit_failure(error)
    return failure is None or failure[0] is CommitFailed.INVALID


def last_attempt(attempt: int, limit: AttemptLimit, age_seconds: float) -> bool:
    """The attempt that just failed was the last one allowed (attempts count from 1; the
    first of them `age_seconds` ago, `retry_age`)."""
    return limit.used_up(attempt, age_seconds)


class AfterFailure(Enum):
    """What a handler's exception leaves on the record (values: the `OutcomeKind` reported)."""

    FAILED = "failed"
    """Final: the error is terminal, no retry can cure it; the platform stops."""
    DEAD = "dead"
    """Final: it was the last allowed attempt (a poison event); the platform stops."""
    RELEASED = "released"
    """Handed back (in progress, no lease): the error is re-raised, the platform retries."""

    @property
    def state(self) -> State:
        """The record state this decision writes."""
        return _STATE_AFTER[self]


_STATE_AFTER = {
    AfterFailure.FAILED: State.FAILED,
    AfterFailure.DEAD: State.DEAD,
    AfterFailure.RELEASED: State.IN_PROGRESS,
}


def after_failure(
    error: BaseException, attempt: int, limit: AttemptLimit, age_seconds: float = 0.0
) -> AfterFailure:
    """What the `attempt`-th run's `error` leaves behind, in every mode; the event's first
    attempt was `age_seconds` ago (`retry_age` of the record as last read; 0 for a first)."""
    if error_terminal(error):
        return AfterFailure.FAILED
    if last_attempt(attempt, limit, age_seconds):
        return AfterFailure.DEAD
    return AfterFailure.RELEASED


def after_state(state: State) -> AfterFailure:
    """The decision a record in `state` shows was made (a write recognised as ours): failed,
    dead, else released."""
    if state is State.FAILED:
        return AfterFailure.FAILED
    if state is State.DEAD:
        return AfterFailure.DEAD
    return AfterFailure.RELEASED


class AfterCommit(Enum):
    """What an atomic attempt does after its commit raised, once it read the record."""

    LANDED = "landed"
    """The marker carries this attempt's owner: the commit landed unanswered."""
    GIVE_UP = "give_up"
    """Firestore refused for a reason no retry here cures: `StoreUnavailable`."""
    FRESH_TRY = "fresh_try"
    """Refused as invalid for the first time: maybe the transaction expired; once more."""
    REFUSED = "refused"
    """The handler's writes were refused: a failed attempt (see `after_failure`)."""
    AGAIN = "again"
    """Another delivery wrote the marker meanwhile: read and decide again, no pause."""
    BACK_OFF = "back_off"
    """Contention or an outage: pause, read and decide again."""


def after_commit_failure(
    failed: CommitFailed, *, ours: bool, marker_moved: bool, retried_invalid: bool
) -> AfterCommit:
    """The next step of an atomic attempt whose commit failed with `failed`: `ours` is the
    record carrying this attempt's owner, `marker_moved` it changed since the attempt read it,
    `retried_invalid` a fresh try after an invalid refusal was made already."""
    if ours:
        return AfterCommit.LANDED
    if failed is CommitFailed.OTHER:
        return AfterCommit.GIVE_UP
    if failed in (CommitFailed.REFUSED, CommitFailed.INVALID) and not marker_moved:
        if failed is CommitFailed.INVALID and not retried_invalid:
            return AfterCommit.FRESH_TRY
        return AfterCommit.REFUSED
    if failed in (CommitFailed.REFUSED, CommitFailed.INVALID):
        return AfterCommit.AGAIN
    return AfterCommit.BACK_OFF


class AfterConflict(Enum):
    """What an owner does when its fenced outcome write found the record changed."""

    LANDED = "landed"
    """Its own earlier try landed unanswered: done."""
    REFRESH = "refresh"
    """Still its record (an operator released the lease or edited it): write over it."""
    LOST = "lost"
    """Another delivery took the lease over: `LeaseLost`, nothing recorded."""


def after_fenced_conflict(record: Record | None, owner: str, state: State) -> AfterConflict:
    """The next step of `owner`'s write of `state` that found the record as read."""
    if record is None or not written_by(record, owner):
        return AfterConflict.LOST
    if record.state is state and not record.has_lease:
        return AfterConflict.LANDED
    if record.state is State.IN_PROGRESS:
        return AfterConflict.REFRESH
    return AfterConflict.LOST
