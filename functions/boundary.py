"""The HTTP boundary: refuse what is not a well-formed event for this function, before any
Firestore record is touched.

The platform (Eventarc) sends well-formed CloudEvents only; anything else that reaches a
function's URL comes from a misconfigured or hostile caller. Such a request gets a 4xx status
and one WARNING log line saying what was wrong (never the payload, never a header's value), no
dedup record is created or changed, and the instance goes on serving.

`validated` first makes the cheap checks below, then parses the event exactly as
firebase-functions does (its own parser, called once) and checks the parsed event against the
function's trigger; the function is then called with that parsed event. So whatever the
function sees is well formed: a parse failure is a 400 here, never a 500 retried later.

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
2 KB, unicode) are not refused: `dedup.keys` maps them to safe record ids.

Answers are `{"error": "<function>: <reason>"}`, at most `MAX_REASON` characters of reason, in
the project's words: no exception type, no echoed value. The Functions emulator's start-up
probe (`GET /__/health`, answered 405) is logged at INFO; every other refusal at WARNING.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast
from urllib.parse import unquote

import flask
from cloudevents.abstract import CloudEvent
from firebase_functions import firestore_fn, pubsub_fn
from firebase_functions.private.path_pattern import PathPattern
from google.auth.exceptions import GoogleAuthError
from google.events.cloud.firestore import DocumentEventData
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)

from dedup.answers import ENTERED_FLAG, mark_entered
from dedup.events import SCHEDULE_TIME_HEADER
from dedup.firebase_app import default_app
from dedup.logs import log_delivery
from functions.ids import id_problem

FIRESTORE_PREFIX = "google.cloud.firestore.document.v1."
PUBSUB_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
MAX_FIRESTORE_BODY = 3 * 1024 * 1024
"""A document is at most 1 MiB and an event carries two versions of it, plus a little."""
MAX_PUBSUB_BODY = 14 * 1024 * 1024
"""A message is at most 10 MB, base64 in a JSON envelope makes it 4/3 larger."""
MAX_REQUEST_BODY = max(MAX_FIRESTORE_BODY, MAX_PUBSUB_BODY)
"""The app-wide cap: a body is read up to one byte past it, chunked or not, then refused."""
MAX_REASON = 300
"""Longest reason an answer or a refusal log line carries."""
HEALTH_PROBE = ("GET", "/__/health")
"""The request the Functions emulator sends while a worker starts (answered 405)."""

RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})")
PROJECT_ID = re.compile(r"[a-z0-9][a-z0-9.:-]{0,99}")
LOCATION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
DOCUMENT_NAME = re.compile(r"projects/([^/]+)/databases/([^/]+)/documents/(.+)")
PUBSUB_SOURCE = re.compile(r"//pubsub\.googleapis\.com/projects/([^/]+)/topics/([^/]+)")
MESSAGE_FIELDS = frozenset(
    {"data", "attributes", "messageId", "message_id", "publishTime", "publish_time", "orderingKey"}
)
"""What a push message carries; firebase-functions fails on any other field."""
VERSIONS_REQUIRED = {
    "created": ("value",),
    "deleted": ("old_value",),
    "updated": ("value", "old_value"),
}
"""Document versions each Firestore event type must carry (`written`: at least one)."""

Refusal = tuple[type[HTTPException], str]
logger = logging.getLogger(__name__)


class _Refused(Exception):
    """Raised inside the checks: the request is refused with `error` and `why`."""

    def __init__(self, error: type[HTTPException], why: str) -> None:
        super().__init__(why)
        self.error, self.why = error, why


def _refuse(why: str, error: type[HTTPException] = BadRequest) -> _Refused:
    return _Refused(error, why)


# --- The function's trigger -----------------------------------------------------------------


class Trigger(NamedTuple):
    """What a firebase-functions event function was declared for (its `__firebase_endpoint__`)."""

    event_type: str
    document_pattern: str | None = None
    """Firestore: the document path pattern (`posts/{postId}`)."""
    database: str = "(default)"
    namespace: str = "(default)"
    topic: str | None = None
    """Pub/Sub: the topic id."""

    @property
    def body_limit(self) -> int:
        """The largest body an event of this trigger can have."""
        return MAX_PUBSUB_BODY if self.event_type == PUBSUB_TYPE else MAX_FIRESTORE_BODY


def trigger_of(function: Callable[..., Any]) -> Trigger:
    """The trigger firebase-functions recorded on `function`; `TypeError` for anything else."""
    endpoint: Any = getattr(function, "__firebase_endpoint__", None)
    if endpoint is None or endpoint.eventTrigger is None:
        raise TypeError(f"{function!r} is not a firebase-functions event function")
    trigger = endpoint.eventTrigger
    filters = dict(trigger.get("eventFilters") or {})
    patterns = dict(trigger.get("eventFilterPathPatterns") or {})
    return Trigger(
        event_type=trigger["eventType"],
        document_pattern=patterns.get("document") or filters.get("document"),
        database=filters.get("database", "(default)"),
        namespace=filters.get("namespace", "(default)"),
        topic=filters.get("topic"),
    )


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Eventarc path pattern -> regex: `{x}`/`*` one segment, `{x=**}`/`**` one or more."""
    parts = []
    for segment in pattern.strip("/").split("/"):
        if "**" in segment:
            parts.append(r"[^/]+(?:/[^/]+)*")
        elif segment == "*" or re.fullmatch(r"\{[^/{}=]+(?:=\*)?\}", segment):
            parts.append(r"[^/]+")
        else:
            parts.append(re.escape(segment))
    return re.compile("/".join(parts))


