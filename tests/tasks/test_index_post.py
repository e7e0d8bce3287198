"""index_post under Cloud Tasks' at-least-once dispatch: one search request per task, however
often and however concurrently the task is dispatched; answers Cloud Tasks retries for a
busy or failed dispatch, 2xx for everything that must stop."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud import firestore

from demo.receiver import Receiver
from demo.tasks import task_dispatch
from functions.index_post import FUNCTION_ID
from tests.functions.conftest import start_instance
from tests.tasks.conftest import SEARCH_PATH, TaskFunction


def unique() -> str:
    return uuid.uuid4().hex[:12]


def save_post(db: firestore.Client, post_id: str, **fields: Any) -> None:
    db.collection("posts").document(post_id).set({"authorId": "ann", "title": "t", **fields})


def test_thirty_concurrent_dispatches_send_one_request(
    firestore_client: firestore.Client, index_post: TaskFunction, receiver: Receiver
) -> None:
    """It is impossible for two dispatches of one task to both reach the search service:
    30 at once give one request; the copies that met the live lease answer 429 and, retried,
    find the task done."""
    post_id, task = unique(), f"task-{unique()}"
    save_post(firestore_client, post_id, title="Hello")
    dispatch = task_dispatch(task, {"postId": post_id})
    statuses = index_post.dispatch_concurrently(dispatch, 30)
    assert set(statuses) <= {200, 429}, statuses
    for status in statuses:
        if status != 200:
            assert index_post.dispatch_until_done(dispatch)[-1] == 200
    [request] = receiver.applied(SEARCH_PATH)
    assert request.idempotency_key == f"{task}-index_post"
    assert request.content_type == "application/json"
    body = json.loads(request.body)
    assert body == {"postId": post_id, "post": {"authorId": "ann", "title": "Hello"}}


def test_another_task_for_the_same_post_is_another_request(
    firestore_client: firestore.Client, index_post: TaskFunction, receiver: Receiver
) -> None:
    """Deduplication is per task, not per post: a second task (the post saved again) indexes
    again, under its own key."""
    post_id = unique()
    save_post(firestore_client, post_id)
    first, second = f"task-{unique()}", f"task-{unique()}"
    for task in (first, second, first, second):
        assert index_post.dispatch(task_dispatch(task, {"postId": post_id})) == 200
    keys = [r.idempotency_key for r in receiver.applied(SEARCH_PATH)]
    assert keys == [f"{first}-index_post", f"{second}-index_post"]


def test_a_dispatch_meeting_a_live_lease_is_answered_429(
    firestore_client: firestore.Client, index_post: TaskFunction, receiver: Receiver
) -> None:
    """While one dispatch is inside the handler, another dispatch of the task gets 429 (Cloud
    Tasks retries it, backing off); the running one then answers 200."""
    post_id, task = unique(), f"task-{unique()}"
    save_post(firestore_client, post_id)
    # The first request is slow to answer: the second dispatch must meet its lease live within
    # these 10 s (a quiet machine needs a tenth of one; with 3 s a busy one could come late,
    # find the task sent and answer 200).
    receiver.fail(SEARCH_PATH, 200, delay_seconds=10)
    dispatch = task_dispatch(task, {"postId": post_id})
    first: list[int] = []
    runner = threading.Thread(target=lambda: first.append(index_post.dispatch(dispatch)))
    runner.start()
    while not receiver.attempts_to(SEARCH_PATH):  # the first dispatch is inside its POST
        time.sleep(0.02)
    assert index_post.dispatch(dispatch) == 429
    runner.join()
    assert first == [200]
    assert index_post.dispatch(dispatch) == 200
    assert len(receiver.applied(SEARCH_PATH)) == 1


def test_a_failing_search_service_releases_the_lease_and_the_retry_sends(
    firestore_client: firestore.Client,
    index_post: TaskFunction,
    receiver: Receiver,
    records: Callable[[], list[dict[str, Any]]],
) -> None:
    """A 503 from the search service answers 500 (released, Cloud Tasks retries); the retry
    sends with the same key and is recorded sent."""
    post_id, task = unique(), f"task-{unique()}"
    save_post(firestore_client, post_id)
    receiver.fail(SEARCH_PATH, 503)
    dispatch = task_dispatch(task, {"postId": post_id}, retry_count=0)
    assert index_post.dispatch(dispatch) == 500
    assert index_post.dispatch(task_dispatch(task, {"postId": post_id}, retry_count=1)) == 200
    attempts = receiver.attempts_to(SEARCH_PATH)
    assert [a.status for a in attempts] == [503, 200]
    assert {a.idempotency_key for a in attempts} == {f"{task}-index_post"}
    [record] = records()
    assert (record["state"], record["attempts"]) == ("sent", 2)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"postId": "missing-post"}, "does not exist"),
        ({"postId": ""}, "postId"),
        ({"postId": "a/b"}, "postId"),
        ({"postId": ".."}, "postId"),
        ({"postId": "__x__"}, "postId"),
        ({"postId": "p\ud800"}, "postId"),
        ({"postId": "p" * 1501}, "postId"),
        (["postId"], "postId"),
        (None, "postId"),
    ],
)
def test_a_task_that_cannot_succeed_is_recorded_failed_and_acknowledged(
    index_post: TaskFunction,
    receiver: Receiver,
    records: Callable[[], list[dict[str, Any]]],
    data: Any,
    why: str,
) -> None:
    """A missing post or malformed task data is terminal: recorded failed, answered 200 so
    Cloud Tasks stops, and the same answer for every later dispatch; nothing is sent."""
    dispatch = task_dispatch(f"task-{unique()}", data)
    assert index_post.dispatch(dispatch) == 200
    assert index_post.dispatch(dispatch) == 200
    [record] = records()
    assert record["state"] == "failed"
    assert why in record["lastError"]
    assert receiver.applied(SEARCH_PATH) == []


@pytest.mark.parametrize("url", [None, "ftp://search.example/index", "search.example"])
def test_instance_refuses_to_start_without_an_http_search_url(url: str | None) -> None:
    """Serving indexPost with SEARCH_INDEX_URL missing or not http(s) fails at start-up, naming
    the variable; a sibling function's instance starts without it."""
    env = {k: v for k, v in os.environ.items() if k != "SEARCH_INDEX_URL"}
    if url is not None:
        env["SEARCH_INDEX_URL"] = url
    result = start_instance(FUNCTION_ID, env)
    assert result.returncode != 0
    assert "SEARCH_INDEX_URL must be the search service's http:// or https:// URL" in result.stderr
    assert start_instance("sync_published_count", env).returncode == 0, "a sibling must start"


def test_a_dispatch_under_a_fresh_task_name_indexes_again(
    firestore_client: firestore.Client, index_post: TaskFunction, receiver: Receiver
) -> None:
    """The documented trust boundary (docs/tasks.md): deduplication is per task name, which
    `indexPost` takes from `X-CloudTasks-TaskName`. A caller holding `run.invoker` on the
    function who sends the same data under a new name is another task: a second request,
    under its own Idempotency-Key. The search service must tolerate a post indexed twice."""
    post_id = unique()
    save_post(firestore_client, post_id)
    names = [f"task-{unique()}", f"forged-{unique()}"]
    for name in names:
        assert index_post.dispatch(task_dispatch(name, {"postId": post_id})) == 200
    keys = sorted(str(request.idempotency_key) for request in receiver.applied(SEARCH_PATH))
    assert keys == sorted(f"{name}-index_post" for name in names)
