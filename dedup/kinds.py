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

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

Retry = Literal["event", "schedule"]
"""How a kind is retried once a delivery gives its lease back: `event`, the push subscription
redelivers (deployed with `retry: true` / `--retry`); `schedule`, Cloud Scheduler retries the
run up to the job's `retryCount` (deployed with at least 1)."""


USES_DEDUP = "__dedup_suffix__"
"""The attribute `trigger_once` sets on the function it returns (its suffix); the SDK's decorators
copy it onto theirs, so `dedup manifest` and the deploy's checks can tell which functions use
dedup."""


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
    apis: tuple[str, ...] = ()
    """The Google APIs whose events these are, which a project enables before deploying a
    function of the kind (besides Eventarc and Pub/Sub, which every event function needs)."""


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
    Kind(
        "storage",
        ("google.cloud.storage.object.v1.",),
        _storage_subject,
        apis=("storage.googleapis.com",),
    ),
    Kind(
        "database",
        ("google.firebase.database.ref.v1.",),
        _database_subject,
        apis=("firebasedatabase.googleapis.com",),
    ),
    Kind(
        "alerts",
        ("google.firebase.firebasealerts.alerts.v1.published",),
        _own_subject,
        apis=("firebasealerts.googleapis.com",),
    ),
    Kind(
        "remote_config",
        ("google.firebase.remoteconfig.remoteConfig.v1.updated",),
        _own_subject,
        apis=("firebaseremoteconfig.googleapis.com",),
    ),
    Kind(
        "test_lab",
        ("google.firebase.testlab.testMatrix.v1.completed",),
        _own_subject,
        apis=("testing.googleapis.com",),
    ),
    Kind(
        "dataconnect",
        ("google.firebase.dataconnect.connector.v1.mutationExecuted",),
        _own_subject,
        apis=("firebasedataconnect.googleapis.com",),
    ),
)
"""The kinds that `dedup.events` reads generically from their CloudEvent; Firestore and Pub/Sub
events (documents, message ids) and scheduled runs have readers of their own there."""

CUSTOM = Kind("custom", (), _own_subject)
"""Any other CloudEvent type: an Eventarc custom event, or a type newer than this table."""

SCHEDULE = Kind(
    "schedule", (), _own_subject, retry="schedule", apis=("cloudscheduler.googleapis.com",)
)
"""A Cloud Scheduler run: not a CloudEvent; `dedup.events` reads its headers."""


def kind_of(event_type: str | None) -> Kind:
    """The kind whose types include `event_type` (prefix rows included), else `CUSTOM`."""
    if event_type:
        for kind in KINDS:
            for known in kind.types:
                if event_type == known or (known.endswith(".") and event_type.startswith(known)):
                    return kind
    return CUSTOM


_EVERY = re.compile(
    r"every\s+(?:(?P<n>\d+)\s+(?P<unit>minutes?|mins?|hours?)|day\s+(?P<h>\d\d):(?P<m>\d\d))",
    re.IGNORECASE,
)


def cron_equivalent(schedule: str) -> str | None:
    """The unix-cron form of an App Engine schedule ("every 5 minutes", "every 2 hours",
    "every day 08:00"), or None when there is none this simple (or it is not that form)."""
    match = _EVERY.fullmatch(schedule.strip())
    if match is None:
        return None
    if match["h"] is not None:
        return f"{int(match['m'])} {int(match['h'])} * * *"
    n = int(match["n"])
    if match["unit"].lower().startswith("h"):
        return "0 * * * *" if n == 1 else f"0 */{n} * * *"
    return "* * * * *" if n == 1 else f"*/{n} * * * *"


def is_unix_cron(schedule: str) -> bool:
    """Five space-separated fields, as unix-cron writes a schedule."""
    return len(schedule.split()) == 5 and not schedule.strip().lower().startswith("every")


def declaration_problem(name: str, endpoint: Any) -> str | None:
    """Why function `name`, whose firebase-functions endpoint is `endpoint` and which uses
    `trigger_once`, cannot be deduplicated; None when it can. Checked before anything
    deploys or an emulator starts (`tools/exports.py`), never at the first event."""
    if getattr(endpoint, "blockingTrigger", None):
        return (
            f"{name} is a blocking function (identity_fn): Firebase Auth calls it synchronously "
            "and never retries it, so there is no duplicate to drop and no retry to rely on; "
            "remove @trigger_once"
        )
    for trigger, instead in (
        ("httpsTrigger", "dedup.http.idempotent_http"),
        ("callableTrigger", "dedup.http.idempotent_callable"),
        ("taskQueueTrigger", "dedup.tasks.task_once"),
    ):
        if getattr(endpoint, trigger, None) is not None:
            return (
                f"{name} is not an event function ({trigger}): use {instead} instead of "
                "@trigger_once"
            )
    schedule_trigger = getattr(endpoint, "scheduleTrigger", None)
    if schedule_trigger:
        schedule = schedule_trigger.get("schedule")
        if isinstance(schedule, str) and not is_unix_cron(schedule):
            cron = cron_equivalent(schedule)
            hint = f' write it as "{cron}"' if cron else " write it in unix-cron form"
            return (
                f'{name} is scheduled "{schedule}", the App Engine form: Cloud Scheduler sets '
                "X-CloudScheduler-ScheduleTime, the run's identity, only for unix-cron "
                f"schedules;{hint}"
            )
    if getattr(endpoint, "eventTrigger", None) is None and not schedule_trigger:
        return f"{name} declares no event trigger: @trigger_once deduplicates events only"
    return None
