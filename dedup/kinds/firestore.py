"""Firestore document events (`firestore_fn.on_document_*`, their `*_with_auth_context`
variants, and `google.cloud.firestore.document.v1.*` CloudEvents): everything the project
knows about them.

* **Reading.** The key is the CloudEvent `id`; the subject and `document_path` are the document
  path (`users/u1`); the payload is the document path plus the before/after update times and
  data (an SDK event), or the raw protobuf data (a raw CloudEvent); the database is the event's
  `database` attribute.
* **Boundary** (`check_request`, for the template's `validated`): a Firestore event is
  `application/protobuf` `DocumentEventData` naming one document, in the trigger's database and
  namespace, matching its pattern with Firestore-legal ids, with the versions its type
  carries (created: new, deleted: old, updated: both); then firebase-functions' own parse.
* **Deploy.** Eventarc filters (`database`, `namespace`, the `document` path pattern), in the
  database's location.
* **Retry.** Pub/Sub push redelivers any non-2xx for the retry window.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import unquote

from dedup.kinds.base import (
    Declared,
    Deploy,
    EventInfo,
    Kind,
    Malformed,
    aware,
    canonical,
    media_type,
    own_subject,
    parsed_by_sdk,
    path_of_document,
    raw_info,
    sdk_reader,
    text,
)
from dedup.platform.document_ids import id_problem

TYPES = "google.cloud.firestore.document.v1."
MAX_BODY = 3 * 1024 * 1024
"""A document is at most 1 MiB and an event carries two versions of it, plus a little."""
PROJECT_ID = r"[a-z0-9][a-z0-9.:-]{0,99}"
LOCATION = r"[a-z0-9][a-z0-9-]{0,62}"
DOCUMENT_NAME = r"projects/([^/]+)/databases/([^/]+)/documents/(.+)"
VERSIONS_REQUIRED = {
    "created": ("value",),
    "deleted": ("old_value",),
    "updated": ("value", "old_value"),
}
"""Document versions each Firestore event type must carry (`written`: at least one)."""


# --- Reading --------------------------------------------------------------------------------


def read_event(event: Any) -> EventInfo:
    """A `firestore_fn.Event`: its id, the document and both its versions (an SDK event of
    these types that names no document is read as any other CloudEvent)."""
    from firebase_functions import core

    if not isinstance(getattr(event, "document", None), str):
        return sdk_reader(own_subject)(event)

    data = event.data
    if isinstance(data, core.Change):
        rendered = {"before": _snapshot(data.before), "after": _snapshot(data.after)}
    else:
        rendered = {"value": _snapshot(data)}
    rendered["document"] = event.document
    return EventInfo(
        event_id=event.id,
        payload=canonical(rendered),
        event_time=aware(event.time),
        document_path=event.document,
        subject=event.document,
        database=getattr(event, "database", None) or None,
        source=text(getattr(event, "source", None)),
    )


def read_cloud_event(attributes: Mapping[str, Any], data: Any) -> EventInfo:
    """A raw Firestore CloudEvent: its id, its data as sent, the document its `document`
    attribute (or subject `documents/<path>`) names."""
    document_path = path_of_document(attributes)
    return raw_info(attributes, data, document_path=document_path, subject=document_path)


def _snapshot(snapshot: Any) -> Any:
    if snapshot is None or not getattr(snapshot, "exists", False):
        return None
    return {"updateTime": snapshot.update_time, "data": snapshot.to_dict()}


# --- Boundary -------------------------------------------------------------------------------


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


def document_pattern(declared: Declared) -> str:
    """The document path pattern a Firestore trigger was declared with (`posts/{postId}`)."""
    return declared.path_patterns.get("document") or declared.filters["document"]


def _same_path(header: str, path: str) -> bool:
    """True when a header value is `path` as such, percent-encoded, or UTF-8 read as Latin-1."""
    if header == path or unquote(header) == path:
        return True
    try:
        return header.encode("latin-1").decode("utf-8") == path
    except UnicodeError:
        return False


def _document_data(raw: Any, declared: Declared) -> Any:
    from google.events.cloud.firestore import DocumentEventData

    if media_type(raw) != "application/protobuf" or raw.get("datacontenttype") is None:
        raise Malformed("Firestore events are read as application/protobuf only", 415)
    data = raw.get_data()
    if not isinstance(data, bytes):
        raise Malformed("the data is not a protobuf DocumentEventData")
    try:
        decoded = DocumentEventData.deserialize(data)
    except Exception:  # protobuf raises DecodeError and friends
        raise Malformed("the data is not a protobuf DocumentEventData") from None
    change = declared.event_type.removeprefix(TYPES).split(".")[0]
    present = [v for v in ("value", "old_value") if getattr(decoded, v)]  # as firebase-functions
    if not present or not set(VERSIONS_REQUIRED.get(change, ())) <= set(present):
        raise Malformed(f"the data lacks a document version a {change} event carries")
    return decoded


def check_request(raw: Any, declared: Declared) -> Any:
    """`raw` checked as a Firestore event of `declared` (`Malformed` if not), then parsed by
    firebase-functions. A `document` attribute that is the data's path percent-encoded, or its
    UTF-8 read as Latin-1 (how HTTP headers carry non-ASCII text), is replaced by that path."""
    from dedup.platform.firebase_app import default_app
    from dedup.platform.firebase_internals import parse_firestore_event

    for name in ("location", "project", "database", "namespace", "document", "subject"):
        if not isinstance(raw.get(name), str) or not raw.get(name):
            raise Malformed(f"the Firestore event has no `{name}` attribute")
    if not re.fullmatch(PROJECT_ID, raw["project"]) or not re.fullmatch(LOCATION, raw["location"]):
        raise Malformed("the Firestore event's project or location is malformed")
    database = declared.filters.get("database", "(default)")
    namespace = declared.filters.get("namespace", "(default)")
    if (raw["database"], raw["namespace"]) != (database, namespace):
        raise Malformed("the event is for another database or namespace than this function's")
    data = _document_data(raw, declared)
    paths = set()
    for version in ("value", "old_value"):
        if getattr(data, version):
            match = re.fullmatch(DOCUMENT_NAME, getattr(data, version).name)
            if match is None or match.group(1, 2) != (raw["project"], raw["database"]):
                raise Malformed("a document version in the data is not named in this database")
            paths.add(match.group(3))
    if len(paths) != 1:
        raise Malformed("the document versions in the data name different documents")
    [path] = paths
    if not _same_path(raw["document"], path):
        raise Malformed("the `document` attribute is not the document named in the data")
    subject = raw["subject"]
    if not subject.startswith("documents/") or not _same_path(subject[10:], path):
        raise Malformed("the `subject` attribute is not the document named in the data")
    pattern = document_pattern(declared)
    if (why := document_problem(path, pattern)) is not None:
        raise Malformed(why)
    # What firebase-functions builds the snapshots' references from; from_http events are
    # `cloudevents.http.CloudEvent`, which can be assigned to.
    cast(Any, raw)["document"] = path
    default_app()  # before the parser's own unguarded check; a failure is not the request's
    return parsed_by_sdk(lambda: parse_firestore_event(raw, declared.event_type, pattern))


KIND = Kind(
    "firestore",
    (TYPES,),
    read_event,
    read_cloud_event,
    check_request=check_request,
    body_limit=MAX_BODY,
    deploy=Deploy(location="database"),
)
