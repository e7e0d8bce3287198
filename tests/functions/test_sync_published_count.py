"""sync_published_count: the count follows the posts, whatever the platform repeats."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from google.cloud import firestore

from demo.events import HttpEvent, firestore_event
from tests.conftest import PROJECT
from tests.functions.conftest import InProcessFunction

Write = Callable[[firestore.DocumentReference], Any]


def write_post(db: firestore.Client, post_id: str, change: Write) -> HttpEvent:
    """Apply `change` to posts/<id>; the CloudEvent the platform would send for it."""
    ref = db.collection("posts").document(post_id)
    before = ref.get()
    change(ref)
    return firestore_event(ref.path, before, ref.get(), project=PROJECT)


def set_fields(ref: firestore.DocumentReference, *, fields: dict[str, Any]) -> None:
    """A `Write` that sets the document to `fields`."""
    ref.set(fields)


def count(db: firestore.Client, user: str) -> int:
    return int(
        (db.collection("users").document(user).get().to_dict() or {}).get("publishedPostCount", 0)
    )


@pytest.fixture
def counter(serve: Callable[[str], InProcessFunction]) -> InProcessFunction:
    return serve("sync_published_count")


def test_each_transition_applies_its_delta_once_despite_repeats(
    firestore_client: firestore.Client, counter: InProcessFunction
) -> None:
    """Every kind of write moves the count by exactly its delta, each event delivered 3 times."""
    steps: list[tuple[str, Write, dict[str, int]]] = [
        ("p1", lambda r: r.set({"authorId": "ann", "published": True}), {"ann": 1}),
        ("p2", lambda r: r.set({"authorId": "ann", "published": False}), {"ann": 1}),
        ("p2", lambda r: r.update({"published": True}), {"ann": 2}),
        ("p2", lambda r: r.update({"title": "edit"}), {"ann": 2}),
        ("p1", lambda r: r.update({"published": False}), {"ann": 1}),
        ("p2", lambda r: r.update({"authorId": "ben"}), {"ann": 0, "ben": 1}),
        ("p2", lambda r: r.delete(), {"ben": 0}),
        ("p1", lambda r: r.delete(), {"ann": 0}),
    ]
    for post_id, change, expected in steps:
        event = write_post(firestore_client, post_id, change)
        assert [counter.deliver(event) for _ in range(3)] == [200, 200, 200]
        for user, value in expected.items():
            assert count(firestore_client, user) == value, (post_id, user)


def test_fifty_concurrent_copies_increment_once(
    firestore_client: firestore.Client, counter: InProcessFunction
) -> None:
    """50 simultaneous deliveries of one event: the counter moves by one, every copy succeeds."""
    event = write_post(
        firestore_client, "p1", lambda r: r.set({"authorId": "ann", "published": True})
    )
    statuses = counter.deliver_concurrently(event, 50)
    assert statuses == [200] * 50
    assert count(firestore_client, "ann") == 1


def test_malformed_posts_count_as_unpublished(
    firestore_client: firestore.Client, counter: InProcessFunction, caplog: pytest.LogCaptureFixture
) -> None:
    """A post without authorId, or with a non-bool published, never counts, and says so."""
    malformed: list[tuple[str, dict[str, Any]]] = [
        ("no-author", {"published": True}),
        ("string-flag", {"authorId": "ann", "published": "yes"}),
    ]
    for post_id, fields in malformed:
        event = write_post(firestore_client, post_id, partial(set_fields, fields=fields))
        assert counter.deliver(event) == 200
    assert count(firestore_client, "ann") == 0
    assert "malformed" in caplog.text
    fixed = write_post(firestore_client, "string-flag", lambda r: r.update({"published": True}))
    assert counter.deliver(fixed) == 200
    assert count(firestore_client, "ann") == 1


@pytest.mark.parametrize("author_id", ["a/b", ".", "..", "__x__", "../triggerEvents/x"])
def test_author_id_that_names_no_user_is_a_malformed_post(
    author_id: str,
    firestore_client: firestore.Client,
    counter: InProcessFunction,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A post whose authorId cannot be a document id counts as unpublished (the module's
    documented choice): answered 2xx, recorded `sent` once, nothing written for it."""
    event = write_post(
        firestore_client, "p1", lambda r: r.set({"authorId": author_id, "published": True})
    )
    assert [counter.deliver(event) for _ in range(3)] == [200, 200, 200]
    assert "malformed" in caplog.text
    [record] = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    assert record["state"] == "sent"
    assert list(firestore_client.collection("users").list_documents()) == []
