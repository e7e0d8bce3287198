"""`dedup.testing`: its events are what firebase-functions parses and dedup keys as the
platform's; its deliveries run at once; its emulator helper clears the database; and, on the
Firestore emulator, six concurrent copies of one event served by functions-framework give
one effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from cloudevents.http import from_http
from firebase_functions import (
    alerts_fn,
    db_fn,
    eventarc_fn,
    firestore_fn,
    pubsub_fn,
    remote_config_fn,
    scheduler_fn,
    storage_fn,
    test_lab_fn,
)
from firebase_functions.alerts import crashlytics_fn
from flask import Flask
from google.cloud import firestore
from werkzeug.serving import make_server

from dedup import testing
from dedup.kinds import describe
from dedup.testing import HttpEvent

APP = str(Path(__file__).with_name("testing_app.py"))


@pytest.fixture(autouse=True)
def offline_firestore(monkeypatch: pytest.MonkeyPatch) -> None:
    """firestore_fn builds its snapshots with a Firestore client: on the emulator's address
    when one is set, else on an unused one (no call is made), never a real project."""
    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:9")
    if not os.environ.get("GCLOUD_PROJECT"):
        monkeypatch.setenv("GCLOUD_PROJECT", "demo-test")


def parsed(decorate: Callable[[Callable[[Any], None]], Any], event: HttpEvent) -> Any:
    """The event object a function under `decorate` gets for `event`'s request."""
    seen: list[Any] = []
    function = decorate(seen.append)
    function(from_http(dict(event.headers), event.body))
    [got] = seen
    return got


def test_firestore_event_is_what_firestore_fn_parses_and_dedup_keys() -> None:
    """Binary mode with a protobuf body: firebase-functions reads the document and params;
    dedup keys it by the CloudEvent id, the subject the document path."""
    event = testing.firestore_event(
        "orders/o1", {"total": 1}, {"total": 2, "tags": ["a"]}, project="p", event_id="e1"
    )
    assert event.headers["Content-Type"] == "application/protobuf"
    got = parsed(firestore_fn.on_document_written(document="orders/{orderId}"), event)
    assert got.params == {"orderId": "o1"}
    assert got.data.before.to_dict() == {"total": 1}
    assert got.data.after.to_dict() == {"total": 2, "tags": ["a"]}
    info = describe(got)
    assert (info.event_id, info.document_path, info.subject) == ("e1", "orders/o1", "orders/o1")
    created = testing.firestore_event("orders/o2", None, {"n": 1}, change="created")
    got = parsed(firestore_fn.on_document_created(document="orders/{orderId}"), created)
    assert got.data.to_dict() == {"n": 1}
    assert describe(got).event_id == created.id


def test_firestore_event_keeps_a_snapshots_times() -> None:
    """A snapshot-like value gives its own update time (the fingerprint covers it)."""

    class Snapshot:
        exists = True
        create_time = datetime(2026, 1, 1, tzinfo=UTC)
        update_time = datetime(2026, 1, 2, tzinfo=UTC)

        def to_dict(self) -> dict[str, Any]:
            return {"a": 1}

    snapshot: Any = Snapshot()  # duck-typed: what the builder reads of a DocumentSnapshot
    event = testing.firestore_event("c/d", None, snapshot, change="created")
    got = parsed(firestore_fn.on_document_created(document="c/{id}"), event)
    assert got.data.update_time == datetime(2026, 1, 2, tzinfo=UTC)


def test_pubsub_event_is_keyed_by_its_message_id() -> None:
    event = testing.pubsub_event("jobs", b"hello", message_id="m1", attributes={"k": "v"})
    got = parsed(pubsub_fn.on_message_published(topic="jobs"), event)
    assert got.data.message.data == "aGVsbG8="
    info = describe(got)
    assert info.event_id == "m1"
    assert info.subject == "topics/jobs/messages/m1"
    assert (
        describe(parsed(pubsub_fn.on_message_published(topic="jobs"), event.with_id("x")))[0]
        == "m1"
    )


@pytest.mark.parametrize("change", ["finalized", "deleted", "archived", "metadataUpdated"])
def test_storage_events(change: Any) -> None:
    decorators = {
        "finalized": storage_fn.on_object_finalized,
        "deleted": storage_fn.on_object_deleted,
        "archived": storage_fn.on_object_archived,
        "metadataUpdated": storage_fn.on_object_metadata_updated,
    }
    event = testing.storage_event("b1", "uploads/u1/a.png", change=change, size=7)
    assert event.headers["ce-type"] == f"google.cloud.storage.object.v1.{change}"
    got = parsed(decorators[change](bucket="b1"), event)
    assert (got.data.bucket, got.data.name, got.data.size) == ("b1", "uploads/u1/a.png", "7")
    info = describe(got)
    assert (info.event_id, info.subject) == (event.id, "buckets/b1/objects/uploads/u1/a.png")


