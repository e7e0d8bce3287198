"""The HTTP boundary: refuse what is not a well-formed event for this function, before any
Firestore record is touched.

The platform (Eventarc) sends well-formed CloudEvents only; anything else that reaches a
function's URL comes from a misconfigured or hostile caller. Such a request gets a 4xx status
and one WARNING log line saying what was wrong (never the payload, never a header's value), no
dedup record is created or changed, and the instance goes on serving.

`validated` first makes the checks common to every event, then looks the trigger's kind up in
`dedup.kinds` and makes that kind's checks (`Kind.check_request`: `dedup.kinds.firestore`,
`dedup.kinds.pubsub`), which end with firebase-functions' own parse, called once; the function
is then called with that parsed event. So whatever the function sees is well formed: a parse
failure is a 400 here, never a 500 retried later. A kind without strict checks of its own
(Storage, Realtime Database, ...) is refused by `validated` at import: `trigger_once` alone
answers 400 what firebase-functions cannot parse.

| problem                                                                 | status |
|-------------------------------------------------------------------------|--------|
| body larger than the function can ever receive (bytes read, even chunked) | 413  |
| not a CloudEvent (functions-framework: no id, no type...)               | 400    |
| CloudEvent body that does not parse as its content type                 | 400    |
| empty id; event type other than the function's trigger                  | 400    |
| `time` missing or not RFC 3339                                          | 400    |
| Firestore: content type other than `application/protobuf`               | 415    |
| Firestore: `location`, `project`, `database`, `namespace`, `document`,  | 400    |
|   `subject` missing or malformed; another database or namespace         |        |
| Firestore: data not a `DocumentEventData`, or lacking the document      | 400    |
|   versions its event type carries (created: new, deleted: old...)       |        |
| Firestore: `document`/`subject` not the document named in the data      | 400    |
| Firestore: document not matching the trigger's pattern: one id per      | 400    |
|   wildcard, no `.`, `..`, `__x__`, the right collection (`functions.ids`) |      |
| Firestore: values firebase-functions cannot decode                      | 400    |
| Pub/Sub: content type other than `application/json` (batch mode too)    | 415    |
| Pub/Sub: `source` not the trigger's topic; no `message`;                | 400    |
|   `subscription` not a non-empty string (`null` included)               |        |
| Pub/Sub: message field Pub/Sub never sends; no `data`; data not base64  | 400    |
| Pub/Sub: `message_id` not a non-empty string; `publish_time` not RFC 3339 | 400  |
| Pub/Sub: `attributes` not a map of strings (`null`; `5`, a map, a list as a value) | 400 |
| anything else firebase-functions fails to parse                         | 400    |

A `document` header that is the data's path percent-encoded, or its UTF-8 bytes read as
Latin-1 (how HTTP headers carry non-ASCII text), is replaced by the path the data names.
Event ids that are valid CloudEvent ids but not valid Firestore document ids (`a/b`, `..`,
2 KB, unicode) are not refused: `dedup.kernel.transitions` maps them to safe record ids.

Answers are `{"error": "<function>: <reason>"}`, at most `MAX_REASON` characters of reason, in
the project's words: no exception type, no echoed value. The Functions emulator's start-up
probe (`GET /__/health`, answered 405) is logged at INFO; every other refusal at WARNING.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import flask
from cloudevents.abstract import CloudEvent
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)

from dedup.kernel.delivery import ENTERED_FLAG, mark_entered
from dedup.kinds import KINDS, Declared, Kind, Malformed, kind_of
from dedup.kinds import firestore as firestore_kind
from dedup.kinds import pubsub as pubsub_kind
from dedup.kinds.base import RFC3339
from dedup.kinds.schedule import SCHEDULE_TIME_HEADER
from dedup.telemetry import log_delivery

MAX_FIRESTORE_BODY = firestore_kind.MAX_BODY
"""A document is at most 1 MiB and an event carries two versions of it, plus a little."""
MAX_PUBSUB_BODY = pubsub_kind.MAX_BODY
"""A message is at most 10 MB, base64 in a JSON envelope makes it 4/3 larger."""
MAX_REQUEST_BODY = max(kind.body_limit for kind in KINDS)
"""The app-wide cap: a body is read up to one byte past it, chunked or not, then refused."""
MAX_REASON = 300
"""Longest reason an answer or a refusal log line carries."""
HEALTH_PROBE = ("GET", "/__/health")
"""The request the Functions emulator sends while a worker starts (answered 405)."""

STATUS_ERRORS: dict[int, type[HTTPException]] = {
    400: BadRequest,
    413: RequestEntityTooLarge,
    415: UnsupportedMediaType,
}
"""The HTTP error each status of a `Malformed` request is answered with."""
logger = logging.getLogger(__name__)


class Trigger(NamedTuple):
    """What a firebase-functions event function was declared for (its `__firebase_endpoint__`),
    and the kind of its events (`dedup.kinds`)."""

    declared: Declared
    kind: Kind

    @property
    def event_type(self) -> str:
        """The event type the function was declared for."""
        return self.declared.event_type

    @property
    def body_limit(self) -> int:
        """The largest body an event of this trigger can have (its kind's)."""
        return self.kind.body_limit


def trigger_of(function: Callable[..., Any]) -> Trigger:
    """The trigger firebase-functions recorded on `function`; `TypeError` for anything else,
    and for a kind with no strict boundary (`Kind.check_request`), at import."""
    endpoint: Any = getattr(function, "__firebase_endpoint__", None)
    if endpoint is None or endpoint.eventTrigger is None:
        raise TypeError(f"{function!r} is not a firebase-functions event function")
    declared = Declared.of(endpoint.eventTrigger)
    kind = kind_of(declared.event_type)
    if kind.check_request is None:
        raise TypeError(
            f"validated has no strict boundary for {kind.name} events ({declared.event_type}): "
            "remove @validated; trigger_once alone answers 400 what firebase-functions cannot "
            "parse (dedup.entrances.answers)"
        )
    return Trigger(declared, kind)


# --- Checks common to every event -----------------------------------------------------------


def _check_common(raw: CloudEvent, trigger: Trigger) -> None:
    size = len(flask.request.get_data()) if flask.has_request_context() else 0
    if size > trigger.body_limit:
        raise Malformed(f"the body is larger than {trigger.body_limit} bytes", 413)
    if not raw.get("id"):
        raise Malformed("the CloudEvent id is empty")
    if raw.get("type") != trigger.event_type:
        raise Malformed(f"the event type is not this function's {trigger.event_type}")
    time = raw.get("time")
    if not isinstance(time, str) or not re.fullmatch(RFC3339, time):
        raise Malformed("the CloudEvent time is missing or not an RFC 3339 timestamp")


# --- The wrapper ----------------------------------------------------------------------------


def parsed_event(raw: CloudEvent, trigger: Trigger) -> Any:
    """`raw` checked and parsed as firebase-functions would for `trigger`, by its kind's
    `check_request`; `Malformed` if it is not a well-formed event of the trigger."""
    _check_common(raw, trigger)
    assert trigger.kind.check_request is not None  # trigger_of refuses such a kind
    return trigger.kind.check_request(raw, trigger.declared)


def validated[F: Callable[..., None]](function: F) -> F:
    """Wrap a firebase-functions event function so malformed requests are refused (see module).

    Put it outermost, above the firebase-functions decorator, whose trigger it reads. The
    wrapped handler (the decorator's `__wrapped__`) is called with the event parsed here, once.
    A function whose kind has no strict boundary is refused here, at import (`trigger_of`).
    """
    trigger = trigger_of(function)
    handler: Any = getattr(function, "__wrapped__", None)
    if handler is None:
        raise TypeError(f"{function!r} does not expose the handler firebase-functions wraps")
    name = getattr(function, "__name__", "function")

    @functools.wraps(function)
    def checked(raw: CloudEvent) -> None:
        mark_entered()  # failures from here on are the function's own
        try:
            event = parsed_event(raw, trigger)
        except Malformed as refused:
            error = STATUS_ERRORS.get(refused.status, BadRequest)
            raise error(description=f"{name}: {refused.why}") from None
        handler(event)

    # firebase-functions types its decorators as returning the handler's type; the function
    # really takes the raw CloudEvent, as `checked` does.
    return cast(F, checked)


# --- Answers --------------------------------------------------------------------------------


def _refusal(
    status: int, why: str, level: int = logging.WARNING
) -> tuple[str, int, dict[str, str]]:
    """Log the one line of a refused request and build its short JSON answer."""
    why = why if len(why) <= MAX_REASON else why[: MAX_REASON - 3] + "..."
    log_delivery(level, f"refused ({status}): {why}", outcome="refused")
    return json.dumps({"error": why}), status, {"Content-Type": "application/json"}


def is_health_probe(status: int) -> bool:
    """The refusal being answered is the emulator's start-up probe (`GET /__/health`, 405),
    which is logged at INFO: it is no one's mistake."""
    return (
        status == 405
        and flask.has_request_context()
        and (flask.request.method, flask.request.path) == HEALTH_PROBE
    )


def refuse_http_error(error: HTTPException) -> tuple[str, int, dict[str, str]]:
    """Flask error handler for every 4xx: one log line, a short answer that echoes nothing.

    functions-framework's own 400 for a request that is not a CloudEvent describes the whole
    request, body included; it is replaced by a one-line reason.
    """
    status = error.code or 400
    why = error.description or error.name
    if why.startswith("Function was defined with FUNCTION_SIGNATURE_TYPE=cloudevent"):
        why = "not a CloudEvent: the id, source, type or specversion attribute is missing"
    level = logging.INFO if is_health_probe(status) else logging.WARNING
    return _refusal(status, why, level)


def refuse_unparseable_request(error: Exception) -> tuple[str, int, dict[str, str]]:
    """Flask error handler for any other exception: a 400 when it was raised while parsing the
    request (functions-framework and the cloudevents library raise assorted errors for bodies
    that are not CloudEvents); the function's own failures, raised once `validated` or the
    `trigger_once` wrapper was entered (`dedup.kernel.delivery.mark_entered`), are re-raised, so
    functions-framework logs them and answers 500 and the platform retries."""
    if flask.g.get(ENTERED_FLAG):
        raise error  # raised once `validated` or the dedup wrapper was entered: the function's
    return _refusal(400, "the request is not a parseable CloudEvent")


def refuse_oversized_body() -> None:
    """Flask `before_request` hook: read the body (at most one byte past `MAX_REQUEST_BODY`,
    whatever Content-Length says or whether it is chunked) and refuse it with 413 when larger.

    Reading here, before functions-framework parses it, makes a truncated JSON body a 413
    rather than a parse error; the body stays cached for the framework.
    """
    if len(flask.request.get_data()) > MAX_REQUEST_BODY:
        raise RequestEntityTooLarge(description=f"the body is larger than {MAX_REQUEST_BODY} bytes")


def install_boundary(errorhandler: Callable[..., Any]) -> None:
    """Register the refusal handlers with functions-framework's `errorhandler` (main.py) and
    cap the body its app reads (`refuse_oversized_body`).

    While functions-framework creates the app for a function, `errorhandler` is that app's own
    `Flask.errorhandler`; anywhere else (deploy-time discovery imports main.py inside another
    Flask app) it is a stand-in, and only the handlers are registered with it.
    """
    app = getattr(errorhandler, "__self__", None)
    if isinstance(app, flask.Flask):
        app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BODY + 1  # werkzeug stops reading there
        app.before_request(refuse_oversized_body)
    errorhandler(HTTPException)(refuse_http_error)
    errorhandler(Exception)(refuse_unparseable_request)


def scheduled(function: Callable[..., Any]) -> Callable[..., Any]:
    """Refuse a request to a scheduled function that carries no usable
    `X-CloudScheduler-ScheduleTime` (missing, or not an RFC 3339 time) with a 400 before
    firebase-functions' schedule wrapper runs, which would answer 500 (it answers every
    exception so). Nothing runs and no record is written either way
    (`dedup.kinds.describe`); the 400 comes with one ERROR line naming the header, the 4xx
    refusal line of this module, and Cloud Scheduler's retries up to the job's `retryCount`.

    Put it outermost, above `scheduler_fn.on_schedule`; the endpoint and the dedup mark are
    carried up (`functools.wraps`).
    """

    @functools.wraps(function)
    def guarded(request: flask.Request) -> Any:
        raw = request.headers.get(SCHEDULE_TIME_HEADER)
        if raw is None or not re.fullmatch(RFC3339, raw):
            why = (
                f"a scheduled run needs the {SCHEDULE_TIME_HEADER} header (RFC 3339), which "
                f"this request {'lacks' if raw is None else 'has malformed'}: nothing runs"
            )
            logger.error("%s: %s", function.__name__, why)
            raise BadRequest(description=why)
        return function(request)

    return guarded
