"""One delivery's `Run` (identity, attempt, `run.budget`, the record checks, its single log
line), which the flows work and report through; and the instance's memory of keys (`SentKeys`,
only keys known sent; `LiveLeases`, only ever "retry later"), which cannot lose an effect."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from dedup.errors import BudgetSpent, ConfigError, KeyCollision, LeaseHeld, PayloadMismatch
from dedup.kernel.claims import AfterFailure, belongs_to, record_sent, retry_age
from dedup.kernel.delivery import (
    NO_NOTES,
    SYNC_DELIVERIES,
    DeliveryKinds,
    HandlerResult,
    Outcome,
    OutcomeKind,
    Step,
    StepHook,
)
from dedup.kernel.record import GIVEN_UP, GIVING_UP, Mode, Record
from dedup.kernel.turns import TurnTimeout
from dedup.telemetry import EXPLAINED, SEVERITY, log_delivery, logs_at

if TYPE_CHECKING:
    from dedup.config import DedupConfig
    from dedup.kernel.budget import Budget
    from dedup.kernel.flow_io import Ambiguity, FlowIO

_DELIVERY_OF: dict[Mode, tuple[int, str | None]] = {
    Mode.LEASE: (0, None),
    Mode.TRANSACTION: (1, "transaction"),
    Mode.WRITE_ONLY: (2, "batch"),
}
"""Per mode: its delivery type's place in `DeliveryKinds`, and the field holding the writer."""


