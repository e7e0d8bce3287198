"""What a handler is told (`Delivery`), what a delivery did (`Outcome`), the points it passes
(`Step`), how an entrance hands a front door one event (`EventOptions`), and the blocking
driver that runs a sync delivery's flow on the caller's thread (`drive`)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from google.cloud import firestore

from dedup.errors import ConfigError
from dedup.kernel.record import RERUN, STEP_NAME, Mode
from dedup.kernel.record import OutcomeKind as OutcomeKind  # its home is the record's schema

if TYPE_CHECKING:
    from dedup.config import TimeBudget


@dataclass(frozen=True)
class Outcome:
    """The result of a delivery that returned normally."""

    kind: OutcomeKind
    key: str
    """The record's document id."""
    attempt: int
    """The attempt number this delivery ran or found (0 when it never touched a record)."""
    ms: int
    """Wall time of the delivery, milliseconds."""
    result: Mapping[str, Any] | None = None
    """What the handler returned: its return value when it ran now, the stored one for a
    duplicate read from the record (None for `duplicate_cached`: the cache keeps no results)."""
    gave_up: bool = False
    """This delivery recorded the event failed, dead or unknown, or found it so: nothing runs it
    until `dedup revive`. `trigger_once` raises `GivenUp` for it under DEDUP_ON_GIVE_UP=nack."""


class Step(StrEnum):
    """Named points of a delivery, in the order it reaches them (`Deduplicator.on_step`):
    crash tests stop a process at a step and kill it; nothing else depends on them."""

    BEFORE_CLAIM = "before_claim"
    """`run` entered, no Firestore call yet."""
    AFTER_CLAIM = "after_claim"
    """Lease mode: the lease is ours. Atomic modes: the marker was read (or assumed absent)."""
    AFTER_EFFECT = "after_effect"
    """The handler returned; lease mode: "sent" not recorded yet; atomic modes: the writes and
    the marker are buffered, the commit not yet sent."""
    AFTER_MARK = "after_mark"
    """The outcome is recorded (lease mode) or committed (atomic modes)."""
    BEFORE_STEP = "before_step"
    """`delivery.step`: a step not recorded yet starts (at most once: before its start)."""
    AFTER_STEP_CALL = "after_step_call"
    """A plain or at-most-once step's call returned; its value is not recorded yet."""
    AFTER_STEP_RECORD = "after_step_record"
    """A step's value is recorded (a transactional step's with its writes)."""


NO_NOTES: Mapping[str, Any] = MappingProxyType({})
"""The notes of a delivery when nothing was noted (read-only, shared)."""


class RunNotes(Protocol):
    """Where a delivery's notes live: in lease mode its `Lease`, which writes them fenced;
    otherwise its `Run`, which refuses to note."""

    @property
    def notes(self) -> Mapping[str, Any]:
        """What was noted for this event so far."""
        ...

    def note(self, fields: dict[str, Any]) -> Coroutine[Any, Any, None]:
        """Record `fields` with the notes (one fenced write; `LeaseLost`, `ConfigError`)."""
        ...

    def time_left(self) -> float:
        """Seconds left of the delivery's time budget (0 or less: spent)."""
        ...

    def run_step(self, name: str, *how: Any) -> Coroutine[Any, Any, Any]:
        """`delivery.step(name, ...)` (`Lease.run_step`); `ConfigError` without a lease."""
        ...


@dataclass(frozen=True)
class DeliveryIdentity:
    """Who a delivery is: what `Delivery` and `dedup.aio.AsyncDelivery` share."""

    key: str
    """The record's document id: stable across every delivery of this event to this function."""
    event_id: str
    """The original event id."""
    suffix: str
    """The function's suffix."""
    attempt: int
    """1-based attempt number (see `Mode` for which attempts each mode counts)."""
    path: str
    """The record's document path, `triggerEvents/<key>`."""
    run_notes: RunNotes | None = field(default=None, kw_only=True, repr=False, compare=False)
    """Where `note` writes (set by the deduplicator; None for a delivery built by hand)."""

    @property
    def notes(self) -> Mapping[str, Any]:
        """What earlier attempts noted for this event (`note`), for `reconcile` to look their
        effect up (empty on a fresh delivery), and this delivery's own notes. Read-only."""
        return self.run_notes.notes if self.run_notes is not None else NO_NOTES

    def time_left(self) -> float | None:
        """Seconds left of this delivery's time budget (the function's timeout), never below
        0; None for a delivery built by hand. Bound the handler's own calls by it, retries
        included: `dedup` bounds its own work, not the handler's (docs/configuration.md)."""
        if self.run_notes is None:
            return None
        return max(0.0, self.run_notes.time_left())

    def step_key(self, name: str) -> str:
        """Step `name`'s idempotency key, `<key>/<name>`: the same on every delivery, different
        for each step; send it to the API the step calls (docs/steps.md)."""
        if not isinstance(name, str) or not re.fullmatch(STEP_NAME, name):
            raise ConfigError(f"step name {name!r} must be 1 to 100 of [A-Za-z0-9_.-]")
        return f"{self.key}/{name}"

    def _notes_of_run(self) -> RunNotes:
        if self.run_notes is None:
            raise ConfigError(
                "this delivery was not made by a deduplicator: there is no record to note into"
            )
        return self.run_notes


