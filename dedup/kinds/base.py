"""What every kind of event is made of (`Kind`), what reading one gives (`EventInfo`), and the
readers and renderings the kinds share.

A kind's module (`dedup.kinds.firestore`, `.pubsub`, `.schedule`, `.cloud_events`) builds its
`Kind` from these parts; nothing here knows a particular kind. Nothing heavy is imported at
module level: the CLI and the deploy tool read the table without loading firebase-functions.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

Retry = Literal["event", "schedule"]
"""How a kind is retried once a delivery gives its lease back: `event`, the push subscription
redelivers (deployed with `retry: true` / `--retry`) for the retry window, whatever non-2xx
status it got; `schedule`, Cloud Scheduler retries the run up to the job's `retryCount`
(deployed with at least 1)."""

Location = Literal["region", "database", "bucket", "global"]
"""Where a kind's trigger is deployed: the function's region; the Firestore database's
location; the Cloud Storage bucket's location; `global` (Firebase Alerts)."""

DEFAULT_BODY_LIMIT = 3 * 1024 * 1024
"""The largest body of an event whose kind names no limit of its own."""

RFC3339 = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})"
"""An RFC 3339 timestamp, as CloudEvents and Pub/Sub write them. Like every pattern of the
package, kept as text for `re.fullmatch`, whose cache compiles it on first use (an instance's
import compiles none it does not use)."""


class EventInfo(NamedTuple):
    """What the deduplicator needs from one event."""

    event_id: str | None
    """The id deliveries of one event share (None/empty is rejected later, loudly)."""
    payload: bytes
    """Canonical rendering of the payload; its sha256 is the fingerprint."""
    event_time: datetime | None
    """When the event happened (timezone-aware), if the event says."""
    document_path: str | None
    """Path of the Firestore document the event is about (`users/u1`), if any."""
    subject: str | None = None
    """What the event is about, recorded for operators (`dedup list --subject`): the one its
    kind gives (docs/usage.md has the table), or None."""
    database: str | None = None
    """The Firestore database the event came from (its `database` attribute), if any: the
    records follow it unless DEDUP_DATABASE is set (docs/named-databases.md)."""
    source: str | None = None
    """The CloudEvent `source` (which service and resource sent it), kept on the record; for a
    scheduled run, the job (`jobs/<job>`)."""


class Malformed(Exception):
    """A request that is not a well-formed event of its kind: answered `status` (a 4xx) with
    `why`, in the project's words (no echoed value), before any record is touched."""

    def __init__(self, why: str, status: int = 400) -> None:
        super().__init__(why)
        self.why, self.status = why, status


class Declared(NamedTuple):
    """What a firebase-functions event function was declared for (its endpoint's
    `eventTrigger`): the event type, the filters and the path patterns."""

    event_type: str
    filters: Mapping[str, str]
    path_patterns: Mapping[str, str]

    @classmethod
    def of(cls, event_trigger: Mapping[str, Any]) -> Declared:
        """From an endpoint's `eventTrigger` (the SDK's manifest entry)."""
        return cls(
            event_type=str(event_trigger["eventType"]),
            filters=dict(event_trigger.get("eventFilters") or {}),
            path_patterns=dict(event_trigger.get("eventFilterPathPatterns") or {}),
        )


def filter_flags(trigger: Mapping[str, Any]) -> list[str]:
    """gcloud's `--trigger-event-filters` for an Eventarc trigger: its type, each filter and
    each path pattern, as firebase-tools gives them to Eventarc."""
    flags = [f"--trigger-event-filters=type={trigger['eventType']}"]
    for key, value in sorted((trigger.get("eventFilters") or {}).items()):
        flags.append(f"--trigger-event-filters={key}={value}")
    for key, value in sorted((trigger.get("eventFilterPathPatterns") or {}).items()):
        flags.append(f"--trigger-event-filters-path-pattern={key}={value}")
    return flags


