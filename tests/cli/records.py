"""Writing and reading dedup records in the shapes the command line meets in production."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from dedup.config import DEFAULT_COLLECTION
from dedup.kernel.record import Field, Mode, Record, State
from dedup.kernel.transitions import SERVER_TIMESTAMP, dedup_key, new_record

BATCH = 500


def now() -> datetime:
    """The test's clock; the emulator runs on the same machine, so it agrees with the database."""
    return datetime.now(UTC)


def record_fields(
    event_id: str,
    suffix: str = "sendEmail",
    *,
    state: State = State.SENT,
    age: timedelta = timedelta(0),
    lease: str | None = None,
    attempts: int = 1,
    last_error: str | None = None,
    subject: str | None = None,
) -> dict[str, Any]:
    """A record built by `dedup.kernel.transitions.new_record`, first attempted `age` ago.

    `lease`: None for no lease, "live" (an owner holds it for an hour from now), or
    "expired" (taken `age` ago for 60 s, long over).
    """
    fields = new_record(
        event_id=event_id,
        suffix=suffix,
        mode=Mode.LEASE,
        state=state,
        owner=None if lease is None else f"owner-{event_id}",
        leased=lease is not None,
        lease_seconds=3600 if lease == "live" else 60,
        payload_hash=None,
        expire_at=now() + timedelta(days=7),
        attempts=attempts,
        last_error=last_error,
        subject=subject,
    )
    started = now() - age
    fields[Field.FIRST_ATTEMPT_AT] = started
    fields[Field.LAST_ATTEMPT_AT] = started
    if state is State.SENT:
        fields[Field.SENT_AT] = started
    if lease == "live":
        fields[Field.LEASE_STARTED_AT] = SERVER_TIMESTAMP
    elif lease == "expired":
        fields[Field.LEASE_STARTED_AT] = started
    return fields


def write(
    client: firestore.Client,
    records: Iterable[dict[str, Any]],
    collection: str = DEFAULT_COLLECTION,
) -> list[str]:
    """Write records (batches of 500) under their `dedup_key`; returns the keys."""
    keys: list[str] = []
    batch = client.batch()
    for fields in records:
        key = dedup_key(fields[Field.EVENT_ID], fields[Field.SUFFIX])
        batch.set(client.collection(collection).document(key), fields)
        keys.append(key)
        if len(keys) % BATCH == 0:
            batch.commit()
            batch = client.batch()
    batch.commit()
    return keys


def read(client: firestore.Client, key: str, collection: str = DEFAULT_COLLECTION) -> Record | None:
    """The record at `key`, or None."""
    return Record.from_snapshot(client.collection(collection).document(key).get())


def count(client: firestore.Client, collection: str = DEFAULT_COLLECTION) -> int:
    """How many documents the collection holds (a server-side count)."""
    return int(client.collection(collection).count().get()[0][0].value)


def raw(client: firestore.Client, keys: Iterable[str]) -> dict[str, Any]:
    """Every field and update time of the given records: to prove that nothing changed."""
    snapshots = (client.collection(DEFAULT_COLLECTION).document(k).get() for k in keys)
    return {s.id: (s.to_dict(), s.update_time) for s in snapshots}
