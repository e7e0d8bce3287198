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
| JSON endpoint: not a JSON content type / body     | 415 / 400                                |
| first request with a key                          | handler runs; an answer < 500 is stored  |
| handler answers 5xx or raises                     | its 5xx (or 500); nothing stored, released |
| same key and fingerprint, completed               | stored answer + `Idempotent-Replayed: true` |
| same key, first request still running            | 409 + `Retry-After` (after `wait_seconds`) |
| same key, other method, path or canonical body    | 422                                      |
| same key, another caller                          | independent request (keys are scoped)    |
| completed, answer too large to store              | 410 `response-not-stored` (+ status, sha256) |
| record ended without an answer (dead)             | 410 `response-not-stored`                |
| Firestore unavailable                             | 503 + `Retry-After`                      |

The first seven rows are refusals made before any record is touched. A stored answer keeps
status, body, `Content-Type` and `Location`; in transaction mode it commits with the handler's
writes and the marker. "Too large" means larger than `dedup.transitions.MAX_RESULT_BYTES` as
stored: the record then keeps a stub (status, size, sha256) and the first answer is sent whole.

Callables (`idempotent_callable`) take the key from the data field `idempotencyKey` and the
caller from `request.auth` (verified by firebase-functions); refusals are `HttpsError`s, see
`CALLABLE_CODES`. docs/http.md has the whole story and the conformance table.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import flask
from firebase_functions import https_fn

