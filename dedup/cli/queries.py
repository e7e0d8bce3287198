"""Reading records: snapshots to records, the equality filters, server-side counts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.cloud import firestore

from dedup.record import Field, Record


def records_of(snapshots: Iterable[firestore.DocumentSnapshot[Any]]) -> list[Record]:
    """The records among `snapshots` (missing documents left out)."""
    return [r for r in map(Record.from_snapshot, snapshots) if r is not None]


def _eq(name: str, value: Any) -> firestore.FieldFilter:
    return firestore.FieldFilter(name, "==", value)


def filtered(query: Any, state: str | None, suffix: str | None, subject: str | None = None) -> Any:
    """`query` narrowed to a state, a suffix and a subject (equality filters)."""
    if state is not None:
        query = query.where(filter=_eq(Field.STATE, state))
    if suffix is not None:
        query = query.where(filter=_eq(Field.SUFFIX, suffix))
    if subject is not None:
        query = query.where(filter=_eq(Field.SUBJECT, subject.strip("/")))
    return query


def count(query: Any) -> int:
    """Documents matching `query`, counted by the server (an aggregation, no documents read)."""
    return int(query.count().get()[0][0].value)
