"""What `idempotent_http` checks of a request before any record is touched, in the order
docs/http.md lists: the method, the body's size, the caller's ID token, the Idempotency-Key,
the JSON body. Each refusal is a `Problem` whose status and slug are the answer table's where
the table has the case (`dedup.entrances.answer_table`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import flask
from werkzeug.exceptions import RequestEntityTooLarge

from dedup.entrances.answer_table import Case, Door, answer, refusal_status
from dedup.http.auth import AuthUnavailable, InvalidToken, TokenVerifier, bearer_token
from dedup.http.idempotency import HEADER, InvalidKey, parse_key
from dedup.http.problems import Problem, retry_after
from dedup.platform.strict_json import InvalidJSON
from dedup.platform.strict_json import loads as strict_loads


@dataclass(frozen=True)
class Rules:
    """What `idempotent_http` was told about the requests it accepts and how it answers."""

    allowed: tuple[str, ...]
    max_body_bytes: int
    anonymous: bool
    verify: TokenVerifier
    json_body: bool
    wait_seconds: float
    retry_after_seconds: int


def checked_request(
    request: flask.Request, rules: Rules
) -> Problem | tuple[str | None, str, bytes, Any]:
    """Everything checked before a record is touched, in the documented order."""
    allowed, max_body_bytes = rules.allowed, rules.max_body_bytes
    if request.method not in allowed:
        return Problem(
            405,
            "method-not-allowed",
            "Method not allowed",
            f"this endpoint accepts {', '.join(allowed)} only",
            headers={"Allow": ", ".join(allowed)},
        )
    length = request.content_length
    if length is not None and length > max_body_bytes:
        return too_large(max_body_bytes)
    app_limit = request.max_content_length  # the app's MAX_CONTENT_LENGTH, if any
    if app_limit is not None:
        max_body_bytes = min(max_body_bytes, app_limit)
    # A body without a length (chunked) is read no further: one byte more tells "too large"
    # (werkzeug cuts such a body at the limit silently). Flask before 3.1 cannot set it.
    with contextlib.suppress(AttributeError):
        request.max_content_length = max_body_bytes + 1
    try:
        body = request.get_data(cache=True)
    except RequestEntityTooLarge:
        return too_large(max_body_bytes)
    if len(body) > max_body_bytes:
        return too_large(max_body_bytes)
    uid: str | None = None
    if not rules.anonymous:
        try:
            uid = rules.verify(bearer_token(request))
        except InvalidToken as exc:
            return Problem(
                401,
                "unauthenticated",
                "Unauthenticated",
                f"{exc}: send `Authorization: Bearer <Firebase ID token>`",
                headers={"WWW-Authenticate": 'Bearer realm="firebase"'},
            )
        except AuthUnavailable as exc:
            return Problem(
                503,
                "auth-unavailable",
                "Authentication unavailable",
                f"{exc}; retry later",
                headers=retry_after(rules.retry_after_seconds),
            )
    raw_key = request.headers.get(HEADER)
    if raw_key is None:
        return refusal(
            Case.REFUSED_INPUT,
            "Idempotency-Key missing",
            f"this endpoint requires the {HEADER} header: send a new UUID per "
            "operation, and the same one when retrying it",
        )
    try:
        key = parse_key(raw_key)
    except InvalidKey as exc:
        return Problem(400, "idempotency-key-invalid", "Invalid Idempotency-Key", str(exc))
    parsed: Any = None
    if rules.json_body:
        if not request.is_json:
            return Problem(
                415,
                "unsupported-media-type",
                "Unsupported media type",
                "send the body as JSON with `Content-Type: application/json`",
            )
        try:
            parsed = strict_loads(body)
        except InvalidJSON as exc:
            return Problem(400, "malformed-json", "Malformed JSON", exc.detail)
    return uid, key, body, parsed


def target(request: flask.Request) -> str:
    """The path and, when there is one, the query string: both are fingerprinted, so a
    handler reading `request.args` never replays the answer to another query."""
    query = request.query_string.decode("latin-1")
    return f"{request.path}?{query}" if query else request.path


def refusal(case: Case, title: str, detail: str, headers: dict[str, str] | None = None) -> Problem:
    """The problem with which an HTTP entrance refuses `case`: its status and slug are the
    answer table's (`dedup.entrances.answer_table`)."""
    status, slug = refusal_status(case, Door.HTTP), answer(case, Door.HTTP).error
    assert slug is not None  # every refusal of the table is named
    return Problem(status, slug, title, detail, headers=headers or {})


def too_large(limit: int) -> Problem:
    return Problem(
        413, "body-too-large", "Body too large", f"the body is larger than {limit} bytes"
    )
