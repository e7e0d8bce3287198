"""The HTTP boundary: refuse what is not a well-formed event for this function, before any
Firestore record is touched.

The platform (Eventarc) sends well-formed CloudEvents only; anything else that reaches a
function's URL comes from a misconfigured or hostile caller. Such a request gets a 4xx status
and one WARNING log line saying what was wrong (never the payload), no dedup record is created
or changed, and the instance goes on serving. What is checked, in order:

| problem                                                   | status |
|-----------------------------------------------------------|--------|
| body larger than the function can ever receive            | 413    |
| not a CloudEvent (functions-framework: no id, no type...) | 400    |
| CloudEvent body that does not parse as its content type   | 400    |
| empty id                                                  | 400    |
| event type other than the function's trigger              | 400    |
| content type the trigger never uses (none means JSON)     | 415    |
| Firestore: no `document` attribute; data not a `DocumentEventData` | 400 |
| Pub/Sub: no message, `message_id` or `publish_time`; data not base64 | 400 |

Ids that are valid CloudEvent ids but not valid Firestore document ids (`a/b`, `..`, 2 KB,
unicode) are not refused: `dedup.keys` maps them to safe record ids.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import flask
from cloudevents.abstract import CloudEvent
from google.events.cloud.firestore import DocumentEventData
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)

from dedup.logs import log_delivery

FIRESTORE_PREFIX = "google.cloud.firestore.document.v1."
PUBSUB_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
MAX_FIRESTORE_BODY = 3 * 1024 * 1024
"""A document is at most 1 MiB and an event carries two versions of it, plus a little."""
MAX_PUBSUB_BODY = 14 * 1024 * 1024
"""A message is at most 10 MB, base64 in a JSON envelope makes it 4/3 larger."""
logger = logging.getLogger(__name__)


def _body_size() -> int:
    return (flask.request.content_length or 0) if flask.has_request_context() else 0


def _firestore_problem(raw: CloudEvent) -> tuple[type[HTTPException], str] | None:
    content_type = raw.get("datacontenttype") or "application/json"  # the CloudEvents default
    document = raw.get("document")
    if not isinstance(document, str) or not document:
        return BadRequest, "the Firestore event has no `document` attribute"
    data = raw.get_data()
    if "application/protobuf" in content_type:
        if not isinstance(data, bytes):
            return BadRequest, "application/protobuf data must be bytes"
        try:
            DocumentEventData.deserialize(data)
        except Exception:  # protobuf raises DecodeError and friends
            return BadRequest, "the data is not a protobuf DocumentEventData"
        return None
    if "json" not in content_type:
        return UnsupportedMediaType, f"content type {content_type} is not protobuf or JSON"
    if not isinstance(data, Mapping):
        return (
            UnsupportedMediaType,
            "the data is neither protobuf (no content type says so) nor JSON",
        )
    return None


def _pubsub_problem(raw: CloudEvent) -> tuple[type[HTTPException], str] | None:
    content_type = raw.get("datacontenttype") or "application/json"  # the CloudEvents default
    if "json" not in content_type:
        return UnsupportedMediaType, f"content type {content_type} is not JSON"
    data = raw.get_data()
    message = data.get("message") if isinstance(data, Mapping) else None
    if not isinstance(message, Mapping):
        return BadRequest, "the Pub/Sub event has no `message` object"
    if not message.get("message_id"):
        return BadRequest, "the Pub/Sub message has no message_id"
    if not isinstance(message.get("publish_time"), str):
        return BadRequest, "the Pub/Sub message has no publish_time"
    try:
        base64.b64decode(message.get("data") or "", validate=True)
    except (binascii.Error, ValueError, TypeError):
        return BadRequest, "the Pub/Sub message data is not base64"
    return None


def event_problem(raw: CloudEvent, event_type: str) -> tuple[type[HTTPException], str] | None:
    """What is wrong with `raw` as an event of `event_type` (error class, reason), or None."""
    limit = MAX_PUBSUB_BODY if event_type == PUBSUB_TYPE else MAX_FIRESTORE_BODY
    if _body_size() > limit:
        return RequestEntityTooLarge, f"the body is larger than {limit} bytes"
    if not raw.get("id"):
        return BadRequest, "the CloudEvent id is empty"
    if raw.get("type") != event_type:
        return BadRequest, f"event type {raw.get('type')!r} is not this function's {event_type!r}"
    if event_type.startswith(FIRESTORE_PREFIX):
        return _firestore_problem(raw)
    if event_type == PUBSUB_TYPE:
        return _pubsub_problem(raw)
    return None


def validated[F: Callable[..., None]](function: F) -> F:
    """Wrap a firebase-functions event function so malformed requests are refused (see module).

    Put it outermost, above the firebase-functions decorator, whose trigger it reads.
    """
    endpoint: Any = getattr(function, "__firebase_endpoint__", None)
    if endpoint is None or endpoint.eventTrigger is None:
        raise TypeError(f"{function!r} is not a firebase-functions event function")
    event_type: str = endpoint.eventTrigger["eventType"]

    name = getattr(function, "__name__", "function")

    @functools.wraps(function)
    def checked(raw: CloudEvent) -> None:
        if flask.has_app_context():
            flask.g.event_parsed = True  # failures from here on are the function's own
        problem = event_problem(raw, event_type)
        if problem is not None:
            error, why = problem
            raise error(description=f"{name}: {why}")
        function(raw)

    # firebase-functions types its decorators as returning the handler's type; the function
    # really takes the raw CloudEvent, as `checked` does.
    return cast(F, checked)


def _refusal(status: int, why: str) -> tuple[str, int, dict[str, str]]:
    """Log the one line of a refused request and build its short JSON answer."""
    log_delivery(logging.WARNING, f"refused ({status}): {why}", outcome="refused")
    return json.dumps({"error": why}), status, {"Content-Type": "application/json"}


def refuse_http_error(error: HTTPException) -> tuple[str, int, dict[str, str]]:
    """Flask error handler for every 4xx: one log line, a short answer that echoes nothing.

    functions-framework's own 400 for a request that is not a CloudEvent describes the whole
    request, body included; it is replaced by a one-line reason.
    """
    status = error.code or 400
    why = error.description or error.name
    if why.startswith("Function was defined with FUNCTION_SIGNATURE_TYPE=cloudevent"):
        why = "not a CloudEvent: the id, source, type or specversion attribute is missing"
    return _refusal(status, why)


def refuse_unparseable_request(error: Exception) -> tuple[str, int, dict[str, str]]:
    """Flask error handler for any other exception: a 400 when it was raised while parsing the
    request (functions-framework and the cloudevents library raise assorted errors for bodies
    that are not CloudEvents); the function's own failures are re-raised, so functions-framework
    logs them and answers 500 and the platform retries."""
    if flask.g.get("event_parsed"):
        raise error
    return _refusal(400, f"the request is not a parseable CloudEvent ({type(error).__name__})")


def install_error_handlers(errorhandler: Callable[[type[Exception]], Any]) -> None:
    """Register the refusal handlers with functions-framework's `errorhandler` (main.py)."""
    errorhandler(HTTPException)(refuse_http_error)
    errorhandler(Exception)(refuse_unparseable_request)
