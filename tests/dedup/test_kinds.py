"""Every event trigger of firebase-functions runs its effect once per event.

Each function of `tests/dedup/kinds_app.py` is written the README's way (the platform's decorator
over `@trigger_once`) and served by functions-framework as the gcloud path serves it
(`cloudevent` signature for events, `http` for the schedule), against the Firestore emulator.
The events' data are Google's captured payloads (`tests/dedup/captured/`); the CloudEvent
attributes around them are hand-built as each platform source sends them, and so are the custom
event and the Cloud Scheduler requests.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from google.cloud import firestore

from dedup.kinds import describe, kind_of

HERE = Path(__file__).parent
APP = str(HERE / "kinds_app.py")
COPIES = 6


def captured(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "captured" / f"{name}.json").read_text())
    return data


def storage(event_id: str, name: str = "folder/Test.cs") -> tuple[dict[str, str], Any]:
    data = {**captured("StorageObjectData-simple"), "name": name}
    return {
        "ce-type": "google.cloud.storage.object.v1.finalized",
        "ce-source": "//storage.googleapis.com/projects/_/buckets/some-bucket",
        "ce-subject": f"objects/{name}",
    }, data


def database(event_id: str) -> tuple[dict[str, str], Any]:
    return {
        "ce-type": "google.firebase.database.ref.v1.written",
        "ce-source": (
            "//firebasedatabase.googleapis.com/projects/_/locations/us-central1/instances/demo"
        ),
        "ce-subject": "refs/users/u1",
        "ce-instance": "demo",
        "ce-ref": "users/u1",
        "ce-firebasedatabasehost": "firebaseio.com",
        "ce-location": "us-central1",
    }, captured("ReferenceEventData-simple")


def custom(event_id: str) -> tuple[dict[str, str], Any]:
    return {
        "ce-type": "com.example.order.paid",
        "ce-source": "//example.com/orders",
        "ce-subject": "orders/o1",
    }, {"order": "o1", "amount": 3}


def alert(
    event_id: str, alert_type: str = "crashlytics.newNonfatalIssue"
) -> tuple[dict[str, str], Any]:
    return {
        "ce-type": "google.firebase.firebasealerts.alerts.v1.published",
        "ce-source": "//firebasealerts.googleapis.com/projects/123",
        "ce-alerttype": alert_type,
        "ce-appid": "1:123:android:abc",
    }, captured("AlertData-simple")


def fatal(event_id: str) -> tuple[dict[str, str], Any]:
    return alert(event_id, "crashlytics.newFatalIssue")


def remote_config(event_id: str) -> tuple[dict[str, str], Any]:
    return {
        "ce-type": "google.firebase.remoteconfig.remoteConfig.v1.updated",
        "ce-source": "//firebaseremoteconfig.googleapis.com/projects/123",
    }, captured("RemoteConfigEventData-simple")


def matrix_event(event_id: str) -> tuple[dict[str, str], Any]:
    data = captured("TestMatrixEventData-simple")
    data["clientInfo"] = data.pop("client_info")
    return {
        "ce-type": "google.firebase.testlab.testMatrix.v1.completed",
        "ce-source": "//firebasetestlab.googleapis.com/projects/123",
    }, data


KINDS: dict[str, tuple[str, Callable[[str], tuple[dict[str, str], Any]]]] = {
    "storage": ("on_upload", storage),
    "database": ("on_value", database),
    "custom": ("on_custom", custom),
    "alerts": ("on_alert", alert),
    "crashlytics": ("on_fatal", fatal),
    "remote_config": ("on_config", remote_config),
    "test_lab": ("on_matrix", matrix_event),
}


def post_until_done(post: Callable[[], int]) -> list[int]:
    """`COPIES` concurrent posts, then the platform's retries of the refused ones, one at a
    time, until one answers 2xx; every status seen."""
    with ThreadPoolExecutor(COPIES) as pool:
        statuses = list(pool.map(lambda _: post(), range(COPIES)))
    for _ in range(50):
        if any(200 <= s < 300 for s in statuses):
            break
        statuses.append(post())
    return statuses


def effects(client: firestore.Client) -> dict[str, dict[str, Any]]:
    return {d.id: d.to_dict() or {} for d in client.collection("effects").stream()}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_concurrent_duplicates_give_one_effect_and_another_event_another(
    kind: str, firestore_client: firestore.Client
) -> None:
    """Concurrent copies of one event give one effect and one `sent` record keyed by the
    CloudEvent id; a different event gives another effect under another key."""
    target, build = KINDS[kind]
    app = functions_framework.create_app(target, APP, "cloudevent").test_client()
    ids = [f"{kind}-{uuid.uuid4().hex}", f"{kind}-{uuid.uuid4().hex}"]
    for event_id in ids:
        attributes, data = build(event_id)
        headers = {
            **attributes,
            "ce-id": event_id,
            "ce-specversion": "1.0",
            "ce-time": "2026-12-02T08:00:00.123Z",
            "Content-Type": "application/json",
        }

        def post(headers: dict[str, str] = headers, data: Any = data) -> int:
            return int(app.post("/", headers=headers, data=json.dumps(data)).status_code)

        statuses = post_until_done(post)
        assert any(200 <= s < 300 for s in statuses), statuses
    found = effects(firestore_client)
    assert sorted(found) == sorted(f"{i}-{target_suffix(target)}" for i in ids)
    assert all(e["n"] == 1 for e in found.values()), found
    for key in found:
        record = firestore_client.document(f"triggerEvents/{key}").get().to_dict() or {}
        assert record.get("state") == "sent", record
        assert record.get("source") == attributes["ce-source"], record  # the event's source
    if kind == "storage":
        snapshot = firestore_client.document(f"triggerEvents/{sorted(found)[0]}").get()
        assert snapshot.get("subject") == "buckets/some-bucket/objects/folder/Test.cs"
    if kind == "database":
        snapshot = firestore_client.document(f"triggerEvents/{sorted(found)[0]}").get()
        assert snapshot.get("subject") == "refs/users/u1"


def target_suffix(target: str) -> str:
    return {
        "on_upload": "kStorage",
        "on_value": "kDatabase",
        "on_custom": "kCustom",
        "on_alert": "kAlert",
        "on_fatal": "kFatal",
        "on_config": "kConfig",
        "on_matrix": "kTestLab",
    }[target]


def scheduler_headers(job: str, at: str | None) -> dict[str, str]:
    headers = {"X-CloudScheduler-JobName": job, "User-Agent": "Google-Cloud-Scheduler"}
    if at is not None:
        headers["X-CloudScheduler-ScheduleTime"] = at
    return headers


def test_scheduled_runs_once_per_job_and_schedule_time(firestore_client: firestore.Client) -> None:
    """Every retry of one scheduled run is one run; two schedule times are two runs; a request
    without a usable `X-CloudScheduler-ScheduleTime` runs nothing, writes no record and gets
    no 2xx answer."""
    app = functions_framework.create_app("on_tick", APP, "http").test_client()
    job = f"firebase-schedule-on_tick-{uuid.uuid4().hex[:8]}"
    for at in ("2026-12-01T08:00:00Z", "2026-12-02T08:00:00.000Z"):

        def post(at: str = at) -> int:
            return int(app.post("/", headers=scheduler_headers(job, at)).status_code)

        statuses = post_until_done(post)
        assert any(200 <= s < 300 for s in statuses), statuses
    found = effects(firestore_client)
    assert sorted(found) == [
        f"{job}@2026-12-01T08:00:00Z-kSchedule",
        f"{job}@2026-12-02T08:00:00Z-kSchedule",
    ]
    assert all(e["n"] == 1 for e in found.values())
    record = firestore_client.document(f"triggerEvents/{sorted(found)[0]}").get()
    assert record.get("subject") == f"jobs/{job}/runs/2026-12-01T08:00:00Z"
    assert record.get("source") == f"jobs/{job}"
    records = len(list(firestore_client.collection("triggerEvents").stream()))
    for bad in (None, "yesterday at eight"):
        status = app.post("/", headers=scheduler_headers(job, bad)).status_code
        assert not 200 <= status < 300, status
    assert len(effects(firestore_client)) == 2
    assert len(list(firestore_client.collection("triggerEvents").stream())) == records


def test_a_different_payload_under_a_reused_id_is_another_fingerprint() -> None:
    """The fingerprint covers each kind's data: a Storage object of another name under the
    same CloudEvent id fingerprints differently (refused as a payload mismatch by the core)."""
    from cloudevents.http import CloudEvent

    first, second = (
        describe(CloudEvent({**_attrs(storage("x", n)[0]), "id": "x"}, storage("x", n)[1]))
        for n in ("a.txt", "b.txt")
    )
    assert first.event_id == second.event_id == "x"
    assert first.payload != second.payload
    assert first.subject == "buckets/some-bucket/objects/a.txt"


def _attrs(headers: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix("ce-"): v for k, v in headers.items()} | {"specversion": "1.0"}


def test_every_kind_of_the_table_is_found_by_its_type() -> None:
    """Each CloudEvent type a firebase-functions trigger declares maps to its kind."""
    assert kind_of("google.cloud.storage.object.v1.finalized").name == "storage"
    assert kind_of("google.cloud.storage.object.v1.metadataUpdated").name == "storage"
    assert kind_of("google.firebase.database.ref.v1.deleted").name == "database"
    assert kind_of("google.firebase.firebasealerts.alerts.v1.published").name == "alerts"
    assert kind_of("google.firebase.testlab.testMatrix.v1.completed").name == "test_lab"
    assert kind_of("com.example.order.paid").name == "custom"


def test_a_copy_that_finds_a_live_lease_is_retried_without_a_traceback(
    firestore_client: firestore.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Copies that arrive while the first one works answer 500, which every transport retries,
    and log the delivery's WARNING line (`lease_held`) only: no traceback from
    functions-framework's app, in a project without the template's error handlers."""
    app = functions_framework.create_app("on_slow_upload", APP, "cloudevent").test_client()
    attributes, data = storage("slow")
    event_id = f"slow-{uuid.uuid4().hex}"
    headers = {
        **attributes,
        "ce-source": "//storage.googleapis.com/projects/_/buckets/slow-bucket",
        "ce-id": event_id,
        "ce-specversion": "1.0",
        "ce-time": "2026-12-02T08:00:00.123Z",
        "Content-Type": "application/json",
    }
    with caplog.at_level(logging.INFO), ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda _: app.post("/", headers=headers, data=json.dumps(data)),
                range(4),
            )
        )
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses[0] == 200, statuses
    assert statuses[-1] == 500, statuses
    refused = [answer for answer in answers if answer.status_code == 500]
    assert all("leased" in answer.get_data(as_text=True) for answer in refused)
    assert [r for r in caplog.records if r.exc_info] == []
    assert not any("Traceback" in r.getMessage() for r in caplog.records)
    assert effects(firestore_client)[f"{event_id}-kSlow"]["n"] == 1


