"""The transactional outbox: publish a Pub/Sub message, or create a Cloud Task, if, and only
if, a transaction commits.

Neither Pub/Sub nor Cloud Tasks can join a Firestore transaction. `enqueue` (a message) and
`enqueue_task` (a task for a task-queue function) write a document `outbox/{id}` *inside* the
caller's transaction instead; the `relay_outbox` function fires when that document is created,
publishes the message or creates the task exactly once (dedup, lease mode), then marks the
document. A transaction that rolls back leaves no document, so nothing is sent; one that
commits is sent even if the caller crashes right after.

Pub/Sub destination, document schema (`outbox/{id}`):

| field         | type             | meaning                                             |
|---------------|------------------|-----------------------------------------------------|
| `topic`       | string           | topic id (`orders`) or full path (`projects/p/topics/orders`) |
| `data`        | bytes            | the message body                                    |
| `attributes`  | map string->string | message attributes                                |
| `createdAt`   | timestamp        | commit time of the enqueuing transaction            |
| `publishedAt` | timestamp        | set by `relay_outbox` once published                |
| `messageId`   | string           | the Pub/Sub message id, set with `publishedAt`      |

Attribute names in `RESERVED_ATTRIBUTES` (and any starting with `goog`) are refused by
`enqueue`; a document that holds one anyway is a terminal failure of the relay.

Every published message carries the attribute `outboxId`, the outbox document's id: consumers
that must not see a message twice deduplicate on it, never on the Pub/Sub message id. The relay
publishes at least once, not exactly once: Pub/Sub cannot join the relay's record, so between
Pub/Sub accepting a publish and the relay's record saying "sent" there is a window in which a
retry of the relay publishes the same message again, under the same `outboxId` and a new
message id. The window covers:

* a publish Pub/Sub accepted whose answer the relay did not get: `future.result` timed out
  (`PUBLISH_TIMEOUT_SECONDS` of `functions.relay_outbox`) or failed, the relay raised, its lease
  was released and the platform's retry published again; the Pub/Sub client library's own
  retry of a publish call whose answer was lost does the same inside one relay;
* a relay that died (crash, timeout, instance stopped) after the publish and before its record
  was written `sent`: the next delivery after its lease runs the relay again;
* a record write refused after the publish (Firestore unavailable): the delivery fails and is
  retried.

Pub/Sub itself delivers each message at least once to each subscription, under one message
id; `outboxId` covers that as well. Marking the document (`publishedAt`, `messageId`) happens
after the publish and never repeats it: the `messageId` there is the last publish's.

Cloud Tasks destination (`enqueue_task`), document schema:

| field        | type      | meaning                                                        |
|--------------|-----------|----------------------------------------------------------------|
| `function`   | string    | the task-queue function (= its queue): `indexPost`, or         |
|              |           | `locations/<region>/functions/<name>` (`projects/...` too)     |
| `taskData`   | string    | the task's `data`, as JSON text (any JSON value)               |
| `createdAt`  | timestamp | commit time of the enqueuing transaction                       |
| `enqueuedAt` | timestamp | set by `relay_outbox` once the task exists                     |
| `taskId`     | string    | the task's id in its queue, set with `enqueuedAt`              |

The task id is derived from the outbox document (`task_id_for`), never random: a second relay
of the same document asks Cloud Tasks for a task that already exists, which Cloud Tasks
refuses, and the relay counts that as done. So one committed transaction makes one task, and
the task-queue function (`dedup.tasks.task_once`) deduplicates on that id again, covering the
hour after which Cloud Tasks forgets a finished task's name.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from google.cloud import firestore

from dedup.platform.firestore_internals import client_of

COLLECTION = "outbox"
OUTBOX_ID_ATTRIBUTE = "outboxId"
_TOPIC_ID = r"[A-Za-z][A-Za-z0-9._~+%-]{2,254}"
TOPIC_PATTERN = re.compile(rf"(?:projects/[a-z0-9.:-]+/topics/)?{_TOPIC_ID}")
_QUEUE_ID = r"[A-Za-z0-9-]{1,100}"
FUNCTION_PATTERN = re.compile(
    rf"(?:(?:projects/[a-z0-9.:-]+/)?locations/[a-z0-9-]+/functions/)?{_QUEUE_ID}"
)
"""A task-queue function as `firebase_admin.functions.task_queue` takes it. Its name is also
its queue's id, which Cloud Tasks limits to letters, digits and hyphens (no "_")."""

