"""`idempotent_callable`: the callable adapter (firebase-functions `https_fn.on_call`); refusals
are `HttpsError`s with the codes of `CALLABLE_CODES`.

Invariants (proven in tests/http/test_red_team_http.py):

* A result, or an `HttpsError` below 500 (but 429) with its message and details, is stored as
  firebase-functions sends it: encoded by the app's JSON provider (Flask's `jsonify`: a
  `Decimal` or `UUID` as a string, a date as an HTTP date, sorted keys), kept as ASCII JSON
  text (so any text, lone surrogates included, can be stored). Every replay is that value.
* Whatever firebase-functions cannot send (an object Flask cannot encode, keys it cannot sort,
  a cycle) is a terminal failure recorded after the effect: the key ends `failed`, never
  released, so no retry repeats the effect. So is a result holding `NaN` or `Infinity`.
* The first call gets the handler's own value or error; "retry" is said only when its lease
  was given back.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import flask
from firebase_functions import https_fn
from flask.json.provider import DefaultJSONProvider, JSONProvider

from dedup.entrances.answer_table import Case, Door, answer
from dedup.entrances.gate import CALLABLE, Entrance, gate
from dedup.errors import TerminalError
from dedup.http.idempotency import (
    CALLABLE_FIELD,
    InvalidKey,
    canonical_json,
    retryable_status,
    scoped_event_id,
    validate_key,
)
from dedup.http.problems import DEFAULT_RETRY_AFTER_SECONDS, failure_problem
from dedup.http.replay import (
    Settled,
    Settlement,
    caller_subject,
    request_budget,
    settle,
)
from dedup.kernel.budget import Budget
from dedup.kernel.delivery import Delivery, HandlerResult
from dedup.kernel.record import RERUN, Mode
from dedup.platform.strict_json import InvalidJSON, check_value

if TYPE_CHECKING:
    from dedup.config import DedupConfig
    from dedup.entrances.triggers import SuffixRegistry
    from dedup.kernel.delivery import Reconcile
    from dedup.kernel.front_door import Deduplicator

logger = logging.getLogger("dedup.http")


def _code(case: Case) -> https_fn.FunctionsErrorCode:
    """The `HttpsError` code with which a callable refuses `case` (the answer table's)."""
    return https_fn.FunctionsErrorCode(answer(case, Door.CALLABLE).error)


CALLABLE_CODES: Mapping[str, https_fn.FunctionsErrorCode] = {
    "unauthenticated": https_fn.FunctionsErrorCode.UNAUTHENTICATED,
    "idempotency-key-invalid": _code(Case.REFUSED_INPUT),
    "malformed-json": _code(Case.REFUSED_INPUT),
    "request-in-progress": _code(Case.LEASE_HELD),
    "idempotency-key-reused": https_fn.FunctionsErrorCode.FAILED_PRECONDITION,
    "response-not-stored": https_fn.FunctionsErrorCode.FAILED_PRECONDITION,
    "outcome-unknown": https_fn.FunctionsErrorCode.FAILED_PRECONDITION,
    "store-unavailable": _code(Case.STORE_UNAVAILABLE),
    "handler-failed": _code(Case.HANDLER_RAISED),
    "request-unprocessable": https_fn.FunctionsErrorCode.INVALID_ARGUMENT,
    "request-failed": https_fn.FunctionsErrorCode.INTERNAL,
}
"""The `HttpsError` code of each callable refusal (its `details` carry `{"reason": slug}`)."""

CallableHandler = Callable[[https_fn.CallableRequest[Any], Delivery], Any]
"""An idempotent callable handler: `handler(request, delivery) -> JSON value`; it may raise
`HttpsError` (stored and replayed when its HTTP status is below 500 and not 429
`resource-exhausted`)."""


def _https_error(slug: str, message: str, **details: Any) -> https_fn.HttpsError:
    return https_fn.HttpsError(CALLABLE_CODES[slug], message, {"reason": slug, **details})


class _CallableFailed(Exception):
    """The handler raised a retryable `HttpsError` (status 500 and above, or 429
    `resource-exhausted`: `retryable_status`): not stored."""

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
    reconcile: Reconcile | None = None,
    on_ambiguous: str = RERUN,
) -> Callable[[CallableHandler], Callable[[https_fn.CallableRequest[Any]], Any]]:
    """The callable variant of `idempotent_http`, under `https_fn.on_call()`.

    The key is the data field `idempotencyKey` (a dict's), scoped by `request.auth.uid`
    (firebase-functions verified the token; call `ensure_firebase_app()` at import so it can).
    The fingerprint is the canonical JSON of the data without the key. The returned value, or
    an `HttpsError` with a status below 500 but 429, is stored and replayed; refusals raise the
    `HttpsError` of `CALLABLE_CODES`. `reconcile` and `on_ambiguous`: as for
    `idempotent_http`; a call skipped as ambiguous, and every retry with its key, raises
    `outcome-unknown` (FAILED_PRECONDITION).
    """
    entry = gate(CALLABLE, suffix, mode, config, deduplicator, registry, reconcile, on_ambiguous)

    def decorate(handler: CallableHandler) -> Callable[[https_fn.CallableRequest[Any]], Any]:
        admitted = entry.admit(handler)

        def once(request: https_fn.CallableRequest[Any]) -> Any:
            config = admitted.deduplicator().config
            spent = request_budget(admitted.options.budget or config.time_budget(), config)
            uid, key, rest = _checked_call(request, anonymous)
            fresh: list[Any] = []
            settled = _settle_call(admitted, request, uid, key, rest, wait_seconds, spent, fresh)
            if settled.kind is Settled.RAN and fresh:  # the handler's own value or error
                if isinstance(fresh[-1], https_fn.HttpsError):
                    raise fresh[-1]
                return fresh[-1]
            return _callable_answer(settled, retry_after_seconds)

        return admitted.identify(once)

    return decorate


