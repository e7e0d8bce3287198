"""Test helpers for functions that use `dedup`: events as the platform delivers them, copies
of one delivery at once, and the Firestore emulator.

Nothing here is imported by `import dedup`; a test imports it: `from dedup import testing`.

**Events.** Each builder returns an `HttpEvent`: the headers and body of the HTTP request the
platform sends for that event, ready to POST (again and again) to a function served by
functions-framework (`functions-framework --target=NAME --signature-type=cloudevent`, or
`functions_framework.create_app(...).test_client()`). CloudEvents are in **binary content
mode**, as Eventarc delivers them: the attributes as `ce-*` headers, the data as the body
(`application/json`, or `application/protobuf` for Firestore's `DocumentEventData`).
`HttpEvent.structured()` gives the same event in structured content mode
(`application/cloudevents+json`, the data inline or as `data_base64`), which functions-framework
accepts as well. A scheduled run is not a CloudEvent: `scheduled_request` gives the Cloud
Scheduler request (its headers, an empty body) an `on_schedule` function is served as (the
`http` signature).

Builders, by the firebase-functions decorator they feed:

* `firestore_event`: `firestore_fn.on_document_*`, types
  `google.cloud.firestore.document.v1.{written,created,updated,deleted}`;
* `pubsub_event`: `pubsub_fn.on_message_published`, `google.cloud.pubsub.topic.v1.messagePublished`;
* `storage_event`: `storage_fn.on_object_*`,
  `google.cloud.storage.object.v1.{finalized,deleted,archived,metadataUpdated}`;
* `database_event`: `db_fn.on_value_*`,
  `google.firebase.database.ref.v1.{written,created,updated,deleted}`;
* `alert_event`: `alerts_fn` and `firebase_functions.alerts.*`,
  `google.firebase.firebasealerts.alerts.v1.published`;
* `remote_config_event`: `remote_config_fn.on_config_updated`,
  `google.firebase.remoteconfig.remoteConfig.v1.updated`;
* `matrix_event` (Test Lab): `test_lab_fn.on_test_matrix_completed`,
  `google.firebase.testlab.testMatrix.v1.completed`;
* `custom_event`: any type, `eventarc_fn.on_custom_event_published` (and Data Connect);
* `scheduled_request`: `scheduler_fn.on_schedule` (the Cloud Scheduler headers).

**Copies at once.** `deliver(url, event)` POSTs one copy and returns the HTTP status;
`deliver_concurrently(url, event, copies=6)` POSTs `copies` copies from as many threads at
once, the at-least-once platform at its worst; `deliver_until_done` retries as the platform
does until one copy is answered 2xx. They use the standard library only (`urllib`); given
`via_test_client(client)` instead of a URL they POST to a Flask test client in-process.

**Through the Functions emulator.** A function the Firebase CLI's Functions emulator serves is
reached at its trigger route, `POST /functions/projects/<project>/triggers/<key>`, where the
key is `<region>-<name>-<generation>` (the generation counts the emulator's reloads of its
triggers). `emulator_trigger("welcome")` finds the current key and returns an
`EmulatorTrigger`, a `Target` for the functions above: it POSTs each CloudEvent in structured
content mode, the form that route passes on whatever the data (a binary-mode protobuf body,
such as `firestore_event`'s, makes it wait 60 s and fail).

**The Firestore emulator.** `firestore_emulator()` reads `FIRESTORE_EMULATOR_HOST` (and the
project from `GCLOUD_PROJECT` / `GOOGLE_CLOUD_PROJECT`); its `clear()` deletes every document
of the emulator's `(default)` database (the dedup records included) through the emulator's
REST endpoint, and `client()` opens a Firestore client on it.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from dedup.kinds import pubsub

if TYPE_CHECKING:
    from google.cloud import firestore

__all__ = [
    "DEFAULT_PROJECT",
    "DEFAULT_REGION",
    "FIRESTORE_TYPES",
    "PUBSUB_TYPE",
    "DatabaseChange",
    "EmulatorTrigger",
    "FirestoreChange",
    "FirestoreEmulator",
    "HttpEvent",
    "StorageChange",
    "Target",
    "alert_event",
    "custom_event",
    "database_event",
    "deliver",
    "deliver_concurrently",
    "deliver_until_done",
    "emulator_trigger",
    "firestore_emulator",
    "firestore_event",
    "matrix_event",
    "pubsub_event",
    "remote_config_event",
    "scheduled_request",
    "storage_event",
    "via_test_client",
]

DEFAULT_PROJECT = "demo-test"
"""The project the builders and `firestore_emulator` use when none is given or set (a
`demo-` project: the emulators never reach a real one)."""

FirestoreChange = Literal["written", "created", "updated", "deleted"]
"""The change a Firestore document event is about."""
StorageChange = Literal["finalized", "deleted", "archived", "metadataUpdated"]
"""The change a Cloud Storage object event is about."""
DatabaseChange = Literal["written", "created", "updated", "deleted"]
"""The change a Realtime Database event is about."""

FIRESTORE_TYPES: Mapping[str, str] = {
    change: f"google.cloud.firestore.document.v1.{change}"
    for change in ("written", "created", "updated", "deleted")
}
"""The CloudEvent type of each Firestore change."""
PUBSUB_TYPE = pubsub.TYPE
"""The CloudEvent type of a Pub/Sub message."""
_STORAGE_TYPE = "google.cloud.storage.object.v1."
_DATABASE_TYPE = "google.firebase.database.ref.v1."
_ALERT_TYPE = "google.firebase.firebasealerts.alerts.v1.published"
_REMOTE_CONFIG_TYPE = "google.firebase.remoteconfig.remoteConfig.v1.updated"
_TEST_LAB_TYPE = "google.firebase.testlab.testMatrix.v1.completed"
_SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
_JOB_NAME_HEADER = "X-CloudScheduler-JobName"


@dataclass(frozen=True)
class HttpEvent:
    """One event as an HTTP request: headers and body, ready to POST again and again."""

    id: str
    """The CloudEvent id (a scheduled run: `<job>@<schedule time>`, its dedup identity)."""
    headers: Mapping[str, str]
    """The request's headers: the `ce-*` attributes and `Content-Type` of a CloudEvent."""
    body: bytes
    """The request's body: the event's data (empty for a scheduled run)."""
    description: str = field(default="", compare=False)
    """What the event is, for a test's messages."""

    def with_id(self, event_id: str) -> HttpEvent:
        """The same event under another CloudEvent id (a Pub/Sub message keeps its message id,
        its key, as the emulator's redeliveries do)."""
        return replace(self, id=event_id, headers={**self.headers, "ce-id": event_id})

    def structured(self) -> HttpEvent:
        """The same CloudEvent in structured content mode: one `application/cloudevents+json`
        body with the attributes and the data (`data` for JSON, `data_base64` for anything
        else); `ValueError` for a request that is no CloudEvent (`scheduled_request`)."""
        attributes = {k[3:]: v for k, v in self.headers.items() if k.lower().startswith("ce-")}
        if "id" not in attributes:
            raise ValueError(f"{self.description or self.id} is not a CloudEvent")
        content_type = next(
            (v for k, v in self.headers.items() if k.lower() == "content-type"), None
        )
        envelope: dict[str, Any] = dict(attributes)
        if content_type:
            envelope["datacontenttype"] = content_type
        if content_type == "application/json":
            envelope["data"] = json.loads(self.body) if self.body else None
        else:
            envelope["data_base64"] = base64.b64encode(self.body).decode()
        body = json.dumps(envelope).encode()
        headers = {"Content-Type": "application/cloudevents+json"}
        return replace(self, headers=headers, body=body)


