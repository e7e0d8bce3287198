"""A request whose attempts ran out while the last one may have taken effect, on the Firestore
emulator: its record is `dead` and marked `ambiguous` (the last attempt's lease expired after
its effect, as after a crash). Every later request with its key is answered 410
`response-not-stored` saying that the last attempt may have taken effect and to check before
sending it again; never the text for a request that failed, which tells the caller to send it
again with a new key (a second effect). The same for a callable.

The crash is real (a step hook raises at `Step.AFTER_EFFECT`: no release, no "sent"); the
lease's expiry is driven, its start moved an hour back on the record.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import flask
import pytest
from firebase_functions import https_fn
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, Step, SuffixRegistry
from dedup.config import DEFAULT_COLLECTION
from dedup.http import IdempotentRequest, idempotent_callable, idempotent_http
from dedup.kernel.record import Field
from tests.cli import records


class Crash(BaseException):
    """The process dies: nothing of the request runs after it."""


def die_after_effect(step: Step, key: str) -> None:
    if step is Step.AFTER_EFFECT:
        raise Crash


def expire_leases(client: firestore.Client) -> None:
    """Every record's lease an hour old: expired, as the database clock would see it later."""
    for document in client.collection(DEFAULT_COLLECTION).stream():
        if (document.to_dict() or {}).get(Field.LEASE_STARTED_AT) is not None:
            document.reference.update({Field.LEASE_STARTED_AT: records.now() - timedelta(hours=1)})


def served(view: Any) -> Any:
    app = flask.Flask(__name__)
    app.add_url_rule("/", "view", lambda: view(flask.request), methods=["POST"])
    return app.test_client()


@pytest.fixture
def dedup(firestore_client: firestore.Client) -> Deduplicator:
    config = DedupConfig(
        max_attempts=1, min_retry_seconds=0, cache_size=0, on_payload_mismatch="raise"
    )
    return Deduplicator(config, client=firestore_client)


def test_an_http_request_dead_after_a_crash_says_it_may_have_taken_effect(
    dedup: Deduplicator, firestore_client: firestore.Client
) -> None:
    effects: list[str] = []

    @idempotent_http(
        "pay", anonymous=True, deduplicator=dedup, registry=SuffixRegistry(), on_ambiguous="skip"
    )
    def pay(request: IdempotentRequest) -> Any:
        effects.append(request.key)
        return {"paid": True}, 201

    client = served(pay)
    headers = {"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex}
    stop = dedup.on_step(die_after_effect)
    with pytest.raises(Crash):
        client.post("/", data=b"{}", headers=headers)
    stop()
    expire_leases(firestore_client)
    answers = [client.post("/", data=b"{}", headers=headers) for _ in range(2)]
    assert len(effects) == 1
    for answer in answers:
        assert answer.status_code == 410
        problem = answer.get_json()
        assert problem["type"].endswith("response-not-stored")
        assert "may have taken effect" in problem["detail"]
        assert "failed too many times" not in problem["detail"]
        assert "ran out" in problem["detail"]


def test_a_call_dead_after_a_crash_says_it_may_have_taken_effect(
    dedup: Deduplicator, firestore_client: firestore.Client
) -> None:
    effects: list[str] = []

    @idempotent_callable(
        "refund",
        anonymous=True,
        deduplicator=dedup,
        registry=SuffixRegistry(),
        on_ambiguous="skip",
    )
    def refund(request: https_fn.CallableRequest[Any], delivery: Delivery) -> Any:
        effects.append(delivery.key)
        return {"refunded": True}

    client = served(https_fn.on_call()(refund))
    body = json.dumps({"data": {"idempotencyKey": uuid.uuid4().hex}})
    headers = {"Content-Type": "application/json"}
    stop = dedup.on_step(die_after_effect)
    with pytest.raises(Crash):
        client.post("/", data=body, headers=headers)
    stop()
    expire_leases(firestore_client)
    answers = [client.post("/", data=body, headers=headers) for _ in range(2)]
    docs = [d.to_dict() for d in firestore_client.collection(DEFAULT_COLLECTION).stream()]
    assert len(effects) == 1, (docs, [a.get_json() for a in answers])
    for answer in answers:
        error = answer.get_json()["error"]
        assert error["status"] == "FAILED_PRECONDITION"
        assert "ran out" in error["message"]
        assert "may have taken effect" in error["message"]
