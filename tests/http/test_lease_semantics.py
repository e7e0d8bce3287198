"""The rows of the behaviour table that need a lease (test endpoints of
`tests/http/endpoints.py`, lease mode, served in this process): 409 while the first request
runs, the bounded wait, 5xx and exceptions releasing the lease, a response too large to store,
anonymous endpoints."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from dedup.kernel.transitions import MAX_RESULT_BYTES
from tests.http.conftest import SERVED
from tests.http.support import new_key, problem

Serve = Callable[..., FlaskClient]


@pytest.fixture
def echo(http_function: Serve) -> FlaskClient:
    """The lease-mode endpoint that answers 409 at once."""
    return http_function("echo", SERVED)


@pytest.fixture
def echo_wait(http_function: Serve) -> FlaskClient:
    """The lease-mode endpoint that waits up to 20 s before a 409."""
    return http_function("echo_wait", SERVED)


def call(client: FlaskClient, key: str, plan: dict[str, Any]) -> Any:
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    return client.post("/", data=json.dumps(plan), headers=headers)


def runs(db: firestore.Client, key: str, suffix: str = "test_echo") -> int:
    fields = db.collection("runs").document(f"{key}-{suffix}").get().to_dict() or {}
    return int(fields.get("count", 0))


def started(db: firestore.Client, key: str, suffix: str = "test_echo") -> None:
    """Block until the handler of `key` has begun its run."""
    deadline = time.monotonic() + 30
    while runs(db, key, suffix) == 0:
        assert time.monotonic() < deadline, "the first request never started"
        time.sleep(0.05)


def test_a_request_whose_key_is_running_gets_409_with_retry_after(
    echo: FlaskClient, firestore_client: firestore.Client
) -> None:
    """While the first request runs, a copy is answered 409 problem+json with Retry-After,
    and the handler does not run for it; after the first finishes the copy gets its answer."""
    key = new_key()
    plan = {"sleep": 3}
    first: list[Any] = []
    flight = threading.Thread(target=lambda: first.append(call(echo, key, plan)))
    flight.start()
    started(firestore_client, key)
    busy = call(echo, key, plan)
    assert busy.status_code == 409
    assert int(busy.headers["Retry-After"]) >= 1
    assert problem(busy)["type"].endswith("request-in-progress")
    flight.join()
    assert first[0].status_code == 200
    later = call(echo, key, plan)
    assert (later.status_code, later.data) == (200, first[0].data)
    assert later.headers["Idempotent-Replayed"] == "true"
    assert runs(firestore_client, key) == 1


def test_a_waiting_copy_gets_the_first_requests_answer(
    echo_wait: FlaskClient, firestore_client: firestore.Client
) -> None:
    """With `wait_seconds`, a copy waits for the running request and replays its answer."""
    key = new_key()
    plan = {"sleep": 2}
    first: list[Any] = []
    flight = threading.Thread(target=lambda: first.append(call(echo_wait, key, plan)))
    flight.start()
    started(firestore_client, key, "test_echo_wait")
    copy = call(echo_wait, key, plan)
    flight.join()
    assert copy.status_code == 200
    assert copy.data == first[0].data
    assert copy.headers["Idempotent-Replayed"] == "true"
    assert runs(firestore_client, key, "test_echo_wait") == 1


@pytest.mark.parametrize("how", ["status", "raise"])
def test_a_5xx_or_an_exception_releases_the_key(
    echo: FlaskClient, firestore_client: firestore.Client, how: str
) -> None:
    """A 5xx answer or an exception stores nothing and releases the lease: the client's retry
    runs the handler again and its answer is the one stored."""
    key = new_key()
    plan = {"fail": 1, "how": how}
    failed = call(echo, key, plan)
    assert failed.status_code == (503 if how == "status" else 500)
    if how == "raise":
        body = problem(failed)
        assert body["type"].endswith("handler-failed")
        assert "RuntimeError" not in failed.text
        assert "internal detail" not in failed.text
    ref = firestore_client.collection("triggerEvents").document(f"{key}-test_echo")
    record = ref.get().to_dict() or {}
    assert record["result"] is None
    assert record["leaseStartedAt"] is None
    retried = call(echo, key, plan)
    assert retried.status_code == 200
    assert retried.get_json() == {"run": 2}
    replayed = call(echo, key, plan)
    assert replayed.data == retried.data
    assert runs(firestore_client, key) == 2


def test_a_response_too_large_to_store_is_answered_once_then_410(
    echo: FlaskClient, firestore_client: firestore.Client
) -> None:
    """The first answer is sent whole; the record keeps its status, size and sha256 only, and
    a replay is 410 `response-not-stored` saying so (never a crash, never a second run)."""
    key = new_key()
    size = MAX_RESULT_BYTES + 1
    plan = {"size": size}
    first = call(echo, key, plan)
    assert first.status_code == 200
    assert len(first.data) == size
    replay = call(echo, key, plan)
    assert replay.status_code == 410
    assert replay.headers["Idempotent-Replayed"] == "true"
    body = problem(replay)
    assert body["type"].endswith("response-not-stored")
    assert (body["originalStatus"], body["bytes"]) == (200, size)
    assert runs(firestore_client, key) == 1


def test_an_anonymous_endpoint_scopes_by_the_key_alone(
    echo: FlaskClient, firestore_client: firestore.Client
) -> None:
    """No token needed; two clients sending one key share the request."""
    key = new_key()
    first = call(echo, key, {})
    second = echo.post(
        "/",
        data=b"{}",
        headers={"Content-Type": "application/json", "Idempotency-Key": key, "X-Other": "1"},
    )
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.data == first.data
