"""The outbox's task destination: a transaction that saves a post enqueues its index task only
if it commits, and the relay creates that task once, however often and under however many
event ids the outbox document is relayed (the task id is derived from the document).

The relay runs in this process; the task goes to the Cloud Tasks emulator, whose `indexPost`
queue (created by the Functions emulator) dispatches it to the Functions emulator's
`indexPost`, which posts to the test receiver (`.env.local`)."""

from __future__ import annotations

import contextlib
import uuid

import functions_framework
import pytest
from google.cloud import firestore

from dedup.outbox import enqueue_task, task_id_for
from demo.events import firestore_event
from demo.receiver import Receiver
from functions.index_post import FUNCTION_ID
from functions.outbox_tasks import create_task
from tests.conftest import PROJECT
from tests.functions.conftest import MAIN, InProcessFunction
from tests.tasks.conftest import SEARCH_PATH, tasks_emulator_host
from tests.waiting import eventually


@pytest.fixture
def relay(firestore_host: str) -> InProcessFunction:
    tasks_emulator_host()
    app = functions_framework.create_app(
        target="relay_outbox", source=MAIN, signature_type="cloudevent"
    )
    return InProcessFunction("relay_outbox", app.test_client())


def save_post(
    db: firestore.Client, post_id: str, *, fail: bool = False
) -> firestore.DocumentReference:
    """Save posts/<post_id> and enqueue its index task in one transaction (rolled back if
    `fail`); the outbox document's reference."""
    refs: list[firestore.DocumentReference] = []

    @firestore.transactional
    def work(transaction: firestore.Transaction) -> None:
        transaction.set(db.collection("posts").document(post_id), {"title": f"post {post_id}"})
        refs.append(enqueue_task(transaction, FUNCTION_ID, {"postId": post_id}))
        if fail:
            raise RuntimeError("declined")

    with contextlib.suppress(RuntimeError):
        work(db.transaction())
    return refs[-1]


def test_a_relay_delivered_many_times_creates_one_task(
    firestore_client: firestore.Client, relay: InProcessFunction, receiver: Receiver
) -> None:
    """Five concurrent copies of the outbox event, then five more under other event ids (each
    one a relay run of its own): one task, so one search request; the document is marked."""
    post_id = uuid.uuid4().hex[:12]
    outbox = save_post(firestore_client, post_id)
    event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
    statuses = relay.deliver_concurrently(event, 5)
    while 200 not in statuses:  # the platform retries copies that met the live lease
        statuses.append(relay.deliver(event))
    others = [event.with_id(f"{event.id}-{n}") for n in range(5)]
    assert [relay.deliver(other) for other in others] == [200] * 5
    task_id = task_id_for(outbox.path)
    marked = outbox.get().to_dict() or {}
    assert marked["taskId"] == task_id
    assert marked["enqueuedAt"] is not None
    assert not create_task(FUNCTION_ID, {"postId": post_id}, task_id)  # the name is taken
    eventually(lambda: receiver.applied(SEARCH_PATH), "the task reached the search service")
    [indexed] = receiver.applied(SEARCH_PATH)
    assert indexed.idempotency_key == f"{task_id}-index_post"


def test_a_rolled_back_save_enqueues_nothing(
    firestore_client: firestore.Client, relay: InProcessFunction, receiver: Receiver
) -> None:
    """A rolled-back transaction leaves neither the post nor an outbox document: nothing to
    relay, no task. The committed save after it is indexed, and only it."""
    rolled_back, committed = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    ghost = save_post(firestore_client, rolled_back, fail=True)
    assert not ghost.get().exists
    assert not firestore_client.collection("posts").document(rolled_back).get().exists
    outbox = save_post(firestore_client, committed)
    assert [doc.id for doc in firestore_client.collection("outbox").stream()] == [outbox.id]
    event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
    assert relay.deliver(event) == 200
    eventually(lambda: receiver.applied(SEARCH_PATH), "the committed post was indexed")
    [indexed] = receiver.applied(SEARCH_PATH)
    assert indexed.idempotency_key == f"{task_id_for(outbox.path)}-index_post"
    assert committed in indexed.body.decode()


def test_a_task_document_deleted_before_it_is_marked_ends_sent_with_one_task(
    firestore_client: firestore.Client, relay: InProcessFunction, receiver: Receiver
) -> None:
    """The task is created, then its outbox document is found deleted when the relay marks
    it: the delivery still ends `sent` (as for a message), every redelivery is 200 and no
    second task exists; the search service gets the post once."""
    post_id = uuid.uuid4().hex[:12]
    outbox = save_post(firestore_client, post_id)
    event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
    outbox.delete()
    assert [relay.deliver(event) for _ in range(3)] == [200, 200, 200]
    records = [
        d.to_dict() or {}
        for d in firestore_client.collection("triggerEvents").stream()
        if d.id.endswith("-relay_outbox")
    ]
    assert [r["state"] for r in records] == ["sent"]
    assert not outbox.get().exists, "the mark must not resurrect a deleted outbox document"
    assert not create_task(FUNCTION_ID, {"postId": post_id}, task_id_for(outbox.path))
    eventually(lambda: receiver.applied(SEARCH_PATH), "the task reached the search service")
    [indexed] = receiver.applied(SEARCH_PATH)
    assert post_id in indexed.body.decode()


def test_enqueue_task_refuses_bad_input_before_writing(firestore_client: firestore.Client) -> None:
    """Names Cloud Tasks would refuse as a queue and data that is not JSON raise ValueError;
    nothing is written."""
    transaction = firestore_client.transaction()
    with pytest.raises(ValueError, match="letters, digits and '-'"):
        enqueue_task(transaction, "index_post", {"postId": "p1"})  # "_": not a queue id
    with pytest.raises(ValueError, match="must be JSON"):
        enqueue_task(transaction, FUNCTION_ID, {"when": object()})
    with pytest.raises(ValueError, match="must be JSON"):
        enqueue_task(transaction, FUNCTION_ID, {"x": float("nan")})
    assert list(firestore_client.collection("outbox").stream()) == []