from dedup.config import DedupConfig
from dedup.core import Deduplicator, default_deduplicator
from dedup.decorator import DEFAULT_REGISTRY, SuffixRegistry
from dedup.delivery import Delivery, HandlerResult, OutcomeKind
from dedup.errors import ConfigError, LeaseHeld, LeaseLost, PayloadMismatch, StoreUnavailable
from dedup.idempotency import (
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
from dedup.keys import dedup_key, validate_suffix
from dedup.record import Mode

PROBLEM_JSON = "application/problem+json"
"""Content type of every refusal (RFC 9457)."""

PROBLEM_TYPE = "urn:exactly-once:problem:"
"""Prefix of each refusal's `type`; the slugs are listed in docs/http.md."""

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Largest request body accepted by default (a stored fingerprint covers the whole body)."""

DEFAULT_RETRY_AFTER_SECONDS = 1
"""`Retry-After` of a 409 (another request with the key is running) and of a 503."""

WAIT_POLL_SECONDS = 0.2
"""How often a request waiting for the first one with its key (`wait_seconds`) looks again."""

logger = logging.getLogger("dedup.http")


# --- Answers ------------------------------------------------------------------------------


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


def _retry_after(seconds: int) -> dict[str, str]:
    return {"Retry-After": str(seconds)}


def replay(stored: StoredResponse | NotStored) -> flask.Response:
    """The answer to a request whose key completed: the stored response with
    `Idempotent-Replayed: true`, or the `response-not-stored` problem."""
    if isinstance(stored, NotStored):
        extra: dict[str, Any] = {}
        if stored.status is not None:
            extra = {"originalStatus": stored.status, "bytes": stored.size, "sha256": stored.sha256}
            detail = (
                f"the request with this key completed with status {stored.status}, but its "
                "response was too large to keep for replays; fetch the resource instead of "
                "retrying, or send a new request with a new key"
            )
        else:
            detail = (
                "the request with this key ended without a response to replay (it failed "
                "too many times); send it again with a new Idempotency-Key"
            )
        problem = Problem(410, "response-not-stored", "Response not stored", detail, extra=extra)
        response = problem.response()
    else:
        response = _response(stored)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def _response(stored: StoredResponse) -> flask.Response:
    response = flask.Response(stored.body, stored.status)
    del response.headers["Content-Type"]
    if stored.content_type is not None:
        response.headers["Content-Type"] = stored.content_type
    if stored.location is not None:
        response.headers["Location"] = stored.location
    return response


# --- Callers ------------------------------------------------------------------------------


class InvalidToken(Exception):
    """The bearer token is missing or not a valid Firebase ID token (answered 401)."""


class AuthUnavailable(Exception):
    """The token could not be checked now (certificates unreachable; answered 503)."""


TokenVerifier = Callable[[str], str]
"""`verify(id_token) -> uid`; raises `InvalidToken` or `AuthUnavailable`."""

_app_lock = threading.Lock()


def ensure_firebase_app() -> None:
    """Create the default firebase_admin app unless it exists (no network call).

    ID tokens are verified through it: by `firebase_uid`, and by firebase-functions before a
    callable's handler runs, which is why main.py calls this at import time.
    """
    import firebase_admin

    with _app_lock:
        if not firebase_admin._apps:
            firebase_admin.initialize_app()


def firebase_uid(id_token: str, *, check_revoked: bool = False) -> str:
    """The uid of a verified Firebase ID token (signature, expiry, audience and issuer; the
    Auth emulator's unsigned tokens when FIREBASE_AUTH_EMULATOR_HOST is set). Revocation is
    checked only with `check_revoked` (one more RPC). Raises `InvalidToken`/`AuthUnavailable`."""
    from firebase_admin import auth

    ensure_firebase_app()
    try:
        claims = auth.verify_id_token(id_token, check_revoked=check_revoked)
    except auth.CertificateFetchError as exc:
        raise AuthUnavailable("the ID token's certificates could not be fetched") from exc
    except (ValueError, auth.InvalidIdTokenError, auth.UserDisabledError) as exc:
        raise InvalidToken("the ID token is invalid, expired or revoked") from exc
    uid = claims.get("uid") or claims.get("sub")
    if not isinstance(uid, str) or not uid:
        raise InvalidToken("the ID token names no user")
    return uid


def _bearer(request: flask.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidToken("send `Authorization: Bearer <Firebase ID token>`")
    return token.strip()


# --- The shared flow ----------------------------------------------------------------------


class Settled(StrEnum):
    """How `settle` ended a request."""

    RAN = "ran"
    """The handler ran now; its result is stored."""
    COMPLETED = "completed"
    """An earlier request with the key completed: replay the stored result."""
    IN_PROGRESS = "in_progress"
    """Another request with the key is running (still, after `wait_seconds`)."""
    MISMATCH = "mismatch"
    """The key was used for a request with another fingerprint."""
    UNAVAILABLE = "unavailable"
    """Firestore could not be reached."""


@dataclass(frozen=True)
class Settlement:
    """What `settle` decided, with the stored result of a completed request."""

    kind: Settled
    result: Mapping[str, Any] | None = None


def settle(
    runner: Deduplicator,
    event_id: str,
    suffix: str,
    handler: Callable[[Delivery], HandlerResult],
    *,
    mode: Mode,
    payload: bytes,
    wait_seconds: float,
    subject: str | None = None,
) -> Settlement:
    """Run `handler` once for (event_id, suffix) or find how an earlier request ended.

    The handler's own exceptions propagate (the core has released the lease or counted the
    attempt first); the dedup errors become a `Settlement`. `subject` is recorded for
    `dedup list --subject` (see `caller_subject`).
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            outcome = runner.run(
                event_id, suffix, handler, mode=mode, payload=payload, subject=subject
            )
        except (LeaseHeld, LeaseLost):
            if time.monotonic() + WAIT_POLL_SECONDS > deadline:
                return Settlement(Settled.IN_PROGRESS)
            time.sleep(WAIT_POLL_SECONDS)
            continue
        except PayloadMismatch:
            return Settlement(Settled.MISMATCH)
        except StoreUnavailable:
            return Settlement(Settled.UNAVAILABLE)
        if outcome.kind is OutcomeKind.RAN:
            return Settlement(Settled.RAN, outcome.result)
        result = outcome.result
        if outcome.kind is OutcomeKind.DUPLICATE_CACHED:  # a deduplicator with a key cache
            record = runner.store.read(dedup_key(event_id, suffix)).record
            result = record.result if record is not None else None
        return Settlement(Settled.COMPLETED, result)


def _http_config() -> DedupConfig:
    """The environment's config, with what HTTP needs: no key cache (a duplicate must read the
    stored response) and payload mismatches raised (answered 422)."""
    return replace(DedupConfig.from_env(), cache_size=0, on_payload_mismatch="raise")


def http_deduplicator() -> Deduplicator:
    """The process's shared deduplicator for HTTP and callable functions (see `_http_config`)."""
    return default_deduplicator(_http_config())


def caller_subject(uid: str | None) -> str | None:
    """The `subject` of an HTTP or callable request's record: `users/<uid>` of a signed-in
    caller, so `dedup list --subject users/<uid>` lists that user's requests (with the records
    of any trigger on their `users/<uid>` document); None for an anonymous endpoint."""
    return None if uid is None else f"users/{uid}"


def _runner_for(
    deduplicator: Deduplicator | None, config: DedupConfig | None
) -> Callable[[], Deduplicator]:
    if config is not None and deduplicator is not None:
        raise ConfigError("pass either config or deduplicator, not both")
    if deduplicator is not None:
        if deduplicator.config.on_payload_mismatch != "raise":
            raise ConfigError(
                "an HTTP deduplicator must refuse reused keys: build it with "
                "DedupConfig(on_payload_mismatch='raise', cache_size=0)"
            )
        return lambda: deduplicator
    if config is not None:
        fixed = replace(config, cache_size=0, on_payload_mismatch="raise")
        return lambda: default_deduplicator(fixed)
    return http_deduplicator


def _register(registry: SuffixRegistry | None, suffix: str, handler: Callable[..., Any]) -> None:
    owner = f"{handler.__module__}.{handler.__qualname__}"
    (registry if registry is not None else DEFAULT_REGISTRY).register(suffix, owner)


_COPIED_ATTRIBUTES = ("__module__", "__name__", "__qualname__", "__doc__")


def _copy_identity(target: Any, source: Any) -> None:
    # Name and doc only, not the signature (frameworks must see the wrapper's).
    for attribute in _COPIED_ATTRIBUTES:
        setattr(target, attribute, getattr(source, attribute, None))


# --- HTTP ---------------------------------------------------------------------------------


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
    """The handler answered 5xx: carried out of the dedup run so the lease is released."""

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
) -> Callable[[HttpHandler], Callable[[flask.Request], flask.Response]]:
    """Make an HTTP handler run once per (caller, Idempotency-Key); see the module docstring.

    `suffix` names the function (as for `trigger_once`, unique in the process); `mode` is the
    dedup mode (TRANSACTION: the handler writes through `delivery.transaction`, and its writes,
    its stored response and the marker commit together). `anonymous` endpoints (webhooks with
    a signature of their own) scope keys by the key alone; the others require a Firebase ID
    token (`verify_token`, default `firebase_uid`). `methods`: the others are refused with 405.
    `json_body`: the body must be JSON (415,
    400 otherwise) and is fingerprinted canonically. `wait_seconds`: how long a request whose
    key is running waits for the first to finish before answering 409.
    """
    validate_suffix(suffix)
    mode = Mode(mode)
    runner = _runner_for(deduplicator, config)
    verify = verify_token if verify_token is not None else firebase_uid
    allowed = tuple(method.upper() for method in methods)
    if max_body_bytes < 1 or wait_seconds < 0 or retry_after_seconds < 0:
        raise ConfigError(
            "max_body_bytes must be positive, wait_seconds and retry_after_seconds not negative"
        )

    def decorate(handler: HttpHandler) -> Callable[[flask.Request], flask.Response]:
        _register(registry, suffix, handler)

        def once(request: flask.Request) -> flask.Response:
            try:
                checked = _checked_request(request)
            except Exception:  # a verifier or the framework failing: never a 4xx by mistake
                logger.exception("%s: the request could not be checked", suffix)
                return _failed().response()
            if isinstance(checked, Problem):
                return checked.response()
            uid, key, body, parsed = checked
            fresh: list[StoredResponse] = []

            def run_handler(delivery: Delivery) -> HandlerResult:
                answer = flask.make_response(
                    handler(IdempotentRequest(request, delivery, uid, key, parsed))
                )
                if answer.status_code >= 500:
                    raise _ServerError(answer)
                stored = StoredResponse(
                    answer.status_code,
                    answer.get_data(),
                    answer.headers.get("Content-Type"),
                    answer.headers.get("Location"),
                )
                fresh.append(stored)
                return stored.to_result()

            payload = fingerprint(request.method, request.path, body, json_body=json_body)
            try:
                settled = settle(
                    runner(),
                    scoped_event_id(uid, key),
                    suffix,
                    run_handler,
                    mode=mode,
                    payload=payload,
                    wait_seconds=wait_seconds,
                    subject=caller_subject(uid),
                )
            except _ServerError as error:
                return error.response
            except Exception:
                logger.exception("%s: the handler failed; nothing stored, the key is free", suffix)
                return _failed().response()
            return _answer(settled, fresh, retry_after_seconds)

        def _checked_request(
            request: flask.Request,
        ) -> Problem | tuple[str | None, str, bytes, Any]:
            """Everything checked before a record is touched, in the documented order."""
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
                return _too_large(max_body_bytes)
            body = request.get_data(cache=True)  # bounded by the length checked above
            if len(body) > max_body_bytes:
                return _too_large(max_body_bytes)
            uid: str | None = None
            if not anonymous:
                try:
                    uid = verify(_bearer(request))
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
                        headers=_retry_after(retry_after_seconds),
                    )
            raw_key = request.headers.get(HEADER)
            if raw_key is None:
                return Problem(
                    400,
                    "idempotency-key-missing",
                    "Idempotency-Key missing",
                    f"this endpoint requires the {HEADER} header: send a new UUID per "
                    "operation, and the same one when retrying it",
                )
            try:
                key = parse_key(raw_key)
            except InvalidKey as exc:
                return Problem(400, "idempotency-key-invalid", "Invalid Idempotency-Key", str(exc))
            parsed: Any = None
            if json_body:
                if not request.is_json:
                    return Problem(
                        415,
                        "unsupported-media-type",
                        "Unsupported media type",
                        "send the body as JSON with `Content-Type: application/json`",
                    )
                try:
                    parsed = json.loads(body)
                except (UnicodeDecodeError, json.JSONDecodeError):
                    return Problem(400, "malformed-json", "Malformed JSON", "the body is not JSON")
            return uid, key, body, parsed

        _copy_identity(once, handler)
        return once

    return decorate


