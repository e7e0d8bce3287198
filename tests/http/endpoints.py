"""Test-only HTTP endpoints in lease mode, for the rows of the behaviour table that
`create_order` (transaction mode, no lease) cannot show: 409 while the first request runs,
the bounded wait, a 5xx or an exception releasing the lease, a response too large to store.

The request body says what to do: `{"sleep": seconds, "fail": n, "how": "status"|"raise",
"size": bytes}`: the first `n` runs of a key fail (503, or an exception), a run sleeps
`sleep` seconds, and answers 200 with `size` bytes of "x" (or `{"run": n}`). Every run of a key
is counted in `runs/<record key>` (outside any transaction), so tests count handler runs.
`bad_result` is a callable whose result is not JSON. Served through `tests/http/served.py`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import flask
from firebase_functions import https_fn
from google.cloud import firestore

from dedup import Delivery
from dedup.http import IdempotentRequest, idempotent_callable, idempotent_http


def count_run(call: IdempotentRequest) -> int:
    """Count this run of the key; returns its number (1 for the first)."""
    ref = call.delivery.client.collection("runs").document(call.delivery.key)
    ref.set({"count": firestore.Increment(1)}, merge=True)
    return int((ref.get().to_dict() or {})["count"])


def work(call: IdempotentRequest) -> flask.Response:
    """What the endpoints do (see the module docstring)."""
    plan: dict[str, Any] = call.json or {}
    run = count_run(call)
    time.sleep(float(plan.get("sleep", 0)))
    if run <= int(plan.get("fail", 0)):
        if plan.get("how") == "raise":
            raise RuntimeError("internal detail that must not reach the client")
        return flask.Response("unavailable", 503, content_type="text/plain")
    if "size" in plan:
        return flask.Response(b"x" * int(plan["size"]), 200, content_type="text/plain")
    return flask.Response(json.dumps({"run": run}), 200, content_type="application/json")


@idempotent_http("test_echo", anonymous=True)
def echo(call: IdempotentRequest) -> flask.Response:
    """Lease mode, anonymous, answers 409 at once while a request with the key runs."""
    return work(call)


@idempotent_http("test_echo_wait", anonymous=True, wait_seconds=20)
def echo_wait(call: IdempotentRequest) -> flask.Response:
    """The same, waiting up to 20 s for the first request to finish before a 409."""
    return work(call)


@https_fn.on_call()
@idempotent_callable("test_bad_result", anonymous=True)
def bad_result(request: https_fn.CallableRequest[Any], delivery: Delivery) -> Any:
    """Lease mode: counts its run in `runs/<record key>` (its effect), then returns a result
    JSON cannot carry (`NaN`)."""
    ref = delivery.client.collection("runs").document(delivery.key)
    ref.set({"count": firestore.Increment(1)}, merge=True)
    return {"amount": float("nan")}
