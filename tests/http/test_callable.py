"""`create_order_callable` served in this process, called as the Firebase client SDKs call it
(`POST {"data": ...}` with the ID token): the callable equivalents of the HTTP rows, with the
`HttpsError` codes of `dedup.http.CALLABLE_CODES`."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from tests.http.support import User, new_key
from tests.http.test_create_order import orders, records

Serve = Callable[..., FlaskClient]


@pytest.fixture
def callable_api(http_function: Serve) -> FlaskClient:
    """`create_order_callable`, served."""
    return http_function("create_order_callable")


def invoke(api: FlaskClient, user: User | None, data: Any) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", **(user.bearer if user else {})}
    response = api.post("/", json={"data": data}, headers=headers)
    return response.status_code, response.get_json()


def order(key: object, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"item": "coffee", "quantity": 2, **fields}
    if key is not None:
        data["idempotencyKey"] = key
    return data


def test_a_call_places_one_order_and_a_retry_gets_the_same_result(
    callable_api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """The first call creates the order; a retry with the same key returns the same map and
    does not run the handler."""
    key = new_key()
    status, first = invoke(callable_api, user, order(key))
    assert status == 200
    [placed] = orders(firestore_client)
    assert first["result"] == {"orderId": placed["id"], "item": "coffee", "quantity": 2}
    assert placed["uid"] == user.uid
    assert invoke(callable_api, user, order(key)) == (200, first)
    assert len(orders(firestore_client)) == 1


def test_refusals_map_to_https_error_codes(
    callable_api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """No auth: UNAUTHENTICATED; no or bad key: INVALID_ARGUMENT; all before any record."""
    cases = [
        (None, order(new_key()), 401, "UNAUTHENTICATED"),
        (user, order(None), 400, "INVALID_ARGUMENT"),
        (user, order(""), 400, "INVALID_ARGUMENT"),
        (user, order("k" * 256), 400, "INVALID_ARGUMENT"),
        (user, order(7), 400, "INVALID_ARGUMENT"),
        (user, ["not", "an", "object"], 400, "INVALID_ARGUMENT"),
    ]
    for caller, data, status, code in cases:
        got_status, body = invoke(callable_api, caller, data)
        assert (got_status, body["error"]["status"]) == (status, code), data
    assert records(firestore_client) == []


def test_a_key_reused_with_other_data_is_failed_precondition(
    callable_api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Same key, different data: FAILED_PRECONDITION, reason idempotency-key-reused."""
    key = new_key()
    assert invoke(callable_api, user, order(key))[0] == 200
    status, body = invoke(callable_api, user, order(key, quantity=3))
    assert (status, body["error"]["status"]) == (400, "FAILED_PRECONDITION")
    assert body["error"]["details"]["reason"] == "idempotency-key-reused"
    assert len(orders(firestore_client)) == 1


def test_an_invalid_order_is_a_stored_invalid_argument(
    callable_api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """The handler's INVALID_ARGUMENT is stored: the retry gets the same error."""
    key = new_key()
    first = invoke(callable_api, user, order(key, quantity=0))
    assert (first[0], first[1]["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert invoke(callable_api, user, order(key, quantity=0)) == first
    assert orders(firestore_client) == []
    [record] = records(firestore_client)
    assert record["state"] == "sent"


def test_another_caller_with_the_same_key_is_independent(
    callable_api: FlaskClient, user: User, other_user: User, firestore_client: firestore.Client
) -> None:
    """Keys are scoped by `request.auth.uid`."""
    key = new_key()
    mine = invoke(callable_api, user, order(key))[1]["result"]
    theirs = invoke(callable_api, other_user, order(key))[1]["result"]
    assert mine["orderId"] != theirs["orderId"]
    assert len(orders(firestore_client)) == 2


def test_concurrent_calls_with_one_key_place_one_order(
    callable_api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Twenty concurrent calls with one key: one order, every success the same result."""
    key = new_key()
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda _: invoke(callable_api, user, order(key)), range(20)))
    results = [body["result"]["orderId"] for status, body in answers if status == 200]
    others = [body["error"]["status"] for status, body in answers if status != 200]
    assert set(others) <= {"ABORTED"}
    assert len(set(results)) == 1
    assert len(orders(firestore_client)) == 1
