"""Clients of the functions the Functions emulator serves: Auth-emulator users with their ID
tokens, the URL of a served function, LINE-signed webhook bodies.

The demo calls `create_order`, `create_order_callable` and `receive_line_webhook` with these,
and so do the tests (through `tests.plugin`, the fixtures a project's own tests use).
Every address comes from `firebase.json`, so a checkout with moved ports works unchanged.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass

import requests

from functions.receive_line_webhook import signature
from tools.emulators import configured_ports, function_url

AUTH_ENV = "FIREBASE_AUTH_EMULATOR_HOST"
__all__ = [
    "AUTH_ENV",
    "LINE_SECRET",
    "User",
    "auth_host",
    "function_url",
    "line_body",
    "line_event_id",
    "line_headers",
    "new_key",
    "order_headers",
    "sign_up",
]

LINE_SECRET = "test-line-channel-secret"
"""The channel secret `.secret.local` gives the Functions emulator's `receive_line_webhook`."""


@dataclass(frozen=True)
class User:
    """A user of the Auth emulator with a fresh ID token."""

    uid: str
    id_token: str

    @property
    def bearer(self) -> dict[str, str]:
        """The Authorization header of this user's requests."""
        return {"Authorization": f"Bearer {self.id_token}"}


def auth_host() -> str:
    """host:port of the Auth emulator: FIREBASE_AUTH_EMULATOR_HOST (which `firebase
    emulators:exec` exports), else where firebase.json puts it."""
    host = os.environ.get(AUTH_ENV)
    if host:
        return host
    name, port = configured_ports()["auth"]
    return f"{name}:{port}"


def sign_up(host: str | None = None) -> User:
    """A new anonymous user of the Auth emulator at `host` (default: `auth_host()`), signed up
    through its REST API as a client SDK does; its ID token is valid for an hour."""
    response = requests.post(
        f"http://{host or auth_host()}/identitytoolkit.googleapis.com/v1/accounts:signUp"
        "?key=fake-key",
        json={"returnSecureToken": True},
        timeout=30,
    )
    response.raise_for_status()
    body = response.json()
    return User(body["localId"], body["idToken"])


def new_key() -> str:
    """A fresh Idempotency-Key."""
    return str(uuid.uuid4())


def order_headers(user: User | None, key: str | None) -> dict[str, str]:
    """Headers of a JSON request by `user` (None: no token) with `key` (None: no header)."""
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers.update(user.bearer)
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def line_body(*event_ids: str, redelivery: bool = False) -> bytes:
    """A LINE webhook body with one message event per id (`isRedelivery` as given)."""
    events = [
        {
            "type": "message",
            "mode": "active",
            "timestamp": 1700000000000,
            "source": {"type": "user", "userId": "U" + "0" * 32},
            "webhookEventId": event_id,
            "deliveryContext": {"isRedelivery": redelivery},
            "message": {"id": event_id[-8:], "type": "text", "text": f"hello {event_id}"},
            "replyToken": "r" * 32,
        }
        for event_id in event_ids
    ]
    return json.dumps({"destination": "U" + "1" * 32, "events": events}).encode()


def line_headers(body: bytes, secret: str = LINE_SECRET) -> dict[str, str]:
    """The headers LINE sends with `body`, signed with `secret`."""
    return {"Content-Type": "application/json", "X-Line-Signature": signature(body, secret)}


def line_event_id() -> str:
    """A fresh webhookEventId, shaped like LINE's (a ULID)."""
    return "01" + uuid.uuid4().hex[:24].upper()
