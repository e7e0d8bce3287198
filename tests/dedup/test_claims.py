"""`decide()`, the one claim decision of every mode, as a table: no emulator needed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from google.api_core import exceptions as api_exceptions
from hypothesis import given
from hypothesis import strategies as st

from dedup.errors import TerminalError
from dedup.kernel.claims import (
    AfterCommit,
    AfterConflict,
    AfterFailure,
    AttemptLimit,
    Claim,
    after_commit_failure,
    after_failure,
    after_fenced_conflict,
    after_state,
    decide,
    error_terminal,
    retry_age,
)
from dedup.kernel.record import Mode, Record, State
from dedup.kernel.store_errors import CommitFailed, commit_failure, unanswered

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = 60
MAX_ATTEMPTS = 5
MIN_RETRY = LEASE
"""Seconds since the first attempt before an event may become dead: the expired-lease reads
below (at T0 + LEASE) are exactly that old."""
LIMIT = AttemptLimit(MAX_ATTEMPTS, MIN_RETRY)

IN_PROGRESS = Record(
    key="e-s",
    event_id="e",
    suffix="s",
    state=State.IN_PROGRESS,
    sent=False,
    owner="owner-1",
    lease_started_at=T0,
    lease_seconds=LEASE,
    attempts=1,
    first_attempt_at=T0,
    last_attempt_at=T0,
    sent_at=None,
    expire_at=None,
    last_error=None,
    payload_hash=None,
    mode=Mode.LEASE,
)
RELEASED = replace(IN_PROGRESS, owner=None, lease_started_at=None, last_error="boom")
LIVE = T0 + timedelta(seconds=LEASE - 1)
EXPIRED = T0 + timedelta(seconds=LEASE)  # the lease ends at leaseStartedAt + leaseSeconds

TABLE: dict[str, tuple[Record | None, datetime, Claim]] = {
    "absent": (None, T0, Claim.CREATE),
    "sent": (replace(IN_PROGRESS, state=State.SENT, sent=True, owner=None), LIVE, Claim.SKIP),
    "failed": (replace(RELEASED, state=State.FAILED), EXPIRED, Claim.SKIP),
    "dead": (replace(RELEASED, state=State.DEAD, attempts=MAX_ATTEMPTS), EXPIRED, Claim.SKIP),
    "sent with a stale lease still set": (replace(IN_PROGRESS, state=State.SENT), LIVE, Claim.SKIP),
    "lease live": (IN_PROGRESS, LIVE, Claim.WAIT),
    "lease live, attempts used up": (replace(IN_PROGRESS, attempts=MAX_ATTEMPTS), LIVE, Claim.WAIT),
    "lease expired at its last instant": (IN_PROGRESS, EXPIRED, Claim.TAKE_OVER),
    "lease expired, attempts left": (
        replace(IN_PROGRESS, attempts=MAX_ATTEMPTS - 1),
        EXPIRED,
        Claim.TAKE_OVER,
    ),
    "lease expired, attempts used up": (
        replace(IN_PROGRESS, attempts=MAX_ATTEMPTS),
        EXPIRED,
        Claim.MARK_DEAD,
    ),
    "lease expired, attempts above the bound": (
        replace(IN_PROGRESS, attempts=MAX_ATTEMPTS + 3),
        EXPIRED,
        Claim.MARK_DEAD,
    ),
    "lease expired, attempts used up within min_retry_seconds of the first": (
        replace(IN_PROGRESS, attempts=MAX_ATTEMPTS + 3, first_attempt_at=T0 + timedelta(seconds=1)),
        EXPIRED,
        Claim.TAKE_OVER,
    ),
    "released": (RELEASED, T0, Claim.TAKE_OVER),
    "released with attempts used up (an operator's release)": (
        replace(RELEASED, attempts=MAX_ATTEMPTS),
        T0,
        Claim.TAKE_OVER,
    ),
    "owner without a lease start (released by hand)": (
        replace(IN_PROGRESS, lease_started_at=None),
        LIVE,
        Claim.TAKE_OVER,
    ),
    "lease started in the future (read on a lagging replica)": (
        replace(IN_PROGRESS, lease_started_at=T0 + timedelta(seconds=5)),
        T0,
        Claim.WAIT,
    ),
}


@pytest.mark.parametrize("case", list(TABLE))
@pytest.mark.parametrize("mode", list(Mode))
def test_decide(case: str, mode: Mode) -> None:
    """Each record state maps to one claim, the same in every mode, judged on the read time."""
    record, read_time, expected = TABLE[case]
    if record is not None:
        record = replace(record, mode=mode)
    assert decide(record, read_time, LIMIT) is expected


OLD = float(MIN_RETRY)
SOON = MIN_RETRY - 0.5
FAILURES: dict[str, tuple[Exception, int, float, AfterFailure]] = {
    "terminal on the first attempt": (TerminalError("no"), 1, 0.0, AfterFailure.FAILED),
    "terminal on the last attempt": (TerminalError("no"), MAX_ATTEMPTS, OLD, AfterFailure.FAILED),
    "invalid data": (api_exceptions.InvalidArgument("too big"), 1, 0.0, AfterFailure.FAILED),
    "retryable, attempts left": (RuntimeError("x"), MAX_ATTEMPTS - 1, OLD, AfterFailure.RELEASED),
    "retryable, last attempt": (RuntimeError("x"), MAX_ATTEMPTS, OLD, AfterFailure.DEAD),
    "retryable, above the bound": (RuntimeError("x"), MAX_ATTEMPTS + 2, OLD, AfterFailure.DEAD),
    "retryable, attempts used up too soon": (
        RuntimeError("x"),
        MAX_ATTEMPTS + 20,
        SOON,
        AfterFailure.RELEASED,
    ),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_after_failure(case: str) -> None:
    """What a failed handler leaves behind is one decision for every mode: failed, dead or
    released; and a record in that state is recognised as that decision. Attempts spent
    within `min_retry_seconds` of the first never make an event dead."""
    error, attempt, age, expected = FAILURES[case]
    assert after_failure(error, attempt, LIMIT, age) is expected
    assert after_state(expected.state) is expected


def test_retry_age_is_judged_on_the_database_clock() -> None:
    """The age of an event's attempts runs from the record's firstAttemptAt to a read time of
    the database; no record (a first attempt) is age 0."""
    assert retry_age(IN_PROGRESS, EXPIRED) == LEASE
    assert retry_age(None, EXPIRED) == 0.0
    assert retry_age(replace(IN_PROGRESS, first_attempt_at=None), EXPIRED) == 0.0
    assert retry_age(replace(IN_PROGRESS, first_attempt_at=EXPIRED), T0) == 0.0


F = CommitFailed
COMMITS: dict[str, tuple[CommitFailed, bool, bool, bool, AfterCommit]] = {
    # failed, ours, marker moved, retried invalid -> next
    "our marker is there (lost response)": (F.AMBIGUOUS, True, False, False, AfterCommit.LANDED),
    "ours after a refusal": (F.REFUSED, True, True, False, AfterCommit.LANDED),
    "permission denied": (F.OTHER, False, False, False, AfterCommit.GIVE_UP),
    "first invalid, unchanged": (F.INVALID, False, False, False, AfterCommit.FRESH_TRY),
    "second invalid, unchanged": (F.INVALID, False, False, True, AfterCommit.REFUSED),
    "refused, unchanged": (F.REFUSED, False, False, False, AfterCommit.REFUSED),
    "refused, marker moved": (F.REFUSED, False, True, False, AfterCommit.AGAIN),
    "invalid, marker moved": (F.INVALID, False, True, False, AfterCommit.AGAIN),
    "contention": (F.CONTENTION, False, False, False, AfterCommit.BACK_OFF),
    "outage, not ours": (F.AMBIGUOUS, False, True, False, AfterCommit.BACK_OFF),
}


@pytest.mark.parametrize("case", list(COMMITS))
def test_after_commit_failure(case: str) -> None:
    """An atomic commit that raised is judged by one table: landed, give up, try fresh,
    refused (a failed attempt), again, or back off."""
    failed, ours, moved, retried, expected = COMMITS[case]
    got = after_commit_failure(failed, ours=ours, marker_moved=moved, retried_invalid=retried)
    assert got is expected


SENT_BY_US = replace(IN_PROGRESS, state=State.SENT, sent=True, lease_started_at=None)
CONFLICTS: dict[str, tuple[Record | None, State, AfterConflict]] = {
    "vanished": (None, State.SENT, AfterConflict.LOST),
    "our sent write landed": (SENT_BY_US, State.SENT, AfterConflict.LANDED),
    "our release landed": (
        RELEASED_BY_US := replace(RELEASED, owner="owner-1"),
        State.IN_PROGRESS,
        AfterConflict.LANDED,
    ),
    "ours, lease released by an operator": (RELEASED_BY_US, State.SENT, AfterConflict.REFRESH),
    "ours, still leased (edited by hand)": (IN_PROGRESS, State.SENT, AfterConflict.REFRESH),
    "taken over by another owner": (
        replace(IN_PROGRESS, owner="owner-2"),
        State.SENT,
        AfterConflict.LOST,
    ),
    "ours but final in another state": (
        replace(SENT_BY_US, state=State.DEAD),
        State.SENT,
        AfterConflict.LOST,
    ),
}


@pytest.mark.parametrize("case", list(CONFLICTS))
def test_after_fenced_conflict(case: str) -> None:
    """An owner whose fenced write found the record changed: recorded (its own write landed),
    refresh (still its record) or lost (another delivery took it over)."""
    record, state, expected = CONFLICTS[case]
    assert after_fenced_conflict(record, "owner-1", state) is expected


def test_a_commit_whose_retries_gave_up_may_have_landed() -> None:
    """A `RetryError` (the client's retry wrapper gave up on transient errors, as a rollback's
    may after a lost commit) is read as a commit that may have landed, as `unanswered` reads
    it: the delivery reads the record, where it used to give up as if nothing had applied."""
    gave_up = api_exceptions.RetryError(
        "Timeout of 2.0s exceeded", api_exceptions.ServiceUnavailable("x")
    )
    assert commit_failure(gave_up) == (CommitFailed.AMBIGUOUS, gave_up)
    wrapped = ValueError("store unavailable")
    wrapped.__cause__ = gave_up
    assert unanswered(wrapped)
    denied = api_exceptions.PermissionDenied("no")
    assert commit_failure(denied) == (CommitFailed.OTHER, denied)


def test_a_commits_own_error_is_read_over_its_rollbacks() -> None:
    """A rollback that fails after a commit raises its own error, the commit's chained as
    `__context__`: the commit's error is the one read (here: it may have landed, so the
    delivery reads the record), not the rollback's (denied: nothing would be read)."""
    lost = api_exceptions.DeadlineExceeded("the commit's answer was lost")
    denied = api_exceptions.PermissionDenied("the rollback was denied")
    denied.__context__ = lost
    assert commit_failure(denied) == (CommitFailed.AMBIGUOUS, lost)
    assert commit_failure(ValueError("not Firestore's")) is None