def _now() -> str:
    """The current time in RFC 3339 with microseconds, as the platform writes `time`."""
    return _rfc3339(datetime.now(UTC))


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _project(project: str | None) -> str:
    return (
        project
        or os.environ.get("GCLOUD_PROJECT")
        or os.environ.get("GOOGLE_CLOUD_PROJECT")
        or DEFAULT_PROJECT
    )


def _cloud_event(
    event_type: str,
    source: str,
    data: Any,
    *,
    event_id: str | None,
    subject: str | None = None,
    extensions: Mapping[str, str] | None = None,
    time: str | None = None,
    description: str = "",
) -> HttpEvent:
    """A binary-mode CloudEvent with a JSON body."""
    event_id = event_id or str(uuid.uuid4())
    headers = {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-type": event_type,
        "ce-source": source,
        "ce-time": time or _now(),
    }
    if subject is not None:
        headers["ce-subject"] = subject
    headers.update({f"ce-{name}": value for name, value in (extensions or {}).items()})
    headers["Content-Type"] = "application/json"
    return HttpEvent(event_id, headers, json.dumps(data).encode(), description or event_type)


def _document(value: Any, name: str, now: datetime) -> Any:
    """A document's fields (a mapping, or a `DocumentSnapshot` with its own times) as the
    event's protobuf `Document`; None for no document (absent, or a missing snapshot)."""
    from google.events.cloud.firestore import Document

    if value is None:
        return None
    if hasattr(value, "to_dict") and hasattr(value, "exists"):  # a DocumentSnapshot
        if not value.exists:
            return None
        fields = value.to_dict() or {}
        created, updated = value.create_time or now, value.update_time or now
    else:
        fields, created, updated = dict(value), now, now
    return Document(
        name=name,
        fields={key: _value(field) for key, field in fields.items()},
        create_time=created,
        update_time=updated,
    )


