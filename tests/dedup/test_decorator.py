"""trigger_once: one decorator for Firestore, Pub/Sub and plain CloudEvent handlers."""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from cloudevents.http import CloudEvent as RawCloudEvent
from firebase_functions import firestore_fn, pubsub_fn
from firebase_functions.core import Change, CloudEvent
from google.cloud import firestore

from dedup import (
    Deduplicator,
    Delivery,
    DuplicateSuffix,
    InvalidSuffix,
    MissingEventId,
    Record,
    SuffixRegistry,
    trigger_once,
)

MakeDedup = Callable[..., Deduplicator]
NOW = datetime.now(UTC)


def _firestore_event(client: firestore.Client, event_id: str, path: str = "posts/p1") -> Any:
    ref = client.document(path)
    after = firestore.DocumentSnapshot(ref, {"title": "hi"}, True, NOW, NOW, NOW)
    return firestore_fn.Event(
        project="demo-exactly-once",
        namespace="(default)",
        database="(default)",
        location="us-central1",
        document=path,
        specversion="1.0",
        id=event_id,
        source="//firestore.googleapis.com/projects/demo-exactly-once/databases/(default)",
        type="google.cloud.firestore.document.v1.written",
        time=NOW,
        data=Change(before=None, after=after),
        subject=f"documents/{path}",
        params={},
    )


def _pubsub_event(message_id: str) -> CloudEvent[pubsub_fn.MessagePublishedData[Any]]:
    message: pubsub_fn.Message[Any] = pubsub_fn.Message(
        message_id=message_id,
        publish_time=NOW.isoformat(),
        attributes={"b": "2", "a": "1"},
        data="aGk=",
        ordering_key="",  # what Pub/Sub sends for a message without one
    )
    return CloudEvent(
        specversion="1.0",
        id=uuid.uuid4().hex,  # the emulator gives every delivery a fresh CloudEvent id
        source="//pubsub.googleapis.com/projects/demo-exactly-once/topics/t",
        type="google.cloud.pubsub.topic.v1.messagePublished",
        time=NOW,
        data=pubsub_fn.MessagePublishedData(message=message, subscription="sub"),
        subject=None,
    )


@pytest.fixture
def registry() -> SuffixRegistry:
    """An isolated suffix registry, so tests never collide with each other or the app."""
    return SuffixRegistry()


def test_firestore_event_handler_runs_once(
    make_dedup: MakeDedup, firestore_client: firestore.Client, registry: SuffixRegistry
) -> None:
    """Redeliveries of a Firestore event (same CloudEvent id) run the handler once, and the
    handler receives the event and its delivery key."""
    seen: list[tuple[Any, Delivery]] = []

    @trigger_once("countPosts", deduplicator=make_dedup(), registry=registry)
    def count_posts(event: firestore_fn.Event[Any], delivery: Delivery) -> None:
        """Counts posts."""
        seen.append((event, delivery))

    event = _firestore_event(firestore_client, "evt-1")
    assert count_posts(event) is None
    count_posts(event)
    assert len(seen) == 1
    assert seen[0][0] is event
    assert seen[0][1].key == "evt-1-countPosts"
    record = Record.from_snapshot(
        firestore_client.collection("triggerEvents").document("evt-1-countPosts").get()
    )
    assert record is not None
    assert record.payload_hash is not None


def test_pubsub_deliveries_are_deduplicated_by_message_id(
    make_dedup: MakeDedup, registry: SuffixRegistry
) -> None:
    """Pub/Sub: two deliveries with different CloudEvent ids but one messageId run once."""
    seen: list[Delivery] = []

    @trigger_once("onMessage", deduplicator=make_dedup(), registry=registry)
    def on_message(event: Any, delivery: Delivery) -> None:
        seen.append(delivery)

    on_message(_pubsub_event("m-1"))
    on_message(_pubsub_event("m-1"))
    assert [d.event_id for d in seen] == ["m-1"]


@pytest.mark.parametrize("adapter", ["firebase_functions", "cloudevents"])
def test_a_pubsub_record_names_its_topic_and_message(
    make_dedup: MakeDedup,
    firestore_client: firestore.Client,
    registry: SuffixRegistry,
    adapter: str,
) -> None:
    """The record of a Pub/Sub message holds the subject `topics/<topic>/messages/<id>`, so
    `dedup list --subject` finds what happened to one message; the Firestore record holds its
    document path."""
    message_id = f"m-{uuid.uuid4().hex[:8]}"

    @trigger_once("onTopic", deduplicator=make_dedup(), registry=registry)
    def on_topic(event: Any, delivery: Delivery) -> None:
        """Does nothing."""

    if adapter == "firebase_functions":
        on_topic(_pubsub_event(message_id))
    else:
        on_topic(
            RawCloudEvent(
                {
                    "id": "ce-1",
                    "source": "//pubsub.googleapis.com/projects/demo-exactly-once/topics/t",
                    "type": "google.cloud.pubsub.topic.v1.messagePublished",
                },
                {"message": {"messageId": message_id, "data": "aGk="}, "subscription": "s"},
            )
        )
    record = Record.from_snapshot(
        firestore_client.collection("triggerEvents").document(f"{message_id}-onTopic").get()
    )
    assert record is not None
    assert record.subject == f"topics/t/messages/{message_id}"

    @trigger_once("onPost", deduplicator=make_dedup(), registry=registry)
    def on_post(event: Any, delivery: Delivery) -> None:
        """Does nothing."""

    on_post(_firestore_event(firestore_client, f"e-{message_id}", path="posts/p9"))
    record = Record.from_snapshot(
        firestore_client.collection("triggerEvents").document(f"e-{message_id}-onPost").get()
    )
    assert record is not None
    assert record.subject == "posts/p9"