def _failed() -> Problem:
    return Problem(
        500,
        "handler-failed",
        "Internal error",
        "the request failed and nothing was stored: retry it with the same key",
    )


def _too_large(limit: int) -> Problem:
    return Problem(
        413, "body-too-large", "Body too large", f"the body is larger than {limit} bytes"
    )


def _answer(
    settled: Settlement, fresh: list[StoredResponse], retry_after_seconds: int
) -> flask.Response:
    if settled.kind is Settled.RAN:
        if fresh:  # the full response, even when only a stub of it could be stored
            return _response(fresh[-1])
        return replay(StoredResponse.from_result(settled.result))
    if settled.kind is Settled.COMPLETED:
        return replay(StoredResponse.from_result(settled.result))
    if settled.kind is Settled.IN_PROGRESS:
        return Problem(
            409,
            "request-in-progress",
            "Request in progress",
            "a request with this Idempotency-Key is still being processed: retry after the "
            "Retry-After delay to get its response",
            headers=_retry_after(retry_after_seconds),
        ).response()
    if settled.kind is Settled.MISMATCH:
        return Problem(
            422,
            "idempotency-key-reused",
            "Idempotency-Key reused",
            "this Idempotency-Key was already used for a different request (method, path or "
            "body): use a new key for a new request",
        ).response()
    return Problem(
        503,
        "store-unavailable",
        "Service unavailable",
        "the idempotency records could not be reached: retry with the same key",
        headers=_retry_after(retry_after_seconds),
    ).response()


