"""Every event-trigger decorator of the pinned firebase-functions, over `@trigger_once`, gives one
effect per event under concurrent duplicates.

Each function of `tests/dedup/decorators_app.py` is served by functions-framework as the gcloud
path serves it (the `cloudevent` signature), against the Firestore emulator. Its events are
built with `dedup.testing` (the request the platform sends: binary-mode CloudEvents, Firestore's
data as protobuf `DocumentEventData`), and Firebase Alerts carry each alert type's payload as
firebase-functions reads it (hand-built: Google's captured test data has a Crashlytics issue
only, which `tests/dedup/test_kinds.py` uses). For each function: six copies of an event at
once, retried until one is answered 2xx as the platform retries, then another event the same
way; one effect and one `sent` record per event, under two distinct keys.

The same kinds as raw CloudEvents (`tests/dedup/raw_app.py`: functions-framework's own
`@cloud_event` and `functions_framework.aio.cloud_event`, no firebase-functions) are
recognised by their CloudEvent `type`: the same deliveries, sync (the Flask app) and async (the
ASGI app `functions-framework --asgi` serves), also check each record's subject against the
table in docs/usage.md.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import pkgutil
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import firebase_functions
import firebase_functions.alerts
import functions_framework
import functions_framework.aio
import httpx
import pytest
from google.cloud import firestore

from dedup import testing
from dedup.testing import DatabaseChange, FirestoreChange, HttpEvent, StorageChange
from tests.dedup.decorators_app import DECORATORS

APP = str(Path(__file__).with_name("decorators_app.py"))
COPIES = 6
ISSUE = {"id": "i1", "title": "a crash", "subtitle": "in main", "appVersion": "1.0"}
TYPE = "type.googleapis.com/google.events.firebase.firebasealerts.v1."
CHANGES: tuple[FirestoreChange, ...] = ("written", "created", "updated", "deleted")
"""The four changes of a document (and, spelt the same, of a Realtime Database value)."""


def _firestore(change: FirestoreChange, auth: bool) -> Callable[[], HttpEvent]:
    def build() -> HttpEvent:
        before = None if change == "created" else {"n": 1}
        after = None if change == "deleted" else {"n": 2}
        event = testing.firestore_event(
            f"things/{uuid.uuid4().hex[:8]}",
            before,
            after,
            change=change,
        )
        if not auth:
            return event
        headers = {**event.headers, "ce-authtype": "app_user", "ce-authid": "uid-1"}
        return replace(event, headers=headers)

    return build


def _storage(change: StorageChange) -> Callable[[], HttpEvent]:
    def build() -> HttpEvent:
        name = f"uploads/{uuid.uuid4().hex[:8]}.png"
        return testing.storage_event("some-bucket", name, change=change, size=3)

    return build


def _database(change: DatabaseChange) -> Callable[[], HttpEvent]:
    def build() -> HttpEvent:
        before = None if change == "created" else {"name": uuid.uuid4().hex}
        after = None if change == "deleted" else {"name": uuid.uuid4().hex}
        return testing.database_event("users/u1", before, after, change=change)

    return build


def _alert(
    alert_type: str, payload: dict[str, Any], app_id: bool = True
) -> Callable[[], HttpEvent]:
    def build() -> HttpEvent:
        app = "1:123456789:android:abcdef" if app_id else None
        return testing.alert_event(alert_type, payload, app_id=app)

    return build


def _pubsub() -> HttpEvent:
    message = json.dumps({"thing": uuid.uuid4().hex}).encode()
    return testing.pubsub_event("things", message, message_id=str(uuid.uuid4().int)[:16])


def _dataconnect() -> HttpEvent:
    return testing.custom_event(
        "google.firebase.dataconnect.connector.v1.mutationExecuted",
        {"data": {"order_insert": {"id": uuid.uuid4().hex}}, "variables": {"item": "tea"}},
        source="//firebasedataconnect.googleapis.com/projects/p/locations/us-central1/services/orders",
        extensions={
            "service": "orders",
            "connector": "web",
            "operation": "placeOrder",
            "location": "us-central1",
            "project": "p",
            "authtype": "app_user",
            "authid": "uid-1",
        },
    )


def another_payload(name: str, event: HttpEvent) -> HttpEvent:
    """A new event for function `name` under `event`'s dedup identity: its CloudEvent id, or
    for Pub/Sub its message id."""
    if name != "pubsub":
        return BUILDERS[name]().with_id(event.id)
    message_id = json.loads(event.body)["message"]["messageId"]
    return testing.pubsub_event("things", b'{"other": true}', message_id=message_id)


BUILDERS: dict[str, Callable[[], HttpEvent]] = {
    **{
        f"fs_{change}{'_auth' if auth else ''}": _firestore(change, auth)
        for change in CHANGES
        for auth in (False, True)
    },
    "pubsub": _pubsub,
    "storage_finalized": _storage("finalized"),
    "storage_deleted": _storage("deleted"),
    "storage_archived": _storage("archived"),
    "storage_metadata": _storage("metadataUpdated"),
    **{f"db_{change}": _database(change) for change in CHANGES},
    "custom": lambda: testing.custom_event(
        "com.example.order.paid", {"order": uuid.uuid4().hex}, subject="orders/o1"
    ),
    "alert": _alert(
        "crashlytics.newFatalIssue",
        {"@type": TYPE + "CrashlyticsNewFatalIssuePayload", "issue": ISSUE},
    ),
    "crash_fatal": _alert("crashlytics.newFatalIssue", {"issue": ISSUE}),
    "crash_nonfatal": _alert("crashlytics.newNonfatalIssue", {"issue": ISSUE}),
    "crash_anr": _alert("crashlytics.newAnrIssue", {"issue": ISSUE}),
    "crash_regression": _alert(
        "crashlytics.regression",
        {"type": "fatal", "issue": ISSUE, "resolveTime": "2026-12-01T08:00:00.000000Z"},
    ),
    "crash_velocity": _alert(
        "crashlytics.velocity",
        {
            "issue": ISSUE,
            "createTime": "2026-12-01T08:00:00.000000Z",
            "crashCount": 100,
            "crashPercentage": 12.5,
            "firstVersion": "1.0",
        },
    ),
    "crash_digest": _alert(
        "crashlytics.stabilityDigest",
        {
            "digestDate": "2026-12-01T00:00:00.000000Z",
            "trendingIssues": [{"type": "fatal", "issue": ISSUE, "eventCount": 9, "userCount": 4}],
        },
    ),
    "billing_update": _alert(
        "billing.planUpdate",
        {"notificationType": "upgrade", "billingPlan": "blaze", "principalEmail": "a@example.com"},
        app_id=False,
    ),
    "billing_automated": _alert(
        "billing.planAutomatedUpdate",
        {"notificationType": "downgrade", "billingPlan": "spark"},
        app_id=False,
    ),
    "performance": _alert(
        "performance.threshold",
        {
            "eventName": "page_load",
            "eventType": "trace",
            "metricType": "duration",
            "numSamples": 200,
            "thresholdValue": 1.5,
            "thresholdUnit": "s",
            "violationValue": 2.5,
            "violationUnit": "s",
            "investigateUri": "https://console.firebase.google.com/x",
        },
    ),
    "appdist_device": _alert(
        "appDistribution.newTesterIosDevice",
        {
            "testerName": "Ann",
            "testerEmail": "ann@example.com",
            "testerDeviceModelName": "iPhone",
            "testerDeviceIdentifier": "d1",
        },
    ),
    "appdist_feedback": _alert(
        "appDistribution.inAppFeedback",
        {
            "feedbackReport": "projects/1/apps/a/releases/r/feedbackReports/f",
            "feedbackConsoleUri": "https://console.firebase.google.com/f",
            "testerEmail": "ann@example.com",
            "appVersion": "1.0",
            "text": "it crashed",
        },
    ),
    "remote_config": lambda: testing.remote_config_event(version_number=7),
    "test_lab": lambda: testing.matrix_event(matrix_id=f"matrix-{uuid.uuid4().hex[:6]}"),
    "dataconnect": _dataconnect,
}
"""Function name -> a builder of a new event for it."""


NOT_EVENTS = {"https_fn", "tasks_fn", "identity_fn"}
"""Modules of firebase-functions whose functions are no events: HTTP and callables, task queues
(`task_once`), and blocking functions (refused by `trigger_once` at import,
`tests/dedup/test_kind_table.py`)."""
SCHEDULE = {("scheduler_fn", "on_schedule")}
"""Served as an HTTP request, not a CloudEvent: `tests/dedup/test_kinds.py` covers it."""


def event_decorators() -> set[tuple[str, str]]:
    """(module, name) of every `on_*` decorator of the pinned firebase-functions' trigger
    modules (`firebase_functions.*_fn` and `firebase_functions.alerts.*_fn`)."""
    found = set()
    for package in (firebase_functions, firebase_functions.alerts):
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.endswith("_fn") or module.name in NOT_EVENTS:
                continue
            loaded = importlib.import_module(f"{package.__name__}.{module.name}")
            found |= {
                (module.name, name)
                for name, value in vars(loaded).items()
                if name.startswith("on_") and inspect.isfunction(value)
            }
    return found


def test_the_app_covers_every_event_decorator_of_firebase_functions() -> None:
    """Every event-trigger decorator the pinned firebase-functions offers has a function in
    decorators_app.py (but the schedule, served as HTTP), and every function an event builder
    here: a decorator added by an upgrade fails this test until it is covered."""
    covered = {
        (module.__name__.rpartition(".")[2], decorator)
        for module, decorator, _ in DECORATORS.values()
    }
    assert event_decorators() - SCHEDULE == covered
    assert sorted(BUILDERS) == sorted(DECORATORS)


def one_effect_and_one_sent_record_each(
    client: firestore.Client, events: int, suffix: str
) -> dict[str, dict[str, Any]]:
    """Assert `events` effects, each applied once under a key of `suffix`, and a `sent` record
    at each key and nowhere else; the records by key."""
    found = {d.id: d.to_dict() or {} for d in client.collection("effects").stream()}
    assert len(found) == events, found
    assert all(key.endswith(f"-{suffix}") for key in found), found
    assert all(effect["n"] == 1 for effect in found.values()), found
    records = {d.id: d.to_dict() or {} for d in client.collection("triggerEvents").stream()}
    assert sorted(records) == sorted(found), (records, found)
    assert all(record.get("state") == "sent" for record in records.values()), records
    return records


@pytest.mark.parametrize("name", sorted(DECORATORS))
def test_concurrent_duplicates_under_every_decorator_give_one_effect_per_event(
    name: str, firestore_client: firestore.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Six copies of an event at once (retried until one is acknowledged), then another event:
    one effect and one `sent` record each, under two distinct keys. A third event under the
    first one's id is another payload: no effect, and an ERROR line that says so."""
    app = functions_framework.create_app(name, APP, "cloudevent").test_client()
    target = testing.via_test_client(app)
    events = [BUILDERS[name]() for _ in range(2)]
    for event in events:
        statuses = testing.deliver_until_done(target, event, copies=COPIES)
        assert any(200 <= s < 300 for s in statuses), (statuses, event.description)
    reused = another_payload(name, events[0])
    with caplog.at_level(logging.INFO, logger="dedup"):
        assert 200 <= testing.deliver(target, reused) < 300
    differs = [r for r in caplog.records if "payload fingerprint differs" in r.getMessage()]
    assert [r.levelno for r in differs] == [logging.ERROR], caplog.text
    one_effect_and_one_sent_record_each(firestore_client, 2, name)