_UNDER = st.sampled_from(
    [
        api_exceptions.DeadlineExceeded,
        api_exceptions.ServiceUnavailable,
        api_exceptions.Aborted,
        api_exceptions.InternalServerError,
        api_exceptions.PermissionDenied,
        api_exceptions.FailedPrecondition,
        api_exceptions.InvalidArgument,
        KeyError,
        ValueError,
    ]
)


@given(chain=st.lists(_UNDER, max_size=4))
def test_an_invalid_argument_is_terminal_only_as_the_first_error_its_failure_chains(
    chain: list[type[Exception]],
) -> None:
    """A handler's InvalidArgument raised over any chain of earlier errors (a library
    transaction's refused rollback over its commit's error, the handler's own handling): it
    is terminal exactly when no earlier Google API error is chained, or the first raised is an
    InvalidArgument too; a `TerminalError` always is."""
    raised = api_exceptions.InvalidArgument("Transaction is invalid or expired.")
    current: BaseException = raised
    for kind in chain:  # each one raised before the last
        earlier = kind("earlier")
        current.__context__ = earlier
        current = earlier
    api_chain = [k for k in chain if issubclass(k, api_exceptions.GoogleAPICallError)]
    first = api_chain[-1] if api_chain else api_exceptions.InvalidArgument
    assert error_terminal(raised) is issubclass(first, api_exceptions.InvalidArgument)
    terminal = TerminalError("the handler's own verdict")
    terminal.__context__ = raised
    assert error_terminal(terminal)