def _value(value: Any) -> Any:
    """A field's value as the event's protobuf `Value` (what Firestore writes into the event):
    null, bool, int, float, str, bytes, a time, a geo point, a map or a list of those."""
    from google.events.cloud.firestore import ArrayValue, MapValue, Value
    from google.type import latlng_pb2

    if value is None:
        return Value(null_value=0)
    if isinstance(value, bool):
        return Value(boolean_value=value)
    if isinstance(value, int):
        return Value(integer_value=value)
    if isinstance(value, float):
        return Value(double_value=value)
    if isinstance(value, str):
        return Value(string_value=value)
    if isinstance(value, bytes):
        return Value(bytes_value=value)
    if isinstance(value, datetime):
        return Value(timestamp_value=value)
    if isinstance(value, Mapping):
        return Value(map_value=MapValue(fields={k: _value(v) for k, v in value.items()}))
    if isinstance(value, list | tuple):
        return Value(array_value=ArrayValue(values=[_value(v) for v in value]))
    if hasattr(value, "latitude") and hasattr(value, "longitude"):  # firestore.GeoPoint
        point = latlng_pb2.LatLng(latitude=value.latitude, longitude=value.longitude)
        return Value(geo_point_value=point)
    raise TypeError(
        f"a Firestore event field cannot hold a {type(value).__name__} here: use null, bool, "
        "int, float, str, bytes, a datetime, a GeoPoint, a map or a list"
    )


def firestore_event(
    path: str,
    before: Mapping[str, Any] | firestore.DocumentSnapshot[Any] | None,
    after: Mapping[str, Any] | firestore.DocumentSnapshot[Any] | None,
    *,
    project: str | None = None,
    change: FirestoreChange = "written",
    event_id: str | None = None,
    database: str = "(default)",
    location: str = "us-central1",
) -> HttpEvent:
    """The Firestore CloudEvent for a write of document `path` (`posts/p1`) from `before` to
    `after` (None: no document), each a mapping of fields or a `DocumentSnapshot` read from
    the emulator (its create and update times are kept; a mapping gets the current time).
    The body is the protobuf `DocumentEventData`, with the attributes `location`, `project`,
    `database`, `namespace` and `document` firebase-functions reads."""
    from google.events.cloud.firestore import DocumentEventData

    project = _project(project)
    now = datetime.now(UTC)
    name = f"projects/{project}/databases/{database}/documents/{path}"
    data = DocumentEventData()
    if (old := _document(before, name, now)) is not None:
        data.old_value = old
    if (new := _document(after, name, now)) is not None:
        data.value = new
    event_id = event_id or str(uuid.uuid4())
    headers = {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-type": FIRESTORE_TYPES[change],
        "ce-source": f"//firestore.googleapis.com/projects/{project}/databases/{database}",
        "ce-subject": f"documents/{path}",
        "ce-time": _rfc3339(now),
        "ce-location": location,
        "ce-project": project,
        "ce-database": database,
        "ce-namespace": "(default)",
        "ce-document": path,
        "Content-Type": "application/protobuf",
    }
    return HttpEvent(event_id, headers, DocumentEventData.serialize(data), f"{change} {path}")


