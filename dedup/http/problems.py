"""Refusals as RFC 9457 problem documents (`application/problem+json`): the `Problem` value
every HTTP refusal of `dedup.http` is rendered from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import flask

PROBLEM_JSON = "application/problem+json"
"""Content type of every refusal (RFC 9457)."""

PROBLEM_TYPE = "urn:exactly-once:problem:"
"""Prefix of each refusal's `type`; the slugs are listed in docs/http.md."""

DEFAULT_RETRY_AFTER_SECONDS = 1
"""`Retry-After` of a 409 (another request with the key is running) and of a 503."""


@dataclass(frozen=True)
class Problem:
    """A refusal, rendered as `application/problem+json` (RFC 9457)."""

    status: int
    slug: str
    """The end of `type` (`urn:exactly-once:problem:<slug>`), one per kind of refusal."""
    title: str
    detail: str
    headers: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    """More members of the problem object (e.g. `originalStatus`)."""

    def response(self) -> flask.Response:
        """The HTTP answer."""
        body = {
            "type": PROBLEM_TYPE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }
        return flask.Response(
            json.dumps(body), self.status, headers=dict(self.headers), content_type=PROBLEM_JSON
        )


def retry_after(seconds: int) -> dict[str, str]:
    """The `Retry-After` header of an answer that asks to come back in `seconds`."""
    return {"Retry-After": str(seconds)}
