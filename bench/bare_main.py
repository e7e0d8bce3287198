"""The cold-start baseline: main.py's functions with the same triggers and the same SDK
imports, but no dedup (and no boundary checks, which import it).

Each does its effect the plain way, once per delivery, duplicates included. It is served by
functions-framework like main.py (`bench.cold`), and never deployed.
"""

from collections import Counter
from typing import Any

from firebase_functions import firestore_fn, https_fn, pubsub_fn, tasks_fn
from google.cloud import firestore
from google.cloud.firestore import DocumentSnapshot, Increment

_client: firestore.Client | None = None


def _db() -> firestore.Client:
    """One client per instance, created on the first event (as the Deduplicator does)."""
    global _client
    if _client is None:
        _client = firestore.Client()
    return _client


def _author(snapshot: DocumentSnapshot | None) -> str | None:
    if snapshot is None or not snapshot.exists:
        return None
    post = snapshot.to_dict() or {}
    author = post.get("authorId")
    return author if post.get("published") is True and isinstance(author, str) else None


@firestore_fn.on_document_written(document="posts/{postId}")
def sync_published_count(
    event: firestore_fn.Event[firestore_fn.Change[DocumentSnapshot | None]],
) -> None:
    """Apply the write's count deltas in one batch."""
    deltas: Counter[str] = Counter()
    if (before := _author(event.data.before)) is not None:
        deltas[before] -= 1
    if (after := _author(event.data.after)) is not None:
        deltas[after] += 1
    batch = _db().batch()
    for author, delta in deltas.items():
        ref = _db().collection("users").document(author)
        batch.set(ref, {"publishedPostCount": Increment(delta)}, merge=True)
    batch.commit()


@firestore_fn.on_document_written(document="posts/{postId}")
def send_post_notification(
    event: firestore_fn.Event[firestore_fn.Change[DocumentSnapshot | None]],
) -> None:
    """Read the author (the notification itself is out of scope of a cold start)."""
    if (author := _author(event.data.after)) is not None:
        _db().collection("users").document(author).get()


@firestore_fn.on_document_created(document="outbox/{outboxId}")
def relay_outbox(event: firestore_fn.Event[firestore_fn.DocumentSnapshot | None]) -> None:
    """Publish the outbox document (the Pub/Sub client imported on first use, as in main.py)."""
    from google.cloud.pubsub_v1 import PublisherClient

    if event.data is not None:
        fields = event.data.to_dict() or {}
        PublisherClient().publish(str(fields.get("topic")), bytes(fields.get("data", b"")))


@pubsub_fn.on_message_published(topic="webhooks")
def forward_webhook(event: pubsub_fn.CloudEvent[pubsub_fn.MessagePublishedData[Any]]) -> None:
    """POST the body (requests imported on first use, as in main.py)."""
    import requests

    requests.post("http://127.0.0.1:9/", data=event.data.message.data, timeout=1)


@https_fn.on_request(invoker="public")
def create_order(request: Any) -> Any:
    """Write the order (no Idempotency-Key)."""
    _db().collection("orders").add(request.get_json(silent=True) or {})
    return {"ok": True}


@https_fn.on_call(invoker="public")
def create_order_callable(request: https_fn.CallableRequest[Any]) -> Any:
    """Write the order (no idempotency key)."""
    _db().collection("orders").add(request.data if isinstance(request.data, dict) else {})
    return {"ok": True}


@https_fn.on_request(invoker="public")
def receive_line_webhook(request: Any) -> Any:
    """Publish the body (the Pub/Sub client imported on first use, as in main.py)."""
    from google.cloud.pubsub_v1 import PublisherClient

    PublisherClient().publish("projects/p/topics/webhooks", request.get_data())
    return {"ok": True}


@tasks_fn.on_task_dispatched()
def indexPost(request: tasks_fn.CallableRequest[Any]) -> None:  # noqa: N802  # its queue id
    """Read the post (requests imported on first use, as in main.py)."""
    import requests

    post = _db().collection("posts").document(str(request.data.get("postId"))).get()
    requests.put("http://127.0.0.1:9/", json=post.to_dict(), timeout=1)