@dataclass
class Run:
    """One `Deduplicator.run` call: who it is, what it found, and the instance it runs on."""

    config: DedupConfig
    io: FlowIO
    """The store, pauses and per-key turns of this instance (sync or async, `kernel.flow_io`)."""
    sent_keys: SentKeys
    live_leases: LiveLeases
    mode: Mode
    event_id: str
    """The event id as stored and logged (lone surrogates escaped, see `kernel.transitions`)."""
    suffix: str
    key: str
    payload_hash: str | None
    budget: Budget
    """This delivery's time: every deadline, RPC timeout and pause (`dedup.kernel.budget`)."""
    subject: str | None = None
    source: str | None = None
    """Where the event came from (the CloudEvent `source`), written on a new record."""
    step_hooks: tuple[StepHook, ...] = ()
    attempt: int = 0
    mismatch: bool = False
    outcome: OutcomeKind | None = None
    """The last outcome `finish` reported (read by `dedup.telemetry`)."""
    found: Record | None = None
    """The final record a duplicate found (`skip`; read by `dedup.telemetry`: its trace id)."""
    ambiguity: Ambiguity | None = None
    """Lease mode: the function's choice for an ambiguous take-over (None: rerun)."""
    refused: Exception | None = None
    """What refused a step of this delivery (`LeaseLost`, `BudgetSpent`), raised again if the
    handler caught it and returned."""
    retry_age: float = 0.0
    """Seconds from the record's first attempt to the read this delivery claimed on (database
    clock, `kernel.claims.retry_age`); 0 for a fresh event."""

    def time_left(self) -> float:
        """Seconds left of the time budget (0 or less: spent): `Delivery.time_left`."""
        return self.budget.left()

    def require_time(self, action: str, cause: BaseException | None = None) -> None:
        """Raise `BudgetSpent` (`spent`) when the time budget is spent, before `action`."""
        if self.budget.left() <= 0:
            self.spent(action, cause)

    def spent(self, action: str, cause: BaseException | None = None) -> NoReturn:
        """Raise `BudgetSpent` before `action`, chaining `cause` (the last store error, if any)."""
        budget = self.budget.length.seconds if self.budget.length else 0.0
        error = (
            f"the delivery's time budget of {budget:g} s is spent before it could {action} "
            f"{self.path}; nothing was committed, the event will be retried"
        )
        if cause is not None:
            error += f" (last error: {cause})"
        raise BudgetSpent(error) from cause

    def turn(self, key: str | None = None) -> AbstractAsyncContextManager[None]:
        """This delivery's turn on its key (or on `key`) among the instance's deliveries
        (`FlowIO.turn`), waited for no longer than the budget allows (then `BudgetSpent`)."""
        return _RunTurn(self, key or self.key)

    @property
    def path(self) -> str:
        """The record's document path."""
        return self.io.path(self.key)

    def step(self, step: Step) -> None:
        """Report reaching `step` to the hooks (`DeduplicatorBase.on_step`), if any."""
        for hook in self.step_hooks:
            hook(step, self.key)

    def identity(self) -> tuple[str, str, str, int, str]:
        """(key, event id, suffix, attempt, path): the fields every delivery type starts with."""
        return (self.key, self.event_id, self.suffix, self.attempt, self.path)

    def delivery(
        self, client: Any, writer: Any = None, kinds: DeliveryKinds = SYNC_DELIVERIES
    ) -> Any:
        """What the handler is told at the current attempt: its mode's delivery type among
        `kinds`, with `client` and the `writer` it writes into (the transaction, the batch, or in
        lease mode the `Lease` its notes go to)."""
        index, writer_field = _DELIVERY_OF[self.mode]
        identity = (self.key, self.event_id, self.suffix, self.attempt, self.path, client)
        if writer_field is None:
            return kinds[0](*identity, run_notes=self if writer is None else writer)
        if writer is None:
            return kinds[0](*identity, run_notes=self)
        return kinds[index](*identity, run_notes=self, **{writer_field: writer})

    @property
    def notes(self) -> Mapping[str, Any]:
        """Nothing noted: a run writes no notes (its lease does, in lease mode)."""
        return NO_NOTES

    def run_step(self, name: str, *call: Any) -> Coroutine[Any, Any, Any]:
        """Refused (`ConfigError`): durable steps are run by a lease (`kernel.lease.Lease`)."""
        raise ConfigError(f"{self.path}: delivery.step serves lease mode only")

    def counted(self, attempt: int) -> None:
        """This delivery is attempt `attempt` of the event (what its claim found or wrote)."""
        self.attempt = attempt

    def saw(self, record: Record, read_time: datetime) -> None:
        """The claim read `record`: check that it is this event's, and take its attempt count
        and age (`kernel.claims.retry_age`)."""
        self.check_record(record)
        self.attempt = record.attempts
        self.retry_age = retry_age(record, read_time)

    def note(self, fields: dict[str, Any]) -> Coroutine[Any, Any, None]:
        """Refused (`ConfigError`): notes are written by a lease (`kernel.lease.Lease.note`)."""
        if self.mode is not Mode.LEASE:
            raise ConfigError(
                f"delivery.note serves lease mode only ({self.path} runs in {self.mode.value} "
                "mode, whose effect commits with the record: nothing is ever ambiguous)"
            )
        raise ConfigError(f"{self.path}: delivery.note is for a handler holding the lease")

    def expire_at(self) -> datetime:
        """`expireAt` for a write made now: instance time plus the retention."""
        return self.config.clock() + timedelta(days=self.config.retention_days)

    def check_record(self, record: Record) -> None:
        """Refuse a record written for another event or suffix; compare payload fingerprints."""
        if not belongs_to(record, self.event_id, self.suffix):
            self.finish(OutcomeKind.UNAVAILABLE, error="key collision")
            raise KeyCollision(
                f"{self.path} holds the record of event {record.event_id!r}, suffix "
                f"{record.suffix!r}, not of event {self.event_id!r}, suffix {self.suffix!r}: "
                "it was written by hand or by an older version whose keys could collide; "
                "inspect it with `dedup show` and delete it if it is stale"
            )
        self.check_payload(record.payload_hash)

    def check_payload(self, recorded: str | None) -> None:
        """Compare fingerprints; under policy "raise" a mismatch raises `PayloadMismatch`."""
        if recorded is None or self.payload_hash is None or recorded == self.payload_hash:
            return
        if self.config.on_payload_mismatch == "raise":
            self.finish(OutcomeKind.PAYLOAD_MISMATCH)
            raise PayloadMismatch(
                f"{self.path} was recorded for a payload with fingerprint {recorded[:12]}…, "
                f"this delivery's is {self.payload_hash[:12]}…: the event id was reused for a "
                "different event; check the event source, or set on_payload_mismatch='log'"
            )
        self.mismatch = True

    def skip(self, record: Record) -> Outcome:
        """A final record: report the duplicate with its stored result (caching a sent key)."""
        self.attempt = record.attempts
        self.found = record
        if record_sent(record):
            self.sent_keys.add(self.key, record.payload_hash)
        return self.finish(OutcomeKind.DUPLICATE, result=record.result)

    def ran(self, result: HandlerResult = None) -> Outcome:
        """The handler ran and its outcome is recorded as sent."""
        self.sent_keys.add(self.key, self.payload_hash)
        return self.finish(OutcomeKind.RAN, result=result)

    def failed(self, after: AfterFailure, error: str, exc: Exception) -> Outcome:
        """Report what a failed handler left behind (`kernel.claims.after_failure`): failed or
        dead end the delivery; released re-raises `exc` for the platform to retry."""
        outcome = self.finish(OutcomeKind(after.value), error=error)
        if after is AfterFailure.RELEASED:
            raise exc
        return outcome

    def raise_lease_held(self, record: Record, read_time: datetime) -> NoReturn:
        """Someone else's lease is live: remember it briefly, log, raise `LeaseHeld`."""
        expires = record.lease_expires_at
        if expires is not None:
            self.live_leases.hold(self.key, (expires - read_time).total_seconds())
        self.finish(OutcomeKind.LEASE_HELD)
        raise LeaseHeld(
            f"{self.path} is leased by another delivery (attempt {record.attempts}) until "
            f"{expires.isoformat() if expires else 'unknown'}; the platform will retry"
        )

    def finish(
        self, kind: OutcomeKind, *, error: str | None = None, result: HandlerResult = None
    ) -> Outcome:
        """Log the delivery's single line and build its `Outcome`."""
        self.outcome = kind
        ms = int(self.budget.elapsed() * 1000)
        level = SEVERITY[kind]
        if self.mismatch:
            level = max(level, logging.ERROR)
        if logs_at(level):
            self._log(kind, level, ms, error)
        gave_up = kind in GIVING_UP or (self.found is not None and self.found.state in GIVEN_UP)
        return Outcome(kind, self.key, self.attempt, ms, result, gave_up)

    def _log(self, kind: OutcomeKind, level: int, ms: int, error: str | None) -> None:
        message = f"{kind.value}: {self.path} (attempt {self.attempt})"
        if self.mismatch:
            message += "; payload fingerprint differs from the recorded event's"
        if kind is OutcomeKind.DEAD:
            message += f"; gave up after {self.attempt} attempts, inspect the record"
        elif kind is OutcomeKind.AMBIGUOUS or kind is OutcomeKind.RECONCILED:
            message += EXPLAINED[kind]
        log_delivery(
            level,
            message,
            event_id=self.event_id,
            suffix=self.suffix,
            key=self.key,
            outcome=kind.value,
            attempt=self.attempt,
            ms=ms,
            error=error,
            path=self.path,
            subject=self.subject,
            budget_source=self.budget.length.source if self.budget.length else None,
        )