def test_a_scheduled_copy_that_finds_a_live_lease_logs_no_traceback(
    firestore_client: firestore.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Under firebase-functions' scheduler wrapper, which logs every exception with its traceback,
    copies of one run that find its lease live still answer 500 (Cloud Scheduler retries) and log
    the delivery's WARNING line (`lease_held`) only; the run's effect happens once."""
    app = functions_framework.create_app("on_slow_tick", APP, "http").test_client()
    job = f"firebase-schedule-on_slow_tick-{uuid.uuid4().hex[:8]}"
    headers = scheduler_headers(job, "2026-12-03T09:00:00Z")
    with caplog.at_level(logging.INFO), ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: app.post("/", headers=headers), range(4)))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses[0] == 200, statuses
    assert statuses[-1] == 500, statuses
    assert [r for r in caplog.records if r.exc_info] == []
    assert not any("Traceback" in r.getMessage() for r in caplog.records)
    held = [r for r in caplog.records if "lease_held" in r.getMessage()]
    assert held
    assert all(r.levelno == logging.WARNING for r in held)
    assert effects(firestore_client)[f"{job}@2026-12-03T09:00:00Z-kSlowTick"]["n"] == 1


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_malformed_request_of_every_kind_is_refused_4xx_with_nothing_written(
    kind: str, firestore_client: firestore.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A body that does not parse, and (but for custom events, whose data is the publisher's
    own) data the platform's decorator cannot read as its kind, get a 4xx before the dedup
    wrapper: no record, no effect, no traceback (`dedup.entrances.answers.guard_app`, in a project
    without the template's error handlers)."""
    target, build = KINDS[kind]
    app = functions_framework.create_app(target, APP, "cloudevent").test_client()
    attributes, _ = build("malformed")
    headers = {
        **attributes,
        "ce-id": f"malformed-{uuid.uuid4().hex}",
        "ce-specversion": "1.0",
        "ce-time": "2026-12-02T08:00:00.123Z",
        "Content-Type": "application/json",
    }
    bodies = ["{not json", "[1, 2]"] if kind != "custom" else ["{not json"]
    with caplog.at_level(logging.INFO):
        statuses = [app.post("/", headers=headers, data=body).status_code for body in bodies]
    assert all(400 <= status < 500 for status in statuses), statuses
    assert list(firestore_client.collection("triggerEvents").stream()) == []
    assert effects(firestore_client) == {}
    assert [r for r in caplog.records if r.exc_info] == []
