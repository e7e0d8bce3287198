"""The event half the Functions emulator serves: `register_upload`, `daily_digest` and
`alert_new_fatal_issue`, each reached the way the platform reaches it, duplicates included.

* **Uploads**: no Storage emulator runs here, but the Functions emulator registers the Storage
  trigger all the same. The demo plays Eventarc delivering a Cloud Storage event: the
  binary-mode CloudEvent (`ce-*` headers, the object's metadata as JSON, shaped like Google's
  captured payload in `tests/dedup/captured/`) POSTed to the emulator's trigger route
  `/functions/projects/<project>/triggers/<trigger key>`, `COPIES` copies at once, each failed
  copy retried. Two objects under `uploads/<uid>/`, and one outside it (ignored).
* **Schedule**: there is no Cloud Scheduler emulator, so the demo plays Cloud Scheduler: two
  runs, each a POST with `X-CloudScheduler-JobName` and its own
  `X-CloudScheduler-ScheduleTime`, `COPIES` copies at once and retried; then a request without
  a schedule time, sent 1 + the job's retry count times (Scheduler retries a 4xx too): 400,
  nothing runs. The emulator serves a scheduled function at no HTTP URL (it subscribes it to
  the topic `firebase-schedule-<name>`, whose pushes carry no schedule time), so the requests
  go to its trigger route.
* **Alerts**: each alert is published twice (the same event, at once) to the Eventarc emulator
  (`POST /google/publishEvents`), which routes it by type and `alerttype` to the function's
  trigger in the Functions emulator. It neither reports the function's answer nor retries, so
  the demo waits for the chat message and publishes the alert again when none came in time,
  as Eventarc's retry would.

The emulator's functions deliver where `.env.local` points them (`DIGEST_URL`,
`CHAT_WEBHOOK_URL`): the demo's receiver listens there.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from dedup.cli.dotenv import parse
from demo.events import HttpEvent
from demo.http_story import CLIENT_TIMEOUT_SECONDS, NO_ANSWER, Outcome
from demo.platform import DeliveryLog, deliver_at_least_once
from demo.receiver import Receiver
from tools.emulators import REGION, ROOT, configured_ports

CAPTURED = ROOT / "tests" / "dedup" / "captured"
"""Google's captured event payloads (`tests/dedup/captured/README.md` says where each is from)."""
UPLOAD_SIZES = {"a.png": 100, "b.pdf": 23}
DIGEST_PATH = "/digest"
CHAT_PATH = "/chat"
SCHEDULE_RETRY_COUNT = 3
"""`daily_digest`'s `retry_count`: Cloud Scheduler sends a refused request this many times
more."""
ALERTS = 2
ALERT_COPIES = 2
ALERT_WAIT_SECONDS = 45.0
"""How long the demo waits for an alert's chat message before publishing it again (the first
delivery starts the emulator's Python worker)."""
ALERT_PUBLISHES = 4
"""At most this many rounds of publishing one alert."""
TRIGGER_TYPES = {
    "storage": "google.cloud.storage.object.v1.finalized",
    "alert": "google.firebase.firebasealerts.alerts.v1.published",
}


def env_local() -> dict[str, str]:
    """The variables `.env.local` gives the Functions emulator's functions."""
    return parse((ROOT / ".env.local").read_text())[0]


def receiver_port() -> int:
    """The port `.env.local` points the emulator's functions at (its NOTIFY_URL's)."""
    port = urlsplit(env_local().get("NOTIFY_URL", "")).port
    return int(port or 7765)


def functions_host() -> str:
    """host:port of the Functions emulator, from firebase.json."""
    host, port = configured_ports()["functions"]
    return f"{host}:{port}"


def eventarc_url() -> str:
    """The Eventarc emulator's base URL: CLOUD_EVENTARC_EMULATOR_HOST (which `firebase
    emulators:exec` exports), else firebase.json's."""
    if url := os.environ.get("CLOUD_EVENTARC_EMULATOR_HOST"):
        return url if url.startswith("http") else f"http://{url}"
    host, port = configured_ports()["eventarc"]
    return f"http://{host}:{port}"


def captured(name: str) -> dict[str, Any]:
    """One of Google's captured payloads."""
    data: dict[str, Any] = json.loads((CAPTURED / f"{name}.json").read_text())
    return data


@dataclass(frozen=True)
class EmulatorTrigger:
    """A function's trigger route in the Functions emulator: POST an event, get the status (the
    emulator passes the function's on); no answer in time is `NO_ANSWER` (a worker that lost
    the race for its port never answers), delivered again like any failure."""

    name: str
    url: str

    def deliver(self, event: HttpEvent) -> int:
        """POST the event once; the HTTP status."""
        try:
            return requests.post(
                self.url, data=event.body, headers=dict(event.headers),
                timeout=CLIENT_TIMEOUT_SECONDS,
            ).status_code  # fmt: skip
        except (requests.ConnectionError, requests.Timeout):
            return NO_ANSWER