def pubsub_event(
    topic: str,
    data: bytes,
    *,
    project: str | None = None,
    message_id: str | None = None,
    attributes: Mapping[str, str] | None = None,
    event_id: str | None = None,
) -> HttpEvent:
    """The Pub/Sub CloudEvent for message `message_id` (a fresh one if None) published to
    `topic`: the push body `{"message": {...}, "subscription": ...}` with the message id
    under both spellings; dedup keys it by the message id, not the CloudEvent id."""
    project = _project(project)
    message_id = message_id or str(uuid.uuid4().int)[:16]
    published = _now()
    subscription = f"projects/{project}/subscriptions/eventarc-{topic}"
    body = pubsub.push_body(message_id, data, attributes or {}, published, subscription)
    return _cloud_event(
        PUBSUB_TYPE,
        f"//pubsub.googleapis.com/projects/{project}/topics/{topic}",
        body,
        event_id=event_id or message_id,
        time=published,
        description=f"message {message_id} on {topic}",
    )


def storage_event(
    bucket: str,
    name: str,
    *,
    change: StorageChange = "finalized",
    size: int = 0,
    content_type: str = "application/octet-stream",
    generation: str | None = None,
    metadata: Mapping[str, str] | None = None,
    event_id: str | None = None,
) -> HttpEvent:
    """The Cloud Storage CloudEvent for object `name` of `bucket`: `StorageObjectData` with the
    fields firebase-functions requires (bucket, name, generation, metageneration, id, size,
    storageClass) and a fresh `generation` unless given."""
    now = _now()
    generation = generation or str(int(datetime.now(UTC).timestamp() * 1_000_000))
    data: dict[str, Any] = {
        "bucket": bucket,
        "name": name,
        "generation": generation,
        "metageneration": "1",
        "id": f"{bucket}/{name}/{generation}",
        "kind": "storage#object",
        "size": str(size),
        "contentType": content_type,
        "storageClass": "STANDARD",
        "timeCreated": now,
        "updated": now,
    }
    if metadata is not None:
        data["metadata"] = dict(metadata)
    if change == "deleted":
        data["timeDeleted"] = now
    return _cloud_event(
        _STORAGE_TYPE + change,
        f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        data,
        event_id=event_id,
        subject=f"objects/{name}",
        time=now,
        description=f"{change} gs://{bucket}/{name}",
    )


def database_event(
    ref: str,
    before: Any,
    after: Any,
    *,
    change: DatabaseChange = "written",
    instance: str | None = None,
    location: str = "us-central1",
    event_id: str | None = None,
) -> HttpEvent:
    """The Realtime Database CloudEvent for a write of `ref` (`users/u1`) from `before` to
    `after` (any JSON value; None: absent): data `{"data": before, "delta": after}` and the
    attributes `instance`, `ref`, `firebasedatabasehost`, `location` db_fn reads. The instance
    defaults to `<project>-default-rtdb`."""
    ref = ref.strip("/")
    instance = instance or f"{_project(None)}-default-rtdb"
    return _cloud_event(
        _DATABASE_TYPE + change,
        f"//firebasedatabase.googleapis.com/projects/_/locations/{location}/instances/{instance}",
        {"data": before, "delta": after},
        event_id=event_id,
        subject=f"refs/{ref}",
        extensions={
            "instance": instance,
            "ref": ref,
            "firebasedatabasehost": "firebaseio.com",
            "location": location,
        },
        description=f"{change} refs/{ref}",
    )


