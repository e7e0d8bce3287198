"""How an event function's live-lease refusal reaches the platform: `LeaseHeldAnswer`.

A copy of an event that finds another delivery's lease live raises `LeaseHeld`, so the platform
redelivers it later. Raised as is, functions-framework's Flask app would log a traceback for
every such copy, next to the delivery's own WARNING line (`outcome: lease_held`). `trigger_once`
raises `LeaseHeldAnswer` instead: still a `LeaseHeld` (catch it as one), and also werkzeug's
`InternalServerError`, which Flask answers with 500 without logging a traceback. The status is
the one functions-framework gives any failure (its crash header included), so every transport
retries it as before: Pub/Sub push (and Eventarc over it) nacks every non-2xx, Cloud Scheduler
retries up to the job's `retryCount`.

Imported on the first live lease only: werkzeug comes with functions-framework and Flask, and
`import dedup` does not load it.
"""

from __future__ import annotations

from werkzeug.exceptions import InternalServerError

from dedup.errors import LeaseHeld


class LeaseHeldAnswer(LeaseHeld, InternalServerError):
    """`LeaseHeld` answered 500 by Flask with no traceback; `str()` is the lease's message."""

    def __init__(self, message: str) -> None:
        """The refusal of a copy that found a live lease, saying so in `message`."""
        InternalServerError.__init__(self, description=message)
        self.args = (message,)

    def __str__(self) -> str:
        """The message, as `LeaseHeld` gives it."""
        return str(self.description)


def answer_lease_held(error: LeaseHeld) -> LeaseHeldAnswer:
    """`error` as the answer functions-framework serves without a traceback (raise it `from`
    `error`)."""
    return LeaseHeldAnswer(str(error))
