"""`idempotent_http`: the Flask adapter (`functions_framework.http`, firebase-functions
`https_fn.on_request`). The answers are listed in `dedup.http`'s docstring and docs/http.md.

Invariants (proven in tests/http/test_red_team_http.py):

* The request that runs the handler is answered with the handler's own response, every header
  included; a replay carries the stored status, body, `Content-Type` and `Location` only.
* A completed response is stored whole when it fits the record (its cap and the room the
  record's notes and steps leave), else as a stub (status, size, sha256): a replay is the
  stored answer or 410 `response-not-stored` naming that status, never a failure's problem.
* A handler that answers by raising werkzeug's `HTTPException` (`flask.abort(409)`) is answered
  as Flask would answer it: below 500 it is stored and replayed like a returned answer.
* "Retry with the same key" is said only when it is true: the handler raised and its lease
  was given back. When giving it back failed, the answer is 503 + `Retry-After`.
* One time budget per request (`dedup.http.replay.request_budget`), started on arrival.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import flask
from werkzeug.exceptions import HTTPException

from dedup.entrances.answer_table import Case
from dedup.entrances.gate import HTTP, Entrance, gate
from dedup.errors import ConfigError, TerminalError
from dedup.http.auth import TokenVerifier, firebase_uid
from dedup.http.idempotency import (
    REPLAYED_HEADER,
    StoredResponse,
    fingerprint,
    retryable_status,
    scoped_event_id,
)
from dedup.http.problems import (
    DEFAULT_RETRY_AFTER_SECONDS,
    Problem,
    failure_problem,
    retry_after,
    unknown_problem,
)
from dedup.http.replay import (
    Settled,
    Settlement,
    caller_subject,
    replay,
    request_budget,
    settle,
)
from dedup.http.request_checks import Rules, checked_request, refusal, target
from dedup.kernel.lease import Lease
from dedup.kernel.record import RERUN, Mode
from dedup.kernel.room import record_size
from dedup.kernel.run import Run
from dedup.platform.firestore_values import MAX_DOCUMENT_BYTES, NULL_BYTES

if TYPE_CHECKING:
    from dedup.config import DedupConfig
    from dedup.entrances.suffixes import SuffixRegistry
    from dedup.kernel.delivery import Delivery, HandlerResult, Reconcile
    from dedup.kernel.front_door import Deduplicator

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Largest request body accepted by default (a stored fingerprint covers the whole body)."""

logger = logging.getLogger("dedup.http")


@dataclass(frozen=True)
class IdempotentRequest:
    """What an idempotent HTTP handler is called with."""

    request: flask.Request
    delivery: Delivery
    """The dedup delivery: `delivery.transaction` in transaction mode (write through it: the
    writes commit with the stored response), `delivery.key` to pass downstream."""
    uid: str | None
    """The verified caller (None on an anonymous endpoint)."""
    key: str
    """The request's Idempotency-Key, decoded."""
    json: Any
    """The parsed JSON body (None for a non-JSON endpoint)."""


HttpHandler = Callable[[IdempotentRequest], Any]
"""An idempotent HTTP handler: returns what a Flask view may return (a `flask.Response`, a
(body, status, headers) tuple, a dict...)."""


class _ServerError(Exception):
    """The handler answered 5xx (or 408, 425, 429: `retryable_status`): carried out of the dedup
    run so the lease is released."""

    def __init__(self, response: flask.Response) -> None:
        super().__init__(f"the handler answered {response.status_code}")
        self.response = response


