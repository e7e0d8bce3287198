"""`dedup dead-letters list` and `redrive` on the Pub/Sub emulator, against functions of main.py
served as their Cloud Run services are (`tests.deploy.test_run_served.serving`).

The emulator implements push subscriptions with a retry and a dead-letter policy, but not
Eventarc's turning of a pushed message into a CloudEvent: its push body is Pub/Sub's own
wrapped JSON. `Eventarc` below plays that part, as Eventarc does for a Pub/Sub trigger (the
messagePublished CloudEvent of the message, built by `dedup.testing.pubsub_event`), and answers
the push as Pub/Sub's push deadline would: a service that has not answered within
`PUSH_DEADLINE` spends the attempt (504), while its run goes on.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner, Result
from google.cloud import firestore

from dedup import testing
from dedup.cli import cli
from dedup.kernel.record import Record
from dedup.kernel.transitions import dedup_key
from demo.receiver import Receiver
from tests.conftest import FUNCTION_ENV, PROJECT
from tests.deploy.test_run_served import serving

PUBSUB_PROJECT = "demo-dead-letters"
"""The Pub/Sub resources' project: apart from the Functions emulator's own topics. The
forward_webhook served here runs in it too (its boundary refuses a topic of another project),
so its records are in that project's Firestore."""
TOPIC = "webhooks"
"""forward_webhook's trigger topic (its boundary checks the event's source names it)."""
MAX_ATTEMPTS = 5
"""The dead-letter policy's attempts: Pub/Sub's least, what a detached function gets."""
PUSH_DEADLINE = 3.0
"""Seconds `Eventarc` waits for the service before it answers the push 504."""
FIRST_RUN_SECONDS = 15.0
"""How long the receiver takes to answer the first run (then 503): longer than five attempts
with a 1-2 s backoff and a `PUSH_DEADLINE` take."""
ROUTE = "/webhooks/default"
SUCCESS = range(200, 300)


def rest(method: str, path: str, body: Any = None) -> dict[str, Any]:
    """One call of the emulator's Pub/Sub REST API; raises on an error."""
    host = os.environ["PUBSUB_EMULATOR_HOST"]
    response = requests.request(method, f"http://{host}/v1/{path}", json=body, timeout=30)
    response.raise_for_status()
    return dict(response.json() or {})


def publish(topic: str, data: bytes, attributes: dict[str, str]) -> str:
    """Publish one message to `projects/PUBSUB_PROJECT/topics/<topic>`; its message id."""
    message = {"data": base64.b64encode(data).decode(), "attributes": attributes}
    answer = rest("POST", f"{topic}:publish", {"messages": [message]})
    return str(answer["messageIds"][0])


class Eventarc:
    """Receives the emulator's pushes and delivers each as Eventarc delivers a Pub/Sub trigger's
    event to `service`; counts the pushes and remembers the service's answers."""

    def __init__(self, service: str, topic: str) -> None:
        self.service = service
        self.topic = topic
        self.pushes = 0
        self.answers: list[int] = []
        self.lock = threading.Lock()

    def handle(self, body: bytes) -> int:
        """The push's answer: the service's, or 504 past `PUSH_DEADLINE`."""
        pushed = json.loads(body)
        message = pushed["message"]
        event = testing.pubsub_event(
            self.topic, base64.b64decode(message.get("data") or ""), project=PUBSUB_PROJECT,
            message_id=message["messageId"], attributes=message.get("attributes") or {},
        )  # fmt: skip
        answer: Future[int] = Future()

        def deliver() -> None:
            status = testing.deliver(self.service, event)
            with self.lock:
                self.answers.append(status)
            answer.set_result(status)

        with self.lock:
            self.pushes += 1
        threading.Thread(target=deliver, daemon=True).start()
        try:
            return answer.result(timeout=PUSH_DEADLINE)
        except FutureTimeout:
            return 504


@contextmanager
def eventarc_endpoint(eventarc: Eventarc) -> Iterator[str]:
    """`eventarc` listening on a free port; its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(eventarc.handle(body))
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    """This test's topics and subscriptions (unique), deleted at its end."""
    run = uuid.uuid4().hex[:8]
    base = f"projects/{PUBSUB_PROJECT}"
    made = {
        "topic": f"{base}/topics/{TOPIC}",
        "push": f"{base}/subscriptions/forward-webhook-{run}",
        "dead_topic": f"{base}/topics/forward-webhook-{run}-dead-letter",
        "dead": f"{base}/subscriptions/forward-webhook-{run}-dead-letter",
    }
    yield made
    for key in ("push", "dead", "dead_topic"):
        with suppress(requests.HTTPError):
            rest("DELETE", made[key])


