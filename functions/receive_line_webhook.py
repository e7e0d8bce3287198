"""`receive_line_webhook`: the LINE Messaging API webhook endpoint, the ingress of the chain
LINE -> this function -> Pub/Sub `webhooks` -> `forward_webhook` -> receiver, exactly once.

| request                                                    | answer                    |
|------------------------------------------------------------|---------------------------|
| not POST / body larger than `MAX_BODY_BYTES`                | 405 / 413                 |
| `X-Line-Signature` is not the signature of the body         | 401                       |
| signed, but not `{"events": [{"webhookEventId": ...}, ...]}` | 400                      |
| `events` empty (LINE's "Verify" request)                    | 200                       |
| every event published once (see below)                     | 200                       |
| another delivery of one of its events is running           | 409 + `Retry-After`       |
| an event Pub/Sub refuses as such (attribute, size)         | 200, recorded `failed`, ERROR |
| Firestore or Pub/Sub failed for one of its events           | 500 (LINE redelivers)     |

The first three rows touch no record. A signed body is read with `dedup.platform.strict_json` (its
nesting and number limits, no `NaN`) but keeps any text: an event whose strings hold lone
surrogates is fingerprinted and published like any other. The signature is the base64
HMAC-SHA256 of the raw body with the channel secret `LINE_CHANNEL_SECRET`, compared in
constant time.

Each event is deduplicated on its `webhookEventId` (a LINE redelivery,
`deliveryContext.isRedelivery: true`, carries the same id), lease mode, and published to the
`webhooks` topic as a one-event webhook body `{"destination": ..., "events": [event]}` with
the attributes `route=line` and `eventKey=<webhookEventId>`. A crash after the publish and
before "sent" is recorded publishes again after the lease; `forward_webhook` deduplicates on
`eventKey`, so the receiver still gets the event once.

Problems are `application/problem+json` and never echo the body. `LINE_CHANNEL_SECRET` comes
from Secret Manager in both deploy paths (`secrets=[...]` below); the Functions emulator reads
it from `.secret.local`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
from functools import cache
from typing import TYPE_CHECKING, Any

import flask
from firebase_functions import https_fn
from google.api_core.exceptions import InvalidArgument

from dedup import Delivery, LeaseHeld, LeaseLost, TerminalError
from dedup.entrances.gate import EVENTS, shared_deduplicator
from dedup.errors import ConfigError
from dedup.http import DEFAULT_RETRY_AFTER_SECONDS, Problem
from dedup.kernel.delivery import OutcomeKind
from dedup.kernel.transitions import storable_event_id
from dedup.platform import propagation, strict_json

if TYPE_CHECKING:
    from google.cloud.pubsub_v1 import PublisherClient

SUFFIX = "receive_line_webhook"
TOPIC = "webhooks"
ROUTE = "line"
SECRET = "LINE_CHANNEL_SECRET"
SIGNATURE_HEADER = "X-Line-Signature"
MAX_BODY_BYTES = 1024 * 1024
PUBLISH_TIMEOUT_SECONDS = 30.0
logger = logging.getLogger(__name__)


def signature(body: bytes, secret: str) -> str:
    """The `X-Line-Signature` LINE sends with `body`: base64 of HMAC-SHA256 with the secret."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def channel_secret() -> str:
    """The channel secret; `ConfigError` (answered 500, logged) when it is not configured."""
    secret = os.environ.get(SECRET, "")
    if not secret:
        raise ConfigError(
            f"{SECRET} is not set: create the secret (`firebase functions:secrets:set {SECRET}`) "
            "and deploy again; in the emulator put it in .secret.local"
        )
    return secret


def signed(body: bytes, header: str | None, secret: str) -> bool:
    """True when `header` is the signature of `body` (compared in constant time)."""
    return header is not None and hmac.compare_digest(
        header.strip().encode("ascii", "replace"), signature(body, secret).encode("ascii")
    )


def webhook_events(body: bytes) -> tuple[Any, list[dict[str, Any]]]:
    """(destination, events) of a signed body; `ValueError` says what is malformed."""
    try:  # RFC 8259 within dedup.platform.strict_json's limits; any text, lone surrogates included
        payload = strict_json.loads(body, lone_surrogates=True)
    except strict_json.InvalidJSON as malformed:
        raise ValueError(malformed.detail) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
        raise ValueError("the body has no `events` list")
    events = payload["events"]
    for event in events:
        if not isinstance(event, dict):
            raise ValueError("every event must be an object")
        event_id = event.get("webhookEventId")
        if not isinstance(event_id, str) or not event_id:
            raise ValueError("every event must carry a `webhookEventId` string")
    return payload.get("destination"), events