@dataclass(frozen=True)
class Delivery(DeliveryIdentity):
    """What a handler learns about its delivery; pass `key` downstream as an Idempotency-Key."""

    client: firestore.Client
    """The deduplicator's Firestore client (one per instance): use it for the handler's own
    reads and writes rather than creating a client per event."""
    transaction: firestore.Transaction | None = field(default=None, kw_only=True)
    """Mode.TRANSACTION: read and write through it; its writes commit with the marker. Annotate
    the handler's parameter as `TransactionDelivery` to have it typed as always present."""
    batch: firestore.WriteBatch | None = field(default=None, kw_only=True)
    """Mode.WRITE_ONLY: add writes to it; they commit with the marker's create. Annotate the
    handler's parameter as `WriteOnlyDelivery` to have it typed as always present."""

    def note(self, **fields: Any) -> None:
        """Merge `fields` (Firestore values) into the record's `notes` before the effect, for a
        later delivery's `reconcile` to find it (`notes`), in one write fenced by the lease.
        Lease mode only (`ConfigError` otherwise). Raises `LeaseLost` when the lease is lost,
        `RecordRefused` (nothing written) for notes Firestore would refuse."""
        drive(self._notes_of_run().note(fields))

    def step[T](
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        transactional: bool = False,
        on_interrupted: str | None = None,
        **kwargs: Any,
    ) -> T:
        """A durable step (lease mode, docs/steps.md): `fn(*args, **kwargs)`, its value recorded
        under `name` (one write fenced by the lease, which it renews); a later delivery gets
        the recorded value without calling `fn`. `transactional=True`: `fn(transaction, ...)`
        commits with its record (exactly once); `on_interrupted="skip"`: at most once
        (`StepInterrupted`). Raises `StepMismatch`, `StepTooLarge`, `LeaseLost`."""
        notes = self._notes_of_run()
        step = notes.run_step(name, fn, args, kwargs, transactional, on_interrupted, False)
        return cast(T, drive(step))


@dataclass(frozen=True)
class TransactionDelivery(Delivery):
    """The delivery a transaction-mode handler gets: `transaction` is always set."""

    transaction: firestore.Transaction = field(kw_only=True)
    """The transaction the handler reads and writes through; it commits with the marker."""


@dataclass(frozen=True)
class WriteOnlyDelivery(Delivery):
    """The delivery a write-only-mode handler gets: `batch` is always set."""

    batch: firestore.WriteBatch = field(kw_only=True)
    """The batch the handler adds writes to; it commits with the marker's create."""


HandlerResult = Mapping[str, Any] | None
"""What a handler may return: None, or a map of Firestore values stored with "sent" (see
`dedup.kernel.transitions.MAX_RESULT_BYTES`) and handed to later duplicates as `Outcome.result`."""

Handler = Callable[[Delivery], HandlerResult]
"""The explicit form's handler: called with the delivery; returns None or a result map."""


StepHook = Callable[[Step, str], None]
"""`hook(step, key)`: called at each `Step` of a delivery (tests, tracing)."""


ENTERED_FLAG = "dedup_entered"
"""The `flask.g` attribute `mark_entered` sets: the request reached a dedup wrapper."""


def mark_entered() -> None:
    """Note on the request Flask serves that it reached a dedup wrapper: its failures from here
    on are the function's own (500), not a request that is no event (400)."""
    flask = sys.modules.get("flask")
    if flask is not None and flask.has_app_context():
        setattr(flask.g, ENTERED_FLAG, True)


class EventOptions(NamedTuple):
    """How one event is run, besides its id, suffix and handler, as every entrance hands it to
    a front door's `run_event`: `Deduplicator.run`'s keywords and the time `budget` found."""

    mode: Mode = Mode.LEASE
    payload: bytes | str | None = None
    """Canonical bytes or text, fingerprinted to detect a key reused for another event."""
    event_time: datetime | None = None
    """When the event happened (the maximum-age check)."""
    document_path: str | None = None
    """The triggering document (the self-trigger guard; the default subject)."""
    subject: str | None = None
    """What the event is about, recorded for operators (`dedup list --subject`)."""
    database: str | None = None
    """The Firestore database the event came from (where its records live by default)."""
    reconcile: Reconcile | None = None
    """Lease mode: asked whether an earlier attempt produced the effect (`kernel.ambiguity`)."""
    on_ambiguous: str = RERUN
    """Lease mode: what an ambiguous take-over does when nothing could tell."""
    source: str | None = None
    """Where the event came from (the CloudEvent `source`), kept on the record."""
    budget: TimeBudget | None = None  # of the function's declared timeout; None: the config's

    @property
    def chooses_ambiguity(self) -> bool:
        """The function made a choice for an ambiguous take-over (not the default)."""
        return self.reconcile is not None or self.on_ambiguous != RERUN


type Reconcile = Callable[[Any], bool | None] | Callable[[Any], Coroutine[Any, Any, bool | None]]
"""`reconcile(delivery) -> True | False | None` (or `async def`): see `dedup.kernel.ambiguity`."""

type DeliveryKinds = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]
"""The delivery types of one path: (lease mode, transaction mode, write-only mode)."""

SYNC_DELIVERIES: DeliveryKinds = (Delivery, TransactionDelivery, WriteOnlyDelivery)
"""What sync handlers get (`dedup.aio.delivery.ASYNC_DELIVERIES`: async handlers)."""


def drive[T](flow: Coroutine[Any, Any, T]) -> T:
    """Run a flow that never suspends (a `RecordStore` over a sync client) to its end on the
    caller's thread, without an event loop."""
    try:
        flow.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    flow.close()
    raise RuntimeError(
        "a dedup flow suspended under the blocking driver: it awaited something that is not "
        "a sync store's; run async handlers through dedup.aio.AsyncDeduplicator"
    )


def driven[T](step: Callable[[Any], Coroutine[Any, Any, T]]) -> Callable[[Any], T]:
    """`step` as a plain function, its coroutine run by `drive` (a fill for a library's
    transaction or batch, which calls plain functions)."""
    return lambda writer: drive(step(writer))