def alert_event(
    alert_type: str = "crashlytics.newFatalIssue",
    payload: Mapping[str, Any] | None = None,
    *,
    app_id: str | None = "1:123456789:android:abcdef",
    project_number: str = "123456789",
    event_id: str | None = None,
) -> HttpEvent:
    """The Firebase Alerts CloudEvent of `alert_type` (`crashlytics.newFatalIssue`,
    `billing.planUpdate`, ...): data `{"createTime", "endTime", "payload"}`, the `alerttype`
    and `appid` attributes. The default payload is a Crashlytics issue, what the
    `crashlytics.*Issue` alerts carry."""
    now = _now()
    if payload is None:
        payload = {
            "@type": "type.googleapis.com/google.events.firebase.firebasealerts.v1."
            "CrashlyticsNewFatalIssuePayload",
            "issue": {"id": "1", "title": "a crash", "subtitle": "in main", "appVersion": "1.0"},
        }
    extensions = {"alerttype": alert_type}
    if app_id is not None:
        extensions["appid"] = app_id
    return _cloud_event(
        _ALERT_TYPE,
        f"//firebasealerts.googleapis.com/projects/{project_number}",
        {"createTime": now, "endTime": now, "payload": dict(payload)},
        event_id=event_id,
        extensions=extensions,
        time=now,
        description=f"alert {alert_type}",
    )


def remote_config_event(
    version_number: int = 1,
    *,
    update_type: str = "INCREMENTAL_UPDATE",
    update_origin: str = "CONSOLE",
    description: str = "",
    project_number: str = "123456789",
    event_id: str | None = None,
) -> HttpEvent:
    """The Remote Config CloudEvent of template version `version_number` being published:
    `ConfigUpdateData` with an update user, origin and type."""
    now = _now()
    data = {
        "versionNumber": str(version_number),
        "updateTime": now,
        "updateUser": {
            "name": "Test User",
            "email": "test@example.com",
            "imageUrl": "https://example.com/user.png",
        },
        "description": description,
        "updateOrigin": update_origin,
        "updateType": update_type,
    }
    return _cloud_event(
        _REMOTE_CONFIG_TYPE,
        f"//firebaseremoteconfig.googleapis.com/projects/{project_number}",
        data,
        event_id=event_id,
        time=now,
        description=f"remote config version {version_number}",
    )


def matrix_event(
    matrix_id: str = "matrix-1",
    *,
    state: str = "FINISHED",
    outcome: str = "SUCCESS",
    project_number: str = "123456789",
    event_id: str | None = None,
) -> HttpEvent:
    """The Test Lab CloudEvent of test matrix `matrix_id` completing with `outcome`."""
    now = _now()
    history = f"projects/{project_number}/histories/bh.1"
    data = {
        "createTime": now,
        "state": state,
        "outcomeSummary": outcome,
        "resultStorage": {
            "toolResultsHistory": history,
            "toolResultsExecution": f"{history}/executions/1",
            "resultsUri": f"https://console.firebase.google.com/project/_/testlab/{matrix_id}",
            "gcsPath": "gs://test-lab-results",
        },
        "clientInfo": {"client": "gcloud", "details": {}},
        "testMatrixId": matrix_id,
    }
    return _cloud_event(
        _TEST_LAB_TYPE,
        f"//firebasetestlab.googleapis.com/projects/{project_number}",
        data,
        event_id=event_id,
        time=now,
        description=f"test matrix {matrix_id} {outcome}",
    )


def custom_event(
    event_type: str,
    data: Any,
    *,
    source: str = "//example.com/source",
    subject: str | None = None,
    extensions: Mapping[str, str] | None = None,
    event_id: str | None = None,
) -> HttpEvent:
    """A CloudEvent of any `event_type` with JSON `data`: an Eventarc custom event
    (`eventarc_fn.on_custom_event_published`), a Data Connect event, or a type newer than
    the builders here (dedup keys it by its id, its subject is the CloudEvent's)."""
    return _cloud_event(
        event_type,
        source,
        data,
        event_id=event_id,
        subject=subject,
        extensions=extensions,
        description=f"{event_type} {subject or ''}".strip(),
    )


