"""A key reused with another body while its first request runs, on the Firestore emulator:
the reuse is refused (422 `idempotency-key-reused`, docs/http.md), never answered with the
other body's response.

The race is driven, not timed: two instances (two `Deduplicator`s, so neither waits for the
other's per-key turn) serve one transaction-mode endpoint. The second request reads the record
(absent) and enters its handler; the first request's handler waits for that, commits and is
answered 201; only then does the second handler fail, so its failed attempt is recorded on a
record the first request has meanwhile marked sent (`dedup.kernel.atomic._record_failed_attempt`).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import flask
import pytest
from firebase_functions import https_fn
from flask.testing import FlaskClient
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, SuffixRegistry
from dedup.http import IdempotentRequest, idempotent_callable, idempotent_http
from dedup.kernel.record import Mode
from tests.http.support import problem

WAIT = 30.0
"""How long a driven step may take before the test fails (wide: the machine may be busy)."""


def client_of(view: Callable[[Any], Any]) -> FlaskClient:
    app = flask.Flask(__name__)
    app.add_url_rule("/", "view", lambda: view(flask.request), methods=["POST"])
    return app.test_client()


def instance(firestore_client: firestore.Client) -> Deduplicator:
    """One function instance, as the HTTP kinds configure it (reused keys refused)."""
    config = DedupConfig(on_payload_mismatch="raise", cache_size=0)
    return Deduplicator(config, client=firestore_client)


class Race:
    """The schedule: the second request's handler is in before the first commits, and fails
    only once the first request has been answered."""

    def __init__(self) -> None:
        self.second_inside = threading.Event()
        self.first_answered = threading.Event()
        self.effects: list[Any] = []

    def handle(self, delivery: Delivery, body: Any) -> dict[str, Any]:
        assert delivery.transaction is not None
        if body == {"n": 2}:
            self.second_inside.set()
            assert self.first_answered.wait(WAIT)
            raise RuntimeError("the second request's attempt fails after the first committed")
        assert self.second_inside.wait(WAIT)
        self.effects.append(body)
        return {"order": body["n"]}


def run_both(first: Callable[[], Any], second: Callable[[], Any], race: Race) -> tuple[Any, Any]:
    """Send both requests at once; the first's answer releases the second's handler."""
    answers: dict[str, Any] = {}

    def send_second() -> None:
        answers["second"] = second()

    thread = threading.Thread(target=send_second)
    thread.start()
    answers["first"] = first()
    race.first_answered.set()
    thread.join(WAIT * 2)
    assert not thread.is_alive()
    return answers["first"], answers["second"]


@pytest.mark.firestore_only
def test_a_reused_key_whose_attempt_fails_after_the_first_commit_is_refused_over_http(
    firestore_client: firestore.Client,
) -> None:
    """Exactly one 201 (the first body's), the other 422 `idempotency-key-reused`; without the
    payload check in the failed attempt's read, the second was answered the first's 201."""
    race, suffix, key = Race(), f"reuse_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex

    def endpoint(firestore_client: firestore.Client) -> FlaskClient:
        @idempotent_http(
            suffix,
            mode=Mode.TRANSACTION,
            anonymous=True,
            deduplicator=instance(firestore_client),
            registry=SuffixRegistry(),
        )
        def create(call: IdempotentRequest) -> flask.Response:
            order = race.handle(call.delivery, call.json)
            return flask.Response(json.dumps(order), 201, content_type="application/json")

        return client_of(create)

    one, two = endpoint(firestore_client), endpoint(firestore_client)

    def post(client: FlaskClient, body: Any) -> Any:
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        return client.post("/", data=json.dumps(body), headers=headers)

    first, second = run_both(lambda: post(one, {"n": 1}), lambda: post(two, {"n": 2}), race)
    assert (first.status_code, first.get_json()) == (201, {"order": 1})
    assert second.status_code == 422, second.get_data(as_text=True)
    assert problem(second)["type"].endswith("idempotency-key-reused")
    assert race.effects == [{"n": 1}]
    again = post(two, {"n": 2})  # and so on every retry of the reused key
    assert again.status_code == 422, again.get_data(as_text=True)


@pytest.mark.firestore_only
def test_a_reused_key_whose_attempt_fails_after_the_first_commit_is_refused_by_a_callable(
    firestore_client: firestore.Client,
) -> None:
    """The callable: the reuse is FAILED_PRECONDITION `idempotency-key-reused`, never the
    first call's result."""
    race, suffix, key = Race(), f"reuse_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex

    def endpoint(firestore_client: firestore.Client) -> FlaskClient:
        @idempotent_callable(
            suffix,
            mode=Mode.TRANSACTION,
            anonymous=True,
            deduplicator=instance(firestore_client),
            registry=SuffixRegistry(),
        )
        def create(request: https_fn.CallableRequest[Any], delivery: Delivery) -> Any:
            return race.handle(delivery, {"n": request.data["n"]})

        return client_of(https_fn.on_call()(create))

    one, two = endpoint(firestore_client), endpoint(firestore_client)

    def call(client: FlaskClient, n: int) -> Any:
        body = {"data": {"idempotencyKey": key, "n": n}}
        headers = {"Content-Type": "application/json"}
        return client.post("/", data=json.dumps(body), headers=headers)

    first, second = run_both(lambda: call(one, 1), lambda: call(two, 2), race)
    assert first.status_code == 200, first.get_data(as_text=True)
    assert first.get_json() == {"result": {"order": 1}}
    body = second.get_json()
    assert "error" in body, body
    assert body["error"]["details"]["reason"] == "idempotency-key-reused"
    assert race.effects == [{"n": 1}]
