"""SIGKILL inside index_post's handler, with its search request in flight: Cloud Tasks got no
answer and dispatches the task again; once the dead dispatch's lease expires, exactly one
retry sends, with the same Idempotency-Key, so the search service can drop the copy."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import requests
from google.cloud import firestore

from demo.receiver import Receiver
from demo.serve import ServedFunction, served_function
from demo.tasks import task_dispatch
from functions.index_post import FUNCTION_ID
from tests.faults.support import SERVED_LEASE_SECONDS
from tests.tasks.conftest import SEARCH_INDEX_URL, SEARCH_PATH

LEASE_SECONDS = SERVED_LEASE_SECONDS  # a busy machine's slow claim still reaches the POST
ENV = {"SEARCH_INDEX_URL": SEARCH_INDEX_URL, "DEDUP_LEASE_SECONDS": str(LEASE_SECONDS)}


def serve(log: Path) -> contextlib.AbstractContextManager[ServedFunction]:
    return served_function(FUNCTION_ID, ENV, log=log, signature_type="http")


def test_sigkill_in_the_handler_is_retried_once_with_the_same_key(
    firestore_client: firestore.Client, receiver: Receiver, tmp_path: Path
) -> None:
    """Killed while its POST is in flight, the task is sent once more after the lease, with
    the same key; the retries before the lease expires answer 429; the record ends sent."""
    post_id, task = uuid.uuid4().hex[:12], f"task-{uuid.uuid4().hex[:12]}"
    firestore_client.collection("posts").document(post_id).set({"title": "crash"})
    dispatch = task_dispatch(task, {"postId": post_id})
    receiver.fail(SEARCH_PATH, 200, delay_seconds=5)  # the search service applies it, slowly

    with serve(tmp_path / "first.log") as first:
        answers: list[Any] = []

        def deliver() -> None:
            try:
                answers.append(first.deliver(dispatch))
            except requests.RequestException as exc:  # the instance died mid-request
                answers.append(exc)

        in_flight = threading.Thread(target=deliver)
        in_flight.start()
        while not receiver.attempts_to(SEARCH_PATH):
            time.sleep(0.02)
        first.kill()
        in_flight.join()
    assert isinstance(answers[0], requests.RequestException)

    with serve(tmp_path / "second.log") as second:
        statuses = [second.deliver(dispatch)]
        while statuses[-1] != 200 and len(statuses) < 100:
            time.sleep(0.2)
            statuses.append(second.deliver(dispatch))
        assert set(statuses[:-1]) <= {429}, statuses
        assert statuses[-1] == 200
        assert second.deliver(dispatch) == 200  # and later dispatches are duplicates

    attempts = receiver.attempts_to(SEARCH_PATH)
    assert len(attempts) == 2
    assert {a.idempotency_key for a in attempts} == {f"{task}-index_post"}
    assert receiver.effects(SEARCH_PATH) == 1
    record = firestore_client.collection("triggerEvents").document(f"{task}-index_post").get()
    assert (record.get("state"), record.get("attempts")) == ("sent", 2)
