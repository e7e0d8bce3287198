"""End to end on the emulators, nothing played by the test: a transaction committed in the
Firestore emulator -> its outbox document fires `relay_outbox` in the Functions emulator ->
the task is created in the Cloud Tasks emulator -> which dispatches it to `indexPost` in the
Functions emulator -> one request at the search receiver. Runs with the other e2e tests,
first (see tests/e2e)."""

from __future__ import annotations

import uuid

import pytest
from google.cloud import firestore

from dedup.outbox import enqueue_task, task_id_for
from demo.receiver import Receiver
from functions.index_post import FUNCTION_ID
from tests.tasks.conftest import SEARCH_PATH
from tests.waiting import eventually

pytestmark = pytest.mark.e2e


def test_a_committed_save_is_indexed_exactly_once(
    firestore_client: firestore.Client, receiver: Receiver
) -> None:
    """The post saved in a committed transaction reaches the search service once, under the
    key of the task derived from its outbox document; the outbox document is marked."""
    post_id = f"e2e-{uuid.uuid4().hex[:8]}"
    refs: list[firestore.DocumentReference] = []

    @firestore.transactional
    def save(transaction: firestore.Transaction) -> None:
        transaction.set(firestore_client.document(f"posts/{post_id}"), {"title": "indexed"})
        refs.append(enqueue_task(transaction, FUNCTION_ID, {"postId": post_id}))

    save(firestore_client.transaction())
    outbox = refs[-1]
    eventually(lambda: receiver.applied(SEARCH_PATH), "the post reached the search service")
    eventually(lambda: (outbox.get().to_dict() or {}).get("taskId"), "the outbox is marked")
    [indexed] = receiver.applied(SEARCH_PATH)
    assert indexed.idempotency_key == f"{task_id_for(outbox.path)}-index_post"
    assert post_id in indexed.body.decode()
    record = firestore_client.document(f"triggerEvents/{indexed.idempotency_key}").get()
    assert record.get("state") == "sent"