def document_problem(document: str, pattern: str) -> str | None:
    """Why `document` is not a document path matching `pattern`, or None when it is."""
    segments = document.split("/")
    if len(segments) % 2:
        return "the document path has an odd number of segments"
    for segment in segments:
        if (why := id_problem(segment)) is not None:
            return f"a segment of the document path {why}"
    if not _pattern_regex(pattern).fullmatch(document):
        return f"the document is not one of this function's ({pattern})"
    return None


# --- Checks common to every event -----------------------------------------------------------


def _media_type(raw: CloudEvent) -> str:
    content_type = raw.get("datacontenttype") or "application/json"  # the CloudEvents default
    return str(content_type).split(";", 1)[0].strip().lower()


def _check_common(raw: CloudEvent, trigger: Trigger) -> None:
    size = len(flask.request.get_data()) if flask.has_request_context() else 0
    if size > trigger.body_limit:
        raise _refuse(f"the body is larger than {trigger.body_limit} bytes", RequestEntityTooLarge)
    if not raw.get("id"):
        raise _refuse("the CloudEvent id is empty")
    if raw.get("type") != trigger.event_type:
        raise _refuse(f"the event type is not this function's {trigger.event_type}")
    time = raw.get("time")
    if not isinstance(time, str) or not RFC3339.fullmatch(time):
        raise _refuse("the CloudEvent time is missing or not an RFC 3339 timestamp")


# --- Firestore ------------------------------------------------------------------------------


def _same_path(header: str, path: str) -> bool:
    """True when a header value is `path` as such, percent-encoded, or UTF-8 read as Latin-1."""
    if header == path or unquote(header) == path:
        return True
    try:
        return header.encode("latin-1").decode("utf-8") == path
    except UnicodeError:
        return False


def _document_data(raw: CloudEvent, trigger: Trigger) -> DocumentEventData:
    if _media_type(raw) != "application/protobuf" or raw.get("datacontenttype") is None:
        raise _refuse(
            "Firestore events are read as application/protobuf only", UnsupportedMediaType
        )
    data = raw.get_data()
    if not isinstance(data, bytes):
        raise _refuse("the data is not a protobuf DocumentEventData")
    try:
        decoded = DocumentEventData.deserialize(data)
    except Exception:  # protobuf raises DecodeError and friends
        raise _refuse("the data is not a protobuf DocumentEventData") from None
    change = trigger.event_type.removeprefix(FIRESTORE_PREFIX).split(".")[0]
    present = [v for v in ("value", "old_value") if getattr(decoded, v)]  # as firebase-functions
    if not present or not set(VERSIONS_REQUIRED.get(change, ())) <= set(present):
        raise _refuse(f"the data lacks a document version a {change} event carries")
    return decoded


def _check_firestore(raw: CloudEvent, trigger: Trigger) -> None:
    for name in ("location", "project", "database", "namespace", "document", "subject"):
        if not isinstance(raw.get(name), str) or not raw.get(name):
            raise _refuse(f"the Firestore event has no `{name}` attribute")
    if not PROJECT_ID.fullmatch(raw["project"]) or not LOCATION.fullmatch(raw["location"]):
        raise _refuse("the Firestore event's project or location is malformed")
    if (raw["database"], raw["namespace"]) != (trigger.database, trigger.namespace):
        raise _refuse("the event is for another database or namespace than this function's")
    data = _document_data(raw, trigger)
    paths = set()
    for version in ("value", "old_value"):
        if getattr(data, version):
            match = DOCUMENT_NAME.fullmatch(getattr(data, version).name)
            if match is None or match.group(1, 2) != (raw["project"], raw["database"]):
                raise _refuse("a document version in the data is not named in this database")
            paths.add(match.group(3))
    if len(paths) != 1:
        raise _refuse("the document versions in the data name different documents")
    [path] = paths
    if not _same_path(raw["document"], path):
        raise _refuse("the `document` attribute is not the document named in the data")
    subject = raw["subject"]
    if not subject.startswith("documents/") or not _same_path(subject[10:], path):
        raise _refuse("the `subject` attribute is not the document named in the data")
    assert trigger.document_pattern is not None
    if (why := document_problem(path, trigger.document_pattern)) is not None:
        raise _refuse(why)
    # What firebase-functions builds the snapshots' references from; from_http events are
    # `cloudevents.http.CloudEvent`, which can be assigned to.
    cast(Any, raw)["document"] = path