RAW_APP = str(Path(__file__).with_name("raw_app.py"))
RAW_KINDS = {
    "firestore": "fs_written",
    "pubsub": "pubsub",
    "storage": "storage_finalized",
    "database": "db_written",
    "custom": "custom",
    "alerts": "crash_fatal",
    "remote_config": "remote_config",
    "test_lab": "test_lab",
    "dataconnect": "dataconnect",
}
"""Kind -> the function above whose event builder makes one of its events."""


def deliver_sync(events: list[HttpEvent]) -> None:
    """Each event to `raw_sync` served by functions-framework's Flask app: six copies at once,
    then retried until one is answered 2xx."""
    app = functions_framework.create_app("raw_sync", RAW_APP, "cloudevent")
    target = testing.via_test_client(app.test_client())
    for event in events:
        statuses = testing.deliver_until_done(target, event, copies=COPIES)
        assert any(200 <= s < 300 for s in statuses), (statuses, event.description)


async def deliver_async(events: list[HttpEvent]) -> None:
    """The same to `raw_async` served by functions-framework's ASGI app (what `--asgi` runs),
    the copies awaited together on one event loop."""
    asgi = functions_framework.aio.create_asgi_app("raw_async", RAW_APP, "cloudevent")
    transport = httpx.ASGITransport(app=asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://function") as client:

        async def post(event: HttpEvent) -> int:
            answer = await client.post("/", content=event.body, headers=dict(event.headers))
            return answer.status_code

        for event in events:
            statuses = list(await asyncio.gather(*(post(event) for _ in range(COPIES))))
            while not any(200 <= s < 300 for s in statuses) and len(statuses) < 50:
                statuses.append(await post(event))
            assert any(200 <= s < 300 for s in statuses), (statuses, event.description)


def expected_subject(kind: str, event: HttpEvent) -> str | None:
    """The subject the kind's table row gives the record of `event` (docs/usage.md)."""
    headers = event.headers
    if kind == "storage":
        bucket = headers["ce-source"].rpartition("/buckets/")[2]
        return f"buckets/{bucket}/objects/{headers['ce-subject'].removeprefix('objects/')}"
    if kind == "database":
        return f"refs/{headers['ce-subject'].removeprefix('refs/')}"
    if kind == "firestore":
        return headers["ce-document"]
    if kind == "pubsub":
        topic = headers["ce-source"].rpartition("/topics/")[2]
        return f"topics/{topic}/messages/{json.loads(event.body)['message']['messageId']}"
    return headers.get("ce-subject")


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("kind", sorted(RAW_KINDS))
def test_raw_cloud_events_of_every_kind_run_once_by_their_type(
    kind: str, flavour: str, firestore_client: firestore.Client
) -> None:
    """The same kinds as raw CloudEvents under functions-framework's `@cloud_event` (sync) and
    `functions_framework.aio.cloud_event` (async): six concurrent copies of each of two events
    give one effect and one `sent` record each, with the kind's subject."""
    suffix = "rawSync" if flavour == "sync" else "rawAsync"
    events = [BUILDERS[RAW_KINDS[kind]]() for _ in range(2)]
    if flavour == "sync":
        deliver_sync(events)
    else:
        asyncio.run(deliver_async(events))
    records = one_effect_and_one_sent_record_each(firestore_client, len(events), suffix)
    subjects = sorted(str(record.get("subject")) for record in records.values())
    assert subjects == sorted(str(expected_subject(kind, e)) for e in events), subjects