def trigger_route(project: str, function: str) -> EmulatorTrigger:
    """The Functions emulator's background-trigger route of `function`, as it is now.

    The emulator keys an event trigger `<region>-<name>-<generation>`, the generation counting
    its reloads (every `enableBackgroundTriggers` is one), and says the keys only in the 404 of
    an unknown one; the highest generation is the enabled trigger."""
    base = f"http://{functions_host()}/functions/projects/{project}/triggers"
    answer = requests.post(f"{base}/{REGION}-{function}-unknown", data=b"{}", timeout=30)
    listed = answer.text.partition("valid functions are:")[2]
    prefix = f"{REGION}-{function}-"
    generations = [
        int(key.removeprefix(prefix))
        for key in (part.strip() for part in listed.split(","))
        if key.startswith(prefix) and key.removeprefix(prefix).isdigit()
    ]
    if answer.status_code != 404 or not generations:
        raise RuntimeError(f"the Functions emulator has no trigger {prefix}<n>: {answer.text}")
    return EmulatorTrigger(function, f"{base}/{prefix}{max(generations)}")


def storage_event(bucket: str, name: str, size: int, generation: str) -> HttpEvent:
    """The CloudEvent Eventarc delivers when object `name` of `bucket` is finalized."""
    data = captured("StorageObjectData-simple")
    object_id = f"{bucket}/{name}/{generation}"
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    data.update(
        bucket=bucket, name=name, size=str(size), generation=generation, id=object_id,
        selfLink=f"https://www.googleapis.com/storage/v1/b/{bucket}/o/{name}",
        mediaLink=f"https://www.googleapis.com/download/storage/v1/b/{bucket}/o/{name}",
        timeCreated=now, updated=now, timeStorageClassUpdated=now,
    )  # fmt: skip
    event_id = str(uuid.uuid4())
    headers = {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-type": TRIGGER_TYPES["storage"],
        "ce-source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        "ce-subject": f"objects/{name}",
        "ce-time": now,
        "Content-Type": "application/json",
    }
    return HttpEvent(event_id, headers, json.dumps(data).encode(), f"finalized {object_id}")


