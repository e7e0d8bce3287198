"""`index_post`: mirror a saved post to the search service, exactly once per task.

A task-queue function (Cloud Tasks), the use case of the transactional outbox for tasks: a
transaction that saves `posts/{postId}` also calls
`dedup.outbox.enqueue_task(transaction, FUNCTION_ID, {"postId": postId})`; `relay_outbox`
creates the task only once that transaction committed, and this function, given the task's
data `{"postId": "<id>"}`, reads the post and POSTs it as JSON to `SEARCH_INDEX_URL`:

    POST $SEARCH_INDEX_URL
    Content-Type: application/json
    Idempotency-Key: <dedup key: <task name>-index_post>

    {"postId": "<id>", "post": {<the post's fields>}}

Exactly once, lease mode, deduplicated on the task name (`dedup.tasks.task_once`): the POST
leaves the process, so a crash after it and before "sent" is recorded is retried by Cloud
Tasks after the lease with the same `Idempotency-Key`. Answers: see `dedup.tasks` (429, 500,
503 are retried by Cloud Tasks; 200 stops it) and `functions.task_boundary` (4xx refusals).

Bad input, terminal (recorded `failed`, answered 200, not retried): task data that is not
`{"postId": "<a Firestore document id>"}` (`functions.ids.id_problem`: not empty, no `/`,
not `.`/`..`/`__x__`, valid Unicode, at most 1,500 bytes), or a post that does not exist. The search
service's answers are classified by `functions.http_delivery` (4xx terminal, 5xx retried).

Name: the Python name is `index_post`, but the deployed function is `indexPost`
(`FUNCTION_ID`): a task-queue function's name is also its Cloud Tasks queue id, and queue
ids allow letters, digits and hyphens only (no "_"), in production and in the emulator.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import datetime
from functools import cache
from typing import Any

from firebase_functions import options, tasks_fn

from dedup import Delivery, TerminalError
from dedup.errors import ConfigError
from dedup.tasks import task_once
from functions.http_delivery import post_once
from functions.ids import id_problem
from functions.runtime import startup_check
from functions.task_boundary import validated_task

SUFFIX = "index_post"
FUNCTION_ID = "indexPost"
"""The deployed name, and so the queue id (see the module docstring)."""
RETRY_CONFIG = options.RetryConfig(
    max_attempts=12, min_backoff_seconds=5, max_backoff_seconds=300, max_doublings=5
)
"""About 30 minutes of retries (5, 10, 20, 40, 80, 160 s, then every 300 s): long enough to
outlast a crashed dispatch's lease (DEDUP_LEASE_SECONDS, 60 s by default); a retry that still
meets the live lease answers 429 and comes back later."""
RATE_LIMITS = options.RateLimits(max_concurrent_dispatches=10, max_dispatches_per_second=5)
"""Spare the search service: at most 10 requests in flight, 5 new ones a second."""


@startup_check(FUNCTION_ID)  # a bad setting fails at start-up, not on the first event
@cache
def search_index_url() -> str:
    """`SEARCH_INDEX_URL`, checked once per instance; `ConfigError` if missing or not http(s)."""
    url = os.environ.get("SEARCH_INDEX_URL", "").strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            "SEARCH_INDEX_URL must be the search service's http:// or https:// URL "
            f"(got {url or 'nothing'!r}); set it in .env.<project> (or .env.local for the "
            "emulator)"
        )
    return url


def post_id_of(data: Any) -> str:
    """The task's post id; `TerminalError` unless data is `{"postId": "<id>"}`."""
    post_id = data.get("postId") if isinstance(data, dict) else None
    if id_problem(post_id) is not None:
        raise TerminalError('the task data must be {"postId": "<a Firestore document id>"}')
    assert isinstance(post_id, str)
    return post_id


def _json_value(value: Any) -> Any:
    """Firestore values JSON has no type for: timestamps as ISO text, bytes as base64,
    references as their path, geo points as {lat, lng}."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(getattr(value, "path", None), str):
        return value.path
    if hasattr(value, "latitude") and hasattr(value, "longitude"):
        return {"lat": value.latitude, "lng": value.longitude}
    return repr(value)


@validated_task
@tasks_fn.on_task_dispatched(retry_config=RETRY_CONFIG, rate_limits=RATE_LIMITS)
@task_once(SUFFIX)
def indexPost(request: tasks_fn.CallableRequest[Any], delivery: Delivery) -> None:  # noqa: N802 (FUNCTION_ID)
    """Send posts/{postId} to the search service once per task."""
    post_id = post_id_of(request.data)
    snapshot = delivery.client.collection("posts").document(post_id).get()
    if not snapshot.exists:
        raise TerminalError(f"posts/{post_id} does not exist: nothing to index")
    body = json.dumps(
        {"postId": post_id, "post": snapshot.to_dict() or {}}, default=_json_value
    ).encode()
    post_once(
        search_index_url(), body, content_type="application/json", idempotency_key=delivery.key
    )


index_post = indexPost
"""The same function under its Python name (main.py exports both; deployed as `indexPost`)."""
