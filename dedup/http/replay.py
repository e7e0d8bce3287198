"""How a request with an idempotency key ends: `settle` runs the handler once per (event id,
suffix) or finds how an earlier request with the key ended, and `replay` answers a request
whose key completed. Shared by the HTTP and the callable adapters.

Invariants (docs/http.md; proven in tests/http/test_red_team_http.py):

* **One budget per request.** A request's time is one `Budget`, started when the request
  reaches the adapter (`request_budget`) and as long as the function's timeout: every wait
  round, every delivery it starts (each given what is left of it), the read of how an earlier
  request ended, and every RPC of them are bounded by it. A request answers within its
  function's timeout whatever the store does (slow, hanging, lost responses); a request that
  runs out of it is answered 409 (it was waiting for another request) or 503, never later.
* **A replay never says "failed" about a request that completed.** A completed request whose
  response is not in the record is told apart from one that ended without completing.

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
from dedup.kernel.budget import Budget, TimeBudget
from dedup.kernel.delivery import Delivery, EventOptions, HandlerResult, OutcomeKind, drive
from dedup.kernel.record import RERUN, Mode, State, error_text
from dedup.platform.propagation import continued, from_current_request

if TYPE_CHECKING:
    from dedup.kernel.budget import BudgetSettings
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
            if stored.location is not None:
                extra["location"] = stored.location
            detail = (
                f"the request with this key completed with status {stored.status}, but its "
                "response was too large to keep for replays; fetch the resource instead of "
                "retrying, or send a new request with a new key"
            )
        elif stored.completed:
            detail = (
                "the request with this key completed, but its response was not kept for "
                "replays (it could not be stored, or an earlier attempt's effect was confirmed "
                "after its response was lost); fetch the resource instead of retrying, or send "
                "a new request with a new Idempotency-Key"
            )
        elif stored.maybe_effected:
            detail = (
                "the request with this key ended without a response to replay: its attempts "
                "ran out, and the last one may have taken effect before it was lost; check "
                "the resource before sending it again with a new Idempotency-Key"
            )
        else:
            detail = (
                "the request with this key ended without a response to replay (it failed "
                "too many times); check the resource, or send it again with a new "
                "Idempotency-Key"
            )
        problem = Problem(410, "response-not-stored", "Response not stored", detail, extra=extra)
        response = problem.response()
    else:
        response = stored_answer(stored)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def stored_answer(stored: StoredResponse) -> flask.Response:
    """The stored response as an HTTP answer: status, body, `Content-Type` and `Location`, the
    only headers a record keeps (docs/http.md says why `Set-Cookie`, cache validators and the
    handler's other headers are not replayed)."""
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
    completed: bool = False
    """`COMPLETED` without a `result`: the record says the request completed (sent), its
    response not kept; False: it ended without completing (dead), or nothing says."""
    maybe_effected: bool = False
    """`COMPLETED` by a dead record whose last attempt may have had its effect (`ambiguous`)."""

    def stored(self) -> StoredResponse | NotStored:
        """`COMPLETED`: the HTTP response to replay, or why there is none."""
        found = StoredResponse.from_result(self.result)
        if isinstance(found, NotStored) and found.status is None and self.completed:
            return NotStored(None, None, None, completed=True)
        if isinstance(found, NotStored) and found.status is None and self.maybe_effected:
            return NotStored(None, None, None, maybe_effected=True)
        return found


def request_budget(length: TimeBudget, settings: BudgetSettings) -> Budget:
    """One request's time budget, started now, when the request reaches the adapter: `length`
    is the function's (`dedup.entrances.gate.Entrance.options`), `settings` the deduplicator's
    config (its RPC timeout and `budget_clock`). `settle` spends it across every wait round,
    delivery and read of the request."""
    return Budget.of_delivery(length, settings)


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
    request: Budget | None = None,
    raised: list[Exception] | None = None,
) -> Settlement:
    """Run `handler` once for (event_id, suffix) or find how an earlier request ended.
    `subject` is recorded for `dedup list --subject` (see `caller_subject`); `reconcile` and
    `on_ambiguous` go to `Deduplicator.run`; `budget`: the request's time budget, the
    function's own (`dedup.entrances.gate.Entrance.options`), else the config's; `request`: that
    budget started when the request arrived (`request_budget`; None: started now). Every wait
    round, delivery and read is bounded by what is left of it (the module's invariants).
    `raised`: where the handler's own exceptions are appended, so an adapter can tell the
    handler's exception (its lease released) from a failure to record it.

    The handler's own exceptions propagate (the core has released the lease or counted the
    attempt first), except a terminal failure, which ends the record as failed and becomes a
    `FAILED` settlement; the dedup errors become a `Settlement`.
    """
    config = runner.config
    length = budget or config.time_budget()
    spent = request if request is not None else request_budget(length, config)
    waits_until = spent.now() + wait_seconds
    raised = [] if raised is None else raised
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
        left = length.seconds - spent.elapsed()  # of the request's one budget
        if left <= 0:
            return Settlement(Settled.UNAVAILABLE)
        round_options = options._replace(budget=TimeBudget(left, length.source))
        try:
            with continued(from_current_request()):  # the caller's trace, from the headers
                outcome = runner.run_event(event_id, suffix, watched, round_options)
        except (LeaseHeld, LeaseLost):
            # Wait while both the wait and the request's budget afford another round.
            if spent.now() + WAIT_POLL_SECONDS > min(waits_until, spent.ends):
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
        if outcome.kind is OutcomeKind.RECONCILED:  # completed by an earlier attempt
            return Settlement(Settled.COMPLETED, completed=True)
        if outcome.kind is OutcomeKind.FAILED:  # this request's handler failed terminally
            if raised:
                return Settlement(Settled.FAILED, error=error_text(raised[-1]))
            return _recorded(runner, event_id, suffix, spent, replayed=False)
        if outcome.kind is OutcomeKind.DEAD:  # buried now: the record says if maybe effected
            return _recorded(runner, event_id, suffix, spent, replayed=False)
        if outcome.result is None and outcome.kind in _READ_BACK:
            # The cache keeps no results, and a failed record has none: read the record.
            return _recorded(runner, event_id, suffix, spent, replayed=True)
        return Settlement(Settled.COMPLETED, outcome.result)


_READ_BACK = (OutcomeKind.DUPLICATE, OutcomeKind.DUPLICATE_CACHED)


def _recorded(
    runner: Deduplicator, event_id: str, suffix: str, spent: Budget, *, replayed: bool
) -> Settlement:
    """How the record of (event_id, suffix), in the deduplicator's key layout, ended: read
    within what is left of the request's budget (`spent`), its answer included."""
    key = record_key(runner, event_id, suffix)
    try:
        left = spent.after_handler()
        record = drive(runner.records.read(key, action="read", budget=left)).record
    except StoreUnavailable:
        return Settlement(Settled.UNAVAILABLE)
    if record is not None and record.state is State.FAILED:
        return Settlement(Settled.FAILED, error=record.last_error, replayed=replayed)
    if record is not None and record.state is State.UNKNOWN:
        return Settlement(Settled.UNKNOWN, replayed=replayed)
    if record is None:
        return Settlement(Settled.COMPLETED)
    return Settlement(
        Settled.COMPLETED,
        record.result,
        completed=record.state is State.SENT,
        maybe_effected=record.state is State.DEAD and record.ambiguous,
    )


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
