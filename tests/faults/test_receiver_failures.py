"""Receiver failures for the two functions whose effect is an HTTP POST with a key.

forward_webhook (Pub/Sub) and send_post_notification (Firestore) both POST through
`functions.http_delivery.post_once`. The receiver here records every attempt with its
Idempotency-Key, failed ones included. Leases are 5 s (`SERVED_LEASE_SECONDS`). (Read
timeouts, 20 s each, are in test_waiting_faults.)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.cloud import firestore

from demo.events import HttpEvent, pubsub_event
from demo.receiver import Receiver, running_receiver
from demo.serve import ServedFunction
from tests.faults.support import (
    PROJECT,
    SERVED_LEASE_SECONDS,
    Answer,
    Spec,
    deliver,
    outcomes,
    publish_post,
    record,
    redeliver_until_acknowledged,
    serving,
    unique,
)

LEASE_SECONDS = SERVED_LEASE_SECONDS
FUNCTIONS = ("forward_webhook", "send_post_notification")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("receiver-failures")


@pytest.fixture(scope="module")
def module_recorder() -> Iterator[Receiver]:
    with running_receiver() as recorder:
        yield recorder


@pytest.fixture
def recorder(module_recorder: Receiver) -> Iterator[Receiver]:
    module_recorder.reset()
    yield module_recorder
    module_recorder.up()  # in case the test closed it


@pytest.fixture(scope="module")
def servers(module_recorder: Receiver, log_dir: Path) -> Iterator[dict[str, ServedFunction]]:
    env = {
        "DEDUP_LEASE_SECONDS": str(LEASE_SECONDS),
        "WEBHOOK_ROUTES": json.dumps({"default": f"{module_recorder.base_url}/webhook"}),
        "NOTIFY_URL": f"{module_recorder.base_url}/notify",
    }
    with serving({name: Spec(name, env) for name in FUNCTIONS}, log_dir) as served:
        yield served


@dataclass(frozen=True)
class Case:
    """One event for one function: where its POST goes and under which key."""

    served: ServedFunction
    event: HttpEvent
    path: str
    key: str
    log: Path


@pytest.fixture(params=FUNCTIONS)
def case(
    request: pytest.FixtureRequest,
    servers: dict[str, ServedFunction],
    log_dir: Path,
    firestore_client: firestore.Client,
) -> Case:
    name: str = request.param
    event_id = unique()
    if name == "forward_webhook":
        event = pubsub_event("webhooks", b'{"n": 1}', project=PROJECT, message_id=event_id)
        return Case(servers[name], event, "/webhook", f"{event_id}-{name}", log_dir / f"{name}.log")
    event = publish_post(firestore_client, event_id)
    key = f"post-{event_id}-{name}"
    return Case(servers[name], event, "/notify", key, log_dir / f"{name}.log")


def test_5xx_is_retried_with_the_same_key(
    case: Case, recorder: Receiver, firestore_client: firestore.Client
) -> None:
    """A receiver answering 503 then 500 fails both deliveries (retryable, lease released);
    the third delivery is accepted; all three POSTs carry the same Idempotency-Key, and the
    receiver applied one."""
    recorder.script(case.path, (503, 0.0), (500, 0.0))

    answers = redeliver_until_acknowledged(case.served, case.event, within=20, pause=0.05)

    assert [a.status for a in answers] == [500, 500, 200]
    assert [a.idempotency_key for a in recorder.attempts_to(case.path)] == [case.key] * 3
    assert recorder.effects(case.path) == len(recorder.applied(case.path)) == 1
    assert outcomes(case.log, case.key) == ["released", "released", "ran"]
    final = record(firestore_client, case.key)
    assert final is not None
    assert (final["state"], final["attempts"]) == ("sent", 3)


def test_connection_refused_is_retried_until_the_receiver_is_back(
    case: Case, recorder: Receiver, firestore_client: firestore.Client
) -> None:
    """With the receiver's port closed, deliveries fail fast (retryable) and nothing is
    recorded as sent; once it listens again the next delivery POSTs once, and a later
    redelivery is a duplicate."""
    recorder.down()
    refused = [deliver(case.served, case.event, timeout=30) for _ in range(2)]
    recorder.up()
    answers = redeliver_until_acknowledged(case.served, case.event, within=20)
    again = deliver(case.served, case.event)

    assert [a.status for a in refused] == [500, 500]
    assert max(a.seconds for a in refused) < 5.0, "a refused connection must fail fast"
    assert [a.status for a in answers] == [200]
    assert again.status == 200
    assert [a.idempotency_key for a in recorder.attempts_to(case.path)] == [case.key]
    assert outcomes(case.log, case.key) == ["released", "released", "ran", "duplicate_cached"]
    final = record(firestore_client, case.key)
    assert final is not None
    assert (final["state"], final["attempts"]) == ("sent", 3)


def test_receiver_slower_than_the_lease_gets_the_same_key_twice(
    case: Case, recorder: Receiver, firestore_client: firestore.Client
) -> None:
    """A receiver that answers after 11 s, beyond the 5 s lease: a redelivery takes the lease
    over and POSTs again with the SAME Idempotency-Key; the slow first owner then gets
    LeaseLost (500, outcome not recorded). The receiver applied two POSTs under one key, so
    an idempotent receiver keeps one effect; the record says sent, attempt 2.

    The redelivery must take the lease over before the slow answer comes: it has the 5.7 s
    between the end of the wait below and that answer for its request and its claim, where a
    quiet machine needs a tenth of a second (with 1.7 s, a busy one could be too late, and
    the first owner would record "sent" over a lease nobody had taken)."""
    slow = LEASE_SECONDS + 6.0
    recorder.script(case.path, (200, slow))
    first: list[Answer] = []
    flight = threading.Thread(target=lambda: first.append(deliver(case.served, case.event)))
    flight.start()
    while not recorder.attempts_to(case.path):
        time.sleep(0.02)
    time.sleep(LEASE_SECONDS + 0.3)  # the first owner's lease has expired

    answers = redeliver_until_acknowledged(case.served, case.event, within=20)
    flight.join(timeout=30)

    [slow_owner] = first
    assert slow_owner.status == 500
    assert slow_owner.seconds >= slow
    assert [a.status for a in answers][-1] == 200
    posts = recorder.attempts_to(case.path)
    assert [a.idempotency_key for a in posts] == [case.key, case.key]
    assert len(recorder.applied(case.path)) == 2
    assert recorder.effects(case.path) == 1
    logged = outcomes(case.log, case.key)
    assert sorted(logged) == sorted(["ran", "lease_lost", *["lease_held"] * (len(answers) - 1)])
    final = record(firestore_client, case.key)
    assert final is not None
    assert (final["state"], final["attempts"]) == ("sent", 2)
