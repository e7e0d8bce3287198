"""`relay_outbox`: publish each `outbox/{id}` document to its Pub/Sub topic (at least once,
always under its `outboxId`), or create its Cloud Task (once, under an id derived from it).

The other half of `dedup.outbox.enqueue` (see that module for the document schema). Fires when
an outbox document is created, publishes its `data` with its `attributes` plus `outboxId`, and
marks the document with `publishedAt` and `messageId`. A document written by
`dedup.outbox.enqueue_task` (it has a `function` field) becomes a Cloud Task with an id derived
from the document instead (`functions.outbox_tasks`), marked with `enqueuedAt` and `taskId`.

Lease mode: a publish can join neither a Firestore transaction nor the relay's dedup record,
so a message may be published more than once, each copy under the same `outboxId` attribute
and a new message id; consumers key on `outboxId`. The whole window in which that happens is
named in one place, `dedup.outbox`'s docstring (docs/usage.md, "The transactional outbox",
shows the consumer).

Marking the document never repeats the publish: it is retried a few times within the delivery
(`MARK_ATTEMPTS`); a document deleted before it is marked, or a mark that keeps failing, is
logged (WARNING, ERROR) and the delivery still ends `sent`, because a retry of the delivery
would publish again. The dedup record, not `publishedAt`, is what says the message went out.
The same holds for a task: a task document deleted before it is marked ends `sent` too
(`functions.outbox_tasks.relay_task`).

Bad input: a document without a valid `topic`, or with `data` that is not bytes or a string,
or attributes that are not a map of strings or use a reserved name (`outboxId`, a parameter
of `publish()`, a `goog` prefix: `dedup.outbox.attribute_problem`), is a terminal failure:
recorded, not retried. A topic that does not exist is retried (create it with `make topics`).
"""

from __future__ import annotations

import logging
from functools import cache
from typing import TYPE_CHECKING, Any

from firebase_functions import firestore_fn
from google.api_core.exceptions import NotFound
from google.cloud import firestore

from dedup import Delivery, TerminalError, trigger_once
from dedup.outbox import OUTBOX_ID_ATTRIBUTE, TOPIC_PATTERN, attribute_problem
from dedup.platform import propagation
from functions.boundary import validated
from functions.outbox_tasks import relay_task

if TYPE_CHECKING:
    from google.cloud.pubsub_v1 import PublisherClient

SUFFIX = "relay_outbox"
PUBLISH_TIMEOUT_SECONDS = 30.0
"""How long a delivery waits for Pub/Sub's answer to its publish. A publish accepted but not
answered in time fails the delivery, whose retry publishes again (`dedup.outbox`'s window)."""
MARK_ATTEMPTS = 3
"""Tries to mark the outbox document published before giving up (logged, not retried)."""
logger = logging.getLogger(__name__)


@cache
def _publisher() -> PublisherClient:
    """One publisher per instance (it holds a channel and batching threads), created on this
    function's first event: the Pub/Sub client library is imported here, not at start-up, so
    the instances serving the other functions of main.py never load it."""
    from google.cloud.pubsub_v1 import PublisherClient

    return PublisherClient()


def topic_path(topic: str, project: str) -> str:
    """A full topic path for a topic id or path stored in an outbox document."""
    return topic if topic.startswith("projects/") else f"projects/{project}/topics/{topic}"


def outbox_message(fields: dict[str, Any]) -> tuple[str, bytes, dict[str, str]]:
    """(topic, data, attributes) of an outbox document; `TerminalError` when malformed."""
    topic, data, attributes = (
        fields.get("topic"),
        fields.get("data", b""),
        fields.get("attributes") or {},
    )
    if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
        raise TerminalError(f"outbox document has no valid topic (got {topic!r})")
    if isinstance(data, str):
        data = data.encode()
    if not isinstance(data, bytes):
        raise TerminalError(f"outbox data must be bytes or a string, got {type(data).__name__}")
    if not isinstance(attributes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise TerminalError("outbox attributes must be a map of strings")
    for name in attributes:
        problem = attribute_problem(name)
        if problem is not None:
            raise TerminalError(f"outbox attributes: {problem}")
    return topic, data, attributes


@validated
@firestore_fn.on_document_created(document="outbox/{outboxId}")
@trigger_once(SUFFIX)
def relay_outbox(
    event: firestore_fn.Event[firestore_fn.DocumentSnapshot | None], delivery: Delivery
) -> None:
    """Publish the outbox document's message, then mark the document published."""
    snapshot = event.data
    if snapshot is None or not snapshot.exists:
        raise TerminalError("the outbox event carries no document")
    fields = snapshot.to_dict() or {}
    if "function" in fields:  # written by enqueue_task: a Cloud Task, not a message
        relay_task(snapshot, delivery.client)
        return
    topic, data, attributes = outbox_message(fields)
    # The relay's trace goes with the message, unless the document names one of its own.
    sent = {**propagation.message_attributes(), **attributes, OUTBOX_ID_ATTRIBUTE: snapshot.id}
    future = _publisher().publish(topic_path(topic, event.project), data, **sent)
    message_id = future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
    mark_published(delivery.client.document(snapshot.reference.path), message_id)


def mark_published(document: firestore.DocumentReference, message_id: str) -> None:
    """Set `publishedAt` and `messageId` on the outbox document. Never raises: the message is
    already published, and failing the delivery would have the platform publish it again."""
    for attempt in range(1, MARK_ATTEMPTS + 1):
        try:
            document.update({"publishedAt": firestore.SERVER_TIMESTAMP, "messageId": message_id})
            return
        except NotFound:
            logger.warning(
                "%s was deleted before it was marked: its message %s is published",
                document.path,
                message_id,
            )
            return
        except Exception:
            if attempt == MARK_ATTEMPTS:
                logger.exception(
                    "%s could not be marked published after %d tries: its message %s is "
                    "published and will not be published again",
                    document.path,
                    MARK_ATTEMPTS,
                    message_id,
                )
