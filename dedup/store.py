"""Firestore operations on dedup records; no decisions (those live in `dedup.core`).

Every operation costs one round trip and either succeeds, reports the one expected conflict as
a return value (`None`), or raises `StoreUnavailable` chaining the Google API error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry, if_transient_error
from google.cloud import firestore

from dedup.errors import StoreUnavailable
from dedup.record import Field, Mode, Record, State

SERVER_TIMESTAMP = firestore.SERVER_TIMESTAMP
"""Sentinel: the database's commit time, written by the server."""

Fields = dict[str, Any]


@dataclass(frozen=True)
class Snapshot:
    """A record as read, with the database times that make decisions clock-safe."""

    record: Record | None
    """The record, or None if absent."""
    read_time: datetime
    """When the database served the read (database clock): leases are judged against it."""
    update_time: datetime | None
    """The document's last update time: the precondition for changing what was read."""


class RecordStore:
    """The dedup collection of one Firestore client; safe to use from many threads."""

    def __init__(
        self, client: firestore.Client, collection: str, *, rpc_timeout_seconds: float = 10
    ) -> None:
        """Operate on `collection` (a collection path) through `client`; each call gives up
        after `rpc_timeout_seconds`, its retries of transient errors included."""
        self.client = client
        self.collection = collection
        self.deadline: dict[str, Any] = {
            "retry": Retry(
                predicate=if_transient_error,
                initial=0.1,
                maximum=2.0,
                multiplier=2.0,
                timeout=rpc_timeout_seconds,
            ),
            "timeout": rpc_timeout_seconds,
        }
        """`retry` and `timeout` keyword arguments bounding one call."""

    def path(self, key: str) -> str:
        """The record's document path, `<collection>/<key>`, as used in logs and errors."""
        return f"{self.collection}/{key}"

    def ref(self, key: str) -> firestore.DocumentReference:
        """Reference to the record's document."""
        return self.client.collection(self.collection).document(key)

    def create(self, key: str, fields: Fields, *, action: str = "claim") -> datetime | None:
        """Create the record if absent (exists=false precondition); 1 RPC.

        Returns the write's update time (the new owner's fencing token), or None if the
        record already exists.
        """
        with self._wrapped(action, key):
            try:
                result = self.ref(key).create(fields, **self.deadline)
            except api_exceptions.AlreadyExists:
                return None
        return _required_time(result.update_time)

    def read(
        self, key: str, *, transaction: firestore.Transaction | None = None, action: str = "claim"
    ) -> Snapshot:
        """Read the record (in `transaction` if given); 1 RPC."""
        with self._wrapped(action, key):
            snapshot = self.ref(key).get(transaction=transaction, **self.deadline)
        return Snapshot(
            record=Record.from_snapshot(snapshot),
            read_time=_required_time(snapshot.read_time),
            update_time=snapshot.update_time,
        )

    def update_if_unchanged(
        self, key: str, fields: Fields, update_time: datetime, *, action: str
    ) -> datetime | None:
        """Update the record only if it was last written at `update_time`; 1 RPC.

        Returns the new update time, or None if the record changed (or vanished) since: the
        caller's view, or its lease, is stale.
        """
        option = self.client.write_option(last_update_time=update_time)
        with self._wrapped(action, key):
            try:
                result = self.ref(key).update(fields, option=option, **self.deadline)
            except (api_exceptions.FailedPrecondition, api_exceptions.NotFound):
                return None
        return _required_time(result.update_time)

    def commit_batch(self, batch: firestore.WriteBatch, key: str) -> bool:
        """Commit a batch holding the marker's write; False if its precondition failed.

        A failed precondition is AlreadyExists (marker created) or FailedPrecondition (marker
        changed since read): either way nothing in the batch was applied.
        """
        with self._wrapped("commit batch for", key):
            try:
                batch.commit(**self.deadline)
            except (
                api_exceptions.AlreadyExists,
                api_exceptions.FailedPrecondition,
                api_exceptions.NotFound,
            ):
                return False
        return True

    @contextmanager
    def _wrapped(self, action: str, key: str) -> Iterator[None]:
        try:
            yield
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            raise StoreUnavailable(
                f"could not {action} {self.path(key)}: {exc}; the event will be retried "
                "(check that Firestore is reachable and the service account may write it)"
            ) from exc


