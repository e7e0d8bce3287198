"""Exactly-once HTTP requests: `idempotent_http` for handlers served by
`functions_framework.http` or firebase-functions `https_fn.on_request` (both hand a Flask
request), `idempotent_callable` for `https_fn.on_call`. One flow behind both, over
`Deduplicator.run` and the records every trigger uses.

    @https_fn.on_request()
    @idempotent_http("create_order", mode=Mode.TRANSACTION)
    def create_order(call: IdempotentRequest) -> flask.Response:
        ...

How a request is answered (draft-ietf-httpapi-idempotency-key-header-07, Stripe's practice;
every refusal is `application/problem+json`, RFC 9457, and names no internal exception):

| request                                           | answer                                   |
|---------------------------------------------------|------------------------------------------|
| method not in `methods` (default POST)            | 405 + `Allow`                            |
| body larger than `max_body_bytes`                 | 413                                      |
| no valid Firebase ID token (unless `anonymous`)   | 401 + `WWW-Authenticate`                 |
| no `Idempotency-Key`, or not 1-255 printable ASCII | 400                                     |
| JSON endpoint: not a JSON content type / body not strict JSON (`strict_json`) | 415 / 400 |
| first request with a key                          | the handler's own response; < 500 stored |
| handler answers 5xx, 408, 425, 429 or raises     | its own (or 500); nothing stored, released |
| ... and its release fails                         | 503 + `Retry-After` (the key is held)    |
| handler fails terminally (`TerminalError`)        | 500 `request-failed`, not a replay         |
| Firestore refuses the handler's data as invalid   | 422 `request-unprocessable`, not a replay  |
| same key after a terminal failure                 | that problem + `Idempotent-Replayed: true` |
| same key and fingerprint, completed               | stored answer + `Idempotent-Replayed: true` |
| same key, first request still running            | 409 + `Retry-After` (after `wait_seconds`) |
| same key, other method, path or canonical body    | 422                                      |
| same key, another caller                          | independent request (keys are scoped)    |
| completed, answer too large to store              | 410 `response-not-stored` (+ status, sha256) |
| record ended without an answer (dead)             | 410 `response-not-stored`                |
| Firestore unavailable, or the time budget spent   | 503 + `Retry-After`                      |

The first seven rows are refusals made before any record is touched. The first answer is the
handler's own response, every header included; a stored answer keeps status, body,
`Content-Type` and `Location` (a replay carries no `Set-Cookie` nor cache header: docs/http.md
says why); in transaction mode it commits with the handler's writes and the marker. "Too large"
means larger than `dedup.kernel.transitions.MAX_RESULT_BYTES` as stored, or than the room the
record has left beside its notes and steps: the record then keeps a stub (status, size, sha256)
and the first answer is sent whole. A request's time is one budget from its arrival, across
wait rounds, deliveries and reads (`dedup.http.replay`).

Callables (`idempotent_callable`) take the key from the data field `idempotencyKey` and the
caller from `request.auth` (verified by firebase-functions); refusals are `HttpsError`s, see
`CALLABLE_CODES`; a result or `HttpsError` is stored as firebase-functions sends it.
docs/http.md has the whole story and the conformance table.

Modules: `problems` (refusals as problem documents; `problem_response` builds one for a
handler), `auth` (callers), `replay` (the shared flow and replays), `endpoint` (the Flask
adapter), `callable` (the callable adapter). The checks made at import (suffix, sync handler,
deduplicator, registration) are `dedup.entrances.gate`'s, shared with every trigger kind.
"""

from __future__ import annotations

from dedup.entrances.triggers import DEFAULT_REGISTRY
from dedup.http.auth import (
    AuthUnavailable,
    InvalidToken,
    TokenVerifier,
    ensure_firebase_app,
    firebase_uid,
)
from dedup.http.callable import CALLABLE_CODES, CallableHandler, idempotent_callable
from dedup.http.endpoint import (
    DEFAULT_MAX_BODY_BYTES,
    HttpHandler,
    IdempotentRequest,
    idempotent_http,
)
from dedup.http.idempotency import (
    CALLABLE_FIELD,
    HEADER,
    REPLAYED_HEADER,
    InvalidKey,
    NotStored,
    StoredResponse,
    canonical_json,
    fingerprint,
    parse_key,
    scoped_event_id,
    validate_key,
)
from dedup.http.problems import (
    DEFAULT_RETRY_AFTER_SECONDS,
    PROBLEM_JSON,
    PROBLEM_TYPE,
    Problem,
    failure_problem,
    problem_response,
)
from dedup.http.replay import (
    WAIT_POLL_SECONDS,
    Settled,
    Settlement,
    caller_subject,
    http_deduplicator,
    replay,
    settle,
)
from dedup.kernel.delivery import HandlerResult

__all__ = [
    "CALLABLE_CODES",
    "CALLABLE_FIELD",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_REGISTRY",
    "DEFAULT_RETRY_AFTER_SECONDS",
    "HEADER",
    "PROBLEM_JSON",
    "PROBLEM_TYPE",
    "REPLAYED_HEADER",
    "WAIT_POLL_SECONDS",
    "AuthUnavailable",
    "CallableHandler",
    "HandlerResult",
    "HttpHandler",
    "IdempotentRequest",
    "InvalidKey",
    "InvalidToken",
    "NotStored",
    "Problem",
    "Settled",
    "Settlement",
    "StoredResponse",
    "TokenVerifier",
    "caller_subject",
    "canonical_json",
    "ensure_firebase_app",
    "failure_problem",
    "fingerprint",
    "firebase_uid",
    "http_deduplicator",
    "idempotent_callable",
    "idempotent_http",
    "parse_key",
    "problem_response",
    "replay",
    "scoped_event_id",
    "settle",
    "validate_key",
]
