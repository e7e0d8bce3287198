"""Where the records are (the project, database and collection, the database's clock) and how
they are read: snapshots to records, the equality filters, server-side counts."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

import click
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore

from dedup.kernel.record import Field, Record

if TYPE_CHECKING:
    from dedup.kernel.transitions import KeyLayout

CLOCK_DOCUMENT = "~clock"
"""A document id no record can have (`dedup.kernel.transitions.dedup_key`): reading it yields the
database time."""

EMULATOR_CONNECT_SECONDS = 3.0
"""How long to wait for the emulator's port before reporting that it is not running."""


@dataclass
class Target:
    """The dedup collection the command works on; the Firestore client is made on first use."""

    project: str | None
    database: str
    collection: str
    key_layout: KeyLayout = "plain"
    """How EVENT_ID SUFFIX map to a key: the functions' DEDUP_KEY_LAYOUT."""

    @cached_property
    def client(self) -> firestore.Client:
        """The Firestore client (emulator or real project); raises a click error if unusable."""
        emulator = os.environ.get("FIRESTORE_EMULATOR_HOST", "").strip()
        if not self.project:
            where = "the emulator keeps each project's data apart" if emulator else "no emulator"
            raise click.UsageError(
                f"no Google Cloud project ({where}): pass --project PROJECT or set "
                "GOOGLE_CLOUD_PROJECT (for this repo's emulators: demo-exactly-once)"
            )
        if emulator:
            _require_emulator(emulator)
        try:
            return firestore.Client(project=self.project, database=self.database)
        except auth_exceptions.DefaultCredentialsError as exc:
            raise click.ClickException(
                "no Application Default Credentials: run `gcloud auth application-default "
                "login` (or set GOOGLE_APPLICATION_CREDENTIALS), or set FIRESTORE_EMULATOR_HOST "
                "to use the emulator"
            ) from exc

    @property
    def records(self) -> firestore.CollectionReference:
        """The dedup collection."""
        return self.client.collection(self.collection)

    def path(self, key: str) -> str:
        """`<collection>/<key>`, as shown to the operator."""
        return f"{self.collection}/{key}"

    def document(self, key: str) -> firestore.DocumentReference:
        """The record's document; a key that cannot be a document id is a usage error."""
        if not key or "/" in key or key in (".", ".."):
            raise click.BadParameter(
                f"{key!r} is not a record key: keys look like <eventId>-<suffix>; "
                "or pass EVENT_ID SUFFIX and the key is computed",
                param_hint="KEY",
            )
        return self.records.document(key)

    def database_now(self) -> datetime:
        """The database's current time: the read time of a one-document read."""
        read_time: datetime | None = self.records.document(CLOCK_DOCUMENT).get().read_time
        if read_time is None:  # pragma: no cover - Firestore always returns a read time
            raise click.ClickException("Firestore returned no read time")
        return read_time


def _require_emulator(host: str) -> None:
    """Fail fast when nothing listens at FIRESTORE_EMULATOR_HOST (the client would retry 5 min)."""
    name, _, port = host.rpartition(":")
    try:
        socket.create_connection((name.strip("[]"), int(port)), EMULATOR_CONNECT_SECONDS).close()
    except (OSError, ValueError) as exc:
        raise click.ClickException(
            f"no Firestore emulator answers at {host} (FIRESTORE_EMULATOR_HOST): start it "
            "with `make emulators`, or unset the variable to work on the real project"
        ) from exc


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