class Deploy(NamedTuple):
    """How both deploy paths deploy a function of a kind."""

    location: Location = "region"
    """Where its trigger sits (`Location`)."""
    gcloud_trigger: Callable[[Mapping[str, Any]], list[str]] = filter_flags
    """The gcloud flags that name the trigger, from the manifest's `eventTrigger` (the tool adds
    `--retry`, the trigger identity and `--trigger-location`)."""
    service_agent: tuple[str, str] | None = None
    """(the Google service agent publishing these events, `{number}` for the project number;
    the role it needs), granted by `make bootstrap`."""
    gcloud_location: bool = True
    """Whether gcloud is given `--trigger-location` (a `--trigger-topic` trigger takes none)."""


class Kind(NamedTuple):
    """Everything the project knows about one family of events (docs/usage.md, "Adding a
    kind of event")."""

    name: str
    """A short name (`storage`), as docs/usage.md's table gives it."""
    types: tuple[str, ...]
    """The CloudEvent types of the family; one ending in `.` is a prefix."""
    read_event: Callable[[Any], EventInfo]
    """The event object a firebase-functions decorator passes -> what dedup records."""
    read_cloud_event: Callable[[Mapping[str, Any], Any], EventInfo]
    """A raw CloudEvent (functions-framework `@cloud_event`): (attributes, data) -> the same."""
    check_request: Callable[[Any, Declared], Any] | None = None
    """The template's strict boundary (`functions.boundary.validated`): checks a raw CloudEvent
    against the declared trigger (raising `Malformed`) and returns the event firebase-functions
    parses from it. None: `validated` refuses the function at import; `trigger_once` alone
    still answers what the SDK cannot parse 400 (`dedup.entrances.answers`)."""
    body_limit: int = DEFAULT_BODY_LIMIT
    """The largest body one of its events can have, in bytes."""
    retry: Retry = "event"
    """How the platform retries it (`Retry`)."""
    apis: tuple[str, ...] = ()
    """The Google APIs whose events these are, which a project enables before deploying a
    function of the kind (besides Eventarc and Pub/Sub, which every event function needs)."""
    deploy: Deploy = Deploy()
    """How it is deployed (`Deploy`)."""

    def has_type(self, event_type: str) -> bool:
        """True when `event_type` is one of this kind's (prefix rows included)."""
        return any(
            event_type == known or (known.endswith(".") and event_type.startswith(known))
            for known in self.types
        )


def parsed_by_sdk(parse: Callable[[], Any]) -> Any:
    """`parse()`'s result: firebase-functions' own parse of a raw event, once checked. Any
    failure of it is `Malformed` (values the SDK cannot decode) but a credentials error, which
    is the instance's problem and propagates."""
    from google.auth.exceptions import GoogleAuthError

    try:
        return parse()
    except GoogleAuthError:
        raise
    except Exception:
        raise Malformed("firebase-functions cannot read this event (malformed values)") from None


# --- Reading the CloudEvent kinds -----------------------------------------------------------

Subject = Callable[[str | None, Any], str | None]
"""(the CloudEvent subject, the event's data as plain values) -> the subject to record."""


def own_subject(subject: str | None, data: Any) -> str | None:
    """The CloudEvent's own subject."""
    return subject or None


def sdk_reader(subject: Subject) -> Callable[[Any], EventInfo]:
    """The reader of a firebase-functions `CloudEvent` whose id is the key and whose data
    (dataclasses as their fields) is the payload, recording the subject `subject` gives."""

    def read(event: Any) -> EventInfo:
        plain = plain_data(event.data)
        return EventInfo(
            event_id=event.id,
            payload=plain if isinstance(plain, bytes) else canonical(plain),
            event_time=aware(event.time),
            document_path=None,
            subject=subject(event.subject, plain),
            source=text(event.source),
        )

    return read


