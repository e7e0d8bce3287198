"""Guarded writes: batched updates and deletes that apply only to documents unchanged since read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

BATCH_LIMIT = 500
"""Most writes Firestore accepts in one batch; purge, revive and release commit at most this."""


@dataclass(frozen=True)
class GuardedWrite:
    """An update (or, with `fields` None, a delete) of a document exactly as it was read."""

    snapshot: firestore.DocumentSnapshot[Any]
    fields: dict[str, Any] | None


@dataclass
class WriteTally:
    """What a series of guarded writes did."""

    done: int = 0
    """Writes applied."""
    changed: list[str] = field(default_factory=list)
    """Keys left alone: the record changed (or vanished) after it was read."""


def apply_guarded(
    client: firestore.Client,
    writes: Sequence[GuardedWrite],
    on_progress: Callable[[int], None] | None = None,
) -> WriteTally:
    """Apply `writes` in batches of <= 500, each only if its document is unchanged since read.

    A batch is atomic, so one stale document fails its whole batch: that batch is then
    retried one write at a time, and only the stale documents are skipped. `on_progress` is
    called with the number of writes settled after each batch.
    """
    tally = WriteTally()
    for start in range(0, len(writes), BATCH_LIMIT):
        chunk = writes[start : start + BATCH_LIMIT]
        if _commit(client, chunk):
            tally.done += len(chunk)
        else:
            for write in chunk:
                if _commit(client, [write]):
                    tally.done += 1
                else:
                    tally.changed.append(write.snapshot.id)
        if on_progress is not None:
            on_progress(len(chunk))
    return tally


def _commit(client: firestore.Client, writes: Sequence[GuardedWrite]) -> bool:
    """Commit `writes` as one batch; False if a document changed since it was read."""
    batch = client.batch()
    for write in writes:
        option = client.write_option(last_update_time=write.snapshot.update_time)
        if write.fields is None:
            batch.delete(write.snapshot.reference, option=option)
        else:
            batch.update(write.snapshot.reference, write.fields, option=option)
    try:
        batch.commit()
    except (api_exceptions.FailedPrecondition, api_exceptions.NotFound):
        return False
    return True