# --- Callables ----------------------------------------------------------------------------

CALLABLE_CODES: Mapping[str, https_fn.FunctionsErrorCode] = {
    "unauthenticated": https_fn.FunctionsErrorCode.UNAUTHENTICATED,
    "idempotency-key-invalid": https_fn.FunctionsErrorCode.INVALID_ARGUMENT,
    "request-in-progress": https_fn.FunctionsErrorCode.ABORTED,
    "idempotency-key-reused": https_fn.FunctionsErrorCode.FAILED_PRECONDITION,
    "response-not-stored": https_fn.FunctionsErrorCode.FAILED_PRECONDITION,
    "store-unavailable": https_fn.FunctionsErrorCode.UNAVAILABLE,
    "handler-failed": https_fn.FunctionsErrorCode.INTERNAL,
}
"""The `HttpsError` code of each callable refusal (its `details` carry `{"reason": slug}`)."""

CallableHandler = Callable[[https_fn.CallableRequest[Any], Delivery], Any]
"""An idempotent callable handler: `handler(request, delivery) -> JSON value`; it may raise
`HttpsError` (stored and replayed when its HTTP status is below 500)."""


def _https_error(slug: str, message: str, **details: Any) -> https_fn.HttpsError:
    return https_fn.HttpsError(CALLABLE_CODES[slug], message, {"reason": slug, **details})


class _CallableFailed(Exception):
    """The handler raised a retryable `HttpsError` (status 500 and above): not stored."""

    def __init__(self, error: https_fn.HttpsError) -> None:
        super().__init__(error.message)
        self.error = error


