"""HTTP, callable and task entrances on an ambiguous delivery, over the Firestore emulator: the
record of an earlier attempt whose lease expired before its outcome was recorded (it may have
taken effect). Under `on_ambiguous="skip"` the request is answered 409 `outcome-unknown` and
every retry with its key gets the same answer, replayed, never a rerun and never a 500; the
callable raises `outcome-unknown`; a task is acknowledged (200). A `reconcile` that confirms the
effect leaves no response to replay: 410 `response-not-stored`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import flask
import pytest
from firebase_functions import https_fn
from flask.testing import FlaskClient
from google.cloud import firestore

from dedup import Record, State, SuffixRegistry
from dedup.http import REPLAYED_HEADER, IdempotentRequest, idempotent_callable, idempotent_http
from dedup.kernel.delivery import Delivery
from dedup.tasks import TASK_NAME_HEADER, task_once
from tests.dedup.support import write_foreign_lease
from tests.http.support import new_key, problem

UNKNOWN = "urn:exactly-once:problem:outcome-unknown"


def client_of(view: Callable[[flask.Request], flask.Response]) -> FlaskClient:
    app = flask.Flask(__name__)
    app.add_url_rule("/", "view", lambda: view(flask.request), methods=["POST"])
    return app.test_client()


def post(client: FlaskClient, key: str) -> Any:
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    return client.post("/", data=json.dumps({"a": 1}), headers=headers)


def expired(client: firestore.Client, record_key: str) -> None:
    """An earlier attempt's record: its lease expired before it recorded an outcome."""
    write_foreign_lease(client, record_key, started=datetime.now(UTC) - timedelta(minutes=5))


def read(client: firestore.Client, record_key: str) -> Record | None:
    return Record.from_snapshot(client.collection("triggerEvents").document(record_key).get())


def test_an_http_request_skipped_as_ambiguous_is_409_outcome_unknown_on_every_retry(
    firestore_client: firestore.Client,
) -> None:
    ran: list[str] = []

    @idempotent_http(
        "ambiguous_http", anonymous=True, on_ambiguous="skip", registry=SuffixRegistry()
    )
    def charge(call: IdempotentRequest) -> flask.Response:
        ran.append(call.key)
        return flask.Response("{}", 201, content_type="application/json")

    client, key = client_of(charge), new_key()
    expired(firestore_client, f"{key}-ambiguous_http")
    first = post(client, key)
    assert first.status_code == 409, first.get_data(as_text=True)
    assert problem(first)["type"] == UNKNOWN
    assert "Retry-After" not in first.headers
    assert REPLAYED_HEADER not in first.headers
    again = post(client, key)
    assert (again.status_code, problem(again)) == (409, problem(first))
    assert again.headers[REPLAYED_HEADER] == "true"
    assert ran == []
    record = read(firestore_client, f"{key}-ambiguous_http")
    assert record is not None
    assert record.state is State.UNKNOWN


def test_an_http_request_that_reconcile_confirms_is_410_and_never_runs(
    firestore_client: firestore.Client,
) -> None:
    ran: list[str] = []
    asked: list[str] = []

    def reconcile(delivery: Delivery) -> bool:
        asked.append(delivery.key)
        return True

    @idempotent_http(
        "reconciled_http", anonymous=True, reconcile=reconcile, registry=SuffixRegistry()
    )
    def charge(call: IdempotentRequest) -> flask.Response:
        ran.append(call.key)
        return flask.Response("{}", 201, content_type="application/json")

    client, key = client_of(charge), new_key()
    expired(firestore_client, f"{key}-reconciled_http")
    first = post(client, key)
    assert first.status_code == 410, first.get_data(as_text=True)
    assert problem(first)["type"] == "urn:exactly-once:problem:response-not-stored"
    assert post(client, key).status_code == 410
    assert (ran, asked) == ([], [f"{key}-reconciled_http"])
    record = read(firestore_client, f"{key}-reconciled_http")
    assert record is not None
    assert (record.state, record.reconciled) == (State.SENT, True)


def test_a_callable_skipped_as_ambiguous_raises_outcome_unknown_on_every_retry(
    firestore_client: firestore.Client,
) -> None:
    ran: list[str] = []

    @idempotent_callable(
        "ambiguous_call", anonymous=True, on_ambiguous="skip", registry=SuffixRegistry()
    )
    def call(request: https_fn.CallableRequest[Any], delivery: Delivery) -> dict[str, int]:
        ran.append(delivery.key)
        return {"n": 1}

    key = new_key()
    expired(firestore_client, f"{key}-ambiguous_call")
    request = https_fn.CallableRequest(raw_request=None, data={"idempotencyKey": key, "a": 1})  # type: ignore[arg-type]
    errors = []
    for _ in range(2):
        with pytest.raises(https_fn.HttpsError) as raised:
            call(request)
        errors.append((raised.value.code, raised.value.details))
    assert (
        errors
        == [(https_fn.FunctionsErrorCode.FAILED_PRECONDITION, {"reason": "outcome-unknown"})] * 2
    )
    assert ran == []


def test_a_task_skipped_as_ambiguous_is_acknowledged(firestore_client: firestore.Client) -> None:
    ran: list[str] = []

    @task_once("ambiguous_task", on_ambiguous="skip", registry=SuffixRegistry())
    def index(request: Any, delivery: Delivery) -> None:
        ran.append(delivery.key)

    expired(firestore_client, "t1-ambiguous_task")
    raw = SimpleNamespace(headers={TASK_NAME_HEADER: "t1"})
    request = https_fn.CallableRequest(raw_request=raw, data={"post": "p1"})  # type: ignore[arg-type]
    assert index(request) is None  # returned: Cloud Tasks gets 200 and stops
    assert ran == []
    record = read(firestore_client, "t1-ambiguous_task")
    assert record is not None
    assert record.state is State.UNKNOWN
