"""How an event function's refusals reach the platform through functions-framework, in any
project: no traceback for a live lease, a 4xx for a request that is not an event.

**A live lease.** A copy of an event that finds another delivery's lease live raises
`LeaseHeld`, so the platform redelivers it later. Raised as is, functions-framework's Flask app
would log a traceback for every such copy, next to the delivery's own WARNING line (`outcome:
lease_held`). `trigger_once` raises `LeaseHeldAnswer` instead: still a `LeaseHeld` (catch it as
one), and also werkzeug's `InternalServerError`, which Flask answers 500 (functions-framework's
crash header included) without logging a traceback.

**The scheduler wrapper's traceback.** firebase-functions' `scheduler_fn.on_schedule` wrapper
catches every exception of the function itself, logs it with its traceback through the root
logger (`functions_framework.logging.exception`) and answers 500. The first held lease answered
here installs `LoggedRefusals` on the root logger: it drops a record whose exception is a
`LeaseHeldAnswer`, whose WARNING line the delivery already wrote. Every other record, the
function's own errors included, passes untouched.

**An event without an id.** `MissingEventId` raised by the wrapper (an event whose id is empty)
becomes `MissingEventIdAnswer`, a `MissingEventId` and werkzeug's `BadRequest`: 400, nothing
written.

**A request that is not an event.** The platform's decorator (firebase-functions) parses the
request into its event type before `trigger_once`'s wrapper runs; a body it cannot parse (a
truncated protobuf, a Storage object without its fields, a CloudEvent of another shape) raised
an exception there, which functions-framework answered 500, retried for days. When a function is
declared while functions-framework builds its app (its `errorhandler` is then the app's own),
`guard_app` registers `refuse_unparsed`: an exception raised before the wrapper was entered
(`mark_entered`) is answered 400 `{"error": ...}` with one WARNING line on the "dedup" logger
and nothing written; an exception raised after it is the function's own and is re-raised, so
functions-framework answers 500 as before. It registers nothing where the application already
handles `Exception` itself (this template's `functions.boundary`).

**An event given up on.** Under `DedupConfig.on_give_up="nack"` (DEDUP_ON_GIVE_UP, which the
Cloud Run path sets), a delivery that records its event failed, dead or unknown, or finds it so,
raises `GivenUp`; `trigger_once` raises `GivenUpAnswer` instead, 500 without a traceback, so
Pub/Sub counts the attempt and, once its count is spent, forwards the event to the dead-letter
topic, where `dedup dead-letters redrive` finds it after a fix (docs/operations.md).

**What the transports do then.** A 500 is retried by every transport. A 400 ends the request for
a plain HTTP caller; Pub/Sub push, which carries Eventarc and Firebase events, redelivers every
status but 102/200/201/202/204, 4xx included, until its retry window ends, each time answered
400 again without an effect; Cloud Scheduler retries up to the job's `retryCount`
(docs/malformed-input.md). A scheduled function's requests are parsed by firebase-functions'
own wrapper, which answers every exception 500 itself.

Imported when a function is declared under functions-framework, or on the first live lease:
werkzeug and Flask come with functions-framework; `import dedup` alone loads neither.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import flask
from werkzeug.exceptions import BadRequest, HTTPException, InternalServerError

from dedup.errors import GivenUp, LeaseHeld, MissingEventId
from dedup.kernel.delivery import ENTERED_FLAG
from dedup.telemetry import log_delivery


class LeaseHeldAnswer(LeaseHeld, InternalServerError):
    """`LeaseHeld` answered 500 by Flask with no traceback; `str()` is the lease's message."""

    def __init__(self, message: str) -> None:
        """The refusal of a copy that found a live lease, saying so in `message`."""
        InternalServerError.__init__(self, description=message)
        self.args = (message,)

    def __str__(self) -> str:
        """The message, as `LeaseHeld` gives it."""
        return str(self.description)


class MissingEventIdAnswer(MissingEventId, BadRequest):
    """`MissingEventId` (an event without an id, a scheduled request without a usable schedule
    time) answered 400 by Flask with no traceback: nothing ran, nothing was written."""

    def __init__(self, message: str) -> None:
        """The refusal of an event that cannot be deduplicated, saying why in `message`."""
        BadRequest.__init__(self, description=message)
        self.args = (message,)

    def __str__(self) -> str:
        """The message, as `MissingEventId` gives it."""
        return str(self.description)


class GivenUpAnswer(GivenUp, InternalServerError):
    """`GivenUp` answered 500 by Flask with no traceback; `str()` is its message."""

    def __init__(self, message: str) -> None:
        """The refusal of a delivery of an event given up on, saying so in `message`."""
        InternalServerError.__init__(self, description=message)
        self.args = (message,)

    def __str__(self) -> str:
        """The message, as `GivenUp` gives it."""
        return str(self.description)


ANSWERS = (LeaseHeldAnswer, MissingEventIdAnswer, GivenUpAnswer)
"""The refusals already in the form functions-framework answers."""


class LoggedRefusals(logging.Filter):
    """Drops a log record whose exception is a held lease or an event given up on, answered by
    dedup (`LeaseHeldAnswer`, `GivenUpAnswer`): the delivery logged it already as its single
    line. Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False only for a record carrying a `LeaseHeldAnswer` or `GivenUpAnswer`."""
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, LeaseHeldAnswer | GivenUpAnswer)


_ROOT_FILTER = LoggedRefusals()


def mute_logged_refusals() -> None:
    """Install `LoggedRefusals` on the root logger, once (the scheduler wrapper logs there)."""
    root = logging.getLogger()
    if _ROOT_FILTER not in root.filters:
        root.addFilter(_ROOT_FILTER)


def answer_lease_held(error: LeaseHeld) -> LeaseHeldAnswer:
    """`error` as the answer functions-framework serves without a traceback (raise it `from`
    `error`); a wrapper that logs every exception itself (the scheduler's) logs none for it."""
    mute_logged_refusals()
    return LeaseHeldAnswer(str(error))


def answer_given_up(error: GivenUp) -> GivenUpAnswer:
    """`error` as the 500 functions-framework serves without a traceback (raise it `from`
    `error`); a wrapper that logs every exception itself (the scheduler's) logs none for it."""
    mute_logged_refusals()
    return GivenUpAnswer(str(error))


def answer_missing_id(error: MissingEventId) -> MissingEventIdAnswer:
    """`error` as a 400 functions-framework serves without a traceback."""
    return MissingEventIdAnswer(str(error))


def refuse_unparsed(error: Exception) -> Any:
    """Flask error handler: an exception raised before the dedup wrapper was entered is a
    request the platform's decorator could not parse, answered 400 with one WARNING line; one
    raised after is re-raised (functions-framework's 500). HTTP errors pass through as they are."""
    if isinstance(error, HTTPException):
        return error
    if flask.g.get(ENTERED_FLAG):
        raise error
    why = "the request is not an event this function can read"
    log_delivery(logging.WARNING, f"refused (400): {why}", outcome="refused")
    return json.dumps({"error": why}), 400, {"Content-Type": "application/json"}


def guard_app(errorhandler: Any) -> bool:
    """Register `refuse_unparsed` with functions-framework's `errorhandler` when it is an app's
    own (functions-framework is building that app) and the app handles no `Exception` yet;
    whether it did."""
    app = getattr(errorhandler, "__self__", None)
    if not isinstance(app, flask.Flask):
        return False
    handlers = app.error_handler_spec.get(None, {}).get(None, {})
    if Exception in handlers:
        return handlers[Exception] is refuse_unparsed
    errorhandler(Exception)(refuse_unparsed)
    return True