def scheduled_request(job: str, schedule_time: datetime | str | None = None) -> HttpEvent:
    """The request Cloud Scheduler sends for one run of `job` (a firebase-functions schedule's
    job is `firebase-schedule-<function>-<region>`): the `X-CloudScheduler-JobName` and
    `X-CloudScheduler-ScheduleTime` headers (RFC 3339; now, to the second, if None), an empty
    body. Every retry of a run carries the same schedule time, which is its dedup identity;
    `id` is `<job>@<schedule time>`."""
    if schedule_time is None:
        schedule_time = datetime.now(UTC).replace(microsecond=0)
    if isinstance(schedule_time, datetime):
        at = schedule_time.astimezone(UTC).isoformat().replace("+00:00", "Z")
    else:
        at = schedule_time
    headers = {
        _JOB_NAME_HEADER: job,
        _SCHEDULE_TIME_HEADER: at,
        "User-Agent": "Google-Cloud-Scheduler",
        "Content-Type": "application/octet-stream",
    }
    return HttpEvent(f"{job}@{at}", headers, b"", f"run of {job} at {at}")


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Requests go straight to the server under test, never through an `HTTP_PROXY`."""

Target = str | Callable[[HttpEvent], int]
"""Where a delivery goes: a URL, or a callable that POSTs the event and returns the HTTP
status (`via_test_client(client)` makes one of a Flask test client)."""


def via_test_client(client: Any, path: str = "/") -> Callable[[HttpEvent], int]:
    """A delivery target that POSTs to a Flask test client (for example
    `functions_framework.create_app(target, source, "cloudevent").test_client()`) in this
    process, instead of over the network."""

    def post(event: HttpEvent) -> int:
        return int(client.post(path, data=event.body, headers=dict(event.headers)).status_code)

    return post


def deliver(url: Target, event: HttpEvent, *, timeout: float = 60.0) -> int:
    """POST `event` to `url` (a URL, or a `Target` callable) once, as the platform does; the
    HTTP status of the answer (a refused connection raises `URLError`)."""
    if callable(url):
        return url(event)
    request = urllib.request.Request(url, data=event.body, headers=dict(event.headers))
    try:
        with _DIRECT.open(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as answered:
        answered.read()
        return int(answered.code)


def deliver_concurrently(
    url: Target, event: HttpEvent, copies: int = 6, *, timeout: float = 60.0
) -> list[int]:
    """POST `copies` copies of `event` to `url` at once, from as many threads; their HTTP
    statuses in the order they were started. With `dedup`, one copy runs the effect; the
    others answer 2xx (a duplicate) or a retryable status (the first still runs: the platform
    would redeliver them), never a second effect."""
    with ThreadPoolExecutor(max_workers=copies) as pool:
        return list(pool.map(lambda _: deliver(url, event, timeout=timeout), range(copies)))


def deliver_until_done(
    url: Target,
    event: HttpEvent,
    *,
    copies: int = 1,
    limit: int = 50,
    timeout: float = 60.0,
) -> list[int]:
    """Deliver `copies` copies at once (one by default), then one at a time until one is
    answered 2xx, as the platform retries (at most `limit` deliveries); every status seen."""
    if copies > 1:
        statuses = deliver_concurrently(url, event, copies, timeout=timeout)
    else:
        statuses = [deliver(url, event, timeout=timeout)]
    while not any(200 <= s < 300 for s in statuses) and len(statuses) < limit:
        statuses.append(deliver(url, event, timeout=timeout))
    return statuses


DEFAULT_REGION = "us-central1"
"""The region firebase-functions deploys to, and the emulator keys triggers by, by default."""


@dataclass(frozen=True)
class EmulatorTrigger:
    """A function's trigger route in the Functions emulator, a `Target`: calling it with an
    event POSTs the event once (a CloudEvent in structured content mode, a scheduled run's
    request as it is) and returns the HTTP status the function answered (the route passes it
    on)."""

    function: str
    """The function's name (its export in main.py)."""
    url: str
    """`http://<host>/functions/projects/<project>/triggers/<region>-<name>-<generation>`."""

    def __call__(self, event: HttpEvent) -> int:
        """POST `event` once; the HTTP status."""
        sent = event.structured() if any(k.lower() == "ce-id" for k in event.headers) else event
        return deliver(self.url, sent)