def idempotent_callable(
    suffix: str,
    *,
    mode: Mode = Mode.LEASE,
    anonymous: bool = False,
    wait_seconds: float = 0.0,
    retry_after_seconds: int = DEFAULT_RETRY_AFTER_SECONDS,
    deduplicator: Deduplicator | None = None,
    config: DedupConfig | None = None,
    registry: SuffixRegistry | None = None,
) -> Callable[[CallableHandler], Callable[[https_fn.CallableRequest[Any]], Any]]:
    """The callable variant of `idempotent_http`, under `https_fn.on_call()`.

    The key is the data field `idempotencyKey` (a dict's), scoped by `request.auth.uid`
    (firebase-functions verified the token; call `ensure_firebase_app()` at import so it can).
    The fingerprint is the canonical JSON of the data without the key. The returned value, or
    an `HttpsError` with a status below 500, is stored and replayed; refusals raise the
    `HttpsError` of `CALLABLE_CODES`.
    """
    validate_suffix(suffix)
    mode = Mode(mode)
    runner = _runner_for(deduplicator, config)

    def decorate(handler: CallableHandler) -> Callable[[https_fn.CallableRequest[Any]], Any]:
        _register(registry, suffix, handler)

        def once(request: https_fn.CallableRequest[Any]) -> Any:
            uid: str | None = None
            if not anonymous:
                if request.auth is None or not request.auth.uid:
                    raise _https_error("unauthenticated", "sign in to call this function")
                uid = request.auth.uid
            data = request.data
            if not isinstance(data, dict) or CALLABLE_FIELD not in data:
                raise _https_error(
                    "idempotency-key-invalid",
                    f"send the data as an object with an `{CALLABLE_FIELD}` field (a new UUID "
                    "per operation, the same one when retrying it)",
                )
            try:
                key = validate_key(data[CALLABLE_FIELD])
            except InvalidKey as exc:
                raise _https_error("idempotency-key-invalid", str(exc)) from None
            rest = {name: value for name, value in data.items() if name != CALLABLE_FIELD}

            def run_handler(delivery: Delivery) -> HandlerResult:
                try:
                    value = handler(request, delivery)
                except https_fn.HttpsError as error:
                    if error._http_error_code.status >= 500:
                        raise _CallableFailed(error) from error
                    return {"kind": "callable", "error": _error_dict(error)}
                return {"kind": "callable", "json": json.dumps(value)}

            try:
                settled = settle(
                    runner(),
                    scoped_event_id(uid, key),
                    suffix,
                    run_handler,
                    mode=mode,
                    payload=canonical_json(rest),
                    wait_seconds=wait_seconds,
                    subject=caller_subject(uid),
                )
            except _CallableFailed as failed:
                raise failed.error from None
            except Exception:
                logger.exception("%s: the handler failed; nothing stored, the key is free", suffix)
                raise _https_error(
                    "handler-failed", "the call failed and nothing was stored: retry it"
                ) from None
            return _callable_answer(settled, retry_after_seconds)

        _copy_identity(once, handler)
        return once

    return decorate


def _error_dict(error: https_fn.HttpsError) -> dict[str, Any]:
    return {
        "code": error.code.value,
        "message": error.message,
        "details": json.dumps(error.details),
    }


def _callable_answer(settled: Settlement, retry_after_seconds: int) -> Any:
    if settled.kind is Settled.IN_PROGRESS:
        raise _https_error(
            "request-in-progress",
            "a call with this idempotencyKey is still running: retry shortly",
            retryAfterSeconds=retry_after_seconds,
        )
    if settled.kind is Settled.MISMATCH:
        raise _https_error(
            "idempotency-key-reused",
            "this idempotencyKey was already used with different data: use a new key",
        )
    if settled.kind is Settled.UNAVAILABLE:
        raise _https_error("store-unavailable", "retry with the same idempotencyKey")
    result = settled.result
    if not result or result.get("kind") != "callable":
        raise _https_error(
            "response-not-stored",
            "the call with this idempotencyKey ended without a result to replay: use a new key",
        )
    if "error" in result:
        error = result["error"]
        raise https_fn.HttpsError(
            https_fn.FunctionsErrorCode(error["code"]),
            error["message"],
            json.loads(error["details"]),
        )
    return json.loads(result["json"])