def test_self_trigger_is_ignored(
    make_dedup: MakeDedup, firestore_client: firestore.Client, registry: SuffixRegistry
) -> None:
    """An event about a dedup record (e.g. a TTL deletion) never runs the handler."""
    seen: list[Delivery] = []

    @trigger_once("anyDoc", deduplicator=make_dedup(), registry=registry)
    def any_doc(event: Any, delivery: Delivery) -> None:
        seen.append(delivery)

    any_doc(_firestore_event(firestore_client, "evt-2", path="triggerEvents/evt-1-x"))
    assert seen == []
    assert not firestore_client.collection("triggerEvents").document("evt-2-anyDoc").get().exists


@pytest.mark.needs_emulators  # the served function reaches Firestore from its own process
def test_raw_cloud_event_through_functions_framework(tmp_path: Path) -> None:
    """A functions-framework app receiving the same CloudEvent twice runs the handler once;
    a Pub/Sub CloudEvent is keyed by its messageId."""
    source = tmp_path / "app.py"
    source.write_text(
        "import functions_framework\n"
        "from google.cloud import firestore\n"
        "from dedup import SuffixRegistry, trigger_once\n"
        "\n"
        "@functions_framework.cloud_event\n"
        "@trigger_once('ffHandler', registry=SuffixRegistry())\n"
        "def handle(event, delivery):\n"
        "    firestore.Client().collection('effects').document(delivery.key).create({})\n"
    )
    client = functions_framework.create_app("handle", str(source), "cloudevent").test_client()
    event_id = uuid.uuid4().hex
    headers = {
        "ce-id": event_id,
        "ce-source": "//test",
        "ce-type": "com.example.thing",
        "ce-specversion": "1.0",
        "Content-Type": "application/json",
    }
    for _ in range(2):
        response = client.post("/", headers=headers, data=json.dumps({"x": 1}))
        assert response.status_code == 200
    pubsub_headers = {
        **headers,
        "ce-id": uuid.uuid4().hex,
        "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
    }
    body = json.dumps({"message": {"messageId": f"m-{event_id}", "data": "aGk="}})
    for _ in range(2):
        pubsub_headers["ce-id"] = uuid.uuid4().hex
        assert client.post("/", headers=pubsub_headers, data=body).status_code == 200
    effects = firestore.Client().collection("effects")
    assert sorted(d.id for d in effects.list_documents()) == sorted(
        [f"{event_id}-ffHandler", f"m-{event_id}-ffHandler"]
    )


def test_wrapper_takes_the_event_only_and_keeps_the_name(
    make_dedup: MakeDedup, registry: SuffixRegistry
) -> None:
    """The decorated function has the handler's name and doc, and exactly one parameter."""

    @trigger_once("named", deduplicator=make_dedup(), registry=registry)
    def my_handler(event: Any, delivery: Delivery) -> None:
        """Docs."""

    assert my_handler.__name__ == "my_handler"
    assert my_handler.__doc__ == "Docs."
    assert len(inspect.signature(my_handler).parameters) == 1


def test_duplicate_suffix_fails_at_decoration_naming_both(
    make_dedup: MakeDedup, registry: SuffixRegistry
) -> None:
    """Registering one suffix twice in a registry fails at import time, naming both handlers."""

    @trigger_once("shared", deduplicator=make_dedup(), registry=registry)
    def first(event: Any, delivery: Delivery) -> None: ...

    with pytest.raises(DuplicateSuffix) as raised:

        @trigger_once("shared", deduplicator=make_dedup(), registry=registry)
        def second(event: Any, delivery: Delivery) -> None: ...

    message = str(raised.value)
    assert "test_duplicate_suffix_fails_at_decoration_naming_both.<locals>.first" in message
    assert "<locals>.second" in message


def test_invalid_suffix_fails_at_decoration() -> None:
    """A bad suffix is rejected before any handler is wrapped."""
    with pytest.raises(InvalidSuffix):
        trigger_once("has space")


def test_event_without_id_raises_missing_event_id(
    make_dedup: MakeDedup, registry: SuffixRegistry
) -> None:
    """A Pub/Sub CloudEvent without a messageId raises MissingEventId; the handler never runs."""
    seen: list[Delivery] = []

    @trigger_once("noId", deduplicator=make_dedup(), registry=registry)
    def handler(event: Any, delivery: Delivery) -> None:
        seen.append(delivery)

    event = RawCloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "//t"},
        {"message": {"data": "aGk="}},
    )
    with pytest.raises(MissingEventId):
        handler(event)
    assert seen == []


def test_unknown_event_type_names_the_supported_ones(
    make_dedup: MakeDedup, registry: SuffixRegistry
) -> None:
    """Anything but a supported event raises TypeError listing what is supported."""

    @trigger_once("unknown", deduplicator=make_dedup(), registry=registry)
    def handler(event: Any, delivery: Delivery) -> None: ...

    with pytest.raises(TypeError, match="supported events are"):
        handler({"id": "x"})
