"""A cold instance's first requests, all at once: each valid event runs, none is refused.

firebase-functions' Firestore parser creates the default Firebase app with an unguarded
check-then-create, and `firebase_admin.initialize_app()` raises when the app already exists.
On a cold instance serving several events at once, two requests could both see no app: one
of them used to be refused with a 400 ("cannot read this event") although the event was
valid. The boundary creates the app through `dedup.platform.firebase_app.default_app()` (one lock)
before the parser runs.

The instance is a fresh process serving `sync_published_count` through functions-framework's
Flask app, its deliveries released together by a barrier; `initialize_app` is slowed down
there (the window widened, nothing else changed) so the race, when it exists, is always lost.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid

from google.cloud import firestore

from demo.events import HttpEvent
from tests.faults.support import publish_post, published_count
from tests.functions.conftest import MAIN

COPIES = 8
INSTANCE = """
import base64, json, sys, threading, time
import firebase_admin

real_initialize_app = firebase_admin.initialize_app

def slow_initialize_app(*args, **kwargs):
    time.sleep(0.3)  # the window between "no app yet" and "app registered", widened
    return real_initialize_app(*args, **kwargs)

firebase_admin.initialize_app = slow_initialize_app
import functions_framework

app = functions_framework.create_app(target="sync_published_count", source=sys.argv[1],
                                     signature_type="cloudevent")
events = json.loads(sys.stdin.read())
cold = not firebase_admin._apps
barrier = threading.Barrier(len(events))
statuses = [0] * len(events)

def deliver(index, event):
    client = app.test_client()
    barrier.wait()
    response = client.post("/", data=base64.b64decode(event["body"]), headers=event["headers"])
    statuses[index] = response.status_code

threads = [threading.Thread(target=deliver, args=item) for item in enumerate(events)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"cold": cold, "statuses": statuses}))
"""


def _wire(event: HttpEvent) -> dict[str, object]:
    return {"headers": dict(event.headers), "body": base64.b64encode(event.body).decode()}


def test_first_concurrent_events_on_a_cold_instance_all_run(
    firestore_client: firestore.Client,
) -> None:
    """Eight valid first events released together: all answered 200, no refusal logged, each
    author's counter moved once."""
    run = uuid.uuid4().hex[:8]
    authors = [f"cold-{run}-{index}" for index in range(COPIES)]
    events = [publish_post(firestore_client, f"{author}-post", author=author) for author in authors]
    done = subprocess.run(
        [sys.executable, "-c", INSTANCE, MAIN],
        input=json.dumps([_wire(event) for event in events]),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FUNCTION_TARGET": "sync_published_count"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["cold"], "the instance already had a Firebase app: the test proves nothing"
    assert answer["statuses"] == [200] * COPIES, done.stdout[-3000:]
    assert "refused" not in done.stdout
    assert [published_count(firestore_client, author) for author in authors] == [1] * COPIES
