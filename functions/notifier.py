"""Who tells followers about a new post: Firebase Cloud Messaging, or an HTTP receiver.

`notifier_from_env()` picks one per instance: `NOTIFY_URL` set -> `HttpNotifier` (the tests and
the demo point it at a local receiver); otherwise `FcmNotifier`, through the Admin SDK's
default credentials. Both carry the dedup key downstream: HTTP as the `Idempotency-Key` header,
FCM in the message data as `idempotencyKey`, so a client can drop the copy a crash between
sending and recording can produce.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dedup.errors import ConfigError
from dedup.platform.firebase_app import default_app
from functions.http_delivery import post_once


@dataclass(frozen=True)
class Notification:
    """One new post to announce to a set of device tokens."""

    post_id: str
    author_id: str
    tokens: tuple[str, ...]


class Notifier(Protocol):
    """Delivers a notification; raises to have the platform retry, `TerminalError` to give up."""

    def send(self, notification: Notification, *, idempotency_key: str) -> None:
        """Deliver `notification` to all of its tokens."""
        ...


@dataclass(frozen=True)
class HttpNotifier:
    """POSTs the notification as JSON to `url` (see `functions.http_delivery` for retries)."""

    url: str

    def send(self, notification: Notification, *, idempotency_key: str) -> None:
        """One POST per notification, carrying every token."""
        body = json.dumps(
            {
                "postId": notification.post_id,
                "authorId": notification.author_id,
                "tokens": list(notification.tokens),
            }
        ).encode()
        post_once(self.url, body, content_type="application/json", idempotency_key=idempotency_key)


class FcmNotifier:
    """Sends one multicast message through Firebase Cloud Messaging.

    FCM has no idempotency key of its own: a retry after a partial failure sends again to the
    tokens that already got the message. The key travels in the data so apps can drop copies.
    """

    def send(self, notification: Notification, *, idempotency_key: str) -> None:
        """Send to every token; raise when any token failed for a reason worth retrying."""
        from firebase_admin import messaging

        default_app()
        message = messaging.MulticastMessage(
            tokens=list(notification.tokens),
            data={
                "postId": notification.post_id,
                "authorId": notification.author_id,
                "idempotencyKey": idempotency_key,
            },
            notification=messaging.Notification(title="New post", body="Someone you follow posted"),
        )
        response = messaging.send_each_for_multicast(message)
        retryable = [
            r.exception
            for r in response.responses
            if not r.success and not isinstance(r.exception, messaging.UnregisteredError)
        ]
        if retryable:
            raise RuntimeError(
                f"FCM failed for {len(retryable)} of {len(notification.tokens)} tokens"
            )


def on_ambiguous_from_env() -> str:
    """What `send_post_notification` does when a delivery may repeat a notification (its
    earlier attempt's lease expired before "sent" was recorded; `dedup.kernel.ambiguity`), chosen by
    the transport `notifier_from_env` picks: "rerun" over HTTP (`NOTIFY_URL` set), whose
    receiver drops a copy by its `Idempotency-Key`; "skip" over FCM, which has no idempotency
    key of its own and cannot be asked whether a message went out, and where a push
    notification is better lost than doubled. Read once, at import."""
    return "rerun" if os.environ.get("NOTIFY_URL", "").strip() else "skip"


def notifier_from_env() -> Notifier:
    """`HttpNotifier(NOTIFY_URL)` when that variable is set, else `FcmNotifier()`; a
    `ConfigError` for a NOTIFY_URL that is not an http(s) URL."""
    url = os.environ.get("NOTIFY_URL", "").strip()
    if url:
        if not url.startswith(("http://", "https://")):
            raise ConfigError("NOTIFY_URL must be an http:// or https:// URL, or unset for FCM")
        return HttpNotifier(url)
    return FcmNotifier()


def unique_tokens(tokens: Sequence[object]) -> tuple[str, ...]:
    """Non-empty string tokens, deduplicated, in first-seen order."""
    return tuple(dict.fromkeys(t for t in tokens if isinstance(t, str) and t))