def dedup(*args: str) -> Result:
    """`dedup --project PROJECT ARGS...`, in-process."""
    return CliRunner().invoke(cli, ["--project", PROJECT, *args])


def listed(subscription: str) -> list[dict[str, Any]]:
    """`dedup dead-letters list SUBSCRIPTION --json`."""
    result = dedup("dead-letters", "list", subscription, "--json")
    assert result.exit_code == 0, result.output
    return list(json.loads(result.output))


def wait_for[T](probe: Callable[[], T | None], seconds: float, what: str) -> T:
    """The first truthy value of `probe`, polled for up to `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {seconds} s")


def test_a_dead_lettered_message_is_redriven_to_one_effect(
    tmp_path: Path,
    names: dict[str, str],
    receiver: Receiver,
    firestore_client: firestore.Client,
) -> None:
    """A message whose first run outlives its five attempts is dead-lettered while that run
    holds the lease (each copy answered 500); once the run fails and releases the lease,
    `redrive` delivers it and the receiver gets exactly one request; a second dead letter of the
    same message, redriven, changes nothing. The dead letter has a message id of its own (as in
    production), and forward_webhook's key is the `eventKey` attribute, which it keeps. The
    function runs in the topic's project, as in production."""
    event_key = f"order-{uuid.uuid4().hex[:8]}"
    key = dedup_key(event_key, "forward_webhook")
    receiver.script(ROUTE, (503, FIRST_RUN_SECONDS))
    with suppress_conflict():
        rest("PUT", names["topic"])
    rest("PUT", names["dead_topic"])
    rest("PUT", names["dead"], {"topic": names["dead_topic"], "ackDeadlineSeconds": 60})
    in_project = {"GOOGLE_CLOUD_PROJECT": PUBSUB_PROJECT, "GCLOUD_PROJECT": PUBSUB_PROJECT}
    records = firestore.Client(project=PUBSUB_PROJECT)
    with serving(
        tmp_path / "server.log", "forward_webhook", {**FUNCTION_ENV, **in_project}
    ) as service:
        eventarc = Eventarc(service, TOPIC)
        with eventarc_endpoint(eventarc) as push_url:
            rest("PUT", names["push"], {
                "topic": names["topic"], "ackDeadlineSeconds": 10,
                "pushConfig": {"pushEndpoint": push_url},
                "retryPolicy": {"minimumBackoff": "1s", "maximumBackoff": "2s"},
                "deadLetterPolicy": {"deadLetterTopic": names["dead_topic"],
                                     "maxDeliveryAttempts": MAX_ATTEMPTS},
            })  # fmt: skip
            body = json.dumps({"events": [{"type": "message", "text": "hi"}]}).encode()
            original_id = publish(names["topic"], body, {"eventKey": event_key})

            [dead] = wait_for(lambda: listed(names["dead"]), 60, "the dead letter")
            assert eventarc.pushes == MAX_ATTEMPTS
            assert all(status == 500 for status in eventarc.answers), eventarc.answers
            # Only the first run reached the receiver: every copy met its live lease.
            assert len(receiver.attempts_to(ROUTE)) == 1
            assert dead["deliveryCount"] == MAX_ATTEMPTS
            assert dead["sourceSubscription"] == names["push"]
            assert dead["type"] == testing.PUBSUB_TYPE
            assert dead["source"] == f"//pubsub.googleapis.com/{names['topic']}"
            assert dead["messageId"] != original_id  # forwarding publishes a new message
            assert dead["eventId"] == dead["messageId"]
            assert listed(names["dead"]) == [dead]  # listing removed nothing

            def released() -> bool:
                record = Record.from_snapshot(
                    records.collection("triggerEvents").document(key).get()
                )
                return record is not None and not record.has_lease and record.attempts == 1

            wait_for(released, 2 * FIRST_RUN_SECONDS, "the first run's release")
            assert receiver.applied(ROUTE) == []

            result = dedup("dead-letters", "redrive", names["dead"], "--to", service)
            assert result.exit_code == 0, result.output
            assert "1 redriven, 0 left" in result.output
            [effect] = receiver.applied(ROUTE)
            assert effect.idempotency_key == key
            assert effect.body == body
            assert listed(names["dead"]) == []

            # Pub/Sub dead-letters best effort: the same message may arrive twice.
            attributes = {
                "eventKey": event_key,
                "CloudPubSubDeadLetterSourceDeliveryCount": "5",
                "CloudPubSubDeadLetterSourceSubscription": names["push"].split("/")[-1],
                "CloudPubSubDeadLetterSourceSubscriptionProject": PUBSUB_PROJECT,
            }
            publish(names["dead_topic"], body, attributes)
            again = dedup("dead-letters", "redrive", names["dead"], "--to", service)
            assert again.exit_code == 0, again.output
            assert len(receiver.applied(ROUTE)) == 1
            assert listed(names["dead"]) == []


