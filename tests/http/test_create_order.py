"""`create_order` served in this process (as functions-framework serves it) against the
Firestore and Auth emulators: the behaviour table of docs/http.md, row by row."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from tests.http.support import User, new_key, order_headers, problem

ORDER = {"item": "coffee", "quantity": 2}
Serve = Callable[..., FlaskClient]
INTERNAL_NAMES = ("Error", "Exception", "Traceback", "LeaseHeld", "PayloadMismatch")


@pytest.fixture
def api(http_function: Serve) -> FlaskClient:
    """`create_order`, served."""
    return http_function("create_order")


def post(api: FlaskClient, user: User | None, key: str | None, body: Any = ORDER) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return api.post("/", data=data, headers=order_headers(user, key))


def orders(db: firestore.Client, uid: str | None = None) -> list[dict[str, Any]]:
    query: Any = db.collection("orders")
    if uid is not None:
        query = query.where(filter=firestore.FieldFilter("uid", "==", uid))
    return [snapshot.to_dict() | {"id": snapshot.id} for snapshot in query.stream()]


def records(db: firestore.Client) -> list[dict[str, Any]]:
    return [snapshot.to_dict() or {} for snapshot in db.collection("triggerEvents").stream()]


def test_first_request_creates_the_order_and_answers_201(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """A first request runs the handler: the order is written, 201 names it."""
    response = post(api, user, new_key())
    assert response.status_code == 201
    answer = response.get_json()
    [order] = orders(firestore_client)
    assert answer == {"orderId": order["id"], "item": "coffee", "quantity": 2}
    assert response.headers["Location"] == f"/orders/{order['id']}"
    assert response.headers["Content-Type"] == "application/json"
    assert "Idempotent-Replayed" not in response.headers
    assert order["uid"] == user.uid
    assert (order["item"], order["quantity"]) == ("coffee", 2)
    assert order["createdAt"] is not None
    [record] = records(firestore_client)
    assert record["state"] == "sent"
    assert record["result"]["status"] == 201
    assert record["expireAt"] is not None  # the key is remembered for the retention period


def test_a_replay_is_the_stored_response_byte_for_byte(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Same key, same request, after completion: the first answer again, byte for byte, with
    `Idempotent-Replayed: true`; the handler does not run again (one order)."""
    key = new_key()
    first = post(api, user, key)
    for _ in range(3):
        again = post(api, user, key)
        assert again.status_code == first.status_code == 201
        assert again.data == first.data
        assert again.headers["Content-Type"] == first.headers["Content-Type"]
        assert again.headers["Location"] == first.headers["Location"]
        assert again.headers["Idempotent-Replayed"] == "true"
    assert len(orders(firestore_client)) == 1