def _checked_call(
    request: https_fn.CallableRequest[Any], anonymous: bool
) -> tuple[str | None, str, dict[str, Any]]:
    """The caller, the key and the data without it; an `HttpsError` refusal otherwise."""
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
    try:
        check_value(rest, what="the data")
    except InvalidJSON as exc:
        raise _https_error("malformed-json", exc.detail) from None
    return uid, key, rest


def _settle_call(
    admitted: Entrance,
    request: https_fn.CallableRequest[Any],
    uid: str | None,
    key: str,
    rest: dict[str, Any],
    wait_seconds: float,
    spent: Budget,
    fresh: list[Any],
) -> Settlement:
    """Run the handler once per (caller, key), within the call's one budget (`spent`); what it
    returned or raised, once stored, is appended to `fresh`. A retryable failure raises its
    `HttpsError`."""
    raised: list[Exception] = []

    def run_handler(delivery: Delivery) -> HandlerResult:
        try:
            value = admitted.handler(request, delivery)
        except https_fn.HttpsError as error:
            if retryable_status(error._http_error_code.status):  # 5xx, resource-exhausted
                raise _CallableFailed(error) from error
            stored = {"kind": "callable", "errorJson": _error_json(admitted.suffix, error)}
            fresh.append(error)
            return stored
        try:
            text = sent_json(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:  # after the effect
            raise TerminalError(
                f"{admitted.suffix}: the result is not JSON firebase-functions can send"
            ) from exc
        fresh.append(value)
        return {"kind": "callable", "json": text}

    config = admitted.deduplicator().config
    try:
        return settle(
            admitted.deduplicator(),
            scoped_event_id(uid, key),
            admitted.suffix,
            run_handler,
            mode=admitted.mode,
            payload=canonical_json(rest),
            wait_seconds=wait_seconds,
            subject=caller_subject(uid),
            reconcile=admitted.reconcile,
            on_ambiguous=admitted.on_ambiguous,
            budget=admitted.options.budget or config.time_budget(),
            request=spent,
            raised=raised,
        )
    except Exception as error:
        if raised and error is not raised[-1]:  # the handler failed, and so did its release
            logger.exception(
                "%s: the call failed and its key could not be released", admitted.suffix
            )
            raise _https_error(
                "store-unavailable",
                "the call failed and its idempotencyKey could not be released yet: retry with "
                "the same idempotencyKey shortly",
            ) from None
        if isinstance(error, _CallableFailed):  # its lease given back: the key is free
            raise error.error from None
        logger.exception("%s: the handler failed; nothing stored, the key is free", admitted.suffix)
        raise _https_error(
            "handler-failed", "the call failed and nothing was stored: retry it"
        ) from None


@functools.cache
def _default_provider() -> JSONProvider:
    """Flask's default JSON provider, for a call served outside a Flask app."""
    return DefaultJSONProvider(flask.Flask("dedup.http.callable"))


def sent_json(value: Any, *, allow_nan: bool = True) -> str:
    """`value` as firebase-functions sends it (Flask's `jsonify`, with the app's JSON provider,
    or Flask's default outside an app), as ASCII JSON text, which any Firestore string field
    stores and `json.loads` gives back. Raises what the provider raises for a value it cannot
    send (`TypeError`, `ValueError`, `RecursionError`), and `ValueError` for `NaN` or
    `Infinity` unless `allow_nan`."""
    provider = flask.current_app.json if flask.has_app_context() else _default_provider()
    sent = provider.dumps(value)
    decoded = json.loads(sent, parse_constant=None if allow_nan else _no_constant)
    return json.dumps(decoded, ensure_ascii=True, separators=(",", ":"))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _error_json(suffix: str, error: https_fn.HttpsError) -> str:
    """A stored `HttpsError`: its code, and its message and details as firebase-functions sends
    them (`sent_json`). `TerminalError` when they cannot be sent: the effect happened."""
    wire: dict[str, Any] = {"code": error.code.value, "message": error.message}
    if error.details is not None:
        wire["details"] = error.details
    try:
        return sent_json(wire)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TerminalError(
            f"{suffix}: the HttpsError's message or details are not JSON firebase-functions "
            "can send"
        ) from exc


def _stored_error(result: Mapping[str, Any]) -> https_fn.HttpsError:
    """The `HttpsError` a record stored (`_error_json`; or the older form: a map with the
    details as JSON text)."""
    if "errorJson" in result:
        wire = json.loads(result["errorJson"])
        code = https_fn.FunctionsErrorCode(wire["code"])
        return https_fn.HttpsError(code, wire["message"], wire.get("details"))
    error = result["error"]
    code = https_fn.FunctionsErrorCode(error["code"])
    return https_fn.HttpsError(code, error["message"], json.loads(error["details"]))


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
    if settled.kind is Settled.UNKNOWN:
        raise _https_error(
            "outcome-unknown",
            "an earlier attempt of the call with this idempotencyKey may have taken effect and "
            "it is not run again: check whether it did before calling with a new key",
        )
    if settled.kind is Settled.FAILED:  # the same refusal for the first call and its retries
        problem = failure_problem(settled.error)
        raise _https_error(
            problem.slug,
            "the call failed permanently: retrying it with this idempotencyKey returns this "
            "error again; send a corrected call with a new key",
        )
    result = settled.result
    if (not result or result.get("kind") != "callable") and settled.maybe_effected:
        raise _https_error(
            "response-not-stored",
            "the call with this idempotencyKey ended without a result to replay: its attempts "
            "ran out, and the last one may have taken effect; check before calling with a new key",
        )
    if not result or result.get("kind") != "callable":
        raise _https_error(
            "response-not-stored",
            "the call with this idempotencyKey ended without a result to replay: use a new key",
        )
    if "errorJson" in result or "error" in result:
        raise _stored_error(result)
    return json.loads(result["json"])
