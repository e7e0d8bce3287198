"""The few Pub/Sub calls the dead-letter commands make, through Pub/Sub's REST API (v1).

`PubSub.connect()` talks to the emulator at `PUBSUB_EMULATOR_HOST` with plain `requests` when
that variable is set, else to `pubsub.googleapis.com` through google-auth's `AuthorizedSession`
with Application Default Credentials: no Pub/Sub client library is needed (the library's
dependencies stay google-cloud-firestore's). Every failure is a `click.ClickException` that
names the subscription and says what to check.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
import requests
from google.auth import exceptions as auth_exceptions

PUBSUB_API = "https://pubsub.googleapis.com/v1"
"""Pub/Sub's REST endpoint outside the emulator."""
PUBSUB_SCOPE = "https://www.googleapis.com/auth/pubsub"
"""The OAuth scope of the REST calls."""
CALL_SECONDS = 30.0
"""How long one REST call may take."""
SUBSCRIPTION_PATH = re.compile(r"projects/([^/]+)/subscriptions/([^/]+)")
"""A full subscription name."""
SUBSCRIPTION_ID = re.compile(r"[A-Za-z][A-Za-z0-9._~+%-]{2,254}")
"""Pub/Sub's rule for a subscription id: a letter, then 2 to 254 letters, digits or `-_.~+%`."""


@dataclass(frozen=True)
class Message:
    """One message pulled from a subscription, leased to this command until acked or nacked."""

    ack_id: str
    """What acknowledges (or gives back) this delivery of the message."""
    message_id: str
    """The id Pub/Sub gave the message when it was published to the subscription's topic."""
    publish_time: str
    """When it was published to the subscription's topic (RFC 3339)."""
    data: bytes
    """The message's body."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """The message's attributes."""
    ordering_key: str = ""
    """The ordering key it was published with, if any."""


def subscription_name(given: str, project: str | None) -> str:
    """`projects/P/subscriptions/S` for a full name, or for a subscription id and `project`;
    `click.BadParameter` saying the accepted forms otherwise."""
    if SUBSCRIPTION_PATH.fullmatch(given):
        return given
    if "/" in given or not SUBSCRIPTION_ID.fullmatch(given) or given.startswith("goog"):
        raise click.BadParameter(
            f"{given!r} is not a subscription: give its id (e.g. sync-published-count-dead-letter, "
            "with --project) or its full name projects/PROJECT/subscriptions/ID",
            param_hint="SUBSCRIPTION",
        )
    if not project:
        raise click.UsageError(
            f"no Google Cloud project for subscription {given}: pass --project PROJECT (before "
            "the command), set GOOGLE_CLOUD_PROJECT, or give projects/PROJECT/subscriptions/"
            f"{given}"
        )
    return f"projects/{project}/subscriptions/{given}"


