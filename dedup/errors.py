"""The exceptions of the dedup package: one root, `DedupError`, and a few documented subclasses.

Retryable errors (`LeaseHeld`, `LeaseLost`, `StoreUnavailable`) are meant to escape the function
so that the platform redelivers the event later. Configuration errors (`ConfigError`,
`InvalidSuffix`, `DuplicateSuffix`) are raised at import or decoration time, before any event.
"""

from __future__ import annotations


class DedupError(Exception):
    """Root of every error raised by this package; catch it to handle all of them at once."""


class ConfigError(DedupError, ValueError):
    """A configuration value is invalid; the message names the setting and the accepted form."""


class DatabaseMismatch(ConfigError):
    """Transaction or write-only mode: the handler wrote to another Firestore database than
    the one holding the dedup records, so its writes and the marker cannot commit together.
    Nothing was committed; keep the records in the handler's database (unset DEDUP_DATABASE, or
    set it to that database) or use lease mode (docs/named-databases.md)."""


class MissingEventId(DedupError, ValueError):
    """The event carries no id, so it cannot be deduplicated; the handler was not run.

    Fix the event source (every CloudEvent has an `id`, every Pub/Sub message a `messageId`);
    the package never runs a handler unprotected.
    """


class InvalidSuffix(DedupError, ValueError):
    """A suffix is not 1 to 100 characters of `[A-Za-z0-9_]`; rename it in the decorator."""


class KeyCollision(DedupError):
    """The record at this event's key was written for another event id or suffix.

    Keys cannot collide (`dedup.kernel.transitions`), so the record was written by hand or by an
    older version of this package; inspect it with `dedup show` and delete it if it is stale.
    """


class DuplicateSuffix(DedupError):
    """Two handlers in one process registered the same suffix; give each function its own."""


class LeaseHeld(DedupError):
    """Another live delivery holds the lease on this event; let the platform retry later.

    Raised, not returned, so the platform redelivers: if the holder finishes, the retry is a
    duplicate; if it crashed, the retry takes the lease over once it expires.
    """


class LeaseLost(DedupError):
    """This delivery's lease expired and was taken over; its outcome was not recorded.

    The delivery that took over decides the record. Raise the function's timeout or
    `lease_seconds` if this happens for handlers that are merely slow.
    """


class GivenUp(DedupError):
    """Under `DedupConfig.on_give_up="nack"` (DEDUP_ON_GIVE_UP): this delivery recorded its
    event failed, dead or unknown, or found it so. The handler will not run for it again;
    raised, not returned, so that the transport counts a failed attempt and its dead-letter
    topic ends up keeping the event. Fix the cause, `dedup revive` the record, then redeliver
    the event (`dedup dead-letters redrive`). `trigger_once` answers it 500 with no traceback.
    """


class PayloadMismatch(DedupError):
    """The record for this key was written for an event with a different payload fingerprint.

    Raised only with `on_payload_mismatch="raise"`; by default the mismatch is logged at
    ERROR and the delivery is treated as the recorded event.
    """


class StoreUnavailable(DedupError):
    """Firestore could not be reached or refused a dedup operation; retryable.

    The underlying Google API error is chained as `__cause__`. Let it escape so the platform
    redelivers the event.
    """


class BudgetSpent(StoreUnavailable):
    """The delivery's time budget (`DedupConfig.time_budget`: the function's timeout, else the
    lease's bound) ran out before its work was done, usually while Firestore was contended or
    failing; retryable.

    Nothing is half-written: the handler's writes were not committed (transaction and
    write-only modes) or the handler did not start and the lease was given back (lease mode).
    Let it escape so the platform redelivers the event; the last Firestore error, if any, is
    chained as `__cause__`.
    """


class TerminalError(DedupError):
    """Raise from a handler when retrying cannot help (e.g. a webhook answered 4xx).

    The record becomes `failed`, the delivery returns normally and the event is not retried.
    """


class RecordRefused(TerminalError):
    """A write of the dedup record that Firestore refuses, or would refuse: a durable step's
    name or value it cannot store, or would store as another type (`delivery.step` checks
    before the write, with `dedup.platform.firestore_values`), or a write Firestore refused as
    invalid (`InvalidArgument`: a value it cannot hold, a document past 1 MiB) or its client
    could not encode (the error chained as `__cause__`). A retry would meet the same refusal,
    so it is terminal: the event ends failed, never retried as `StoreUnavailable`."""


class StepInterrupted(DedupError):
    """A step declared `on_interrupted="skip"` (at most once) was started by an earlier
    delivery that never recorded its end: it is not called again. Catch it in the handler to
    carry on without the step's value, or let it end the delivery (retried, and raised again)."""


class StepMismatch(DedupError):
    """This delivery calls its steps in another order than the record holds, one name twice,
    a recorded step with another function or other arguments, or a step while another of its
    steps is running: the handler changed between deliveries, chose its steps from something
    other than the event, or started steps concurrently. Nothing of the step was called or
    written. Fix the handler (docs/steps.md); `dedup show` lists the recorded steps."""


class StepTooLarge(TerminalError):
    """A step's value, or the steps together, is over the record's limit (docs/steps.md):
    nothing was recorded and the event ends failed, since a retry would meet the limit again.
    Return less from the step (an id rather than the whole document)."""