RESERVED_ATTRIBUTES = frozenset(
    {OUTBOX_ID_ATTRIBUTE, "topic", "data", "ordering_key", "retry", "timeout"}
)
"""Attribute names a message may not carry: `outboxId` is set by the relay, the others are
parameters of `PublisherClient.publish`, which takes attributes as keywords (a clash would
make every relay fail). Names starting with `goog` are reserved by Pub/Sub itself."""


def attribute_problem(name: object) -> str | None:
    """Why `name` cannot be an outbox message's attribute name, or None when it can."""
    if not isinstance(name, str) or not name:
        return "attribute names are non-empty strings"
    if name in RESERVED_ATTRIBUTES:
        return f"the attribute name {name!r} is reserved (set by the relay or by Pub/Sub)"
    if name.lower().startswith("goog"):
        return "attribute names starting with 'goog' are reserved by Pub/Sub"
    return None


def enqueue(
    transaction: firestore.Transaction,
    topic: str,
    data: bytes | str,
    attributes: Mapping[str, str] | None = None,
    *,
    client: firestore.Client | None = None,
    collection: str = COLLECTION,
) -> firestore.DocumentReference:
    """Write `outbox/{new id}` in `transaction`; the message is published once it commits.

    `data` is the message body (a str is encoded as UTF-8). Raises `ValueError` for a topic
    that Pub/Sub would refuse or attributes that are not strings, before anything is written.
    Returns the outbox document's reference (its id becomes the `outboxId` attribute).
    Reserved attribute names (`RESERVED_ATTRIBUTES`, a `goog` prefix) raise `ValueError` too.
    """
    if not TOPIC_PATTERN.fullmatch(topic):
        raise ValueError(
            f"{topic!r} is not a Pub/Sub topic: use a topic id like 'orders' "
            "(3-255 characters, starting with a letter) or 'projects/<project>/topics/<id>'"
        )
    attributes = dict(attributes or {})
    for key, value in attributes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"attribute {key!r}: Pub/Sub attributes are strings, got {value!r}")
    for key in attributes:
        problem = attribute_problem(key)
        if problem is not None:
            raise ValueError(problem)
    body = data.encode() if isinstance(data, str) else bytes(data)
    db = client or client_of(transaction)  # a Transaction has no public accessor for it
    ref = db.collection(collection).document()
    transaction.create(
        ref,
        {
            "topic": topic,
            "data": body,
            "attributes": attributes,
            "createdAt": firestore.SERVER_TIMESTAMP,
        },
    )
    return ref


def enqueue_task(
    transaction: firestore.Transaction,
    function_name: str,
    data: Any,
    *,
    client: firestore.Client | None = None,
    collection: str = COLLECTION,
) -> firestore.DocumentReference:
    """Write `outbox/{new id}` in `transaction`; a Cloud Task for `function_name` is created
    with `data` once it commits (see the module docstring for the schema).

    `function_name` is a task-queue function (`indexPost`, or
    `locations/<region>/functions/<name>`); `data` is any JSON value, delivered as the task's
    `data`. Raises `ValueError` for a name Cloud Tasks would refuse or data that is not JSON,
    before anything is written. Returns the outbox document's reference; `task_id_for` of its
    path is the task's id.
    """
    if not isinstance(function_name, str) or not FUNCTION_PATTERN.fullmatch(function_name):
        raise ValueError(
            f"{function_name!r} is not a task-queue function name: use the deployed name "
            "(letters, digits and '-', 1-100 characters: it is also the queue's id) or "
            "'locations/<region>/functions/<name>'"
        )
    try:
        text = json.dumps(data, allow_nan=False, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"task data must be JSON (dicts, lists, str, numbers): {exc}") from exc
    db = client or client_of(transaction)  # a Transaction has no public accessor for it
    ref = db.collection(collection).document()
    transaction.create(
        ref,
        {"function": function_name, "taskData": text, "createdAt": firestore.SERVER_TIMESTAMP},
    )
    return ref


def task_id_for(document_path: str) -> str:
    """The Cloud Task id for the outbox document at `document_path`: deterministic, so a
    duplicate relay cannot create a second task; a hash, as Cloud Tasks asks of explicit ids
    (sequential ids slow its index down)."""
    return hashlib.sha256(document_path.encode("utf-8")).hexdigest()
