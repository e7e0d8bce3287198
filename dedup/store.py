"""Firestore operations on dedup records; no decisions (those live in `dedup.claims` and the
flows).

Every operation is bounded in time and either succeeds, reports the one expected conflict as a
value (`Conflict`), or raises `StoreUnavailable` chaining the Google API error. Conditional
writes retry transient errors themselves, so they can tell the caller when an earlier try may
have been applied although its response was lost (`Conflict.maybe_applied`): the caller then
reads the record and recognises its own write by its owner token.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry, if_exception_type
from google.cloud import firestore
from google.cloud.firestore_v1.transaction import Transaction

from dedup.errors import StoreUnavailable
from dedup.record import Record
from dedup.transitions import Fields

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

BACKOFF_BASE_SECONDS = 0.02
BACKOFF_CAP_SECONDS = 1.0


def backoff(round_: int) -> float:
    """Full-jitter exponential backoff for retry `round_` (0-based), in seconds."""
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**round_))


@dataclass(frozen=True)
class Snapshot:
    """A record as read, with the database times that make decisions clock-safe."""

    record: Record | None
    """The record, or None if absent."""
    read_time: datetime
    """When the database served the read (database clock): leases are judged against it."""
    update_time: datetime | None
    """The document's last update time: the precondition for changing what was read."""


@dataclass(frozen=True)
class Conflict:
    """A conditional write found the record not as expected; this try wrote nothing."""

    maybe_applied: bool
    """An earlier try of the same call failed in a way that may have applied it (its response
    was lost): read the record and look for your own owner token before concluding."""


class CommitFailure(Enum):
    """Why a commit of a transaction or batch failed (see `commit_failure`)."""

    REJECTED = "rejected"
    """A precondition or a value was refused (AlreadyExists, NotFound, FailedPrecondition,
    InvalidArgument): nothing was applied. The marker's own precondition, or the handler's
    writes: read the record to tell which."""
    CONTENTION = "contention"
    """Aborted: another transaction held a lock; nothing was applied, try again."""
    AMBIGUOUS = "ambiguous"
    """Deadline, unavailable...: the commit may or may not have been applied."""
    OTHER = "other"
    """Anything else from Firestore (permission denied...): nothing applied, retryable later."""


def commit_failure(exc: BaseException) -> CommitFailure | None:
    """Classify a Google API error raised by a commit; None if `exc` is not one."""
    if isinstance(exc, (*PRECONDITION_ERRORS, api_exceptions.InvalidArgument)):
        return CommitFailure.REJECTED
    if isinstance(exc, api_exceptions.Aborted):
        return CommitFailure.CONTENTION
    if isinstance(exc, TRANSIENT_ERRORS):
        return CommitFailure.AMBIGUOUS
    if isinstance(exc, api_exceptions.GoogleAPICallError | api_exceptions.RetryError):
        return CommitFailure.OTHER
    return None


class BoundedTransaction(Transaction):
    """A `firestore.Transaction` whose begin, commit and rollback are bounded in time.

    google-cloud-firestore passes no timeout to these calls (the library's default is 60 s), so
    a Firestore outage would hold a transaction-mode delivery far past `rpc_timeout_seconds`.
    The overrides are the library's own methods (2.34, pinned in requirements.txt) with a
    timeout added; commit is not retried here (a lost response is resolved by reading).
    """

    def __init__(self, client: firestore.Client, *, max_attempts: int, timeout: float) -> None:
        """A transaction of `client` retried `max_attempts` times on Aborted; each RPC is
        bounded by `timeout` seconds."""
        super().__init__(client, max_attempts=max_attempts)
        self._rpc_timeout = timeout

    def _begin(self, retry_id: bytes | None = None) -> None:
        if self.in_progress:
            raise ValueError(f"transaction {self._id!r} has already begun")
        response = self._client._firestore_api.begin_transaction(
            request={
                "database": self._client._database_string,
                "options": self._options_protobuf(retry_id),
            },
            metadata=self._client._rpc_metadata,
            retry=_transient_retry(self._rpc_timeout),
            timeout=self._rpc_timeout,
        )
        self._id = response.transaction

    def _rollback(self) -> None:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        try:
            self._client._firestore_api.rollback(
                request={"database": self._client._database_string, "transaction": self._id},
                metadata=self._client._rpc_metadata,
                timeout=self._rpc_timeout,
            )
        finally:
            self._clean_up()

    def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        response = self._client._firestore_api.commit(
            request={
                "database": self._client._database_string,
                "writes": self._write_pbs,
                "transaction": self._id,
            },
            metadata=self._client._rpc_metadata,
            retry=None,
            timeout=self._rpc_timeout,
        )
        self._clean_up()
        self.write_results = list(response.write_results)
        self.commit_time = response.commit_time
        return self.write_results


