"""The builders of events as the platform delivers them, one per firebase-functions
decorator (the list is in `dedup.testing`'s docstring), and the types and changes they take."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from dedup.kinds import pubsub
from dedup.testing.event import HttpEvent, cloud_event, now_rfc3339, project_or_default

__all__ = [
    "PUBSUB_TYPE",
    "DatabaseChange",
    "StorageChange",
    "alert_event",
    "custom_event",
    "database_event",
    "matrix_event",
    "pubsub_event",
    "remote_config_event",
    "scheduled_request",
    "storage_event",
]

StorageChange = Literal["finalized", "deleted", "archived", "metadataUpdated"]
"""The change a Cloud Storage object event is about."""
DatabaseChange = Literal["written", "created", "updated", "deleted"]
"""The change a Realtime Database event is about."""
PUBSUB_TYPE = pubsub.TYPE
"""The CloudEvent type of a Pub/Sub message."""
_STORAGE_TYPE = "google.cloud.storage.object.v1."
_DATABASE_TYPE = "google.firebase.database.ref.v1."
_ALERT_TYPE = "google.firebase.firebasealerts.alerts.v1.published"
_REMOTE_CONFIG_TYPE = "google.firebase.remoteconfig.remoteConfig.v1.updated"
_TEST_LAB_TYPE = "google.firebase.testlab.testMatrix.v1.completed"
_SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
_JOB_NAME_HEADER = "X-CloudScheduler-JobName"


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
    project = project_or_default(project)
    message_id = message_id or str(uuid.uuid4().int)[:16]
    published = now_rfc3339()
    subscription = f"projects/{project}/subscriptions/eventarc-{topic}"
    body = pubsub.push_body(message_id, data, attributes or {}, published, subscription)
    return cloud_event(
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
    now = now_rfc3339()
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
    return cloud_event(
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
    instance = instance or f"{project_or_default(None)}-default-rtdb"
    return cloud_event(
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
    now = now_rfc3339()
    if payload is None:
        payload = {
            "@type": "type.googleapis.com/google.events.firebase.firebasealerts.v1."
            "CrashlyticsNewFatalIssuePayload",
            "issue": {"id": "1", "title": "a crash", "subtitle": "in main", "appVersion": "1.0"},
        }
    extensions = {"alerttype": alert_type}
    if app_id is not None:
        extensions["appid"] = app_id
    return cloud_event(
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
    now = now_rfc3339()
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
    return cloud_event(
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
    now = now_rfc3339()
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
    return cloud_event(
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
    return cloud_event(
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