class _RunTurn:
    """`Run.turn`'s block: a `TurnTimeout`, entering or leaving, is the budget spent."""

    __slots__ = ("_key", "_run", "_turn")

    def __init__(self, run: Run, key: str) -> None:
        self._run, self._key = run, key

    async def __aenter__(self) -> None:
        run = self._run
        turn = self._turn = run.io.turn(self._key, max(0.0, run.budget.left()))
        try:
            await turn.__aenter__()
        except TurnTimeout as waited:
            run.spent("take its turn on", waited)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        try:
            suppressed = await self._turn.__aexit__(kind, error, traceback)
        except TurnTimeout as waited:
            self._run.spent("take its turn on", waited)
        if isinstance(error, TurnTimeout) and not suppressed:
            self._run.spent("take its turn on", error)
        return suppressed


class SentKeys:
    """LRU set of sent keys (with their payload fingerprint), holding at most `capacity`."""

    def __init__(self, capacity: int) -> None:
        """An empty cache; `capacity` 0 disables it (nothing is ever remembered)."""
        self._capacity = capacity
        self._entries: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Number of keys currently held (never more than the capacity)."""
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Membership test that does not refresh the key's recency."""
        with self._lock:
            return key in self._entries

    def lookup(self, key: str) -> tuple[bool, str | None]:
        """(True, payload hash) if `key` is known sent (refreshing it), else (False, None)."""
        if key not in self._entries:  # a miss, the common case, needs no lock: one read
            return False, None
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def add(self, key: str, payload_hash: str | None) -> None:
        """Remember `key` as sent, evicting the least recently used key beyond capacity."""
        if self._capacity <= 0:
            return
        with self._lock:
            self._entries[key] = payload_hash
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


LIVE_LEASE_HORIZON_SECONDS = 1.0
"""How long a live lease seen in a read is trusted without reading again."""


class LiveLeases:
    """Keys with a lease known live on this instance, each until a local monotonic deadline."""

    def __init__(self, horizon_seconds: float = LIVE_LEASE_HORIZON_SECONDS) -> None:
        """Nothing known; leases seen in reads are trusted for at most `horizon_seconds`."""
        self._horizon = horizon_seconds
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def own(self, key: str, seconds: float) -> None:
        """This process holds the lease of `key` for `seconds` (until `drop`)."""
        self._set(key, seconds)

    def hold(self, key: str, seconds: float) -> None:
        """A read showed another delivery's lease live for `seconds` more (capped)."""
        self._set(key, min(seconds, self._horizon))

    def drop(self, key: str) -> None:
        """Forget `key` (its lease ended here)."""
        with self._lock:
            self._until.pop(key, None)

    def live(self, key: str) -> bool:
        """True while a lease of `key` is known live."""
        if self._until.get(key) is None:  # unknown, the common case, needs no lock: one read
            return False
        with self._lock:
            until = self._until.get(key)
            if until is None:
                return False
            if until <= time.monotonic():
                del self._until[key]
                return False
            return True

    def __len__(self) -> int:
        """Number of keys held (expired ones included until looked up or swept)."""
        with self._lock:
            return len(self._until)

    def _set(self, key: str, seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            self._until[key] = now + max(0.0, seconds)
            if len(self._until) > 10_000:  # sweep: memory stays bounded by live keys
                self._until = {k: t for k, t in self._until.items() if t > now}
