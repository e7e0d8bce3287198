"""End to end through the Functions emulator: `create_order` and the LINE chain
(LINE -> `receive_line_webhook` -> Pub/Sub `webhooks` -> `forward_webhook` -> receiver) served
by the emulator itself, with the Firestore, Pub/Sub and Auth emulators.

Marked `e2e`: they run first in the session, with the emulator's triggers on (see
tests/e2e/test_emulator_triggers.py for why).
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from google.cloud import firestore
from google.cloud.pubsub_v1 import SubscriberClient

from demo.pubsub import ensure_topic, pull_all
from demo.receiver import Receiver
from tests.conftest import PROJECT
from tests.faults.support import SERVED_LEASE_SECONDS, wait_for_crash_point
from tests.http.support import (
    LINE_SECRET,
    User,
    http_server,
    line_body,
    line_headers,
    new_key,
    order_headers,
)
from tests.http.test_create_order import ORDER, orders
from tests.waiting import eventually
from tools.emulators import configured_ports

pytestmark = pytest.mark.e2e
_FUNCTIONS_HOST, _FUNCTIONS_PORT = configured_ports()["functions"]
FUNCTIONS = f"http://{_FUNCTIONS_HOST}:{_FUNCTIONS_PORT}/{PROJECT}/us-central1"
"""The Functions emulator, where firebase.json puts it."""
SERVED = Path(__file__).resolve().parent / "served.py"
WAIT_SECONDS = 90
LEASE_SECONDS = SERVED_LEASE_SECONDS
"""The served functions' lease: long enough for a claim to come back on a busy machine
(`tests.faults.support.SERVED_LEASE_SECONDS`)."""
CLIENT_TRIES = 3
EMULATOR_COPIES = 10


def deliver_like_line(url: str, body: bytes) -> list[int]:
    """POST a signed batch, redelivering (as LINE does) until a 200; every status."""
    statuses: list[int] = []
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        status = requests.post(url, data=body, headers=line_headers(body), timeout=60).status_code
        statuses.append(status)
        if status == 200:
            return statuses
        time.sleep(0.5)
    raise AssertionError(f"the batch was never accepted: {statuses}")


def event_ids(count: int) -> list[str]:
    return [f"01E2E{uuid.uuid4().hex[:16].upper()}" for _ in range(count)]


def test_concurrent_requests_in_the_functions_emulator_place_one_order(
    user: User, firestore_client: firestore.Client
) -> None:
    """10 concurrent requests with one key to the emulator's `create_order`: every answer 201
    with the same orderId, or 409; one order; a later replay is byte for byte.

    10, not the 30 of `test_create_order.py` (in-process, where every copy runs at once on one
    instance): the Functions emulator starts one Python worker per concurrent request, each
    importing main.py (1-2 s of CPU) on `8081 + randomInt(0, 1000)` (firebase-tools'
    `startPython`). Two workers started together pick the same port with probability about
    n^2/2000 (a third of the runs at 30); the one that cannot bind dies and the request given
    to it is never answered. Each client therefore does what a mobile client does after a
    timeout: it sends the same request (same key) again."""
    key = new_key()
    url = f"{FUNCTIONS}/create_order"

    def post() -> requests.Response:
        for _ in range(CLIENT_TRIES - 1):
            try:
                return requests.post(url, json=ORDER, headers=order_headers(user, key), timeout=60)
            except (requests.ConnectionError, requests.Timeout):
                continue  # the client's retry, with the same Idempotency-Key
        return requests.post(url, json=ORDER, headers=order_headers(user, key), timeout=60)

    with ThreadPoolExecutor(max_workers=EMULATOR_COPIES) as pool:
        answers = list(pool.map(lambda _: post(), range(EMULATOR_COPIES)))
    statuses = [answer.status_code for answer in answers]
    assert set(statuses) <= {201, 409}, statuses
    created = {answer.json()["orderId"] for answer in answers if answer.status_code == 201}
    [order] = orders(firestore_client)
    assert created == {order["id"]}
    replay = post()
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == {"orderId": order["id"], "item": "coffee", "quantity": 2}


def test_a_line_redelivery_storm_reaches_the_receiver_once_per_event(receiver: Receiver) -> None:
    """A signed batch of 3 events delivered 5 times at once (redeliveries marked as LINE
    marks them), each copy redelivered until accepted: the receiver gets 3 POSTs, 3 keys."""
    ensure_topic(PROJECT, "webhooks")
    ids = event_ids(3)
    bodies = [line_body(*ids, redelivery=copy > 0) for copy in range(5)]
    url = f"{FUNCTIONS}/receive_line_webhook"
    with ThreadPoolExecutor(max_workers=5) as pool:
        statuses = list(pool.map(lambda body: deliver_like_line(url, body), bodies))
    assert all(run[-1] == 200 for run in statuses)
    eventually(lambda: len(receiver.applied("/webhooks/line")) >= 3, "3 events forwarded")
    forwarded = receiver.applied("/webhooks/line")
    assert sorted(a.idempotency_key or "" for a in forwarded) == sorted(
        f"{event_id}-forward_webhook" for event_id in ids
    )
    for attempt in forwarded:
        [event] = json.loads(attempt.body)["events"]
        assert f"{event['webhookEventId']}-forward_webhook" == attempt.idempotency_key


def test_an_ingress_killed_between_publish_and_sent_forwards_each_event_once(
    receiver: Receiver, tmp_path: Path
) -> None:
    """The ingress dies after publishing an event and before recording "sent": after the
    lease it publishes the event again (same eventKey), and `forward_webhook` in the emulator
    forwards it once."""
    ensure_topic(PROJECT, "webhooks")
    watch = f"watch-{uuid.uuid4().hex[:8]}"
    ensure_topic(PROJECT, "webhooks", subscription=watch)
    ids = event_ids(2)
    body = line_body(*ids)
    crash_file = tmp_path / "ingress.crash"
    env = {
        "DEDUP_LEASE_SECONDS": str(LEASE_SECONDS),
        "LINE_CHANNEL_SECRET": LINE_SECRET,
        "CRASH_AT": "after_effect",
        "CRASH_FILE": str(crash_file),
    }
    target = "receive_line_webhook"
    with (
        http_server(target, SERVED, env, tmp_path / "crash.log") as server,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
        pending = pool.submit(
            requests.post, server.url, data=body, headers=line_headers(body), timeout=60
        )
        wait_for_crash_point(crash_file, "after_effect")
        server.kill()
        with pytest.raises(requests.RequestException):
            pending.result()
    clean_env = {k: v for k, v in env.items() if not k.startswith("CRASH")}
    with http_server(target, SERVED, clean_env, tmp_path / "retry.log") as server:
        deliver_like_line(server.url, line_body(*ids, redelivery=True))
    published = pull_all(SubscriberClient().subscription_path(PROJECT, watch))
    keys = sorted(message.attributes["eventKey"] for message in published)
    assert keys == sorted([ids[0], *ids]), "the first event was published twice"
    eventually(lambda: len(receiver.applied("/webhooks/line")) >= 2, "both events forwarded")
    # forward_webhook gets the republished copy too; give the emulator time to deliver it.
    time.sleep(5)
    forwarded = receiver.applied("/webhooks/line")
    assert sorted(a.idempotency_key or "" for a in forwarded) == sorted(
        f"{event_id}-forward_webhook" for event_id in ids
    )
