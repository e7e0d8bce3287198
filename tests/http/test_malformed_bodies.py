"""Bodies that cannot succeed as sent: a 4xx of the right kind before any record, never a 5xx
that a client or LINE would retry. `create_order`, `create_order_callable` and
`receive_line_webhook` served in this process over the emulators."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

import flask
import functions_framework
import pytest
from flask.testing import FlaskClient
from google.api_core.exceptions import InvalidArgument
from google.cloud import firestore
from google.pubsub_v1 import PubsubMessage

import functions.receive_line_webhook as line_module
from dedup.platform.strict_json import MAX_DEPTH, MAX_INTEGER_DIGITS
from functions.create_order import create_order_callable
from tests.http.conftest import SERVED
from tests.http.support import User, line_headers, new_key, order_headers, problem
from tests.http.test_create_order import orders, records

Serve = Callable[..., FlaskClient]
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]+(?:Error|Exception)\b|Traceback|Recursion")

MALFORMED = {
    "lone surrogate": b'{"item": "\\ud800", "quantity": 1}',
    "lone surrogate key": b'{"\\udc00": 1, "item": "coffee", "quantity": 1}',
    "not UTF-8": b'{"item": "\xff", "quantity": 1}',
    "100,000 levels": b"[" * 100_000 + b"]" * 100_000,
    "one level too deep": b'{"item": "coffee", "quantity": 1, "x": '
    + b"[" * MAX_DEPTH
    + b"]" * MAX_DEPTH
    + b"}",
    "5,000-digit integer": b'{"item": "coffee", "quantity": 1' + b"0" * 5000 + b"}",
    "integer one digit too long": b'{"item": "coffee", "quantity": '
    + b"1" * (MAX_INTEGER_DIGITS + 1)
    + b"}",
    "NaN": b'{"item": "coffee", "quantity": NaN}',
    "Infinity": b'{"item": "coffee", "quantity": 1, "amount": Infinity}',
    "1e999": b'{"item": "coffee", "quantity": 1, "amount": 1e999}',
    "empty": b"",
    "open brace": b"{",
    "trailing bytes": b'{"item": "coffee", "quantity": 1} trailing',
}


def assert_clean(text: str, sent: bytes) -> None:
    """No exception type named, nothing of the body echoed."""
    assert not EXCEPTION_NAME.search(text), text
    if len(sent) >= 16:
        assert sent[:16].decode("utf-8", "replace") not in text


@pytest.fixture
def api(http_function: Serve) -> FlaskClient:
    return http_function("create_order")


@pytest.fixture
def callable_api(http_function: Serve) -> FlaskClient:
    return http_function("create_order_callable")


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_an_http_body_that_cannot_succeed_is_a_400_problem_before_any_record(
    api: FlaskClient, user: User, firestore_client: firestore.Client, body: bytes
) -> None:
    """Each malformed body: 400 `application/problem+json` `malformed-json` whose detail says
    what to fix; no record, no order; the key is still free for the right body."""
    key = new_key()
    response = api.post("/", data=body, headers=order_headers(user, key))
    assert response.status_code == 400
    answer = problem(response)
    assert answer["type"].endswith("malformed-json")
    assert answer["detail"].startswith("the body ")
    assert_clean(response.get_data(as_text=True), body)
    assert records(firestore_client) == []
    assert orders(firestore_client) == []
    good = api.post("/", json={"item": "coffee", "quantity": 1}, headers=order_headers(user, key))
    assert good.status_code == 201


def test_the_query_string_is_part_of_the_fingerprint(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Same key and body, another query: 422, never the other query's answer; the same query
    again: the stored answer."""
    key = new_key()
    order = {"item": "coffee", "quantity": 1}
    first = api.post("/?express=1", json=order, headers=order_headers(user, key))
    assert first.status_code == 201
    other = api.post("/?express=0", json=order, headers=order_headers(user, key))
    assert other.status_code == 422
    assert problem(other)["type"].endswith("idempotency-key-reused")
    assert api.post("/", json=order, headers=order_headers(user, key)).status_code == 422
    again = api.post("/?express=1", json=order, headers=order_headers(user, key))
    assert (again.status_code, again.data) == (201, first.data)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(orders(firestore_client)) == 1


def envelope(data: bytes) -> bytes:
    return b'{"data": ' + data + b"}"


CALLABLE_MALFORMED = {
    "empty": b"",
    "open brace": b"{",
    "trailing bytes": b'{"data": {}} x',
    "100,000 levels": envelope(b"[" * 100_000 + b"]" * 100_000),
    "5,000-digit integer": envelope(b"1" + b"0" * 5000),
    "top-level number": b"5",
    "top-level list": b"[]",
    "extra member": b'{"data": {}, "more": 1}',
    **{name: envelope(body) for name, body in MALFORMED.items() if body.startswith(b"{")},
}


@pytest.mark.parametrize("body", CALLABLE_MALFORMED.values(), ids=CALLABLE_MALFORMED.keys())
def test_a_malformed_callable_request_is_invalid_argument_never_internal(
    callable_api: FlaskClient, user: User, firestore_client: firestore.Client, body: bytes
) -> None:
    """firebase-functions would answer these 500 INTERNAL before the function's code runs:
    `dedup.http.callable_body.strict_callable` answers 400 INVALID_ARGUMENT first."""
    headers = {"Content-Type": "application/json", **user.bearer}
    response = callable_api.post("/", data=body, headers=headers)
    assert response.status_code == 400, response.data[:300]
    error = response.get_json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert_clean(response.get_data(as_text=True), body)
    assert records(firestore_client) == []
    assert orders(firestore_client) == []