def idempotent_http(
    suffix: str,
    *,
    mode: Mode = Mode.LEASE,
    anonymous: bool = False,
    methods: tuple[str, ...] = ("POST",),
    json_body: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    wait_seconds: float = 0.0,
    retry_after_seconds: int = DEFAULT_RETRY_AFTER_SECONDS,
    verify_token: TokenVerifier | None = None,
    deduplicator: Deduplicator | None = None,
    config: DedupConfig | None = None,
    registry: SuffixRegistry | None = None,
    reconcile: Reconcile | None = None,
    on_ambiguous: str = RERUN,
) -> Callable[[HttpHandler], Callable[[flask.Request], flask.Response]]:
    """Make an HTTP handler run once per (caller, Idempotency-Key); see the module docstring.

    `suffix` names the function (as for `trigger_once`, unique in the process); `mode` is the
    dedup mode (TRANSACTION: the handler writes through `delivery.transaction`, and its writes,
    its stored response and the marker commit together). `anonymous` endpoints (webhooks with
    a signature of their own) scope keys by the key alone; the others require a Firebase ID
    token (`verify_token`, default `firebase_uid`). `methods`: the others are refused with 405.
    `json_body`: the body must be JSON (415,
    400 otherwise) and is fingerprinted canonically. `wait_seconds`: how long a request whose
    key is running waits for the first to finish before answering 409. `reconcile` and
    `on_ambiguous`: as for `trigger_once` (lease mode); a request skipped as ambiguous, and
    every retry with its key, is answered 409 `outcome-unknown` (`unknown_problem`), and one
    that `reconcile` confirmed 410 `response-not-stored` (there is no response to replay).
    """
    entry = gate(HTTP, suffix, mode, config, deduplicator, registry, reconcile, on_ambiguous)
    if max_body_bytes < 1 or wait_seconds < 0 or retry_after_seconds < 0:
        raise ConfigError(
            "max_body_bytes must be positive, wait_seconds and retry_after_seconds not negative"
        )
    rules = Rules(
        allowed=tuple(method.upper() for method in methods),
        max_body_bytes=max_body_bytes,
        anonymous=anonymous,
        verify=verify_token if verify_token is not None else firebase_uid,
        json_body=json_body,
        wait_seconds=wait_seconds,
        retry_after_seconds=retry_after_seconds,
    )

    def decorate(handler: HttpHandler) -> Callable[[flask.Request], flask.Response]:
        admitted = entry.admit(handler)

        def once(request: flask.Request) -> flask.Response:
            return _serve(admitted, rules, request)

        return admitted.identify(once)

    return decorate


def _serve(admitted: Entrance, rules: Rules, request: flask.Request) -> flask.Response:
    """Answer one request: check it, run the handler once per key, answer the outcome."""
    suffix = admitted.suffix
    try:
        config = admitted.deduplicator().config
        length = admitted.options.budget or config.time_budget()
        spent = request_budget(length, config)  # the request's one budget, from its arrival
        checked = checked_request(request, rules)
    except Exception:  # a verifier or the framework failing: never a 4xx by mistake
        logger.exception("%s: the request could not be checked", suffix)
        return _failed().response()
    if isinstance(checked, Problem):
        return checked.response()
    uid, key, body, parsed = checked
    fresh: list[flask.Response] = []
    raised: list[Exception] = []

    def run_handler(delivery: Delivery) -> HandlerResult:
        try:
            value = admitted.handler(IdempotentRequest(request, delivery, uid, key, parsed))
        except HTTPException as abort:  # `flask.abort(409)`: an answer, as Flask would send it
            value = abort.get_response()
        try:
            answer = flask.make_response(value)
            answer.direct_passthrough = False  # a file answer is read, to be stored
            body = answer.get_data()
        except Exception as exc:  # after the effect: a retry must not repeat it
            raise TerminalError(f"{suffix}: the handler's answer is no response") from exc
        if retryable_status(answer.status_code):  # 5xx, 408, 425, 429: not stored
            raise _ServerError(answer)
        stored = StoredResponse(
            answer.status_code,
            body,
            answer.headers.get("Content-Type"),
            answer.headers.get("Location"),
        )
        fresh.append(answer)
        return stored.to_result(room=_result_room(delivery))

    payload = fingerprint(request.method, target(request), body, json_body=rules.json_body)
    try:
        settled = settle(
            admitted.deduplicator(),
            scoped_event_id(uid, key),
            suffix,
            run_handler,
            mode=admitted.mode,
            payload=payload,
            wait_seconds=rules.wait_seconds,
            subject=caller_subject(uid),
            reconcile=admitted.reconcile,
            on_ambiguous=admitted.on_ambiguous,
            budget=length,
            request=spent,
            raised=raised,
        )
    except Exception as error:
        if raised and error is not raised[-1]:  # the handler failed, and so did its release
            return _unreleased(suffix, rules.retry_after_seconds)
        if isinstance(error, _ServerError):  # its lease given back: the key is free
            return error.response
        logger.exception("%s: the handler failed; nothing stored, the key is free", suffix)
        return _failed().response()
    return _answer(settled, fresh, rules.retry_after_seconds)


