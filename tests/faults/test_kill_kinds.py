"""SIGKILL inside the handler of a Storage trigger and of a scheduled function, then the
platform's retry: the effect happens once.

`register_upload` (transaction mode) is killed between its two buffered writes: nothing was
committed, the retry commits both with the marker once. `daily_digest` (lease mode) is killed
before its POST: the retry after the lease (5 s here, `SERVED_LEASE_SECONDS`) posts the digest
once. Both are served by functions-framework from the crash source
(`tests/faults/crash_functions.py`) as the gcloud path serves them, the Storage event a
captured payload in hand-built CloudEvent attributes, the scheduled request built as Cloud
Scheduler sends it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.cloud import firestore

from demo.events import HttpEvent
from demo.receiver import Receiver
from demo.serve import ROOT, served_function
from tests.dedup.test_kinds import captured
from tests.faults.support import (
    CRASH_SOURCE,
    NO_ANSWER,
    SERVED_LEASE_SECONDS,
    crash_during,
    redeliver_until_acknowledged,
    unique,
)

pytestmark = pytest.mark.needs_emulators
LEASE = {"DEDUP_LEASE_SECONDS": str(SERVED_LEASE_SECONDS)}
CRASH = {"PYTHONPATH": str(ROOT), "CRASH_AT": "in_handler"}
"""The crash source lives outside the root and imports main.py from it."""
BUCKET = "demo-exactly-once.appspot.com"


def upload(name: str, size: int) -> HttpEvent:
    data = {**captured("StorageObjectData-simple"), "bucket": BUCKET, "name": name}
    data |= {"size": str(size), "id": f"{BUCKET}/{name}/1587627537231057"}
    headers = {
        "ce-id": f"kill-{name}",
        "ce-type": "google.cloud.storage.object.v1.finalized",
        "ce-source": f"//storage.googleapis.com/projects/_/buckets/{BUCKET}",
        "ce-subject": f"objects/{name}",
        "ce-specversion": "1.0",
        "ce-time": "2026-12-02T08:00:00.000Z",
        "Content-Type": "application/json",
    }
    return HttpEvent(id=headers["ce-id"], headers=headers, body=json.dumps(data).encode())


def test_an_upload_killed_in_its_handler_is_registered_once(
    tmp_path: Path, firestore_client: firestore.Client
) -> None:
    """Killed mid-handler, the upload wrote nothing; the retry on a fresh instance adds the
    object's size once and writes its `uploads/` document once."""
    uid = f"k{unique()}"
    event = upload(f"uploads/{uid}/photo.png", 42)
    crash_file = tmp_path / "upload.crash"
    env = {**LEASE, **CRASH, "CRASH_FILE": str(crash_file), "UPLOAD_BUCKET": BUCKET}
    with served_function(
        "register_upload", env, log=tmp_path / "crash.log", source=CRASH_SOURCE
    ) as doomed:
        assert crash_during(doomed, crash_file, "in_handler", event).status == NO_ANSWER
    assert firestore_client.document(f"users/{uid}").get().to_dict() is None  # nothing committed
    with served_function("register_upload", {**LEASE, "UPLOAD_BUCKET": BUCKET}) as fresh:
        answers = redeliver_until_acknowledged(fresh, event, within=60)
        assert answers[-1].acknowledged
        assert redeliver_until_acknowledged(fresh, event, within=30)[-1].acknowledged  # again
    user = firestore_client.document(f"users/{uid}").get().to_dict() or {}
    assert user.get("uploadedBytes") == 42
    uploads = [d for d in firestore_client.collection("uploads").stream() if d.get("uid") == uid]
    assert len(uploads) == 1


def test_a_scheduled_run_killed_in_its_handler_posts_once(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Killed before its POST, the run holds an expiring lease; Cloud Scheduler's retry (on a
    fresh instance, after the lease) posts the digest once, and a later retry posts nothing."""
    job = f"firebase-schedule-daily_digest-{unique()}"
    headers = {
        "X-CloudScheduler-JobName": job,
        "X-CloudScheduler-ScheduleTime": "2026-12-02T08:00:00Z",
    }
    run = HttpEvent(id=f"{job}@2026-12-02T08:00:00Z", headers=headers, body=b"")
    settings = {
        **LEASE,
        "DIGEST_URL": f"{receiver.base_url}/digest",
        "DIGEST_TIME_ZONE": "UTC",
    }
    crash_file = tmp_path / "digest.crash"
    doomed_env = {**settings, **CRASH, "CRASH_FILE": str(crash_file)}
    with served_function(
        "daily_digest", doomed_env, log=tmp_path / "crash.log", source=CRASH_SOURCE,
        signature_type="http",
    ) as doomed:  # fmt: skip
        assert crash_during(doomed, crash_file, "in_handler", run).status == NO_ANSWER
    assert receiver.applied("/digest") == []
    with served_function("daily_digest", settings, signature_type="http") as fresh:
        assert redeliver_until_acknowledged(fresh, run, within=60)[-1].acknowledged
        assert redeliver_until_acknowledged(fresh, run, within=30)[-1].acknowledged
    sent = receiver.applied("/digest")
    assert len(sent) == 1
    assert json.loads(sent[0].body)["date"] == "2026-12-01"
