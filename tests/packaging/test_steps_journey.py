"""Durable steps as a new user meets them: a `firebase init functions` project outside the
repository (`firebase_functions~=0.5.0`, the wheel installed with it), a booking function of
three steps written by following docs/steps.md, and the user's own crash test written by
following its testing section, run on the Firestore emulator.

The function: a transactional hold on `rooms/{room}`, a payment POST keyed by
`delivery.step_key("pay")`, a confirmation email at most once. The user's test (a script of
the project, run by its venv's Python with `DEDUP_LEASE_SECONDS=3` and neither
GOOGLE_CLOUD_PROJECT nor GCLOUD_PROJECT, as a new user's shell has) gives `dedup.testing`'s crash
helpers the function as written and its event, dies at every boundary of every step, then
delivers three copies of a new booking at once, and counts each effect: the room held once,
the payment applied once under one key (POSTed twice only after a death between its call and
its record), the email never twice. Marker `packaging` (a fresh venv, shared with
test_journey.py's first hour); needs the Firestore emulator.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.packaging.conftest import firebase_init_folder, new_user_environment, run

pytestmark = [pytest.mark.packaging, pytest.mark.needs_emulators]

MAIN = '''\
"""Bookings: hold the room, take the payment, send the confirmation; each effect once."""

import json
import os
import urllib.request

from firebase_functions import firestore_fn
from google.cloud import firestore

from dedup import Delivery, StepInterrupted, trigger_once


def post(url: str, body: dict, key: str) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as answer:
        return answer.status


def hold_room(transaction: firestore.Transaction, db: firestore.Client, booking: dict) -> dict:
    room = db.document(f"rooms/{booking['room']}")
    free = room.get(transaction=transaction).get("free")
    transaction.update(room, {"free": free - 1})
    return {"held": booking["room"]}


def pay(booking: dict, idempotency_key: str) -> dict:
    return {"status": post(os.environ["PAYMENTS_URL"], booking, idempotency_key)}


def send_confirmation(booking: dict, key: str) -> None:
    post(os.environ["MAIL_URL"], booking, key)


@firestore_fn.on_document_created(document="bookings/{bookingId}")
@trigger_once("book")
def book(event: firestore_fn.Event[firestore.DocumentSnapshot | None], delivery: Delivery) -> None:
    booking = event.data.to_dict()
    db = delivery.client
    delivery.step("hold", hold_room, db, booking, transactional=True)
    delivery.step("pay", pay, booking, idempotency_key=delivery.step_key("pay"))
    try:
        key = delivery.step_key("confirm")
        delivery.step("confirm", send_confirmation, booking, key, on_interrupted="skip")
    except StepInterrupted:
        pass  # started by a delivery that died: never sent twice
'''

CRASH_TEST = '''\
"""The user's crash test of `book`: every boundary of every step, then three copies at once."""

import json
import os
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cloudevents.http import from_http

from dedup import LeaseHeld, OutcomeKind, Step, testing

received = Counter()
keys = Counter()


class Services(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        received[self.path] += 1
        keys[(self.path, self.headers["Idempotency-Key"])] += 1
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Services)
threading.Thread(target=server.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{server.server_port}"
os.environ["PAYMENTS_URL"], os.environ["MAIL_URL"] = f"{base}/pay", f"{base}/mail"

from main import book  # noqa: E402 (the services' URLs first)

emulator = testing.firestore_emulator()
db = emulator.client()


def booked() -> testing.HttpEvent:
    """Room r1 with 5 free, a new booking of it: its created event."""
    db.document("rooms/r1").set({"free": 5})
    booking = {"room": "r1", "guest": "ann"}
    path = f"bookings/{uuid.uuid4().hex}"
    db.document(path).set(booking)
    return testing.firestore_event(path, None, booking, change="created")


cases = []
for step in (1, 2, 3):
    for at in testing.STEP_BOUNDARIES:
        emulator.clear()
        received.clear()
        keys.clear()
        outcome = testing.deliver_after_crash(book, booked(), step=step, at=at)
        cases.append({
            "step": step, "at": at.value, "outcome": outcome.kind.value,
            "free": db.document("rooms/r1").get().get("free"),
            "pay": received["/pay"], "mail": received["/mail"],
            "pay_keys": len([k for k in keys if k[0] == "/pay"]),
        })

emulator.clear()
crash = testing.crash_at_step(book, booked(), step=1, at=Step.AFTER_STEP_CALL)
skipped = {"died": crash.died, "why": crash.why}
emulator.clear()
received.clear()
keys.clear()
event = booked()


def copy(_):
    cloud_event = from_http(dict(event.headers), event.body)
    while True:
        try:
            return book(cloud_event)
        except LeaseHeld:  # the platform retries a copy answered 500
            threading.Event().wait(0.2)


with ThreadPoolExecutor(3) as pool:
    list(pool.map(copy, range(3)))
concurrent = {
    "free": db.document("rooms/r1").get().get("free"),
    "pay": received["/pay"], "mail": received["/mail"],
    "pay_keys": len([k for k in keys if k[0] == "/pay"]),
    "project": emulator.project,
}
print(json.dumps({"cases": cases, "skipped": skipped, "concurrent": concurrent}))
'''


def test_a_new_users_three_step_function_survives_every_crash_and_three_copies(
    firebase_init_project: tuple[Path, Path], tmp_path: Path
) -> None:
    """Each boundary of each step: the crash where the step has that boundary, then the
    delivery after it, which ends `ran`; the room is held once (5 free, then 4), the payment
    POSTed once under one key (twice under that key only after a death between its call and
    its record), the confirmation sent once. A transactional step asked for after_step_call:
    no crash, and the helper says so, naming the step and its kind. Three copies at once: the
    room held once, the payment under one key, the confirmation at most once. The test's
    database and the function's are one (no project variable set)."""
    _, bin_ = firebase_init_project
    functions = firebase_init_folder(tmp_path / "booking")
    (functions / "main.py").write_text(MAIN)
    (functions / "crash_test.py").write_text(CRASH_TEST)
    env = new_user_environment(DEDUP_LEASE_SECONDS="3")
    done = run(bin_ / "python", "crash_test.py", cwd=functions, env=env)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    cases = found["cases"]
    assert len(cases) == 9
    for case in cases:
        where = (case["step"], case["at"])
        assert case["outcome"] == "ran", case
        assert case["free"] == 4, case
        assert case["pay"] == (2 if where == (2, "after_step_call") else 1), case
        assert case["pay_keys"] == 1, case
        assert case["mail"] == 1, case
    skipped = found["skipped"]
    assert skipped["died"] is False, skipped
    assert "step 1 ('hold') is transactional" in skipped["why"], skipped
    assert "ended before" not in skipped["why"], skipped
    concurrent = found["concurrent"]
    assert concurrent["project"] == "google-cloud-firestore-emulator", concurrent
    # Held once; paid under one key (a second POST under it only if a copy took over a lease
    # that ran out mid-step, which the payment service applies once); confirmed at most once.
    assert concurrent["free"] == 4, concurrent
    assert concurrent["pay_keys"] == 1, concurrent
    assert concurrent["pay"] >= 1, concurrent
    assert concurrent["mail"] <= 1, concurrent