def _transient_retry(timeout: float) -> Retry:
    return Retry(
        predicate=if_exception_type(*TRANSIENT_ERRORS),
        initial=0.05,
        maximum=1.0,
        multiplier=2.0,
        timeout=timeout,
    )


class RecordStore:
    """The dedup collection of one Firestore client; safe to use from many threads."""

    def __init__(
        self, client: firestore.Client, collection: str, *, rpc_timeout_seconds: float = 10
    ) -> None:
        """Operate on `collection` (a collection path) through `client`; each call gives up
        after `rpc_timeout_seconds`, its retries of transient errors included."""
        self.client = client
        self.collection = collection
        self.rpc_timeout_seconds = rpc_timeout_seconds

    def path(self, key: str) -> str:
        """The record's document path, `<collection>/<key>`, as used in logs and errors."""
        return f"{self.collection}/{key}"

    def ref(self, key: str) -> firestore.DocumentReference:
        """Reference to the record's document."""
        return self.client.collection(self.collection).document(key)

    def transaction(self, *, max_attempts: int) -> BoundedTransaction:
        """A new transaction whose RPCs are bounded like every other call of this store."""
        return BoundedTransaction(
            self.client, max_attempts=max_attempts, timeout=self.rpc_timeout_seconds
        )

    def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: float | None = None
    ) -> datetime | Conflict:
        """Create the record if absent (exists=false precondition).

        Returns the write's update time (the new owner's fencing token), or a `Conflict` if
        the record exists. Transient errors are retried for `budget` seconds (default: the
        RPC timeout), then `StoreUnavailable`.
        """
        ref = self.ref(key)
        return self._conditional(
            action, key, lambda timeout: ref.create(fields, retry=None, timeout=timeout), budget
        )

    def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        update_time: datetime,
        *,
        action: str,
        budget: float | None = None,
    ) -> datetime | Conflict:
        """Update the record only if it was last written at `update_time`.

        Returns the new update time, or a `Conflict` if the record changed (or vanished) since.
        Transient errors are retried for `budget` seconds (default: the RPC timeout).
        """
        ref = self.ref(key)
        option = self.client.write_option(last_update_time=update_time)
        return self._conditional(
            action,
            key,
            lambda timeout: ref.update(fields, option=option, retry=None, timeout=timeout),
            budget,
        )

    def read(self, key: str, *, action: str = "claim") -> Snapshot:
        """Read the record, retrying transient errors within the RPC timeout."""
        timeout = self.rpc_timeout_seconds
        with self._wrapped(action, key):
            snapshot = self.ref(key).get(retry=_transient_retry(timeout), timeout=timeout)
        return Snapshot(
            record=Record.from_snapshot(snapshot),
            read_time=_required_time(snapshot.read_time),
            update_time=snapshot.update_time,
        )

    def unavailable(self, action: str, key: str, exc: BaseException | None) -> StoreUnavailable:
        """The error for a failed `action` on the record (chain `exc` with `from`)."""
        return StoreUnavailable(
            f"could not {action} {self.path(key)}: {exc}; the event will be retried "
            "(check that Firestore is reachable and the service account may write it)"
        )

    def _conditional(
        self,
        action: str,
        key: str,
        write: Callable[[float], Any],
        budget: float | None,
    ) -> datetime | Conflict:
        deadline = time.monotonic() + (self.rpc_timeout_seconds if budget is None else budget)
        maybe_applied = False
        round_ = 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                result = write(max(0.1, min(self.rpc_timeout_seconds, remaining)))
            except PRECONDITION_ERRORS:
                return Conflict(maybe_applied=maybe_applied)
            except TRANSIENT_ERRORS as exc:
                maybe_applied = True
                pause = backoff(round_)
                round_ += 1
                if time.monotonic() + pause >= deadline:
                    raise self.unavailable(action, key, exc) from exc
                time.sleep(pause)
                continue
            except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
                raise self.unavailable(action, key, exc) from exc
            return _required_time(result.update_time)

    @contextmanager
    def _wrapped(self, action: str, key: str) -> Iterator[None]:
        try:
            yield
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            raise self.unavailable(action, key, exc) from exc


def is_written(result: datetime | Conflict) -> bool:
    """True when a conditional write succeeded (returned its update time)."""
    return isinstance(result, datetime)


def _required_time(value: datetime | None) -> datetime:
    if value is None:  # pragma: no cover - Firestore always returns it for a write or read
        raise StoreUnavailable("Firestore returned no timestamp for a dedup write")
    return value
