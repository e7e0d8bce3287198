"""The transactional outbox: publish a Pub/Sub message if, and only if, a transaction commits.

Pub/Sub (like Cloud Tasks) cannot join a Firestore transaction. `enqueue` writes the message
as a document `outbox/{id}` *inside* the caller's transaction instead; the `relay_outbox`
function fires when that document is created and publishes it exactly once (dedup, lease
mode), then marks the document published. A transaction that rolls back leaves no document,
so nothing is published; one that commits is published even if the caller crashes right after.

Document schema (`outbox/{id}`):

| field         | type             | meaning                                             |
|---------------|------------------|-----------------------------------------------------|
| `topic`       | string           | topic id (`orders`) or full path (`projects/p/topics/orders`) |
| `data`        | bytes            | the message body                                    |
| `attributes`  | map string->string | message attributes                                |
| `createdAt`   | timestamp        | commit time of the enqueuing transaction            |
| `publishedAt` | timestamp        | set by `relay_outbox` once published                |
| `messageId`   | string           | the Pub/Sub message id, set with `publishedAt`      |

Every published message carries the attribute `outboxId`: consumers that must not see a
message twice deduplicate on it (the one at-least-once window is a relay that crashed after
publishing and before recording it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from google.cloud import firestore

COLLECTION = "outbox"
OUTBOX_ID_ATTRIBUTE = "outboxId"
_TOPIC_ID = r"[A-Za-z][A-Za-z0-9._~+%-]{2,254}"
TOPIC_PATTERN = re.compile(rf"(?:projects/[a-z0-9.:-]+/topics/)?{_TOPIC_ID}")


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
    if OUTBOX_ID_ATTRIBUTE in attributes:
        raise ValueError(f"the attribute {OUTBOX_ID_ATTRIBUTE!r} is set by the relay")
    body = data.encode() if isinstance(data, str) else bytes(data)
    db = client or transaction._client  # a Transaction has no public accessor for its client
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
