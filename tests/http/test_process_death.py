"""A serving process SIGKILLed inside the handler (functions-framework in a process group of
its own, `tests/http/served.py` crash points): the client's retry runs the handler once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import requests
from google.cloud import firestore

from tests.faults.support import SERVED_LEASE_SECONDS, wait_for_crash_point
from tests.http.support import User, http_server, new_key, order_headers
from tests.http.test_create_order import ORDER, orders

SERVED = Path(__file__).resolve().parent / "served.py"
LEASE_SECONDS = SERVED_LEASE_SECONDS
"""The served functions' lease: long enough for a claim to come back on a busy machine
(`tests.faults.support.SERVED_LEASE_SECONDS`)."""
LEASE_ENV = {"DEDUP_LEASE_SECONDS": str(LEASE_SECONDS)}


def killed_in_handler(target: str, tmp_path: Path, data: bytes, headers: dict[str, str]) -> None:
    """Send the request to a server that stops in the handler; SIGKILL it there."""
    crash_file = tmp_path / f"{target}.crash"
    env = {**LEASE_ENV, "CRASH_AT": "in_handler", "CRASH_FILE": str(crash_file)}
    with http_server(target, SERVED, env, tmp_path / f"{target}-crash.log") as server:
        answers: list[Any] = []

        def send() -> None:
            try:
                answers.append(requests.post(server.url, data=data, headers=headers, timeout=60))
            except requests.RequestException as exc:
                answers.append(exc)

        flight = threading.Thread(target=send)
        flight.start()
        wait_for_crash_point(crash_file, "in_handler")
        server.kill()
        flight.join(timeout=30)
    assert isinstance(answers[0], requests.RequestException), "the killed request got no answer"


def test_create_order_killed_in_its_handler_places_one_order_on_retry(
    user: User, firestore_client: firestore.Client, tmp_path: Path
) -> None:
    """Transaction mode: the killed attempt's order never committed; the retry places the
    order once and later retries replay it."""
    key = new_key()
    body, headers = json.dumps(ORDER).encode(), order_headers(user, key)
    killed_in_handler("create_order", tmp_path, body, headers)
    assert orders(firestore_client) == []
    with http_server("create_order", SERVED, LEASE_ENV, tmp_path / "retry.log") as server:
        retried = requests.post(server.url, data=body, headers=headers, timeout=60)
        assert retried.status_code == 201
        again = requests.post(server.url, data=body, headers=headers, timeout=60)
    assert again.content == retried.content
    assert again.headers["Idempotent-Replayed"] == "true"
    [order] = orders(firestore_client)
    assert order["id"] == retried.json()["orderId"]


def test_a_lease_holder_killed_in_its_handler_runs_once_after_the_lease(
    firestore_client: firestore.Client, tmp_path: Path
) -> None:
    """Lease mode: retries get 409 while the dead holder's lease lasts; the first retry after
    it runs the handler, once; the rest replay its answer."""
    key = new_key()
    body = b"{}"
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    killed_in_handler("echo", tmp_path, body, headers)
    statuses: list[int] = []
    with http_server("echo", SERVED, LEASE_ENV, tmp_path / "retry.log") as server:
        deadline = time.monotonic() + LEASE_SECONDS + 30
        while True:
            answer = requests.post(server.url, data=body, headers=headers, timeout=60)
            statuses.append(answer.status_code)
            if answer.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer.status_code == 200, statuses
        assert answer.json() == {"run": 1}
        replay = requests.post(server.url, data=body, headers=headers, timeout=60)
    assert set(statuses[:-1]) <= {409}
    assert replay.content == answer.content
    assert replay.headers["Idempotent-Replayed"] == "true"
    runs = firestore_client.collection("runs").document(f"{key}-test_echo").get().to_dict()
    assert runs == {"count": 1}
