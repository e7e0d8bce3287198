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


def problem_response(
    status: int,
    slug: str,
    title: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> flask.Response:
    """An RFC 9457 problem answer (`application/problem+json`) for a handler to return:
    `{"type": "urn:exactly-once:problem:<slug>", "title", "status", "detail", **extra}` with
    `status` and `headers`. Returned by an `idempotent_http` handler with a status below 500,
    it is stored and replayed like any other answer."""
    return Problem(status, slug, title, detail, headers=headers or {}, extra=extra or {}).response()


INVALID_ARGUMENT_ERROR = "InvalidArgument:"
"""How a failure's recorded text (`lastError`) starts when Firestore refused the data."""


def failure_problem(error: str | None) -> Problem:
    """The answer to a request whose handler failed terminally (its record is failed), from
    the recorded failure, so the first answer and every replay are the same: 422
    `request-unprocessable` when Firestore refused the request's data as invalid (an entity too
    large, a bad document id: the request as sent can never succeed), otherwise 500
    `request-failed`. Both tell the client not to retry with the key, and name no exception."""
    if error is not None and error.startswith(INVALID_ARGUMENT_ERROR):
        return Problem(
            422,
            "request-unprocessable",
            "Request cannot be processed",
            "the data this request would store was refused (too large or invalid): the same "
            "request cannot succeed, do not retry it; send a corrected request with a new "
            "Idempotency-Key",
        )
    return Problem(
        500,
        "request-failed",
        "Request failed",
        "the request failed permanently and was recorded as failed: retrying it with the same "
        "key returns this answer again; send a corrected request with a new Idempotency-Key",
    )


def unknown_problem() -> Problem:
    """The answer to a request whose outcome is unknown (an `unknown` record: an earlier
    attempt may have taken effect, nothing could tell, and the function skips such requests,
    `on_ambiguous="skip"`): 409 `outcome-unknown`, without `Retry-After`. The first answer and
    every retry with the key are the same; the request is never run again unless an operator
    revives its record (`dedup revive`)."""
    return Problem(
        409,
        "outcome-unknown",
        "Outcome unknown",
        "an earlier attempt of the request with this Idempotency-Key may have taken effect, and "
        "whether it did could not be established; it is not run again: check whether it took "
        "effect before sending it again with a new Idempotency-Key",
    )