@pytest.mark.parametrize("change", ["written", "created", "updated", "deleted"])
def test_database_events(change: Any) -> None:
    decorators = {
        "written": db_fn.on_value_written,
        "created": db_fn.on_value_created,
        "updated": db_fn.on_value_updated,
        "deleted": db_fn.on_value_deleted,
    }
    event = testing.database_event("/users/u1", {"a": 1}, {"b": 2}, change=change)
    got = parsed(decorators[change](reference="/users/{uid}"), event)
    assert got.params["uid"] == "u1"
    if change in ("written", "updated"):
        assert got.data.after == {"a": 1, "b": 2}
    info = describe(got)
    assert (info.event_id, info.subject) == (event.id, "refs/users/u1")


def test_alert_remote_config_test_lab_and_custom_events() -> None:
    """Each is parsed by its decorator and keyed by its CloudEvent id."""
    cases: list[tuple[Any, HttpEvent]] = [
        (crashlytics_fn.on_new_fatal_issue_published(), testing.alert_event()),
        (
            alerts_fn.on_alert_published(alert_type=alerts_fn.AlertType.BILLING_PLAN_UPDATE),
            testing.alert_event(
                "billing.planUpdate",
                {"billingPlan": "blaze", "principalEmail": "a@b.c", "notificationType": "x"},
                app_id=None,
            ),
        ),
        (remote_config_fn.on_config_updated(), testing.remote_config_event(7)),
        (test_lab_fn.on_test_matrix_completed(), testing.matrix_event("m-1")),
        (
            eventarc_fn.on_custom_event_published(event_type="com.example.paid"),
            testing.custom_event("com.example.paid", {"order": "o1"}, subject="orders/o1"),
        ),
    ]
    for decorate, event in cases:
        got = parsed(decorate, event)
        assert describe(got).event_id == event.id, event.description
    assert describe(parsed(*cases[-1])).subject == "orders/o1"
    assert parsed(*cases[2]).data.version_number == "7"


def test_scheduled_request_is_one_run_per_job_and_time() -> None:
    """The headers give the run's identity; retries of one run share it."""
    seen: list[Any] = []
    function: Any = scheduler_fn.on_schedule(schedule="0 8 * * *")(
        lambda event: seen.append(describe(event))
    )
    at = datetime(2026, 12, 1, 8, tzinfo=UTC)
    event = testing.scheduled_request("firebase-schedule-tick-us-central1", at)
    assert event.id == "firebase-schedule-tick-us-central1@2026-12-01T08:00:00Z"
    app = Flask(__name__)
    for _ in range(2):
        with app.test_request_context("/", method="POST", headers=dict(event.headers)):
            from flask import request

            function(request)
    assert [info.event_id for info in seen] == [event.id, event.id]
    with pytest.raises(ValueError, match="not a CloudEvent"):
        event.structured()


@pytest.mark.parametrize(
    "event",
    [
        testing.firestore_event("orders/o1", None, {"n": 1}, change="created"),
        testing.pubsub_event("jobs", b"x"),
        testing.storage_event("b", "o"),
    ],
    ids=["protobuf", "pubsub", "json"],
)
def test_both_content_modes_reach_a_served_function(event: HttpEvent) -> None:
    """functions-framework answers 200 to the binary and the structured form alike, and
    both carry the same attributes and data."""
    client = functions_framework.create_app("echo", APP, "cloudevent").test_client()
    structured = event.structured()
    assert structured.headers == {"Content-Type": "application/cloudevents+json"}
    for form in (event, structured):
        response = client.post("/", data=form.body, headers=dict(form.headers))
        assert response.status_code == 200, response.get_data()
    binary = from_http(dict(event.headers), event.body)
    other = from_http(dict(structured.headers), structured.body)
    assert other["id"] == binary["id"]
    assert other["type"] == binary["type"]
    assert other.get_data() == binary.get_data()


