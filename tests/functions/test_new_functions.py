"""register_upload, daily_digest and alert_new_fatal_issue, served from main.py as the gcloud
path serves them (functions-framework, `cloudevent` for the two events, `http` for the
schedule), on the Firestore emulator: concurrent copies of one event or run give one effect.

The Storage and Crashlytics events are Google's captured payloads (`tests/dedup/captured/`) in
hand-built CloudEvent attributes; the scheduled requests are built as Cloud Scheduler sends
them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import functions_framework
import pytest
from google.cloud import firestore

from demo.receiver import Receiver
from tests.dedup.test_kinds import captured, post_until_done
from tests.functions.conftest import MAIN

COPIES = 6
pytestmark = pytest.mark.needs_emulators  # the functions write to and read from Firestore


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, receiver: Receiver) -> None:
    monkeypatch.setenv("DIGEST_URL", f"{receiver.base_url}/digest")
    monkeypatch.setenv("CHAT_WEBHOOK_URL", f"{receiver.base_url}/chat")
    monkeypatch.setenv("DIGEST_TIME_ZONE", "UTC")


def cloudevent_app(name: str) -> Any:
    return functions_framework.create_app(name, MAIN, "cloudevent").test_client()


def poster(app: Any, headers: dict[str, str], body: Any) -> Callable[[], int]:
    return lambda: int(app.post("/", headers=headers, data=json.dumps(body)).status_code)


def storage_event(unique: str, name: str, size: int) -> tuple[dict[str, str], dict[str, Any]]:
    data = captured("StorageObjectData-simple")
    generation = "1587627537231057"
    data.update(
        bucket="demo-exactly-once.appspot.com",
        name=name,
        size=str(size),
        id=f"demo-exactly-once.appspot.com/{name}/{generation}",
    )
    return {
        "ce-id": f"upload-{unique}-{name}",
        "ce-type": "google.cloud.storage.object.v1.finalized",
        "ce-source": "//storage.googleapis.com/projects/_/buckets/demo-exactly-once.appspot.com",
        "ce-subject": f"objects/{name}",
        "ce-specversion": "1.0",
        "ce-time": "2026-12-02T08:00:00.000Z",
        "Content-Type": "application/json",
    }, data


def test_register_upload_counts_each_object_once(
    unique: str, firestore_client: firestore.Client
) -> None:
    """Concurrent copies of two finalized objects add each size once; an object outside
    uploads/<uid>/ changes nothing."""
    app = cloudevent_app("register_upload")
    uid = f"u{unique}"
    for name, size in ((f"uploads/{uid}/a.png", 100), (f"uploads/{uid}/b.png", 23)):
        statuses = post_until_done(poster(app, *storage_event(unique, name, size)))
        assert any(s == 200 for s in statuses), statuses
    assert post_until_done(poster(app, *storage_event(unique, "other/x.png", 7)))[0] == 200
    user = firestore_client.document(f"users/{uid}").get().to_dict() or {}
    assert user.get("uploadedBytes") == 123
    uploads = [d for d in firestore_client.collection("uploads").stream() if (d.get("uid") == uid)]
    assert len(uploads) == 2


def test_alert_new_fatal_issue_posts_each_alert_once(
    unique: str, settings: None, receiver: Receiver
) -> None:
    """Concurrent copies of one Crashlytics alert post one chat message; another alert posts
    another."""
    app = cloudevent_app("alert_new_fatal_issue")
    for n in range(2):
        headers = {
            "ce-id": f"alert-{unique}-{n}",
            "ce-type": "google.firebase.firebasealerts.alerts.v1.published",
            "ce-source": "//firebasealerts.googleapis.com/projects/123",
            "ce-alerttype": "crashlytics.newFatalIssue",
            "ce-appid": "1:123:android:abc",
            "ce-specversion": "1.0",
            "ce-time": "2026-12-02T08:00:00.000Z",
            "Content-Type": "application/json",
        }
        statuses = post_until_done(poster(app, headers, captured("AlertData-simple")))
        assert any(s == 200 for s in statuses), statuses
    sent = receiver.applied("/chat")
    assert len(sent) == 2
    assert len({attempt.idempotency_key for attempt in sent}) == 2
    assert "Some title" in sent[0].body.decode()


def test_daily_digest_posts_once_per_scheduled_run(
    unique: str, settings: None, receiver: Receiver
) -> None:
    """Two scheduled runs and their retries post two digests; a request without
    X-CloudScheduler-ScheduleTime posts nothing and gets no 2xx."""
    app = functions_framework.create_app("daily_digest", MAIN, "http").test_client()
    job = f"firebase-schedule-daily_digest-{unique}"
    for at in ("2026-12-01T08:00:00Z", "2026-12-02T08:00:00Z"):
        headers = {"X-CloudScheduler-JobName": job, "X-CloudScheduler-ScheduleTime": at}

        def post(headers: dict[str, str] = headers) -> int:
            return int(app.post("/", headers=headers).status_code)

        statuses = post_until_done(post)
        assert any(s == 200 for s in statuses), statuses
    status = app.post("/", headers={"X-CloudScheduler-JobName": job}).status_code
    assert not 200 <= status < 300
    sent = receiver.applied("/digest")
    assert len(sent) == 2
    assert sorted(json.loads(a.body)["date"] for a in sent) == ["2026-11-30", "2026-12-01"]