def _required_time(value: datetime | None) -> datetime:
    if value is None:  # pragma: no cover - Firestore always returns it for a write or read
        raise StoreUnavailable("Firestore returned no timestamp for a dedup write")
    return value


# --- Field sets written by each transition (the record schema is in dedup.record) ---------


def new_record(
    *,
    event_id: str,
    suffix: str,
    mode: Mode,
    state: State,
    owner: str | None,
    lease_seconds: int,
    payload_hash: str | None,
    expire_at: datetime,
    attempts: int = 1,
    last_error: str | None = None,
) -> Fields:
    """Every field of a record written for the first time (an attempt starting now)."""
    sent = state is State.SENT
    leased = owner is not None
    return {
        Field.EVENT_ID: event_id,
        Field.SUFFIX: suffix,
        Field.STATE: state.value,
        Field.SENT: sent,
        Field.OWNER: owner,
        Field.LEASE_STARTED_AT: SERVER_TIMESTAMP if leased else None,
        Field.LEASE_SECONDS: lease_seconds,
        Field.ATTEMPTS: attempts,
        Field.FIRST_ATTEMPT_AT: SERVER_TIMESTAMP,
        Field.LAST_ATTEMPT_AT: SERVER_TIMESTAMP,
        Field.SENT_AT: SERVER_TIMESTAMP if sent else None,
        Field.EXPIRE_AT: expire_at,
        Field.LAST_ERROR: last_error,
        Field.PAYLOAD_HASH: payload_hash,
        Field.MODE: mode.value,
    }


def lease_taken(*, owner: str, lease_seconds: int, attempts: int, expire_at: datetime) -> Fields:
    """Fields that hand an existing record's lease to `owner` for a new attempt."""
    return {
        Field.STATE: State.IN_PROGRESS.value,
        Field.OWNER: owner,
        Field.LEASE_STARTED_AT: SERVER_TIMESTAMP,
        Field.LEASE_SECONDS: lease_seconds,
        Field.ATTEMPTS: attempts,
        Field.LAST_ATTEMPT_AT: SERVER_TIMESTAMP,
        Field.EXPIRE_AT: expire_at,
    }


def finished(state: State, *, expire_at: datetime, error: str | None = None) -> Fields:
    """Fields that end a record in a final state (sent, failed or dead) and drop the lease."""
    sent = state is State.SENT
    fields: Fields = {
        Field.STATE: state.value,
        Field.SENT: sent,
        Field.OWNER: None,
        Field.LEASE_STARTED_AT: None,
        Field.EXPIRE_AT: expire_at,
        Field.LAST_ERROR: error,
    }
    if sent:
        fields[Field.SENT_AT] = SERVER_TIMESTAMP
    return fields


def released(*, error: str, expire_at: datetime) -> Fields:
    """Fields that release the lease after a failed attempt (state stays in_progress)."""
    return {
        Field.STATE: State.IN_PROGRESS.value,
        Field.OWNER: None,
        Field.LEASE_STARTED_AT: None,
        Field.LAST_ERROR: error,
        Field.EXPIRE_AT: expire_at,
    }


def failed_attempt(*, attempts: int, state: State, error: str, expire_at: datetime) -> Fields:
    """Fields that record an attempt that ran outside any lease (transaction/write-only)."""
    return {
        Field.STATE: state.value,
        Field.SENT: False,
        Field.OWNER: None,
        Field.LEASE_STARTED_AT: None,
        Field.ATTEMPTS: attempts,
        Field.LAST_ATTEMPT_AT: SERVER_TIMESTAMP,
        Field.LAST_ERROR: error,
        Field.EXPIRE_AT: expire_at,
    }
