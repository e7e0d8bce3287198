"""The one-database rule of the atomic modes: a Firestore transaction (or batch) commits in a
single database, so the handler's writes and the sent marker must share the records' database.

`require_one_database` is called by the transaction and write-only flows (`dedup.atomic`)
after the handler has added its writes and before the marker is added: a write to another
database is refused with `DatabaseMismatch` before anything is committed, instead of a commit
the server rejects or a partial effect. Lease mode has no such rule: its handler writes where
it likes, and the record lives in the records' database.
"""

from __future__ import annotations

from typing import Any

from google.cloud import firestore

from dedup.errors import DatabaseMismatch

_DOCUMENTS = "/documents/"


def database_of_name(name: str) -> str:
    """The database id in a document resource name `projects/p/databases/d/documents/...`."""
    return name.split("/databases/", 1)[1].split("/", 1)[0] if "/databases/" in name else ""


def written_names(writer: Any) -> list[str]:
    """The resource names of the documents a transaction or batch will write, in order."""
    names = []
    for write in getattr(writer, "_write_pbs", ()):
        pb = getattr(write, "_pb", write)
        operation = pb.WhichOneof("operation")
        if operation == "update":
            names.append(pb.update.name)
        elif operation == "delete":
            names.append(pb.delete)
        elif operation == "transform":
            names.append(pb.transform.document)
    return names


def require_one_database(
    writer: firestore.Transaction | firestore.WriteBatch,
    marker: firestore.DocumentReference,
    mode: str,
) -> None:
    """Raise `DatabaseMismatch` if `writer` holds a write outside `marker`'s database."""
    marker_name = marker._document_path  # projects/p/databases/d/documents/...
    records = database_of_name(marker_name)
    for name in written_names(writer):
        database = database_of_name(name)
        if database != records:
            document = name.split(_DOCUMENTS, 1)[-1]
            raise DatabaseMismatch(
                f"{mode} mode: the handler wrote {document} in Firestore database {database!r}, "
                f"but the dedup records (and the marker that must commit with its writes) live "
                f"in database {records!r}: one transaction cannot write to two databases. Keep "
                f"the records in the handler's database (unset DEDUP_DATABASE so they follow the "
                f"triggering event's database, or set DEDUP_DATABASE={database}), or use lease "
                "mode; nothing was committed"
            )