def test_callable_data_that_another_parser_let_through_is_invalid_argument(
    user: User, firestore_client: firestore.Client
) -> None:
    """Without `strict_callable` (firebase-functions alone parses the body), `NaN` and lone
    surrogates reach `idempotent_callable`: it refuses them with INVALID_ARGUMENT too."""
    served: Any = create_order_callable
    bare = served.__wrapped__  # https_fn.on_call's function, without strict_callable
    app = functions_framework.create_app(target="create_order_callable", source=SERVED)
    headers = {"Content-Type": "application/json", **user.bearer}
    for data in (b'{"item": "\\ud800", "quantity": 1', b'{"item": "x", "quantity": NaN'):
        body = b'{"data": ' + data + b', "idempotencyKey": "' + new_key().encode() + b'"}}'
        with app.test_request_context("/", method="POST", data=body, headers=headers):
            response = bare(flask.request)
        assert response.status_code == 400
        assert response.get_json()["error"]["status"] == "INVALID_ARGUMENT"
    assert records(firestore_client) == []


def test_a_callable_result_that_is_not_json_never_runs_the_effect_twice(
    http_function: Serve, firestore_client: firestore.Client
) -> None:
    """Lease mode, a result JSON cannot carry (`NaN`), after the effect: the record is
    `failed` (no lease released), the call and every retry are answered `internal`
    `request-failed` (a terminal failure, not to be retried) and the effect ran once."""
    api = http_function("bad_result", source=SERVED)
    key = new_key()
    answers = [api.post("/", json={"data": {"idempotencyKey": key}}, headers={}) for _ in range(3)]
    for answer in answers:
        assert answer.status_code == 500
        error = answer.get_json()["error"]
        assert (error["status"], error["details"]["reason"]) == ("INTERNAL", "request-failed")
    [record] = records(firestore_client)
    assert record["state"] == "failed"
    runs = [doc.to_dict() for doc in firestore_client.collection("runs").stream()]
    assert runs == [{"count": 1}]


# --- LINE ----------------------------------------------------------------------------------


def surrogate_body(event_id: str, *, redelivery: bool = False) -> bytes:
    """A LINE body whose message text and id hold lone surrogates (escaped, as JSON allows)."""
    event = {
        "type": "message",
        "webhookEventId": event_id,
        "deliveryContext": {"isRedelivery": redelivery},
        "message": {"type": "text", "text": "broken \ud800 emoji \udc00"},
    }
    return json.dumps({"destination": "U1", "events": [event]}).encode()


@pytest.mark.shared_emulators  # the Pub/Sub emulator
def test_a_signed_event_with_lone_surrogates_is_published_exactly_once(
    line: FlaskClient,
    firestore_client: firestore.Client,
    published: Callable[[], list[PubsubMessage]],
) -> None:
    """Text and even the event id holding lone surrogates: 200, one message whose body carries
    the text as LINE sent it (escaped); redeliveries publish nothing more."""
    for event_id in (f"01H{uuid.uuid4().hex[:20].upper()}", f"01H\ud800{uuid.uuid4().hex[:8]}"):
        for redelivery in (False, True, True):
            body = surrogate_body(event_id, redelivery=redelivery)
            response = line.post("/", data=body, headers=line_headers(body))
            assert response.status_code == 200, response.data
    messages = published()
    assert len(messages) == 2
    for message in messages:
        [event] = json.loads(message.data)["events"]
        assert event["message"]["text"] == "broken \ud800 emoji \udc00"
    assert sorted(r["state"] for r in records(firestore_client)) == ["sent", "sent"]


def test_an_event_pubsub_refuses_is_recorded_failed_acknowledged_and_logged(
    line: FlaskClient,
    firestore_client: firestore.Client,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pub/Sub refusing the message as such (InvalidArgument): 200, the record `failed`, an
    ERROR naming the webhookEventId; LINE's redelivery is 200 and publishes nothing."""
    calls: list[str] = []

    class Refusing:
        def publish(self, topic: str, data: bytes, **attributes: str) -> Any:
            calls.append(attributes["eventKey"])
            raise InvalidArgument("attribute value too long")

    monkeypatch.setattr(line_module, "_publisher", lambda: Refusing())
    event_id = f"01H{uuid.uuid4().hex[:20].upper()}"
    body = surrogate_body(event_id)
    with caplog.at_level(logging.ERROR, logger=line_module.__name__):
        for _ in range(3):
            assert line.post("/", data=body, headers=line_headers(body)).status_code == 200
    assert calls == [event_id]
    assert [r["state"] for r in records(firestore_client)] == ["failed"]
    assert any(event_id in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    "body",
    [MALFORMED["100,000 levels"], MALFORMED["5,000-digit integer"], MALFORMED["NaN"]],
    ids=["deep", "huge integer", "NaN"],
)
def test_a_signed_body_beyond_the_limits_is_400_not_500(
    line: FlaskClient, firestore_client: firestore.Client, body: bytes
) -> None:
    response = line.post("/", data=body, headers=line_headers(body))
    assert response.status_code == 400
    assert problem(response)["type"].endswith("malformed-webhook")
    assert_clean(response.get_data(as_text=True), body)
    assert records(firestore_client) == []
