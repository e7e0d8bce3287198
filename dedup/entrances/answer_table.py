"""What each entrance answers, one table: `ANSWERS` maps each way a delivery can end (`Case`)
and each entrance (`Door`) to the `Answer` the platform sees. The entrances read it: an event
function (`trigger_once`) to raise `GivenUp` under `nack`, a task function (`task_once`) for
the `HttpsError` code of each refusal, the HTTP and callable adapters for the status and reason
of each refusal they make. docs/guarantees.md renders it (`make docs`) and a test checks that
its "the platform sees" column agrees. Plain data: importing it loads no web framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

from dedup.errors import BudgetSpent, LeaseHeld, LeaseLost, MissingEventId, StoreUnavailable

__all__ = [
    "ANSWERS",
    "Answer",
    "Case",
    "Door",
    "answer",
    "case_of",
    "given_up",
    "markdown",
    "refusal_status",
]


class Case(StrEnum):
    """How a delivery ended, as far as its answer goes."""

    RAN = "ran"
    """The handler ran now and its outcome is recorded (sent)."""
    DUPLICATE = "duplicate"
    """The record is sent already (or the event is too old, or about a dedup record)."""
    LEASE_HELD = "held lease"
    """Another live delivery holds the lease (`LeaseHeld`)."""
    LEASE_LOST = "lease lost"
    """This delivery's lease was taken over before it finished (`LeaseLost`)."""
    HANDLER_RAISED = "handler raised"
    """The handler raised a retryable error: the lease is released, the error re-raised."""
    GIVEN_UP_ACK = "given up, ack"
    """The event is recorded failed, dead or unknown (now or before), under `on_give_up="ack"`
    (the default)."""
    GIVEN_UP_NACK = "given up, nack"
    """The same under `on_give_up="nack"` (DEDUP_ON_GIVE_UP, which the Cloud Run path sets)."""
    BUDGET_SPENT = "budget spent"
    """The delivery's time budget ran out first (`BudgetSpent`, a `StoreUnavailable`)."""
    STORE_UNAVAILABLE = "store unavailable"
    """Firestore failed (`StoreUnavailable`)."""
    REFUSED_INPUT = "refused input"
    """The request is not one the entrance can deduplicate: nothing read, nothing written."""


class Door(StrEnum):
    """The entrances, by the kind of function they serve."""

    EVENT = "event function"
    """`trigger_once`: Pub/Sub push, Eventarc, Firebase events, Cloud Scheduler."""
    TASK = "task"
    """`task_once`: Cloud Tasks task-queue functions."""
    HTTP = "HTTP"
    """`idempotent_http`: a plain HTTP caller with an `Idempotency-Key`."""
    CALLABLE = "callable"
    """`idempotent_callable`: a Firebase callable."""


class Answer(NamedTuple):
    """What the platform sees for one case at one entrance."""

    status: int | None
    """The HTTP status; None: the handler's own (or the stored one, replayed)."""
    error: str | None
    """What names the refusal on the wire: an event function's exception, a task's or a
    callable's `HttpsError` code, an HTTP problem's slug; None for an answer that is no error."""
    retried: bool
    """Whether the platform delivers the event again (the caller retries, for HTTP)."""
    note: str = ""
    """What else to know, for the rendered table."""

    def sees(self) -> str:
        """The answer in the words of docs/guarantees.md: the status and the error's name, then
        `success`, `refused` or `error: retry`."""
        if self.status is None:
            return self.note or "the handler's own answer"
        word = "error: retry" if self.retried else ("success" if self.status < 300 else "refused")
        named = f" `{self.error}`" if self.error else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.status}{named}, {word}{note}"


_OK = Answer(200, None, retried=False)
_REPLAYED_HTTP = (
    "the stored answer replayed: status, body, `Content-Type`, `Location`; never `Set-Cookie`, "
    "cache headers or the handler's other headers"
)
_REPLAYED_CALLABLE = "the stored value or `HttpsError`, as firebase-functions sent it"
_OTHER_4XX = "or 401, 405, 413, 415"
_UNRELEASED = "503 `store-unavailable` when its key could not be released"
_RETRY_AFTER = "`Retry-After`"
_GIVEN_UP_HTTP = (
    "500 `request-failed` or 422 `request-unprocessable` for a failed record, 410 "
    "`response-not-stored` for a dead one, 409 `outcome-unknown` for an unknown one"
)

