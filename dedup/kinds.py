"""Every kind of event `trigger_once` deduplicates, in one table: `KINDS`.

A kind is a family of CloudEvent types (`google.cloud.storage.object.v1.` and its four events,
say) with what the project knows about it: what its events are about (the `subject` recorded
for `dedup list --subject`) and how the platform retries it. `dedup.events.describe` looks an
event's kind up here, by its CloudEvent `type`, whether the event is the object a
firebase-functions decorator passes or a raw CloudEvent from functions-framework's
`@cloud_event`; a type no kind names is still deduplicated by its CloudEvent `id`, with the
CloudEvent's own subject.

The key is the CloudEvent `id` for every kind here (Pub/Sub: the message id; a scheduled
run: job name and schedule time, read in `dedup.events`). The subjects: Storage
`buckets/<bucket>/objects/<name>`, Realtime Database `refs/<path>`, every other kind the
CloudEvent's own subject; docs/usage.md has the table of every kind with its types and subject.

Adding a kind is one row here (its types, its subject, its retry) and its test in
`tests/dedup/test_kinds.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

Retry = Literal["event", "schedule"]
"""How a kind is retried once a delivery gives its lease back: `event`, the push subscription
redelivers (deployed with `retry: true` / `--retry`); `schedule`, Cloud Scheduler retries the
run up to the job's `retryCount` (deployed with at least 1)."""


class Kind(NamedTuple):
    """One family of events: its CloudEvent types, its subject, its retry."""

    name: str
    """A short name, as the table of this module gives it."""
    types: tuple[str, ...]
    """The CloudEvent types of the family; one ending in `.` is a prefix."""
    subject: Callable[[str | None, Any], str | None]
    """(the CloudEvent subject, the event's data as a mapping) -> the subject to record."""
    retry: Retry = "event"
    """How the platform retries it (see `Retry`)."""


def _own_subject(subject: str | None, data: Any) -> str | None:
    return subject or None


def _storage_subject(subject: str | None, data: Any) -> str | None:
    bucket, name = _field(data, "bucket"), _field(data, "name")
    if bucket and name:
        return f"buckets/{bucket}/objects/{name}"
    return subject or None


def _database_subject(subject: str | None, data: Any) -> str | None:
    if subject and subject.startswith("refs/"):
        return subject
    return f"refs/{subject.strip('/')}" if subject else None


def _field(data: Any, name: str) -> str | None:
    value = data.get(name) if isinstance(data, Mapping) else getattr(data, name, None)
    return value if isinstance(value, str) and value else None


KINDS: tuple[Kind, ...] = (
    Kind("storage", ("google.cloud.storage.object.v1.",), _storage_subject),
    Kind("database", ("google.firebase.database.ref.v1.",), _database_subject),
    Kind("alerts", ("google.firebase.firebasealerts.alerts.v1.published",), _own_subject),
    Kind(
        "remote_config",
        ("google.firebase.remoteconfig.remoteConfig.v1.updated",),
        _own_subject,
    ),
    Kind("test_lab", ("google.firebase.testlab.testMatrix.v1.completed",), _own_subject),
    Kind(
        "dataconnect",
        ("google.firebase.dataconnect.connector.v1.mutationExecuted",),
        _own_subject,
    ),
)
"""The kinds that `dedup.events` reads generically from their CloudEvent; Firestore and Pub/Sub
events (documents, message ids) and scheduled runs have readers of their own there."""

CUSTOM = Kind("custom", (), _own_subject)
"""Any other CloudEvent type: an Eventarc custom event, or a type newer than this table."""

SCHEDULE = Kind("schedule", (), _own_subject, retry="schedule")
"""A Cloud Scheduler run: not a CloudEvent; `dedup.events` reads its headers."""


def kind_of(event_type: str | None) -> Kind:
    """The kind whose types include `event_type` (prefix rows included), else `CUSTOM`."""
    if event_type:
        for kind in KINDS:
            for known in kind.types:
                if event_type == known or (known.endswith(".") and event_type.startswith(known)):
                    return kind
    return CUSTOM