def _parse_firestore(raw: CloudEvent, trigger: Trigger) -> Any:
    """firebase-functions' own parse of a Firestore event (the event its handler receives)."""
    assert trigger.document_pattern is not None
    pattern = PathPattern(trigger.document_pattern)
    parsed: list[Any] = []
    firestore_fn._firestore_endpoint_handler(parsed.append, trigger.event_type, pattern, raw)  # type: ignore[arg-type]
    return parsed[0]


# --- Pub/Sub --------------------------------------------------------------------------------


def _check_pubsub(raw: CloudEvent, trigger: Trigger) -> None:
    if _media_type(raw) != "application/json":
        raise _refuse("Pub/Sub events are read as application/json only", UnsupportedMediaType)
    source = PUBSUB_SOURCE.fullmatch(str(raw.get("source")))
    if source is None or source.group(2) != trigger.topic:
        raise _refuse(f"the event's source is not this function's topic {trigger.topic}")
    data = raw.get_data()
    message = data.get("message") if isinstance(data, Mapping) else None
    if not isinstance(message, Mapping):
        raise _refuse("the Pub/Sub event has no `message` object")
    assert isinstance(data, Mapping)
    subscription = data.get("subscription")
    if not isinstance(subscription, str) or not subscription:
        raise _refuse("the Pub/Sub event's subscription is not a non-empty string")
    if not set(message) <= MESSAGE_FIELDS:
        raise _refuse("the Pub/Sub message has a field Pub/Sub does not send")
    message_id = message.get("message_id")
    if not isinstance(message_id, str) or not message_id:
        raise _refuse("the Pub/Sub message_id is not a non-empty string")
    if message.get("messageId", message_id) != message_id:
        raise _refuse("the Pub/Sub messageId and message_id differ")
    publish_time = message.get("publish_time")
    if not isinstance(publish_time, str) or not RFC3339.fullmatch(publish_time):
        raise _refuse("the Pub/Sub publish_time is missing or not an RFC 3339 timestamp")
    if not isinstance(message.get("orderingKey", ""), str):
        raise _refuse("the Pub/Sub orderingKey is not a string")
    attributes = message.get("attributes", {})
    if not isinstance(attributes, Mapping) or not all(
        isinstance(v, str) for v in attributes.values()
    ):
        raise _refuse("the Pub/Sub attributes are not a map of strings")
    if "data" not in message or not isinstance(message["data"], str):
        raise _refuse("the Pub/Sub message has no data string")
    try:
        base64.b64decode(message["data"], validate=True)
    except (binascii.Error, ValueError):
        raise _refuse("the Pub/Sub message data is not base64") from None


def _parse_pubsub(raw: CloudEvent, trigger: Trigger) -> Any:
    """firebase-functions' own parse of a Pub/Sub event (it rewrites the raw data in place, so
    it runs once, here)."""
    parsed: list[Any] = []
    pubsub_fn._message_handler(parsed.append, raw)  # type: ignore[arg-type]
    return parsed[0]


# --- The wrapper ----------------------------------------------------------------------------


def parsed_event(raw: CloudEvent, trigger: Trigger) -> Any:
    """`raw` checked and parsed as firebase-functions would for `trigger`; `_Refused` if not."""
    _check_common(raw, trigger)
    if trigger.event_type.startswith(FIRESTORE_PREFIX):
        _check_firestore(raw, trigger)
        default_app()  # before the parser's own unguarded check; a failure is not the request's
        parse = _parse_firestore
    elif trigger.event_type == PUBSUB_TYPE:
        _check_pubsub(raw, trigger)
        parse = _parse_pubsub
    else:
        raise TypeError(f"validated does not know how to parse {trigger.event_type} events")
    try:
        return parse(raw, trigger)
    except GoogleAuthError:
        raise  # credentials: the instance's problem, not the request's
    except Exception:
        raise _refuse("firebase-functions cannot read this event (malformed values)") from None


def validated[F: Callable[..., None]](function: F) -> F:
    """Wrap a firebase-functions event function so malformed requests are refused (see module).

    Put it outermost, above the firebase-functions decorator, whose trigger it reads. The
    wrapped handler (the decorator's `__wrapped__`) is called with the event parsed here, once.
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
        except _Refused as refused:
            raise refused.error(description=f"{name}: {refused.why}") from None
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
    `trigger_once` wrapper was entered (`dedup.answers.mark_entered`), are re-raised, so
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
    exception so). Nothing runs and no record is written either way (`dedup.events`); the 400
    comes with one ERROR line naming the header, the 4xx refusal line of this module, and
    Cloud Scheduler's retries up to the job's `retryCount`.

    Put it outermost, above `scheduler_fn.on_schedule`; the endpoint and the dedup mark are
    carried up (`functools.wraps`).
    """

    @functools.wraps(function)
    def guarded(request: flask.Request) -> Any:
        raw = request.headers.get(SCHEDULE_TIME_HEADER)
        if raw is None or not RFC3339.fullmatch(raw):
            why = (
                f"a scheduled run needs the {SCHEDULE_TIME_HEADER} header (RFC 3339), which "
                f"this request {'lacks' if raw is None else 'has malformed'}: nothing runs"
            )
            logger.error("%s: %s", function.__name__, why)
            raise BadRequest(description=why)
        return function(request)

    return guarded