ANSWERS: MappingProxyType[tuple[Case, Door], Answer] = MappingProxyType(
    {
        (Case.RAN, Door.EVENT): _OK,
        (Case.RAN, Door.TASK): _OK,
        (Case.RAN, Door.HTTP): Answer(
            None, None, False, "the handler's own response, every header included"
        ),
        (Case.RAN, Door.CALLABLE): Answer(None, None, False, "the handler's own value or error"),
        (Case.DUPLICATE, Door.EVENT): _OK,
        (Case.DUPLICATE, Door.TASK): _OK,
        (Case.DUPLICATE, Door.HTTP): Answer(None, None, False, _REPLAYED_HTTP),
        (Case.DUPLICATE, Door.CALLABLE): Answer(None, None, False, _REPLAYED_CALLABLE),
        (Case.LEASE_HELD, Door.EVENT): Answer(500, "LeaseHeld", True, "no traceback"),
        (Case.LEASE_HELD, Door.TASK): Answer(429, "resource-exhausted", True, "queue backs off"),
        (Case.LEASE_HELD, Door.HTTP): Answer(409, "request-in-progress", True, _RETRY_AFTER),
        (Case.LEASE_HELD, Door.CALLABLE): Answer(409, "aborted", True, "`request-in-progress`"),
        (Case.LEASE_LOST, Door.EVENT): Answer(500, "LeaseLost", True),
        (Case.LEASE_LOST, Door.TASK): Answer(500, "internal", True),
        (Case.LEASE_LOST, Door.HTTP): Answer(409, "request-in-progress", True, _RETRY_AFTER),
        (Case.LEASE_LOST, Door.CALLABLE): Answer(409, "aborted", True, "`request-in-progress`"),
        (Case.HANDLER_RAISED, Door.EVENT): Answer(500, None, True, "the handler's own error"),
        (Case.HANDLER_RAISED, Door.TASK): Answer(500, "internal", True),
        (Case.HANDLER_RAISED, Door.HTTP): Answer(500, "handler-failed", True, _UNRELEASED),
        (Case.HANDLER_RAISED, Door.CALLABLE): Answer(
            500, "internal", True, "`handler-failed`; " + _UNRELEASED
        ),
        (Case.GIVEN_UP_ACK, Door.EVENT): _OK,
        (Case.GIVEN_UP_ACK, Door.TASK): _OK,
        (Case.GIVEN_UP_ACK, Door.HTTP): Answer(None, None, False, _GIVEN_UP_HTTP),
        (Case.GIVEN_UP_ACK, Door.CALLABLE): Answer(None, None, False, "as HTTP, as `HttpsError`"),
        (Case.GIVEN_UP_NACK, Door.EVENT): Answer(500, "GivenUp", True, "no traceback"),
        (Case.GIVEN_UP_NACK, Door.TASK): _OK,
        (Case.GIVEN_UP_NACK, Door.HTTP): Answer(None, None, False, _GIVEN_UP_HTTP),
        (Case.GIVEN_UP_NACK, Door.CALLABLE): Answer(None, None, False, "as HTTP, as `HttpsError`"),
        (Case.BUDGET_SPENT, Door.EVENT): Answer(500, "BudgetSpent", True),
        (Case.BUDGET_SPENT, Door.TASK): Answer(503, "unavailable", True, "queue backs off"),
        (Case.BUDGET_SPENT, Door.HTTP): Answer(503, "store-unavailable", True, _RETRY_AFTER),
        (Case.BUDGET_SPENT, Door.CALLABLE): Answer(503, "unavailable", True),
        (Case.STORE_UNAVAILABLE, Door.EVENT): Answer(500, "StoreUnavailable", True),
        (Case.STORE_UNAVAILABLE, Door.TASK): Answer(503, "unavailable", True, "queue backs off"),
        (Case.STORE_UNAVAILABLE, Door.HTTP): Answer(503, "store-unavailable", True, _RETRY_AFTER),
        (Case.STORE_UNAVAILABLE, Door.CALLABLE): Answer(503, "unavailable", True),
        (Case.REFUSED_INPUT, Door.EVENT): Answer(400, "MissingEventId", False, "no record"),
        (Case.REFUSED_INPUT, Door.TASK): Answer(400, "invalid-argument", False, "no task name"),
        (Case.REFUSED_INPUT, Door.HTTP): Answer(400, "idempotency-key-missing", False, _OTHER_4XX),
        (Case.REFUSED_INPUT, Door.CALLABLE): Answer(400, "invalid-argument", False, "or 401"),
    }
)
"""Each case at each entrance: what the platform sees. Complete: every (case, door) pair.

`retried` is the platform's own rule for the status: every transport retries a 5xx and a 429;
Pub/Sub push (Eventarc and Firebase events) also redelivers a 400 until its retry window ends
(docs/malformed-input.md), each time refused again without an effect. The HTTP and callable
adapters store their answer with the key, so a given-up request is answered the same way on
every retry (docs/http.md); the event entrance alone reads `on_give_up`."""


def answer(case: Case, door: Door) -> Answer:
    """The answer to `case` at `door` (`ANSWERS`)."""
    return ANSWERS[case, door]


def refusal_status(case: Case, door: Door) -> int:
    """The HTTP status with which `door` refuses `case` (a case answered with a status)."""
    status = ANSWERS[case, door].status
    if status is None:
        raise LookupError(f"{door.value} answers {case.value!r} with the handler's own status")
    return status


def given_up(on_give_up: str) -> Case:
    """The case of an event given up on under `DedupConfig.on_give_up`."""
    return Case.GIVEN_UP_NACK if on_give_up == "nack" else Case.GIVEN_UP_ACK


def case_of(error: BaseException) -> Case | None:
    """The case a dedup error raised out of a delivery stands for; None for any other error
    (the handler's own, or another refusal)."""
    for kind, case in _RAISED:
        if isinstance(error, kind):
            return case
    return None


_RAISED: tuple[tuple[type[BaseException], Case], ...] = (
    (LeaseHeld, Case.LEASE_HELD),
    (LeaseLost, Case.LEASE_LOST),
    (BudgetSpent, Case.BUDGET_SPENT),  # before its base class, StoreUnavailable
    (StoreUnavailable, Case.STORE_UNAVAILABLE),
    (MissingEventId, Case.REFUSED_INPUT),
)


def markdown(proven_by: Mapping[Case, str]) -> str:
    """`ANSWERS` as a Markdown table, one row per case, one column per entrance, and a last
    column naming each case's tests (`proven_by`)."""
    lines = [
        "| the delivery | " + " | ".join(door.value for door in Door) + " | proven by |",
        "|---|" + "---|" * (len(Door) + 1),
    ]
    for case in Case:
        cells = [answer(case, door).sees().replace("|", "\\|") for door in Door]
        lines.append(f"| {case.value} | " + " | ".join(cells) + f" | {proven_by[case]} |")
    return "\n".join(lines) + "\n"