def play_uploads(project: str, db: firestore.Client) -> Outcome:
    """Two objects under uploads/<uid>/ and one outside, each delivered `COPIES` times at once."""
    bucket = env_local().get("UPLOAD_BUCKET") or f"{project}.appspot.com"
    route = trigger_route(project, "register_upload")
    uid = f"uploader-{uuid.uuid4().hex[:8]}"
    log = DeliveryLog()
    generation = str(time.time_ns() // 1000)
    for file, size in UPLOAD_SIZES.items():
        deliver_at_least_once(
            route, storage_event(bucket, f"uploads/{uid}/{file}", size, generation), log
        )
    deliver_at_least_once(route, storage_event(bucket, f"public/{uid}.png", 7, generation), log)
    uploads = [
        doc.to_dict() or {}
        for doc in db.collection("uploads").where(filter=FieldFilter("uid", "==", uid)).stream()
    ]
    total = (db.document(f"users/{uid}").get().to_dict() or {}).get("uploadedBytes")
    problems = []
    if total != sum(UPLOAD_SIZES.values()):
        problems.append(f"users/{uid}.uploadedBytes is {total}, not {sum(UPLOAD_SIZES.values())}")
    names = Counter(str(upload.get("name", "")).rpartition("/")[2] for upload in uploads)
    if set(names) - set(UPLOAD_SIZES):
        problems.append(f"uploads/ documents for {sorted(names)}")
    detail = (
        f"uploads/ documents of {len(names)} distinct objects; users/<uid>.uploadedBytes "
        f"{total}; the object outside uploads/ wrote nothing (trigger route, no Storage emulator)"
    )
    return Outcome(log, len(uploads), len(UPLOAD_SIZES), detail, problems)


def scheduler_request(job: str, schedule_time: datetime | None) -> HttpEvent:
    """The POST Cloud Scheduler sends for one run of `job` (no schedule time: a malformed
    one)."""
    headers = {"X-CloudScheduler": "true", "X-CloudScheduler-JobName": job,
               "User-Agent": "Google-Cloud-Scheduler", "Content-Length": "0"}  # fmt: skip
    if schedule_time is None:
        return HttpEvent("", headers, b"", f"{job} without a schedule time")
    at = schedule_time.isoformat().replace("+00:00", "Z")
    headers["X-CloudScheduler-ScheduleTime"] = at
    return HttpEvent(at, headers, b"", f"{job} at {at}")


def play_schedule(project: str, db: firestore.Client, receiver: Receiver) -> Outcome:
    """Two scheduled runs (copies at once, retried), then a request without a schedule time."""
    url = trigger_route(project, "daily_digest")
    job = f"firebase-schedule-daily_digest-{REGION}"
    log = DeliveryLog()
    today = datetime.now(UTC).replace(hour=8, minute=0, second=0, microsecond=0)
    runs = (today - timedelta(days=1), today)
    for run in runs:
        deliver_at_least_once(url, scheduler_request(job, run), log)
    before = len(receiver.applied(DIGEST_PATH))
    records = db.collection("triggerEvents")
    records_before = len(list(records.list_documents()))
    unscheduled = scheduler_request(job, None)
    refusals = [url.deliver(unscheduled) for _ in range(1 + SCHEDULE_RETRY_COUNT)]
    new_records = len(list(records.list_documents())) - records_before
    log.events += 1
    log.deliveries += len(refusals)
    log.statuses.update(refusals)
    sent = receiver.applied(DIGEST_PATH)
    dates = sorted(json.loads(attempt.body).get("date", "?") for attempt in sent)
    expected_dates = sorted((run - timedelta(days=1)).date().isoformat() for run in runs)
    problems = []
    if set(refusals) != {400}:
        problems.append(f"no schedule time was answered {sorted(set(refusals))}")
    if len(sent) != before or new_records:
        problems.append(
            f"without a schedule time: {len(sent) - before} digests, {new_records} records"
        )
    if sorted(set(dates)) != expected_dates:
        problems.append(f"digests of {dates}, expected {expected_dates}")
    keys = {attempt.idempotency_key for attempt in sent}
    detail = (
        f"POST {DIGEST_PATH}, {len(keys)} distinct keys, for {', '.join(sorted(set(dates)))}; "
        f"no schedule time: {'/'.join(map(str, sorted(set(refusals))))} x{len(refusals)}, "
        "no record, no digest (Cloud Scheduler played on the trigger route)"
    )
    return Outcome(log, len(sent), len(runs), detail, problems)


def alert_event(project_number: str, app_id: str) -> dict[str, Any]:
    """A Crashlytics new-fatal-issue alert as a structured CloudEvent (Firebase Alerts')."""
    data = captured("AlertData-simple")
    data["payload"]["@type"] = (
        "type.googleapis.com/google.events.firebase.firebasealerts.v1.CrashlyticsNewFatalIssuePayload"
    )
    data["payload"]["issue"]["id"] = uuid.uuid4().hex[:12]
    return {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "type": TRIGGER_TYPES["alert"],
        "source": f"//firebasealerts.googleapis.com/projects/{project_number}",
        "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "alerttype": "crashlytics.newFatalIssue",
        "appid": app_id,
        "data": data,
    }


def play_alerts(receiver: Receiver) -> Outcome:
    """Each alert published twice at once to the Eventarc emulator; again when no chat message
    came within `ALERT_WAIT_SECONDS`."""
    publish_url = f"{eventarc_url()}/google/publishEvents"
    log = DeliveryLog()
    alerts = [alert_event("123456789", "1:123456789:android:0a1b2c3d") for _ in range(ALERTS)]
    published: dict[str, int] = {}

    def publish(event: dict[str, Any]) -> int:
        response = requests.post(publish_url, json={"events": [event]}, timeout=30)
        return response.status_code

    for event in alerts:
        issue = event["data"]["payload"]["issue"]["id"]
        log.events += 1
        for _ in range(ALERT_PUBLISHES):
            with ThreadPoolExecutor(ALERT_COPIES) as pool:
                statuses = list(pool.map(publish, [event] * ALERT_COPIES))
            published[issue] = published.get(issue, 0) + len(statuses)
            log.deliveries += len(statuses)
            arrived = _chat_messages_of(receiver, issue, wait=ALERT_WAIT_SECONDS)
            # Published, but no chat message in time: these copies failed, publish again.
            log.statuses.update(statuses if arrived else [NO_ANSWER] * len(statuses))
            if arrived:
                break
        else:
            log.undelivered.append(f"alert {issue}")
    time.sleep(2.0)  # a straggling copy would post by now
    ours = [a for a in receiver.applied(CHAT_PATH) if _issue_of(a.body) in published]
    keys = {attempt.idempotency_key for attempt in ours}
    detail = (
        f"POST {CHAT_PATH}, {len(keys)} distinct keys; {sum(published.values())} publishes to "
        "the Eventarc emulator, which routed them to the Functions emulator's alert trigger"
    )
    return Outcome(log, len(ours), len(alerts), detail, [])


def _issue_of(body: bytes) -> str:
    """The issue id a chat message links to ("" if none)."""
    text = json.loads(body or b"{}").get("text", "")
    return str(text).partition("/issues/")[2].partition("|")[0]


def _chat_messages_of(receiver: Receiver, issue: str, *, wait: float) -> int:
    """How many chat messages name `issue`, waiting up to `wait` seconds for the first."""
    deadline = time.monotonic() + wait
    while True:
        found = sum(_issue_of(a.body) == issue for a in receiver.applied(CHAT_PATH))
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def set_background_triggers(enabled: bool) -> None:
    """Switch the Functions emulator's event triggers on (re-registered with the Eventarc
    emulator) or off."""
    hub = os.environ.get("FIREBASE_EMULATOR_HUB")
    if not hub:
        raise RuntimeError("FIREBASE_EMULATOR_HUB is not set: run the demo with `make demo`")
    path = "enableBackgroundTriggers" if enabled else "disableBackgroundTriggers"
    requests.put(f"http://{hub}/functions/{path}", timeout=120).raise_for_status()
