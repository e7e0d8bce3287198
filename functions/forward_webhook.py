"""`forward_webhook`: forward each webhook message published to the `webhooks` topic to the
receiver its route names, exactly once.

The message body is the webhook payload as received (for example a LINE webhook); the message
attribute `route` picks a receiver from `WEBHOOK_ROUTES`, a JSON object of route name -> URL
that must have a `default` entry (an unknown or missing route goes to `default`, logged). The
attribute `contentType` gives the body's content type (default `application/json`). The body
is forwarded unchanged with `Idempotency-Key: <dedup key>`.

Exactly once, lease mode, keyed by the message attribute `eventKey` when the message has one
(a publisher that may publish the same event twice, such as `receive_line_webhook` after a
crash between its publish and its "sent", names the event there; it must be unique among the
topic's events), else by the Pub/Sub message id. Receiver answers: see
`functions.http_delivery` (5xx, 429, timeouts and refused connections are retried; any other
4xx is a terminal failure, recorded and not retried).

Configuration errors surface at start-up: the instance serving this function (its
`FUNCTION_TARGET`) refuses to start when `WEBHOOK_ROUTES` is missing or invalid, with a message
that says what is expected. Bad input: a request that is not a well-formed Pub/Sub event
(data not base64, no message id, attributes that are not strings...) is refused by
`functions.boundary`; a JSON content type whose body is not JSON, or nests too deep to check,
is a terminal failure, recorded.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Mapping
from functools import cache
from typing import Any

from firebase_functions import pubsub_fn

from dedup import Delivery, TerminalError, trigger_once
from dedup.errors import ConfigError
from functions.boundary import validated
from functions.http_delivery import post_once
from functions.runtime import startup_check

SUFFIX = "forward_webhook"
TOPIC = "webhooks"
DEFAULT_ROUTE = "default"
DEFAULT_CONTENT_TYPE = "application/json"
EVENT_KEY_ATTRIBUTE = "eventKey"
logger = logging.getLogger(__name__)


def parse_routes(raw: str | None) -> Mapping[str, str]:
    """Route name -> URL from the `WEBHOOK_ROUTES` text; `ConfigError` says what is wrong."""
    example = '{"default": "https://example.com/hook", "line": "https://example.com/line"}'
    if not raw or not raw.strip():
        raise ConfigError(f"WEBHOOK_ROUTES is not set: set it to a JSON object such as {example}")
    try:
        routes = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"WEBHOOK_ROUTES is not valid JSON ({exc.msg}): expected {example}"
        ) from None
    if not isinstance(routes, dict) or DEFAULT_ROUTE not in routes:
        raise ConfigError(
            f"WEBHOOK_ROUTES must be a JSON object with a 'default' entry, like {example}"
        )
    for name, url in routes.items():
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"WEBHOOK_ROUTES[{name!r}] must be an http:// or https:// URL")
    return routes


@startup_check("forward_webhook")  # a bad setting fails at start-up, not on the first event
@cache
def routes() -> Mapping[str, str]:
    """The routes of this instance, read once."""
    return parse_routes(os.environ.get("WEBHOOK_ROUTES"))


def pick_route(attributes: Mapping[str, str]) -> tuple[str, str]:
    """(route name, URL) for a message's attributes; unknown routes fall back to `default`."""
    table = routes()
    name = attributes.get("route") or DEFAULT_ROUTE
    if name not in table:
        logger.warning("unknown webhook route %r: forwarding to 'default'", name)
        name = DEFAULT_ROUTE
    return name, table[name]


def message_key(event: pubsub_fn.CloudEvent[pubsub_fn.MessagePublishedData[Any]]) -> str:
    """The dedup id of a message: its `eventKey` attribute, else its message id."""
    message = event.data.message
    return message.attributes.get(EVENT_KEY_ATTRIBUTE) or message.message_id


def message_body(message: pubsub_fn.Message[Any]) -> bytes:
    """The message's payload bytes (`validated` already refused data that is not base64)."""
    return base64.b64decode(message.data or "")


@validated
@pubsub_fn.on_message_published(topic=TOPIC)
@trigger_once(SUFFIX, event_id_from=message_key)
def forward_webhook(
    event: pubsub_fn.CloudEvent[pubsub_fn.MessagePublishedData[Any]], delivery: Delivery
) -> None:
    """Forward the message body to its route's receiver, with the dedup key."""
    message = event.data.message
    body = message_body(message)
    content_type = message.attributes.get("contentType") or DEFAULT_CONTENT_TYPE
    if "json" in content_type:
        try:
            json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise TerminalError(
                f"body is not JSON although its content type is {content_type}"
            ) from None
        except RecursionError:
            raise TerminalError("body nests JSON deeper than this function can check") from None
    _, url = pick_route(message.attributes)
    post_once(url, body, content_type=content_type, idempotency_key=delivery.key)
