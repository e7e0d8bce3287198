"""`HttpEvent`, one event as the HTTP request the platform sends, and what every builder
shares: the default project, the platform's time format, the binary-mode CloudEvent envelope
with a JSON body."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "DEFAULT_PROJECT",
    "HttpEvent",
    "cloud_event",
    "now_rfc3339",
    "project_or_default",
    "rfc3339",
]

DEFAULT_PROJECT = "demo-test"
"""The project the builders and `firestore_emulator` use when none is given or set (a
`demo-` project: the emulators never reach a real one)."""


@dataclass(frozen=True)
class HttpEvent:
    """One event as an HTTP request: headers and body, ready to POST again and again."""

    id: str
    """The CloudEvent id (a scheduled run: `<job>@<schedule time>`, its dedup identity)."""
    headers: Mapping[str, str]
    """The request's headers: the `ce-*` attributes and `Content-Type` of a CloudEvent."""
    body: bytes
    """The request's body: the event's data (empty for a scheduled run)."""
    description: str = field(default="", compare=False)
    """What the event is, for a test's messages."""

    def with_id(self, event_id: str) -> HttpEvent:
        """The same event under another CloudEvent id (a Pub/Sub message keeps its message id,
        its key, as the emulator's redeliveries do)."""
        return replace(self, id=event_id, headers={**self.headers, "ce-id": event_id})

    def structured(self) -> HttpEvent:
        """The same CloudEvent in structured content mode: one `application/cloudevents+json`
        body with the attributes and the data (`data` for JSON, `data_base64` for anything
        else); `ValueError` for a request that is no CloudEvent (`scheduled_request`)."""
        attributes = {k[3:]: v for k, v in self.headers.items() if k.lower().startswith("ce-")}
        if "id" not in attributes:
            raise ValueError(f"{self.description or self.id} is not a CloudEvent")
        content_type = next(
            (v for k, v in self.headers.items() if k.lower() == "content-type"), None
        )
        envelope: dict[str, Any] = dict(attributes)
        if content_type:
            envelope["datacontenttype"] = content_type
        if content_type == "application/json":
            envelope["data"] = json.loads(self.body) if self.body else None
        else:
            envelope["data_base64"] = base64.b64encode(self.body).decode()
        body = json.dumps(envelope).encode()
        headers = {"Content-Type": "application/cloudevents+json"}
        return replace(self, headers=headers, body=body)


def now_rfc3339() -> str:
    """The current time in RFC 3339 with microseconds, as the platform writes `time`."""
    return rfc3339(datetime.now(UTC))


def rfc3339(moment: datetime) -> str:
    """`moment` in RFC 3339, UTC, with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def project_or_default(project: str | None) -> str:
    """`project`, else GCLOUD_PROJECT, GOOGLE_CLOUD_PROJECT, else `DEFAULT_PROJECT`."""
    return (
        project
        or os.environ.get("GCLOUD_PROJECT")
        or os.environ.get("GOOGLE_CLOUD_PROJECT")
        or DEFAULT_PROJECT
    )


def cloud_event(
    event_type: str,
    source: str,
    data: Any,
    *,
    event_id: str | None,
    subject: str | None = None,
    extensions: Mapping[str, str] | None = None,
    time: str | None = None,
    description: str = "",
) -> HttpEvent:
    """A binary-mode CloudEvent with a JSON body."""
    event_id = event_id or str(uuid.uuid4())
    headers = {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-type": event_type,
        "ce-source": source,
        "ce-time": time or now_rfc3339(),
    }
    if subject is not None:
        headers["ce-subject"] = subject
    headers.update({f"ce-{name}": value for name, value in (extensions or {}).items()})
    headers["Content-Type"] = "application/json"
    return HttpEvent(event_id, headers, json.dumps(data).encode(), description or event_type)