class PubSub:
    """Pub/Sub's REST API on one session: the emulator's or the real service's."""

    def __init__(self, session: requests.Session, base: str, *, emulator: bool) -> None:
        self.session = session
        """What sends the calls (an `AuthorizedSession` outside the emulator)."""
        self.base = base
        """`http://HOST:PORT/v1` of the emulator, or `PUBSUB_API`."""
        self.emulator = emulator
        """True when the calls go to the emulator."""

    @classmethod
    def connect(cls) -> PubSub:
        """The emulator when `PUBSUB_EMULATOR_HOST` is set, else the real service with
        Application Default Credentials (a click error naming the fix when there are none)."""
        host = os.environ.get("PUBSUB_EMULATOR_HOST", "").strip()
        if host:
            return cls(requests.Session(), f"http://{host}/v1", emulator=True)
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        try:
            credentials, _ = google.auth.default(scopes=[PUBSUB_SCOPE])
        except auth_exceptions.DefaultCredentialsError as exc:
            raise click.ClickException(
                "no Application Default Credentials: run `gcloud auth application-default "
                "login` (or set GOOGLE_APPLICATION_CREDENTIALS), or set PUBSUB_EMULATOR_HOST "
                "to use the emulator"
            ) from exc
        authorized: Callable[[Any], requests.Session] = AuthorizedSession  # untyped upstream
        session = authorized(credentials)
        return cls(session, PUBSUB_API, emulator=False)

    def get(self, path: str, what: str) -> dict[str, Any]:
        """The answer of `GET path` (relative to the API's base), errors naming `what`."""
        return self._call("GET", path, None, what)

    def subscription(self, name: str) -> dict[str, Any]:
        """The subscription's resource (its `topic`, `pushConfig`, ...)."""
        return self._call("GET", name, None, name)

    def pull(self, name: str, max_messages: int) -> list[Message]:
        """Up to `max_messages` messages, each leased for the subscription's ack deadline; an
        empty list when none is waiting (`returnImmediately`, which the service still honours
        although it discourages it: a command must not wait for messages that never come)."""
        body = {"maxMessages": max_messages, "returnImmediately": True}
        answer = self._call("POST", f"{name}:pull", body, name)
        return [_message(received) for received in answer.get("receivedMessages") or []]

    def acknowledge(self, name: str, ack_ids: Sequence[str]) -> None:
        """Remove the messages of `ack_ids` from the subscription."""
        if ack_ids:
            self._call("POST", f"{name}:acknowledge", {"ackIds": list(ack_ids)}, name)

    def modify_ack_deadline(self, name: str, ack_ids: Sequence[str], seconds: int) -> None:
        """Lease the messages of `ack_ids` for `seconds` more; 0 gives them back at once."""
        if ack_ids:
            body = {"ackIds": list(ack_ids), "ackDeadlineSeconds": seconds}
            self._call("POST", f"{name}:modifyAckDeadline", body, name)

    def _call(self, method: str, path: str, body: Any, subscription: str) -> dict[str, Any]:
        url = f"{self.base}/{path}"
        try:
            response = self.session.request(method, url, json=body, timeout=CALL_SECONDS)
        except requests.ConnectionError as exc:
            if self.emulator:
                raise click.ClickException(
                    f"no Pub/Sub emulator answers at {self.base} (PUBSUB_EMULATOR_HOST): start "
                    "it with `make emulators`, or unset the variable to work on the real project"
                ) from exc
            raise click.ClickException(f"Pub/Sub: {exc} (check the network)") from exc
        except (requests.RequestException, auth_exceptions.GoogleAuthError) as exc:
            raise click.ClickException(
                f"Pub/Sub: {exc} (run `gcloud auth application-default login`)"
            ) from exc
        if response.status_code == 404:
            raise click.ClickException(
                f"no subscription {subscription}: check its name and project (a Cloud Run "
                "function's dead letters are on <service>-dead-letter, docs/deploy.md)"
            )
        if response.status_code == 403:
            raise click.ClickException(
                f"Pub/Sub refused access to {subscription} (the account needs "
                f"roles/pubsub.subscriber on it): {_error_text(response)}"
            )
        if not response.ok:
            raise click.ClickException(
                f"Pub/Sub: {method} {path} answered {response.status_code}: {_error_text(response)}"
            )
        answer = response.json() if response.content else {}
        return answer if isinstance(answer, dict) else {}


def _error_text(response: requests.Response) -> str:
    try:
        error = response.json().get("error", {})
        return str(error.get("message") or response.text).strip()
    except (ValueError, AttributeError):
        return " ".join(response.text.split())[:300]


def _message(received: Mapping[str, Any]) -> Message:
    message = received.get("message") or {}
    try:
        data = base64.b64decode(message.get("data") or "", validate=True)
    except (binascii.Error, ValueError):  # pragma: no cover - Pub/Sub always sends base64
        data = b""
    attributes = message.get("attributes") or {}
    return Message(
        ack_id=str(received.get("ackId") or ""),
        message_id=str(message.get("messageId") or ""),
        publish_time=str(message.get("publishTime") or ""),
        data=data,
        attributes={str(k): str(v) for k, v in attributes.items()},
        ordering_key=str(message.get("orderingKey") or ""),
    )