class _Recorder(BaseHTTPRequestHandler):
    """Answers each POST with the next of the server's `statuses` (200 once none are left),
    once `barrier` (if set) has every copy waiting; counts the requests in flight; answers a
    DELETE with `delete_status` and records its path."""

    def do_POST(self) -> None:
        server: Any = self.server
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with server.lock:
            server.in_flight += 1
            server.peak = max(server.peak, server.in_flight)
            server.headers.append({k.lower(): v for k, v in self.headers.items()})
        if server.barrier is not None:
            server.barrier.wait()  # BrokenBarrierError after its timeout: the test fails
        with server.lock:
            server.in_flight -= 1
            status = server.statuses.pop(0) if server.statuses else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_DELETE(self) -> None:
        server: Any = self.server
        server.deleted.append(self.path)
        self.send_response(server.delete_status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.lock = threading.Lock()
    server.in_flight = server.peak = 0
    server.headers, server.statuses, server.deleted = [], [], []
    server.delete_status = 200
    server.barrier = None
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/"
    yield server
    server.shutdown()
    server.server_close()


def test_deliver_concurrently_sends_the_copies_at_once(recorder: Any) -> None:
    """Every copy is in flight at the same time, with the event's headers; the statuses come
    back, non-2xx ones included."""
    event = testing.pubsub_event("jobs", b"x")
    recorder.statuses = [200, 200, 429, 200, 500, 200]
    recorder.barrier = threading.Barrier(6, timeout=10)
    statuses = testing.deliver_concurrently(recorder.url, event, copies=6)
    assert sorted(statuses) == [200, 200, 200, 200, 429, 500]
    assert recorder.peak == 6
    assert all(h["ce-id"] == event.id for h in recorder.headers)


def test_deliver_until_done_retries_until_a_2xx(recorder: Any) -> None:
    recorder.statuses = [503, 409, 429, 204]
    statuses = testing.deliver_until_done(recorder.url, testing.custom_event("t", {}))
    assert statuses == [503, 409, 429, 204]


def test_firestore_emulator_reads_the_environment_and_clears_through_rest(
    recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No FIRESTORE_EMULATOR_HOST: refused, never a real database. Set: `clear` sends the
    emulator's documented DELETE for the project; a refusal raises."""
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    with pytest.raises(RuntimeError, match="FIRESTORE_EMULATOR_HOST is not set"):
        testing.firestore_emulator()
    host = recorder.url.removeprefix("http://").rstrip("/")
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", host)
    monkeypatch.setenv("GCLOUD_PROJECT", "demo-p")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    emulator = testing.firestore_emulator()
    assert (emulator.host, emulator.project) == (host, "demo-p")
    emulator.clear()
    assert recorder.deleted == ["/emulator/v1/projects/demo-p/databases/(default)/documents"]
    recorder.delete_status = 500
    with pytest.raises(RuntimeError, match="refused to clear"):
        testing.firestore_emulator("demo-p").clear()


def test_import_dedup_does_not_load_the_testing_module() -> None:
    """`import dedup` (and its public names) leave `dedup.testing` and `dedup.send` for the
    code that imports them."""
    code = (
        "import json, sys, dedup\n"
        "[getattr(dedup, n) for n in dedup.__all__]\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('dedup'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(done.stdout)
    assert "dedup.testing" not in loaded
    assert "dedup.send" not in loaded


@pytest.fixture
def served_on_order(firestore_host: str) -> Iterator[str]:
    """`on_order` of testing_app.py served over HTTP by functions-framework, as
    `functions-framework --target=on_order --signature-type=cloudevent` serves it."""
    app = functions_framework.create_app("on_order", APP, "cloudevent")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def test_six_concurrent_copies_served_by_functions_framework_give_one_effect(
    served_on_order: str, firestore_client: firestore.Client
) -> None:
    """On the Firestore emulator: `deliver_concurrently` posts six copies of one Firestore
    event at once; one runs the effect, the platform's retries of the refused copies find it
    done, and `firestore_emulator().clear()` empties the database afterwards."""
    emulator = testing.firestore_emulator()
    event = testing.firestore_event(
        f"orders/{uuid.uuid4().hex}", None, {"total": 3}, change="created"
    )
    statuses = testing.deliver_concurrently(served_on_order, event, copies=6)
    assert len(statuses) == 6
    if not any(200 <= s < 300 for s in statuses):
        statuses += testing.deliver_until_done(served_on_order, event)
    assert any(200 <= s < 300 for s in statuses), statuses
    again = testing.deliver(served_on_order, event)
    assert 200 <= again < 300
    effects = {d.id: d.to_dict() for d in firestore_client.collection("effects").stream()}
    assert effects == {f"{event.id}-tOrder": {"n": 1}}
    record = firestore_client.document(f"triggerEvents/{event.id}-tOrder").get()
    assert record.get("state") == "sent"
    emulator.clear()
    assert list(firestore_client.collection("effects").stream()) == []
    assert not firestore_client.document(f"triggerEvents/{event.id}-tOrder").get().exists
