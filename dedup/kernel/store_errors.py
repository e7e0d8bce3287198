"""Firestore's errors, read: which a retry may cure (`TRANSIENT_ERRORS`), which a failed
precondition raises (`PRECONDITION_ERRORS`), whether a failed write may have landed
(`unanswered`), how a failed commit failed (`commit_failure`). No decisions, no I/O."""

from __future__ import annotations

from enum import Enum

from google.api_core import exceptions as api_exceptions

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    api_exceptions.Aborted,  # contention: the emulator's "Transaction lock timeout" (409)
    api_exceptions.DeadlineExceeded,
    api_exceptions.ServiceUnavailable,
    api_exceptions.InternalServerError,
    api_exceptions.TooManyRequests,
    api_exceptions.ResourceExhausted,
    api_exceptions.Unknown,
    api_exceptions.Cancelled,
)
"""Errors after which the same call may succeed; for a write, it may also have been applied."""

PRECONDITION_ERRORS: tuple[type[Exception], ...] = (
    api_exceptions.AlreadyExists,
    api_exceptions.FailedPrecondition,
    api_exceptions.NotFound,
)
"""What a write raises when its precondition (exists=false, or an update time) fails."""


def unanswered(error: BaseException) -> bool:
    """`error` (a `StoreUnavailable`) chains a transient error: the failed write may have
    landed."""
    return isinstance(error.__cause__, (*TRANSIENT_ERRORS, api_exceptions.RetryError))


class CommitFailed(Enum):
    """How a commit that raised failed, as far as its error tells (`commit_failure`)."""

    REFUSED = "refused"
    """A precondition or a value was refused: nothing applied."""
    INVALID = "invalid"
    """Refused as InvalidArgument: bad data, or a transaction that expired."""
    CONTENTION = "contention"
    """Aborted: another transaction held a lock; nothing applied."""
    AMBIGUOUS = "ambiguous"
    """Deadline, unavailable...: it may have been applied."""
    OTHER = "other"
    """Anything else from Firestore (permission denied...): nothing applied."""


def commit_failure(exc: BaseException) -> tuple[CommitFailed, Exception] | None:
    """The commit's own error in `exc`'s chain (the first raised, as under the library's
    ValueError after its last Aborted try), classified, with that error; None if the chain
    holds no Google API error."""
    found: tuple[CommitFailed, Exception] | None = None
    for error in chained(exc):
        kind = _commit_error(error)
        if kind is not None and isinstance(error, Exception):
            found = (kind, error)  # the last found is the first raised
    return found


def chained(exc: BaseException) -> list[BaseException]:
    """`exc` and the errors it chains (`__cause__`, else `__context__`), the last raised first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _commit_error(exc: BaseException) -> CommitFailed | None:
    if isinstance(exc, api_exceptions.InvalidArgument):
        return CommitFailed.INVALID
    if isinstance(exc, PRECONDITION_ERRORS):
        return CommitFailed.REFUSED
    if isinstance(exc, api_exceptions.Aborted):
        return CommitFailed.CONTENTION
    if isinstance(exc, (*TRANSIENT_ERRORS, api_exceptions.RetryError)):
        return CommitFailed.AMBIGUOUS  # a retry wrapper gives up on transient errors (`unanswered`)
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        return CommitFailed.OTHER
    return None