@contextmanager
def suppress_conflict() -> Iterator[None]:
    """Ignore a 409 (the resource exists already)."""
    try:
        yield
    except requests.HTTPError as exc:
        if exc.response is None or exc.response.status_code != 409:
            raise


def test_firestore_events_round_trip_and_what_is_no_event_stays(
    tmp_path: Path, names: dict[str, str], firestore_client: firestore.Client
) -> None:
    """A dead-lettered Firestore event (binary mode: ce-* attributes, protobuf data) is listed
    with its id, type and subject, and redriven to sync_published_count: one increment, and none
    more for a second dead letter of it. A message that is no CloudEvent is reported, kept on
    the subscription, and the command exits 1."""
    rest("PUT", names["dead_topic"])
    rest("PUT", names["dead"], {"topic": names["dead_topic"], "ackDeadlineSeconds": 60})
    dead_id = names["dead"].split("/")[-1]
    event = testing.firestore_event(
        "posts/dl-1", None, {"authorId": "author-dl", "published": True},
        project=PROJECT, change="written", location="nam5",
    )  # fmt: skip
    forwarded = {
        "CloudPubSubDeadLetterSourceDeliveryCount": "15",
        "CloudPubSubDeadLetterSourceSubscription": "eventarc-nam5-sync-published-count-sub-1",
        "CloudPubSubDeadLetterSourceSubscriptionProject": PUBSUB_PROJECT,
    }
    publish(names["dead_topic"], event.body, {**event.headers, **forwarded})
    publish(names["dead_topic"], b"not an event", {"note": "junk"})

    result = CliRunner().invoke(
        cli, ["--project", PUBSUB_PROJECT, "dead-letters", "list", dead_id, "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = {row["eventId"]: row for row in json.loads(result.output)}
    assert set(rows) == {event.id, None}
    assert rows[event.id]["type"] == "google.cloud.firestore.document.v1.written"
    assert rows[event.id]["subject"] == "documents/posts/dl-1"
    assert rows[event.id]["deliveryCount"] == 15
    assert "no ce-* attributes" in rows[None]["problem"]

    def count() -> int:
        author = firestore_client.collection("users").document("author-dl").get()
        return int((author.to_dict() or {}).get("publishedPostCount", 0))

    with serving(tmp_path / "server.log", "sync_published_count") as service:
        redrive = ["--project", PUBSUB_PROJECT, "dead-letters", "redrive", dead_id, "--to", service]
        first = CliRunner().invoke(cli, redrive)
        assert first.exit_code == 1, first.output
        assert "1 redriven, 1 left" in first.output
        assert count() == 1
        publish(names["dead_topic"], event.body, {**event.headers, **forwarded})
        second = CliRunner().invoke(cli, redrive)
        assert second.exit_code == 1, second.output
        assert count() == 1
    [junk] = listed(names["dead"])
    assert junk["eventId"] is None


@pytest.mark.needs_emulators
def test_unknown_subscription_and_bad_url_are_named() -> None:
    """A subscription that does not exist is named; a URL that is not http(s) is refused."""
    missing = dedup("dead-letters", "list", "no-such-dead-letter")
    assert missing.exit_code == 1
    assert f"no subscription projects/{PROJECT}/subscriptions/no-such-dead-letter" in (
        missing.output
    )
    bad = dedup("dead-letters", "redrive", "x-dead-letter", "--to", "run.app/service")
    assert bad.exit_code == 2
    assert "is not an http(s) URL" in bad.output