def test_the_fingerprint_is_the_canonical_body(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Key order and whitespace of a JSON body do not make it another request."""
    key = new_key()
    first = post(api, user, key, b'{"item": "coffee", "quantity": 2}')
    again = post(api, user, key, b'{ "quantity":2,\n "item":"coffee" }')
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.data == first.data
    assert len(orders(firestore_client)) == 1


def test_a_key_reused_for_another_body_is_422(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Same key, different fingerprint: 422 problem+json, the handler does not run."""
    key = new_key()
    assert post(api, user, key).status_code == 201
    reused = post(api, user, key, {"item": "tea", "quantity": 2})
    assert reused.status_code == 422
    body = problem(reused)
    assert body["type"].endswith("idempotency-key-reused")
    assert body["status"] == 422
    assert len(orders(firestore_client)) == 1


def test_a_missing_key_is_400_naming_the_header(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """No Idempotency-Key: 400 problem+json naming the header; no record, no order."""
    response = post(api, user, None)
    assert response.status_code == 400
    body = problem(response)
    assert "Idempotency-Key" in body["detail"]
    assert body["type"].endswith("idempotency-key-missing")
    assert records(firestore_client) == []
    assert orders(firestore_client) == []


@pytest.mark.parametrize(
    "raw",
    ["", '""', "a" * 256, '"' + "a" * 256 + '"', "clé", "a b", '"abc', '"a\\bc"', '"abc"x'],
    ids=[
        "empty",
        "empty-quoted",
        "256",
        "256-quoted",
        "non-ascii",
        "space",
        "open",
        "escape",
        "tail",
    ],
)
def test_an_invalid_key_is_400(
    api: FlaskClient, user: User, firestore_client: firestore.Client, raw: str
) -> None:
    """A key that is not 1-255 printable ASCII characters (bare or sf-string): 400, no record."""
    headers = order_headers(user, None)
    response = api.post(
        "/", data=json.dumps(ORDER), headers=[*headers.items(), ("Idempotency-Key", raw)]
    )
    assert response.status_code == 400
    assert problem(response)["type"].endswith("idempotency-key-invalid")
    assert records(firestore_client) == []
    assert orders(firestore_client) == []


def test_the_quoted_and_the_bare_form_are_the_same_key(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """`"abc"` (RFC 8941 sf-string) and `abc` name the same key; 255 characters are accepted."""
    key = "k" * 250 + new_key()[:5]
    assert post(api, user, key).status_code == 201
    again = post(api, user, f'"{key}"')
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(orders(firestore_client)) == 1


@pytest.mark.parametrize("token", [None, "not-a-token", "eyJhbGciOiJub25lIn0.e30."])
def test_without_a_valid_id_token_it_is_401(
    api: FlaskClient, firestore_client: firestore.Client, token: str | None
) -> None:
    """No token, or one that is not a valid Firebase ID token: 401, no record, no order."""
    headers = order_headers(None, new_key())
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    response = api.post("/", data=json.dumps(ORDER), headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert problem(response)["type"].endswith("unauthenticated")
    assert records(firestore_client) == []
    assert orders(firestore_client) == []


def test_another_caller_with_the_same_key_is_an_independent_request(
    api: FlaskClient, user: User, other_user: User, firestore_client: firestore.Client
) -> None:
    """Keys are scoped to the caller: a stored response is never replayed to another user."""
    key = new_key()
    mine = post(api, user, key)
    theirs = post(api, other_user, key)
    assert mine.status_code == theirs.status_code == 201
    assert "Idempotent-Replayed" not in theirs.headers
    assert mine.get_json()["orderId"] != theirs.get_json()["orderId"]
    assert len(orders(firestore_client, user.uid)) == 1
    assert len(orders(firestore_client, other_user.uid)) == 1


@pytest.mark.parametrize(
    "body",
    [{"item": "", "quantity": 1}, {"item": "tea", "quantity": 0}, {"item": "tea", "quantity": 101},
     {"item": "tea", "quantity": True}, {"item": "tea"}, ["tea", 1]],
    ids=["empty-item", "zero", "101", "bool", "no-quantity", "not-object"],
)  # fmt: skip
def test_an_invalid_order_is_a_stored_400(
    api: FlaskClient, user: User, firestore_client: firestore.Client, body: Any
) -> None:
    """Validation failures answer 400, stored: a replay gives the same 400, no order."""
    key = new_key()
    first = post(api, user, key, body)
    assert first.status_code == 400
    assert problem(first)["type"].endswith("invalid-order")
    again = post(api, user, key, body)
    assert (again.status_code, again.data) == (400, first.data)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert orders(firestore_client) == []


def test_malformed_requests_are_refused_before_any_record(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """Bad JSON, a wrong content type, a body too large, a wrong method: refused with
    problem+json naming no internal exception, and no record is touched."""
    key = new_key()
    headers = order_headers(user, key)
    cases = [
        (api.post("/", data=b'{"item": "coffee",', headers=headers), 400, "malformed-json"),
        (api.post("/", data=b"\xff\xfe", headers=headers), 400, "malformed-json"),
        (
            api.post("/", data=b"item=coffee", headers={**headers, "Content-Type": "text/plain"}),
            415,
            "unsupported-media-type",
        ),
        (api.post("/", data=b"x" * (1024 * 1024 + 1), headers=headers), 413, "body-too-large"),
        (api.get("/", headers=headers), 405, "method-not-allowed"),
    ]
    for response, status, slug in cases:
        assert response.status_code == status
        body = problem(response)
        assert body["type"].endswith(slug)
        assert not any(name in json.dumps(body) for name in INTERNAL_NAMES), body
    assert records(firestore_client) == []
    assert post(api, user, key).status_code == 201  # the key is still unused


def test_30_concurrent_requests_with_one_key_place_one_order(
    api: FlaskClient, user: User, firestore_client: firestore.Client
) -> None:
    """It is impossible for concurrent copies of one request to place two orders: 30 threads
    with one key get 201 with the same orderId (or 409), and one order exists."""
    key = new_key()
    with ThreadPoolExecutor(max_workers=30) as pool:
        answers = list(pool.map(lambda _: post(api, user, key), range(30)))
    statuses = [answer.status_code for answer in answers]
    assert set(statuses) <= {201, 409}, statuses
    created = [answer.get_json()["orderId"] for answer in answers if answer.status_code == 201]
    assert created
    assert len(set(created)) == 1
    [order] = orders(firestore_client)
    assert order["id"] == created[0]


def test_dedup_list_finds_a_callers_requests_by_users_uid(
    api: FlaskClient, user: User, other_user: User, firestore_client: firestore.Client
) -> None:
    """Each request's record carries the subject `users/<uid>`: `dedup list --subject
    users/<uid>` lists that caller's requests, and only theirs (an operator knows the uid)."""
    from click.testing import CliRunner

    from dedup.cli import cli

    key = new_key()
    assert post(api, user, key).status_code == 201
    assert post(api, other_user, new_key()).status_code == 201
    listed = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli,
        ["--project", firestore_client.project, "list", "--subject", f"users/{user.uid}", "--json"],
    )
    assert listed.exit_code == 0, listed.output
    [record] = json.loads(listed.stdout)
    assert record["subject"] == f"users/{user.uid}"
    assert record["key"].startswith(f"{user.uid}:{key}")