def emulator_trigger(
    function: str,
    *,
    host: str | None = None,
    project: str | None = None,
    region: str = DEFAULT_REGION,
) -> EmulatorTrigger:
    """The trigger route of `function` in the Functions emulator at `host` (default: the one
    the emulator hub lists, FIREBASE_EMULATOR_HUB, which `firebase emulators:exec` sets; else
    `127.0.0.1:5001`, the Firebase CLI's default port), for `project` (default:
    GCLOUD_PROJECT / GOOGLE_CLOUD_PROJECT, else `DEFAULT_PROJECT`).

    The emulator names its trigger keys only in the 404 answer to an unknown one: this asks
    once and takes the highest generation of `<region>-<function>-<generation>` (the
    enabled trigger; a trigger with an Eventarc channel has `-<channel>` after it). Ask
    again after the emulator reloads the functions. `LookupError` when it lists none."""
    where = host or _hub_functions_host() or "127.0.0.1:5001"
    base = f"http://{where.removeprefix('http://')}/functions/projects/{_project(project)}/triggers"
    probe = HttpEvent("probe", {"Content-Type": "application/json"}, b"{}")
    request = urllib.request.Request(f"{base}/{region}-{function}-none", data=probe.body)
    try:
        with _DIRECT.open(request, timeout=30) as answer:
            listed = answer.read().decode(errors="replace")
    except urllib.error.HTTPError as refused:
        listed = refused.read().decode(errors="replace")
    prefix = f"{region}-{function}-"
    keys: dict[int, str] = {}
    for key in (part.strip() for part in listed.partition("valid functions are:")[2].split(",")):
        generation = key.removeprefix(prefix).partition("-")[0]
        if key.startswith(prefix) and generation.isdigit():
            keys[int(generation)] = key
    if not keys:
        raise LookupError(f"the Functions emulator at {where} has no trigger {prefix}<n>: {listed}")
    return EmulatorTrigger(function, f"{base}/{keys[max(keys)]}")


def _hub_functions_host() -> str | None:
    """host:port of the Functions emulator the emulator hub lists, or None (no hub, or no
    Functions emulator in it)."""
    hub = os.environ.get("FIREBASE_EMULATOR_HUB")
    if not hub:
        return None
    try:
        with _DIRECT.open(f"http://{hub}/emulators", timeout=10) as answer:
            listed = json.loads(answer.read())
    except (OSError, ValueError):
        return None
    functions = listed.get("functions") if isinstance(listed, dict) else None
    if not isinstance(functions, dict) or "port" not in functions:
        return None
    return f"{functions.get('host', '127.0.0.1')}:{functions['port']}"


@dataclass(frozen=True)
class FirestoreEmulator:
    """A running Firestore emulator: where it listens and the project the tests use."""

    host: str
    """`host:port`, as `FIRESTORE_EMULATOR_HOST` gives it."""
    project: str
    """The project whose documents `clear` deletes and `client` reads."""

    @property
    def documents_url(self) -> str:
        """The emulator's REST endpoint of the `(default)` database's documents."""
        return (
            f"http://{self.host}/emulator/v1/projects/{quote(self.project)}"
            "/databases/(default)/documents"
        )

    def clear(self, *, timeout: float = 30.0) -> None:
        """Delete every document of the project's `(default)` database on the emulator (the
        dedup records and the effects alike); `RuntimeError` if the emulator refuses."""
        request = urllib.request.Request(self.documents_url, method="DELETE")
        try:
            with _DIRECT.open(request, timeout=timeout) as response:
                response.read()
        except urllib.error.HTTPError as refused:
            raise RuntimeError(
                f"the Firestore emulator at {self.host} refused to clear: {refused.code}"
            ) from None

    def client(self) -> firestore.Client:
        """A Firestore client of the project on the emulator (the client library finds it
        through `FIRESTORE_EMULATOR_HOST`, set to `host` here if it is not)."""
        from google.cloud import firestore

        os.environ.setdefault("FIRESTORE_EMULATOR_HOST", self.host)
        return firestore.Client(project=self.project)


def firestore_emulator(project: str | None = None) -> FirestoreEmulator:
    """The Firestore emulator `FIRESTORE_EMULATOR_HOST` points at, for `project` (default:
    `GCLOUD_PROJECT`, `GOOGLE_CLOUD_PROJECT`, else `DEFAULT_PROJECT`); `RuntimeError` when the
    variable is unset, so a test never reaches a real database by mistake."""
    host = os.environ.get("FIRESTORE_EMULATOR_HOST")
    if not host:
        raise RuntimeError(
            "FIRESTORE_EMULATOR_HOST is not set: start the Firestore emulator "
            "(`gcloud emulators firestore start` or `firebase emulators:exec`) and export it"
        )
    return FirestoreEmulator(host=host, project=_project(project))