@cache
def _publisher() -> PublisherClient:
    """One publisher per instance (it holds a channel and batching threads), imported here:
    every function of main.py would otherwise pay for the Pub/Sub client at start-up."""
    from google.cloud.pubsub_v1 import PublisherClient

    return PublisherClient()


def _project() -> str:
    project = os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("GCLOUD_PROJECT")
    if not project:
        import google.auth

        _, project = google.auth.default()
    if not project:
        raise ConfigError("no project id: set GOOGLE_CLOUD_PROJECT")
    return str(project)


def publish_event(destination: Any, event: dict[str, Any]) -> str:
    """Publish one event as a one-event LINE webhook body; returns the message id.

    The body is ASCII JSON (a lone surrogate travels as its `\\ud800` escape, as LINE sent it);
    `eventKey` is the id as `dedup.kernel.transitions.storable_event_id` writes it (UTF-8 text
    whatever the id holds). `TerminalError` when Pub/Sub refuses the message as such (an
    attribute too long, a message too large): no retry could publish it.
    """
    body = json.dumps({"destination": destination, "events": [event]}).encode()
    attributes = {
        **propagation.message_attributes(),  # forward_webhook continues this trace
        "route": ROUTE,
        "eventKey": storable_event_id(event["webhookEventId"]),
    }
    try:
        future = _publisher().publish(f"projects/{_project()}/topics/{TOPIC}", body, **attributes)
        return str(future.result(timeout=PUBLISH_TIMEOUT_SECONDS))
    except (InvalidArgument, TypeError, ValueError) as refused:
        raise TerminalError(f"Pub/Sub refused the event: {type(refused).__name__}") from refused


def _fingerprint(event: dict[str, Any]) -> bytes:
    """The event without its delivery context, which a redelivery changes (canonical JSON;
    a lone surrogate is kept as such, so no text can make the fingerprint fail)."""
    rest = {k: v for k, v in event.items() if k != "deliveryContext"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _problem(status: int, slug: str, title: str, detail: str, **headers: str) -> flask.Response:
    return Problem(status, slug, title, detail, headers=headers).response()


@https_fn.on_request(secrets=[SECRET], invoker="public")
def receive_line_webhook(request: flask.Request) -> flask.Response:
    """Verify LINE's signature, then publish each event of the batch once (module docstring)."""
    if request.method != "POST":
        return _problem(405, "method-not-allowed", "Method not allowed", "POST only", Allow="POST")
    length = request.content_length
    body = request.get_data(cache=True) if length is None or length <= MAX_BODY_BYTES else b""
    if (length is not None and length > MAX_BODY_BYTES) or len(body) > MAX_BODY_BYTES:
        return _problem(
            413, "body-too-large", "Body too large", f"the body exceeds {MAX_BODY_BYTES} bytes"
        )
    try:
        secret = channel_secret()
    except ConfigError:
        logger.exception("receive_line_webhook cannot verify signatures")
        return _problem(500, "not-configured", "Not configured", "the endpoint is not configured")
    if not signed(body, request.headers.get(SIGNATURE_HEADER), secret):
        return _problem(
            401,
            "bad-signature",
            "Bad signature",
            f"{SIGNATURE_HEADER} is not the signature of this body with the channel secret",
        )
    try:
        destination, events = webhook_events(body)
    except ValueError as malformed:
        return _problem(400, "malformed-webhook", "Malformed webhook", str(malformed))
    busy = failed = False
    for event in events:
        try:
            with propagation.continued(propagation.from_headers(request.headers)):
                _publish_once(destination, event)
        except (LeaseHeld, LeaseLost):
            busy = True
        except Exception:
            logger.exception("event %s not published; LINE will redeliver", event["webhookEventId"])
            failed = True
    if failed:
        return _problem(500, "publish-failed", "Not published", "retry the delivery")
    if busy:
        return _problem(
            409,
            "request-in-progress",
            "Delivery in progress",
            "another delivery of an event of this batch is being processed; retry later",
            **{"Retry-After": str(DEFAULT_RETRY_AFTER_SECONDS)},
        )
    return flask.Response("{}", 200, content_type="application/json")


def _publish_once(destination: Any, event: dict[str, Any]) -> None:
    def publish(delivery: Delivery) -> None:
        publish_event(destination, event)

    event_id = event["webhookEventId"]
    outcome = shared_deduplicator(EVENTS).run(
        event_id, SUFFIX, publish, payload=_fingerprint(event)
    )
    if outcome.kind is OutcomeKind.FAILED:
        logger.error(
            "event %s cannot be forwarded (Pub/Sub refuses it): recorded failed and "
            "acknowledged, LINE will not redeliver it",
            storable_event_id(event_id),
            extra={"webhookEventId": storable_event_id(event_id)},
        )
