"""The marker write of the atomic modes, and the one-database rule it enforces.

The transaction and batch modes commit the handler's writes and the record's marker together:
`add_marker` adds the marker to the handler's transaction or batch, of either client, once the
handler has filled it (`dedup.kernel.store.RecordStore.commit_batch` and `run_transaction`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.cloud import firestore

from dedup.errors import DatabaseMismatch
from dedup.kernel.record import Fields
from dedup.platform.firestore_internals import buffered_write_names, document_name


def add_marker(writer: Any, ref: Any, fields: Fields, guard: datetime | None, mode: str) -> None:
    """Add the marker write to a transaction or batch of either client (their create and
    update only buffer): a create if `guard` is None, else an update guarded by that update
    time. Refuses (`DatabaseMismatch`) a writer holding writes outside the records' database."""
    require_one_database(writer, ref, mode)  # the handler's writes, same database
    if guard is None:
        writer.create(ref, fields)
        return
    writer.update(ref, fields, option=firestore.Client.write_option(last_update_time=guard))


# The one-database rule of the atomic modes: a Firestore transaction (or batch) commits in a
# single database, so the handler's writes and the sent marker must share the records'
# database. A write to another database is refused before anything is committed, instead of a
# commit the server rejects or a partial effect. Lease mode has no such rule: its handler
# writes where it likes, and the record lives in the records' database.


def database_of_name(name: str) -> str:
    """The database id in a document resource name `projects/p/databases/d/documents/...`."""
    return name.split("/databases/", 1)[1].split("/", 1)[0] if "/databases/" in name else ""


def require_one_database(writer: Any, marker: Any, mode: str) -> None:
    """Raise `DatabaseMismatch` if `writer` (a transaction or batch of either client) holds a
    write outside the database of `marker` (the record's document reference)."""
    records = database_of_name(document_name(marker))
    for name in buffered_write_names(writer):
        database = database_of_name(name)
        if database != records:
            document = name.split("/documents/", 1)[-1]
            raise DatabaseMismatch(
                f"{mode} mode: the handler wrote {document} in Firestore database {database!r}, "
                f"but the dedup records (and the marker that must commit with its writes) live "
                f"in database {records!r}: one transaction cannot write to two databases. Keep "
                f"the records in the handler's database (unset DEDUP_DATABASE so they follow the "
                f"triggering event's database, or set DEDUP_DATABASE={database}), or use lease "
                "mode; nothing was committed"
            )
