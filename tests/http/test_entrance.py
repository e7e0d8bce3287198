"""HTTP and callable endpoints built in the test over the Firestore emulator: the record key in
the configured layout with the key cache on (a replay, not a 410), and a terminal failure on
the first request answered as a failure of its own (a problem document, not a replay) that
every retry with the key gets back, marked replayed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import flask
import pytest
from firebase_functions import https_fn
from flask.testing import FlaskClient
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Mode, SuffixRegistry, TerminalError, dedup_key
from dedup.http import (
    REPLAYED_HEADER,
    IdempotentRequest,
    idempotent_callable,
    idempotent_http,
)
from dedup.kernel.delivery import Delivery
from tests.http.support import new_key, problem

COLLECTION = "triggerEvents"


def client_of(view: Callable[[flask.Request], flask.Response]) -> FlaskClient:
    """A Flask test client serving `view` at `/` for POST."""
    app = flask.Flask(__name__)
    app.add_url_rule("/", "view", lambda: view(flask.request), methods=["POST"])
    return app.test_client()


def post(client: FlaskClient, key: str, body: dict[str, Any]) -> Any:
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    return client.post("/", data=json.dumps(body), headers=headers)


def test_a_spread_layout_with_the_key_cache_replays_the_stored_answer(
    firestore_client: firestore.Client,
) -> None:
    """With `key_layout="spread"` and the key cache on, a retry is known from the cache and its
    stored answer is read from the record at the spread key: the same 201, replayed (a read at
    the plain key would find nothing and answer 410)."""
    config = DedupConfig(key_layout="spread", cache_size=100, on_payload_mismatch="raise")
    ran: list[str] = []

    @idempotent_http(
        "spread_cached",
        anonymous=True,
        deduplicator=Deduplicator(config),
        registry=SuffixRegistry(),
    )
    def created(call: IdempotentRequest) -> flask.Response:
        ran.append(call.key)
        return flask.Response(json.dumps({"n": len(ran)}), 201, content_type="application/json")

    client, key = client_of(created), new_key()
    first = post(client, key, {"a": 1})
    assert (first.status_code, first.get_json()) == (201, {"n": 1})
    assert REPLAYED_HEADER not in first.headers
    again = post(client, key, {"a": 1})
    assert (again.status_code, again.get_json()) == (201, {"n": 1})
    assert again.headers[REPLAYED_HEADER] == "true"
    assert ran == [key]
    spread = dedup_key(key, "spread_cached", "spread")
    assert firestore_client.collection(COLLECTION).document(spread).get().exists
    plain = dedup_key(key, "spread_cached")
    assert not firestore_client.collection(COLLECTION).document(plain).get().exists


def test_a_terminal_failure_is_answered_once_as_itself_then_replayed(
    firestore_client: firestore.Client,
) -> None:
    """A handler raising `TerminalError` on the first request: 500 `request-failed`, not
    marked replayed; a retry with the key does not run the handler and gets the same problem
    with `Idempotent-Replayed: true`."""
    ran: list[str] = []

    @idempotent_http("terminal_http", anonymous=True, registry=SuffixRegistry())
    def refuses(call: IdempotentRequest) -> flask.Response:
        ran.append(call.key)
        raise TerminalError("the account is closed")

    client, key = client_of(refuses), new_key()
    first = post(client, key, {"a": 1})
    assert first.status_code == 500
    assert problem(first)["type"] == "urn:exactly-once:problem:request-failed"
    assert "new Idempotency-Key" in problem(first)["detail"]
    assert "TerminalError" not in first.get_data(as_text=True)
    assert REPLAYED_HEADER not in first.headers
    again = post(client, key, {"a": 1})
    assert (again.status_code, problem(again)) == (500, problem(first))
    assert again.headers[REPLAYED_HEADER] == "true"
    assert ran == [key]
    record = firestore_client.collection(COLLECTION).document(f"{key}-terminal_http").get()
    assert record.get("state") == "failed"


def test_an_entity_too_large_is_422_on_the_first_request_and_on_its_retries(
    firestore_client: firestore.Client,
) -> None:
    """In transaction mode a handler whose write Firestore refuses as invalid (a document over
    the 1 MiB limit) gets 422 `request-unprocessable`, not a replay; its retry gets the same
    422 marked replayed, and nothing was written."""

    @idempotent_http(
        "too_large_http", mode=Mode.TRANSACTION, anonymous=True, registry=SuffixRegistry()
    )
    def huge(call: IdempotentRequest) -> flask.Response:
        assert call.delivery.transaction is not None
        ref = call.delivery.client.collection("huge").document()
        call.delivery.transaction.create(ref, {"blob": "x" * (1024 * 1024 + 10)})
        return flask.Response("{}", 201, content_type="application/json")

    client, key = client_of(huge), new_key()
    first = post(client, key, {"a": 1})
    assert first.status_code == 422, first.get_data(as_text=True)
    assert problem(first)["type"] == "urn:exactly-once:problem:request-unprocessable"
    assert REPLAYED_HEADER not in first.headers
    again = post(client, key, {"a": 1})
    assert (again.status_code, problem(again)) == (422, problem(first))
    assert again.headers[REPLAYED_HEADER] == "true"
    assert list(firestore_client.collection("huge").stream()) == []


def test_a_callable_terminal_failure_is_the_same_error_for_every_retry(
    firestore_client: firestore.Client,
) -> None:
    """A callable whose handler fails terminally raises `internal` with reason
    `request-failed`, for the first call and, without running again, for its retry."""
    ran: list[str] = []

    @idempotent_callable("terminal_call", anonymous=True, registry=SuffixRegistry())
    def refuses(request: https_fn.CallableRequest[Any], delivery: Delivery) -> None:
        ran.append(delivery.key)
        raise TerminalError("no")

    key = new_key()
    request = https_fn.CallableRequest(raw_request=None, data={"idempotencyKey": key, "a": 1})  # type: ignore[arg-type]
    errors = []
    for _ in range(2):
        with pytest.raises(https_fn.HttpsError) as raised:
            refuses(request)
        errors.append((raised.value.code, raised.value.message, raised.value.details))
    assert errors[0] == errors[1]
    assert errors[0][0] is https_fn.FunctionsErrorCode.INTERNAL
    assert errors[0][2] == {"reason": "request-failed"}
    assert len(ran) == 1
