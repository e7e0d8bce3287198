"""How a request with an idempotency key ends: `settle` runs the handler once per (event id,
suffix) or finds how an earlier request with the key ended, and `replay` answers a request
whose key completed. Shared by the HTTP and the callable adapters.

A handler that fails terminally (`TerminalError`, or Firestore refusing its data as invalid)
leaves a failed record: the request is answered with `failure_problem`, not as a replay, and
every retry with the key gets that same answer, marked replayed.

A request whose earlier attempt may have taken effect without its outcome being recorded (lease
mode, see `dedup.kernel.ambiguity`) and that nothing reconciled, under `on_ambiguous="skip"`, leaves
an `unknown` record: that request and every retry with the key get `unknown_problem` (409
`outcome-unknown`, no `Retry-After`), never a rerun, until an operator revives the record. One
that `reconcile` confirmed has no response to replay: 410 `response-not-stored`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import flask

from dedup.entrances.gate import HTTP, record_key, shared_deduplicator
from dedup.errors import LeaseHeld, LeaseLost, PayloadMismatch, StoreUnavailable
from dedup.http.idempotency import REPLAYED_HEADER, NotStored, StoredResponse
from dedup.http.problems import Problem
from dedup.kernel.delivery import Delivery, EventOptions, HandlerResult, OutcomeKind, drive
from dedup.kernel.record import RERUN, Mode, State, error_text
from dedup.platform.propagation import continued, from_current_request

if TYPE_CHECKING:
    from dedup.config import TimeBudget
    from dedup.kernel.delivery import Reconcile
    from dedup.kernel.front_door import Deduplicator

WAIT_POLL_SECONDS = 0.2
"""How often a request waiting for the first one with its key (`wait_seconds`) looks again."""


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
                "too many times, or it took effect and its response was lost); check the "
                "resource, or send it again with a new Idempotency-Key"
            )
        problem = Problem(410, "response-not-stored", "Response not stored", detail, extra=extra)
        response = problem.response()
    else:
        response = stored_answer(stored)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def stored_answer(stored: StoredResponse) -> flask.Response:
    """The stored response as an HTTP answer (status, body, `Content-Type`, `Location`)."""
    response = flask.Response(stored.body, stored.status)
    del response.headers["Content-Type"]
    if stored.content_type is not None:
        response.headers["Content-Type"] = stored.content_type
    if stored.location is not None:
        response.headers["Location"] = stored.location
    return response


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
    FAILED = "failed"
    """The handler failed terminally, now (`replayed` False) or for an earlier request with
    the key (`replayed` True); `error` is the record's `lastError`."""
    UNKNOWN = "unknown"
    """Whether the request took effect is unknown and it is not run again (`on_ambiguous=
    "skip"`): decided now (`replayed` False) or for an earlier request (`replayed` True)."""


@dataclass(frozen=True)
class Settlement:
    """What `settle` decided, with the stored result of a completed request."""

    kind: Settled
    result: Mapping[str, Any] | None = None
    error: str | None = None
    """`FAILED`: the failure as recorded (`lastError`: the exception's type and message)."""
    replayed: bool = False
    """`FAILED`: an earlier request with the key failed (this one did not run)."""


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
    reconcile: Reconcile | None = None,
    on_ambiguous: str = RERUN,
    budget: TimeBudget | None = None,
) -> Settlement:
    """Run `handler` once for (event_id, suffix) or find how an earlier request ended.
    `subject` is recorded for `dedup list --subject` (see `caller_subject`); `reconcile` and
    `on_ambiguous` go to `Deduplicator.run`; `budget`: the delivery's time budget, the
    function's own (`dedup.entrances.gate.Entrance.options`), else the config's.

    The handler's own exceptions propagate (the core has released the lease or counted the
    attempt first), except a terminal failure, which ends the record as failed and becomes a
    `FAILED` settlement; the dedup errors become a `Settlement`.
    """
    deadline = time.monotonic() + wait_seconds
    raised: list[Exception] = []
    options = runner.checked(
        EventOptions(
            Mode(mode), payload, subject=subject, reconcile=reconcile,
            on_ambiguous=on_ambiguous, budget=budget,
        ),
        "settle",
        handler,
    )  # fmt: skip

    def watched(delivery: Delivery) -> HandlerResult:
        try:
            return handler(delivery)
        except Exception as exc:
            raised.append(exc)
            raise

    while True:
        try:
            with continued(from_current_request()):  # the caller's trace, from the headers
                outcome = runner.run_event(event_id, suffix, watched, options)
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
        if outcome.kind is OutcomeKind.AMBIGUOUS:
            return Settlement(Settled.UNKNOWN)
        if outcome.kind is OutcomeKind.FAILED:  # this request's handler failed terminally
            if raised:
                return Settlement(Settled.FAILED, error=error_text(raised[-1]))
            return _recorded(runner, event_id, suffix, replayed=False)
        if outcome.result is None and outcome.kind in _READ_BACK:
            # The cache keeps no results, and a failed record has none: read the record.
            return _recorded(runner, event_id, suffix, replayed=True)
        return Settlement(Settled.COMPLETED, outcome.result)


_READ_BACK = (OutcomeKind.DUPLICATE, OutcomeKind.DUPLICATE_CACHED)


def _recorded(runner: Deduplicator, event_id: str, suffix: str, *, replayed: bool) -> Settlement:
    """How the record of (event_id, suffix), in the deduplicator's key layout, ended."""
    try:
        record = drive(runner.records.read(record_key(runner, event_id, suffix))).record
    except StoreUnavailable:
        return Settlement(Settled.UNAVAILABLE)
    if record is not None and record.state is State.FAILED:
        return Settlement(Settled.FAILED, error=record.last_error, replayed=replayed)
    if record is not None and record.state is State.UNKNOWN:
        return Settlement(Settled.UNKNOWN, replayed=replayed)
    return Settlement(Settled.COMPLETED, record.result if record is not None else None)


def caller_subject(uid: str | None) -> str | None:
    """The `subject` of an HTTP or callable request's record: `users/<uid>` of a signed-in
    caller, so `dedup list --subject users/<uid>` lists that user's requests (with the records
    of any trigger on their `users/<uid>` document); None for an anonymous endpoint."""
    return None if uid is None else f"users/{uid}"


def http_deduplicator() -> Deduplicator:
    """The process's shared deduplicator for HTTP and callable functions: the process's
    configuration (`dedup.entrances.gate.process_config`) with reused keys refused (answered
    422)."""
    return shared_deduplicator(HTTP)
