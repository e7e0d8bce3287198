"""firestore.rules, evaluated by the Firestore emulator for real client requests.

Clients are simulated through the emulator's REST API: no Authorization header is an
unauthenticated client; an unsigned ID token (which the emulator accepts) is a signed-in user.
The test data is written with the server client library, which bypasses the rules, as the
functions do.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import pytest
import requests
from google.cloud import firestore

from tests.conftest import PROJECT

pytestmark = pytest.mark.shared_emulators  # the security rules `make test` loads

Client = dict[str, str]
ANONYMOUS: Client = {}


def signed_in(uid: str) -> Client:
    """Headers of a client signed in as `uid` (an unsigned token, as the emulator allows)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {
        "iss": f"https://securetoken.google.com/{PROJECT}",
        "aud": PROJECT,
        "iat": now,
        "exp": now + 3600,
        "auth_time": now,
        "sub": uid,
        "user_id": uid,
        "firebase": {"sign_in_provider": "custom", "identities": {}},
    }
    token = f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."
    return {"Authorization": f"Bearer {token}"}


def documents_url(path: str = "") -> str:
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    return f"http://{host}/v1/projects/{PROJECT}/databases/(default)/documents/{path}".rstrip("/")


def fields(values: dict[str, Any]) -> dict[str, Any]:
    """A REST `fields` map for simple values."""

    def value(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"booleanValue": v}
        if isinstance(v, int):
            return {"integerValue": str(v)}
        return {"stringValue": str(v)}

    return {"fields": {k: value(v) for k, v in values.items()}}


def read(client: Client, path: str) -> int:
    return requests.get(documents_url(path), headers=client, timeout=10).status_code


def list_collection(client: Client, collection: str) -> int:
    return requests.get(documents_url(collection), headers=client, timeout=10).status_code


def create(client: Client, collection: str, doc_id: str, values: dict[str, Any]) -> int:
    return requests.post(
        documents_url(collection), params={"documentId": doc_id}, json=fields(values),
        headers=client, timeout=10,
    ).status_code  # fmt: skip


def update(client: Client, path: str, values: dict[str, Any]) -> int:
    return requests.patch(
        documents_url(path), params=[("updateMask.fieldPaths", k) for k in values],
        json=fields(values), headers=client, timeout=10,
    ).status_code  # fmt: skip


def delete(client: Client, path: str) -> int:
    return requests.delete(documents_url(path), headers=client, timeout=10).status_code


@pytest.fixture
def data(firestore_client: firestore.Client) -> None:
    firestore_client.document("triggerEvents/e1-send_post_notification").set({"state": "sent"})
    firestore_client.document("outbox/o1").set({"topic": "orders", "data": b"x"})
    firestore_client.document("users/ann").set({"followers": [], "publishedPostCount": 1})
    firestore_client.document("users/ben").set({"followers": []})
    firestore_client.document("posts/p1").set({"authorId": "ann", "published": True})
    firestore_client.document("posts/draft").set({"authorId": "ann", "published": False})


@pytest.mark.usefixtures("data")
@pytest.mark.parametrize("client", [ANONYMOUS, signed_in("ben")], ids=["anonymous", "signed-in"])
@pytest.mark.parametrize("collection", ["triggerEvents", "outbox"])
def test_clients_can_neither_read_nor_write_dedup_records_or_outbox(
    client: Client, collection: str
) -> None:
    """Nobody can pre-create a marker (suppressing someone's notification), read event
    history, or enqueue a message to any topic."""
    existing = "e1-send_post_notification" if collection == "triggerEvents" else "o1"
    assert read(client, f"{collection}/{existing}") == 403
    assert list_collection(client, collection) == 403
    assert (
        create(client, collection, "e2-send_post_notification", {"state": "sent", "sent": True})
        == 403
    )
    assert update(client, f"{collection}/{existing}", {"state": "in_progress"}) == 403
    assert delete(client, f"{collection}/{existing}") == 403


@pytest.mark.usefixtures("data")
def test_posts_rules_hold() -> None:
    """Published posts are public; drafts are their author's; only the author writes a post."""
    ann, ben = signed_in("ann"), signed_in("ben")
    assert read(ANONYMOUS, "posts/p1") == 200
    assert read(ben, "posts/draft") == 403
    assert read(ann, "posts/draft") == 200
    assert create(ben, "posts", "p2", {"authorId": "ann", "published": True}) == 403
    assert create(ANONYMOUS, "posts", "p3", {"authorId": "ann", "published": True}) == 403
    assert create(ben, "posts", "p4", {"authorId": "ben", "published": "yes"}) == 403
    assert create(ben, "posts", "p5", {"authorId": "ben", "published": True}) == 200
    assert update(ben, "posts/p1", {"published": False}) == 403
    assert update(ann, "posts/p1", {"authorId": "ben"}) == 403
    assert update(ann, "posts/p1", {"published": False}) == 200
    assert delete(ben, "posts/draft") == 403


@pytest.mark.usefixtures("data")
def test_users_cannot_set_a_published_post_count() -> None:
    """publishedPostCount is the function's: no user sets their own or anyone else's; a
    profile (with its device token) is its owner's alone."""
    ann, ben = signed_in("ann"), signed_in("ben")
    assert read(ann, "users/ann") == 200
    assert read(ben, "users/ann") == 403
    assert read(ANONYMOUS, "users/ann") == 403
    assert update(ann, "users/ann", {"publishedPostCount": 99}) == 403
    assert update(ben, "users/ann", {"publishedPostCount": 0}) == 403
    assert update(ben, "users/ann", {"fcmToken": "stolen"}) == 403
    assert create(signed_in("cat"), "users", "cat", {"publishedPostCount": 5}) == 403
    assert update(ann, "users/ann", {"fcmToken": "token-ann"}) == 200
    assert create(signed_in("cat"), "users", "cat", {"fcmToken": "token-cat"}) == 200
