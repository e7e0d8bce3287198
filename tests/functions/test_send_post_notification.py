"""send_post_notification: one notice per post, however often its events arrive."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest
from google.cloud import firestore

from demo.events import HttpEvent
from demo.receiver import Receiver
from tests.functions.conftest import InProcessFunction, start_instance
from tests.functions.test_sync_published_count import write_post

NOTIFY = "/notify"


def publish(db: firestore.Client, post_id: str) -> HttpEvent:
    """Create `posts/<post_id>` published by ann; the event of that write."""
    return write_post(db, post_id, lambda r: r.set({"authorId": "ann", "published": True}))


@pytest.fixture
def notifier(
    serve: Callable[[str], InProcessFunction], firestore_client: firestore.Client
) -> InProcessFunction:
    users = firestore_client.collection("users")
    users.document("ann").set({"followers": ["ben", "cat", "dan", "ben"]})
    users.document("ben").set({"fcmToken": "token-ben"})
    users.document("cat").set({"fcmToken": "token-cat"})
    users.document("dan").set({})  # no token: nothing to send to
    return serve("send_post_notification")


def test_first_publication_notifies_followers_once(
    unique: str, firestore_client: firestore.Client, notifier: InProcessFunction, receiver: Receiver
) -> None:
    """Ten concurrent copies and later repeats of the publishing event: one POST, with a key."""
    event = publish(firestore_client, f"p1-{unique}")
    statuses = notifier.deliver_concurrently(event, 10)
    assert all(s in (200, 500) for s in statuses)
    assert statuses.count(200) >= 1
    for _ in range(3):
        assert notifier.deliver(event) == 200
    [notice] = receiver.applied(NOTIFY)
    assert json.loads(notice.body) == {
        "postId": f"p1-{unique}",
        "authorId": "ann",
        "tokens": ["token-ben", "token-cat"],
    }
    assert notice.idempotency_key == f"post-p1-{unique}-send_post_notification"


def test_republishing_or_editing_sends_nothing_new(
    unique: str,
    firestore_client: firestore.Client,
    notifier: InProcessFunction,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drafts, edits, unpublish and republish: only the first publication notifies."""
    writes = [
        lambda r: r.set({"authorId": "ann", "published": False}),
        lambda r: r.update({"published": True}),
        lambda r: r.update({"title": "edited"}),
        lambda r: r.update({"published": False}),
        lambda r: r.update({"published": True}),
    ]
    for change in writes:
        assert notifier.deliver(write_post(firestore_client, f"p1-{unique}", change)) == 200
    assert len(receiver.applied(NOTIFY)) == 1
    assert "fingerprint" not in caplog.text, "writes sharing the post's key are not mismatches"


def test_receiver_outage_is_retried_with_the_same_key(
    unique: str, firestore_client: firestore.Client, notifier: InProcessFunction, receiver: Receiver
) -> None:
    """A 503 fails the delivery (platform retries); the retry sends once, same key."""
    receiver.fail(NOTIFY, 503, times=1)
    event = publish(firestore_client, f"p1-{unique}")
    assert notifier.deliver(event) == 500
    assert notifier.deliver(event) == 200
    assert notifier.deliver(event) == 200
    [notice] = receiver.applied(NOTIFY)
    assert notice.idempotency_key == f"post-p1-{unique}-send_post_notification"
    assert len(receiver.attempts_to(NOTIFY)) == 2


def test_receiver_refusal_is_a_terminal_failure(
    unique: str, firestore_client: firestore.Client, notifier: InProcessFunction, receiver: Receiver
) -> None:
    """A 400 is recorded as failed and acknowledged: the platform stops, nothing is resent."""
    receiver.fail(NOTIFY, 400, times=5)
    event = publish(firestore_client, f"p1-{unique}")
    assert notifier.deliver(event) == 200
    assert notifier.deliver(event) == 200
    assert len(receiver.attempts_to(NOTIFY)) == 1
    record = (
        firestore_client.document(f"triggerEvents/post-p1-{unique}-send_post_notification")
        .get()
        .to_dict()
    )
    assert record is not None
    assert record["state"] == "failed"
    assert "400" in record["lastError"]


def test_instance_refuses_to_start_with_a_bad_notify_url() -> None:
    """Serving send_post_notification with a NOTIFY_URL that is not an http(s) URL fails at
    start-up, naming the variable, rather than failing every notification."""
    result = start_instance("send_post_notification", {**os.environ, "NOTIFY_URL": "ftp://x"})
    assert result.returncode != 0
    assert "NOTIFY_URL must be an http:// or https:// URL" in result.stderr


BAD_IDS = ["a/b", ".", "..", "__x__", "../triggerEvents/x"]


@pytest.mark.parametrize("author_id", BAD_IDS)
def test_author_id_that_names_no_user_is_a_terminal_failure(
    author_id: str,
    unique: str,
    firestore_client: firestore.Client,
    notifier: InProcessFunction,
    receiver: Receiver,
) -> None:
    """A published post whose authorId cannot be a document id: recorded `failed` once,
    answered 2xx every time, nothing sent, no retry."""
    event = write_post(
        firestore_client, f"p-{unique}", lambda r: r.set({"authorId": author_id, "published": True})
    )
    assert [notifier.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert receiver.attempts_to(NOTIFY) == []
    [record] = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert (record["state"], record["attempts"]) == ("failed", 1)
    assert "authorId" in record["lastError"]


@pytest.mark.parametrize("follower", BAD_IDS)
def test_follower_id_that_names_no_user_is_a_terminal_failure(
    follower: str,
    unique: str,
    firestore_client: firestore.Client,
    notifier: InProcessFunction,
    receiver: Receiver,
) -> None:
    """A follower id that cannot be a document id: recorded `failed` once, answered 2xx."""
    firestore_client.document("users/ann").set({"followers": ["ben", follower]})
    event = publish(firestore_client, f"p-{unique}")
    assert [notifier.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert receiver.attempts_to(NOTIFY) == []
    [record] = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert (record["state"], record["attempts"]) == ("failed", 1)
    assert "follower" in record["lastError"]
