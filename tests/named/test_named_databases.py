"""Named Firestore databases: the records live with the event's database unless DEDUP_DATABASE
says otherwise, and the atomic modes refuse to commit across two databases.

Everything runs on the Firestore emulator, which serves any database id in the resource path:
`NAMED_DATABASE` next to `(default)`, each emptied before every test. The function tests post
real Firestore CloudEvents of the named database to functions served in-process
(`tests/named/functions.py`), as the platform would deliver them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import functions_framework
import pytest
import requests
from flask.testing import FlaskClient
from google.cloud import firestore
from google.events.cloud.firestore import DocumentEventData

from dedup import (
    DedupConfig,
    Deduplicator,
    Delivery,
    Mode,
    OutcomeKind,
    Record,
)
from dedup.errors import ConfigError, DatabaseMismatch
from demo.events import HttpEvent, firestore_event
from tests.named.functions import COUNTS, NAMED_DATABASE, PROJECT

FUNCTIONS = str(Path(__file__).resolve().with_name("functions.py"))
DEFAULT = "(default)"


@pytest.fixture
def named(firestore_host: str) -> firestore.Client:
    """A client of the named database, emptied before the test (the default one is emptied by
    the suite's own fixture)."""
    url = (
        f"http://{firestore_host}/emulator/v1/projects/{PROJECT}/databases/"
        f"{NAMED_DATABASE}/documents"
    )
    requests.delete(url, timeout=10).raise_for_status()
    return firestore.Client(project=PROJECT, database=NAMED_DATABASE)


def record_in(client: firestore.Client, key: str) -> Record | None:
    """The record `triggerEvents/<key>` of the client's database, if any."""
    return Record.from_snapshot(client.collection("triggerEvents").document(key).get())


def ok(delivery: Delivery) -> None:
    """A handler that succeeds."""


def test_records_follow_the_events_database(
    firestore_client: firestore.Client, named: firestore.Client
) -> None:
    """With no database configured, an event from the named database is recorded there (and a
    duplicate is found there); an event with no database goes to the client's, (default)."""
    dedup = Deduplicator(DedupConfig(project=PROJECT, cache_size=0), client=firestore_client)
    assert dedup.run("n1", "s", ok, database=NAMED_DATABASE).kind is OutcomeKind.RAN
    assert dedup.run("n1", "s", ok, database=NAMED_DATABASE).kind is OutcomeKind.DUPLICATE
    assert record_in(named, "n1-s") is not None
    assert record_in(firestore_client, "n1-s") is None
    assert dedup.run("d1", "s", ok).kind is OutcomeKind.RAN
    assert record_in(firestore_client, "d1-s") is not None
    assert record_in(named, "d1-s") is None
    assert dedup.store_for(NAMED_DATABASE) is dedup.store_for(NAMED_DATABASE)  # one client


def test_dedup_database_overrides_the_events_database(
    firestore_client: firestore.Client, named: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEDUP_DATABASE keeps every record in that database, whatever the event's."""
    monkeypatch.setenv("DEDUP_DATABASE", DEFAULT)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    config = DedupConfig.from_env()
    assert config.database == DEFAULT
    Deduplicator(config).run("n2", "s", ok, database=NAMED_DATABASE)
    assert record_in(firestore_client, "n2-s") is not None
    assert record_in(named, "n2-s") is None


def test_a_configured_named_database_holds_the_records(
    firestore_client: firestore.Client, named: firestore.Client
) -> None:
    """DedupConfig(database=...) with the default client factory: records in that database."""
    Deduplicator(DedupConfig(project=PROJECT, database=NAMED_DATABASE)).run("n3", "s", ok)
    assert record_in(named, "n3-s") is not None
    assert record_in(firestore_client, "n3-s") is None


def test_an_empty_dedup_database_is_refused() -> None:
    """An empty database id is a configuration error naming DEDUP_DATABASE."""
    with pytest.raises(ConfigError, match="DEDUP_DATABASE"):
        DedupConfig(database="")


@pytest.mark.parametrize("mode", [Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_atomic_modes_commit_effect_and_marker_in_the_events_database(
    firestore_client: firestore.Client, named: firestore.Client, mode: Mode
) -> None:
    """The handler's writes through the delivery's client land in the named database, in the
    same commit as the marker; a redelivery finds the marker and writes nothing more."""

    def count(delivery: Any) -> None:
        ref = delivery.client.collection(COUNTS).document("o1")
        writer = delivery.transaction if mode is Mode.TRANSACTION else delivery.batch
        writer.set(ref, {"n": firestore.Increment(1)}, merge=True)

    dedup = Deduplicator(DedupConfig(project=PROJECT, cache_size=0), client=firestore_client)
    for _ in range(3):
        dedup.run("n4", "s", count, mode=mode, database=NAMED_DATABASE)
    assert named.collection(COUNTS).document("o1").get().to_dict() == {"n": 1}
    assert not firestore_client.collection(COUNTS).document("o1").get().exists
    record = record_in(named, "n4-s")
    assert record is not None
    assert record.attempts == 1


@pytest.mark.parametrize("mode", [Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_atomic_modes_refuse_a_write_to_another_database(
    firestore_client: firestore.Client, named: firestore.Client, mode: Mode
) -> None:
    """Records in (default), the handler writing to the named database: `DatabaseMismatch`,
    naming both databases and DEDUP_DATABASE, and nothing committed anywhere."""

    def count_elsewhere(delivery: Any) -> None:
        writer = delivery.transaction if mode is Mode.TRANSACTION else delivery.batch
        writer.set(named.collection(COUNTS).document("o2"), {"n": 1})

    dedup = Deduplicator(DedupConfig(project=PROJECT, database=DEFAULT), client=firestore_client)
    with pytest.raises(DatabaseMismatch) as refused:
        dedup.run("n5", "s", count_elsewhere, mode=mode, database=NAMED_DATABASE)
    message = str(refused.value)
    assert f"database {NAMED_DATABASE!r}" in message
    assert f"database {DEFAULT!r}" in message
    assert "DEDUP_DATABASE" in message
    assert not named.collection(COUNTS).document("o2").get().exists
    assert record_in(firestore_client, "n5-s") is None
    assert record_in(named, "n5-s") is None


def test_lease_mode_lets_the_handler_write_anywhere(
    firestore_client: firestore.Client, named: firestore.Client
) -> None:
    """Lease mode has no one-database rule: records in (default), effect in the named one."""

    def write_named(delivery: Delivery) -> None:
        named.collection(COUNTS).document("o3").set({"n": 1})

    dedup = Deduplicator(DedupConfig(project=PROJECT, database=DEFAULT), client=firestore_client)
    assert dedup.run("n6", "s", write_named, database=NAMED_DATABASE).kind is OutcomeKind.RAN
    assert named.collection(COUNTS).document("o3").get().exists
    assert record_in(firestore_client, "n6-s") is not None


# --- functions triggered by the named database, served in-process ------------------------------


def named_event(named: firestore.Client, order: str) -> HttpEvent:
    """The CloudEvent the platform delivers when `orders/<order>` is created in the named
    database: its `database` attribute, source and document names name that database."""
    ref = named.collection("orders").document(order)
    ref.set({"total": 5})
    base = firestore_event(f"orders/{order}", None, ref.get(), project=PROJECT, change="created")
    data = DocumentEventData.deserialize(base.body)
    data.value.name = data.value.name.replace(
        "/databases/(default)/", f"/databases/{NAMED_DATABASE}/"
    )
    headers = dict(base.headers)
    headers["ce-database"] = NAMED_DATABASE
    headers["ce-source"] = (
        f"//firestore.googleapis.com/projects/{PROJECT}/databases/{NAMED_DATABASE}"
    )
    return HttpEvent(base.id, headers, DocumentEventData.serialize(data), base.description)


@pytest.fixture
def serve(firestore_host: str) -> Callable[[str], FlaskClient]:
    """serve(name) -> that function of tests/named/functions.py behind functions-framework."""

    def make(name: str) -> FlaskClient:
        app = functions_framework.create_app(
            target=name, source=FUNCTIONS, signature_type="cloudevent"
        )
        return app.test_client()

    return make


def test_a_function_on_a_named_database_runs_once_and_records_there(
    serve: Callable[[str], FlaskClient],
    firestore_client: firestore.Client,
    named: firestore.Client,
) -> None:
    """Eight concurrent copies of one named-database event, then two more: the order is counted
    once, in the named database, whose `triggerEvents` holds the record; (default) is untouched."""
    function = serve("count_order")
    event = named_event(named, "o4")

    def deliver(_: int) -> int:
        response = function.post("/", data=event.body, headers=event.headers)
        return response.status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(deliver, range(8)))
    statuses += [deliver(0), deliver(0)]
    assert set(statuses) <= {200, 500}  # 500: a copy that met the commit of another: retried
    assert statuses[-2:] == [200, 200]
    assert named.collection(COUNTS).document("o4").get().to_dict() == {"n": 1}
    record = record_in(named, f"{event.id}-named_orders")
    assert record is not None
    assert record_in(firestore_client, f"{event.id}-named_orders") is None
    assert not list(firestore_client.collection("triggerEvents").list_documents())


def test_a_function_whose_records_live_elsewhere_is_refused_clearly(
    serve: Callable[[str], FlaskClient],
    firestore_client: firestore.Client,
    named: firestore.Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Records pinned to (default), a transaction-mode handler writing to the event's named
    database: every delivery fails (the platform retries) with the DatabaseMismatch message,
    and nothing is committed in either database."""
    function = serve("count_order_records_elsewhere")
    event = named_event(named, "o5")
    with caplog.at_level("ERROR"):
        status = function.post("/", data=event.body, headers=event.headers).status_code
    assert status == 500
    assert "one transaction cannot write to two databases" in caplog.text
    assert not named.collection(COUNTS).document("o5").get().exists
    assert not list(firestore_client.collection("triggerEvents").list_documents())
    assert not list(named.collection("triggerEvents").list_documents())
