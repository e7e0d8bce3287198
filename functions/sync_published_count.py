"""`sync_published_count`: keep `users/{authorId}.publishedPostCount` equal to the author's
number of published posts.

Fires on every write to `posts/{postId}`. Each event applies a delta: +1 when a post becomes
published (created published, or `published` false -> true), -1 when it stops being published
(true -> false, or a published post deleted), 0 otherwise; a post moved to another author
while published moves its count. Deltas commute, so the count is right whatever order the
platform delivers events in.

Exactly once: transactional mode. The increments and the dedup marker commit in one Firestore
transaction, so a duplicate delivery finds the marker and a crashed one left nothing behind.

Bad input: a post counts only when it is well formed (`authorId` a string Firestore accepts as
a document id, see `functions.ids`; `published` a bool). A malformed post counts as
unpublished and is logged at ERROR, and nothing is written for it; raising a terminal error
instead would leave the count including a post whose later events no longer
know it was counted.
"""

from __future__ import annotations

import logging
from collections import Counter

from firebase_functions import firestore_fn
from google.cloud.firestore import DocumentSnapshot, Increment

from dedup import Delivery, Mode, trigger_once
from functions.boundary import validated
from functions.ids import is_document_id

SUFFIX = "sync_published_count"
logger = logging.getLogger(__name__)


def counted_author(snapshot: DocumentSnapshot | None) -> str | None:
    """The author a post version counts for, or None when it is absent, a draft or malformed."""
    if snapshot is None or not snapshot.exists:
        return None
    post = snapshot.to_dict() or {}
    author, published = post.get("authorId"), post.get("published", False)
    if not isinstance(published, bool) or not (isinstance(author, str) and is_document_id(author)):
        logger.error(
            "post %s is malformed (authorId must be a user document id, published a bool): "
            "counted as unpublished",
            snapshot.reference.path,
        )
        return None
    return author if published else None


def count_deltas(before: DocumentSnapshot | None, after: DocumentSnapshot | None) -> Counter[str]:
    """Author -> change of their published-post count for one write (zero entries dropped)."""
    deltas: Counter[str] = Counter()
    if (author := counted_author(before)) is not None:
        deltas[author] -= 1
    if (author := counted_author(after)) is not None:
        deltas[author] += 1
    return Counter({author: delta for author, delta in deltas.items() if delta})


@validated
@firestore_fn.on_document_written(document="posts/{postId}")
@trigger_once(SUFFIX, mode=Mode.TRANSACTION)
def sync_published_count(
    event: firestore_fn.Event[firestore_fn.Change[DocumentSnapshot | None]], delivery: Delivery
) -> None:
    """Apply this write's deltas inside the dedup transaction."""
    transaction = delivery.transaction
    assert transaction is not None, "transactional mode always passes a transaction"
    users = delivery.client.collection("users")
    for author, delta in count_deltas(event.data.before, event.data.after).items():
        transaction.set(
            users.document(author), {"publishedPostCount": Increment(delta)}, merge=True
        )