def cloud_event_reader(subject: Subject) -> Callable[[Mapping[str, Any], Any], EventInfo]:
    """The reader of a raw CloudEvent keyed by its `id`, the data its payload (bytes as they
    are), the document it names (a `document` attribute, or a subject `documents/<path>`) its
    subject, else the one `subject` gives."""

    def read(attributes: Mapping[str, Any], data: Any) -> EventInfo:
        document_path = path_of_document(attributes)
        subject_of = document_path
        if subject_of is None:
            raw_subject = attributes.get("subject")
            subject_of = subject(raw_subject if isinstance(raw_subject, str) else None, data)
        return raw_info(attributes, data, document_path=document_path, subject=subject_of)

    return read


THE_ID: Any = object()
"""`raw_info`'s default key: the CloudEvent's own `id`."""


def raw_info(
    attributes: Mapping[str, Any],
    data: Any,
    *,
    document_path: str | None,
    subject: str | None,
    event_id: Any = THE_ID,
    payload: bytes | None = None,
) -> EventInfo:
    """The `EventInfo` of a raw CloudEvent: its `id` (unless `event_id` is given, None
    included), its data rendered (unless `payload`), its time, database and source."""
    event_id = attributes.get("id") if event_id is THE_ID else event_id
    if payload is None:
        payload = bytes(data) if isinstance(data, bytes | bytearray) else canonical(data)
    return EventInfo(
        event_id=None if event_id is None else str(event_id),
        payload=payload,
        event_time=parse_time(attributes.get("time")),
        document_path=document_path,
        subject=subject,
        database=text(attributes.get("database")),
        source=text(attributes.get("source")),
    )


def path_of_document(attributes: Mapping[str, Any]) -> str | None:
    """The document a raw CloudEvent names: its `document` attribute, or a subject
    `documents/<path>`."""
    document = attributes.get("document")
    if isinstance(document, str) and document:
        return document
    subject = attributes.get("subject")
    if isinstance(subject, str) and subject.startswith("documents/"):
        return subject.removeprefix("documents/")
    return None


def field(data: Any, name: str) -> str | None:
    """A non-empty string field of `data` (a mapping or an object), else None."""
    value = data.get(name) if isinstance(data, Mapping) else getattr(data, name, None)
    return value if isinstance(value, str) and value else None


def text(value: object) -> str | None:
    """A string attribute as recorded (None when absent, empty or not a string)."""
    return value if isinstance(value, str) and value else None


def plain_data(data: Any) -> Any:
    """`data` with every dataclass (the SDK's event data types) turned into its fields."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return dataclasses.asdict(data)
    if isinstance(data, bytearray):
        return bytes(data)
    return data


def media_type(raw: Any) -> str:
    """A raw CloudEvent's content type, lower case, without parameters (JSON when unset)."""
    content_type = raw.get("datacontenttype") or "application/json"  # the CloudEvents default
    return str(content_type).split(";", 1)[0].strip().lower()


# --- Canonical renderings -------------------------------------------------------------------


def canonical(value: Any) -> bytes:
    """Sorted-key compact JSON (UTF-8) of `value`: the rendering a fingerprint is taken of. A
    lone surrogate (a JSON `"\\ud800"` escape decoded) is kept as its 3 bytes (`surrogatepass`):
    the event still has a fingerprint, instead of failing on every delivery."""
    rendered = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
    )
    return rendered.encode("utf-8", "surrogatepass")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    path = getattr(value, "path", None)  # DocumentReference
    if isinstance(path, str):
        return {"ref": path}
    if hasattr(value, "latitude") and hasattr(value, "longitude"):  # GeoPoint
        return {"lat": value.latitude, "lng": value.longitude}
    if hasattr(value, "to_map_value"):  # Vector
        return list(value)
    return repr(value)


def aware(value: datetime | None) -> datetime | None:
    """`value` with UTC as its zone when it has none."""
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def parse_time(value: Any) -> datetime | None:
    """A datetime, or an ISO 8601 string parsed, timezone-aware; None for anything else."""
    if isinstance(value, datetime):
        return aware(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        return aware(datetime.fromisoformat(value))
    except ValueError:
        return None