def _unreleased(suffix: str, retry_after_seconds: int) -> flask.Response:
    """The handler failed and its lease could not be given back (the write failed, or the
    lease was lost meanwhile): the key is not free until its lease ends, so the answer is the
    store's 503 + `Retry-After`, never "retry now"."""
    logger.exception("%s: the handler failed and its key could not be released", suffix)
    return refusal(
        Case.STORE_UNAVAILABLE,
        "Service unavailable",
        "the request failed and its Idempotency-Key could not be released yet: retry with the "
        "same key after the Retry-After delay (until its lease ends it is answered 409)",
        headers=retry_after(retry_after_seconds),
    ).response()


def _result_room(delivery: Delivery) -> int | None:
    """The bytes the record of `delivery` has for its result, as the kernel measures it
    (`dedup.kernel.room.storable_result`: the record with a null result, every other field at
    its largest, with the notes and steps written so far); None for a delivery without a run."""
    holder = delivery.run_notes
    if holder is None:
        return None
    if isinstance(holder, Lease):  # lease mode: the notes and steps the lease wrote
        size = record_size(holder.run, notes=holder.notes, steps=holder.steps.recorded)
    elif isinstance(holder, Run):  # the atomic modes keep neither notes nor steps
        size = record_size(holder)
    else:
        return None
    return MAX_DOCUMENT_BYTES - size + NULL_BYTES


def _failed() -> Problem:
    return refusal(
        Case.HANDLER_RAISED,
        "Internal error",
        "the request failed and nothing was stored: retry it with the same key",
    )


def _answer(
    settled: Settlement, fresh: list[flask.Response], retry_after_seconds: int
) -> flask.Response:
    if settled.kind is Settled.RAN:
        if fresh:  # the handler's own response, whole, even when only a stub could be stored
            return fresh[-1]
        return replay(settled.stored())
    if settled.kind is Settled.COMPLETED:
        return replay(settled.stored())
    if settled.kind is Settled.FAILED:  # never a replay unless an earlier request failed
        response = failure_problem(settled.error).response()
        if settled.replayed:
            response.headers[REPLAYED_HEADER] = "true"
        return response
    if settled.kind is Settled.UNKNOWN:
        response = unknown_problem().response()
        if settled.replayed:
            response.headers[REPLAYED_HEADER] = "true"
        return response
    if settled.kind is Settled.IN_PROGRESS:  # a held lease or a lost one: the table agrees
        return refusal(
            Case.LEASE_HELD,
            "Request in progress",
            "a request with this Idempotency-Key is still being processed: retry after the "
            "Retry-After delay to get its response",
            headers=retry_after(retry_after_seconds),
        ).response()
    if settled.kind is Settled.MISMATCH:
        return Problem(
            422,
            "idempotency-key-reused",
            "Idempotency-Key reused",
            "this Idempotency-Key was already used for a different request (method, path or "
            "body): use a new key for a new request",
        ).response()
    return refusal(
        Case.STORE_UNAVAILABLE,
        "Service unavailable",
        "the idempotency records could not be reached: retry with the same key",
        headers=retry_after(retry_after_seconds),
    ).response()
