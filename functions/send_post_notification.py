"""`send_post_notification`: when a post is published for the first time, notify the author's
followers.

Fires on every write to `posts/{postId}`; only a write that makes a well-formed post published
(created published, or `published` false -> true) goes further. The dedup key is the *post*,
not the event: a post published, unpublished and published again notifies once.

Exactly once, lease mode: the notification leaves the process, so it cannot join a Firestore
transaction. A crash after sending and before recording "sent" (or Firestore unreachable for
the rest of the lease) makes the next delivery ambiguous: the notification may have gone out.
What happens then follows the transport (`functions.notifier.on_ambiguous_from_env`):

* over HTTP (`NOTIFY_URL`), `on_ambiguous="rerun"`: sent again with the same idempotency key
  (`Idempotency-Key` header), which the receiver uses to drop the copy: exactly once there;
* over FCM, `on_ambiguous="skip"`: FCM honours no idempotency key and cannot be asked whether
  a message went out, and a push notification is better lost than doubled, so the event ends
  `unknown` (at most once; `dedup list --state unknown`, `dedup revive` to send it after all).

Bad input: the author document missing, or no follower with a token, sends nothing and is
recorded as sent (there is nobody to notify; a retry would not change that). An `authorId` or
a follower id that cannot be a Firestore document id (`a/b`, `.`, `__x__`; see
`functions.ids`) is a terminal failure: recorded as failed once, answered 2xx, never retried.
Follower entries that are not strings are skipped.
"""

from __future__ import annotations

import logging
from functools import cache

from firebase_functions import firestore_fn
from google.cloud.firestore import DocumentSnapshot

from dedup import Delivery, TerminalError, trigger_once
from functions.boundary import validated
from functions.ids import id_problem
from functions.notifier import (
    Notification,
    Notifier,
    notifier_from_env,
    on_ambiguous_from_env,
    unique_tokens,
)
from functions.runtime import startup_check

SUFFIX = "send_post_notification"
logger = logging.getLogger(__name__)

PostEvent = firestore_fn.Event[firestore_fn.Change[DocumentSnapshot | None]]


def _published(snapshot: DocumentSnapshot | None) -> bool:
    if snapshot is None or not snapshot.exists:
        return False
    post = snapshot.to_dict() or {}
    author = post.get("authorId")
    return post.get("published") is True and isinstance(author, str) and bool(author)


def becomes_published(before: DocumentSnapshot | None, after: DocumentSnapshot | None) -> bool:
    """True when this write turns a post into a well-formed published post."""
    return _published(after) and not _published(before)


@startup_check("send_post_notification")  # a bad setting fails at start-up, not on the first event
@cache
def _notifier() -> Notifier:
    """This instance's notifier, configured once."""
    return notifier_from_env()


@trigger_once(
    SUFFIX,
    event_id_from=lambda event: f"post-{event.params['postId']}",
    on_ambiguous=on_ambiguous_from_env(),  # rerun over HTTP (keyed), skip over FCM (not)
)
def _notify_followers_once(event: PostEvent, delivery: Delivery) -> None:
    after = event.data.after
    assert after is not None
    post = after.to_dict() or {}
    author_id: str = post["authorId"]
    if (why := id_problem(author_id)) is not None:
        raise TerminalError(f"post {after.id}: its authorId {why}, so it names no user")
    users = delivery.client.collection("users")
    author = users.document(author_id).get()
    followers = (author.to_dict() or {}).get("followers", []) if author.exists else []
    follower_ids = (
        [f for f in followers if isinstance(f, str) and f] if isinstance(followers, list) else []
    )
    for follower in follower_ids:
        if (why := id_problem(follower)) is not None:
            raise TerminalError(f"user {author_id}: a follower id {why}, so it names no user")
    docs = (
        delivery.client.get_all([users.document(f) for f in follower_ids]) if follower_ids else []
    )
    tokens = unique_tokens([(doc.to_dict() or {}).get("fcmToken") for doc in docs if doc.exists])
    if not tokens:
        logger.info("post %s: author %s has no follower with a token", after.id, author_id)
        return
    notification = Notification(post_id=after.id, author_id=author_id, tokens=tokens)
    _notifier().send(notification, idempotency_key=delivery.key)


@validated
@firestore_fn.on_document_written(document="posts/{postId}")
def send_post_notification(event: PostEvent) -> None:
    """Notify followers once per post, on its first publication."""
    if becomes_published(event.data.before, event.data.after):
        _notify_followers_once(event)
