"""Every kind of event `trigger_once` deduplicates, each in one place, the table of them
(`KINDS`), and `describe`: from a platform's event object to what deduplication needs.

Supported event objects: every event a firebase-functions event trigger passes (a
`firebase_functions.core.CloudEvent`, whose kind is found by its CloudEvent `type`), a
scheduled run (`scheduler_fn.ScheduledEvent`, found by its class), and a `cloudevents`
`CloudEvent` (functions-framework `@cloud_event`, found by its `type` attribute). The payload
fingerprint is the sha256 of the kind's canonical rendering (sorted-key JSON): a different
event under a reused id is refused as a payload mismatch.

A kind (`Kind`) is a family of events with everything the project knows about it: how to read
an event's id, subject, time and payload (from the object a firebase-functions decorator
passes, or from a raw CloudEvent), how the template's boundary checks and parses its request,
how both deploy paths deploy its trigger, and how the platform retries it. The families:

| module | kinds |
|---|---|
| `dedup.kinds.firestore` | Firestore documents (and the `*_with_auth_context` variants) |
| `dedup.kinds.pubsub` | Pub/Sub messages |
| `dedup.kinds.schedule` | scheduled runs (Cloud Scheduler) |
| `dedup.kinds.cloud_events` | Storage, Realtime Database, Firebase Alerts, Remote Config, |
|  | Test Lab, Data Connect, any other type |

`describe` (below), the template's boundary (`functions/boundary.py`) and the deploy tool
(`tools/deploy`) look a kind up here: by its CloudEvent `type` (`kind_of`), or by the class
of an event that is not a CloudEvent (`kind_of_class`); a type no kind names is `CUSTOM`, still
deduplicated by its CloudEvent `id`. docs/usage.md ("Adding a kind of event") shows how to
add one: a row, and its test in `tests/dedup/test_kinds.py`.
"""

from __future__ import annotations

from typing import Any

from cloudevents.abstract import CloudEvent as RawCloudEvent
from firebase_functions import core as ff_core

from dedup.kinds import cloud_events, firestore, pubsub, schedule
from dedup.kinds.base import Declared, Deploy, EventInfo, Kind, Malformed, Retry
from dedup.kinds.cloud_events import CUSTOM
from dedup.kinds.schedule import cron_equivalent, is_unix_cron

__all__ = [
    "CUSTOM",
    "KINDS",
    "SCHEDULE",
    "SUPPORTED_EVENTS",
    "USES_DEDUP",
    "Declared",
    "Deploy",
    "EventInfo",
    "Kind",
    "Malformed",
    "Retry",
    "cron_equivalent",
    "declaration_problem",
    "describe",
    "is_unix_cron",
    "kind_of",
    "kind_of_class",
]

USES_DEDUP = "__dedup_suffix__"
"""The attribute `trigger_once` sets on the function it returns (its suffix); the SDK's decorators
copy it onto theirs, so `dedup manifest` and the deploy's checks can tell which functions use
dedup."""

SCHEDULE = schedule.KIND
"""A Cloud Scheduler run: not a CloudEvent; read from its request's headers."""

KINDS: tuple[Kind, ...] = (firestore.KIND, pubsub.KIND, *cloud_events.KINDS)
"""Every kind that arrives as a CloudEvent, found by its type (`kind_of`)."""

_BY_CLASS = {schedule.EVENT_CLASS: SCHEDULE}
"""Kinds whose event object is not a CloudEvent, by its class (module and qualified name)."""


def kind_of(event_type: str | None) -> Kind:
    """The kind whose types include `event_type` (prefix rows included), else `CUSTOM`."""
    if event_type:
        for kind in KINDS:
            if kind.has_type(event_type):
                return kind
    return CUSTOM


def kind_of_class(event: object) -> Kind | None:
    """The kind of an event object that is not a CloudEvent (a scheduled run), by its class;
    None for any other object."""
    cls = type(event)
    return _BY_CLASS.get(f"{cls.__module__}.{cls.__qualname__}")


SUPPORTED_EVENTS = (
    "the event of every firebase-functions event trigger (firestore_fn, pubsub_fn, storage_fn, "
    "db_fn, eventarc_fn, alerts_fn and firebase_functions.alerts, remote_config_fn, "
    "test_lab_fn, dataconnect_fn, scheduler_fn), "
    "cloudevents CloudEvent (functions_framework.cloud_event)"
)


def describe(event: object) -> EventInfo:
    """Extract id, canonical payload, time, subject and source from a supported event, as its
    kind (`dedup.kinds`) reads them.

    Raises `TypeError` naming the supported event types for anything else, and
    `MissingEventId` for a scheduled run without a usable schedule time.
    """
    if isinstance(event, RawCloudEvent):
        attributes = event.get_attributes()
        event_type = attributes.get("type")
        kind = kind_of(event_type if isinstance(event_type, str) else None)
        return kind.read_cloud_event(attributes, event.get_data())
    if isinstance(event, ff_core.CloudEvent):
        return kind_of(event.type).read_event(event)
    scheduled = kind_of_class(event)
    if scheduled is None:
        raise TypeError(
            f"trigger_once cannot deduplicate a {type(event).__module__}."
            f"{type(event).__qualname__}: supported events are {SUPPORTED_EVENTS}; for "
            "anything else call Deduplicator.run(event_id, suffix, handler) yourself"
        )
    return scheduled.read_event(event)


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
        when = schedule_trigger.get("schedule")
        return schedule.schedule_problem(name, when) if isinstance(when, str) else None
    if getattr(endpoint, "eventTrigger", None) is None:
        return f"{name} declares no event trigger: @trigger_once deduplicates events only"
    return None
