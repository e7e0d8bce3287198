"""The decisions: claim a record, run the handler once, record the outcome (`Deduplicator`).

Every claim decision is spelled out as a named condition (`record_absent`, `record_sent`,
`record_finished`, `lease_live_other_owner`, `lease_expired`, `lease_released`,
`attempts_exhausted`) and combined in `decide`. Firestore calls live in `dedup.store`.

Lease mode, per delivery:

1. key in the per-instance LRU of keys known sent -> `duplicate_cached`, no RPC;
2. create the record with an exists=false precondition (1 RPC, the common case);
3. if it exists, read it and `decide` on the database's read time; take over with an
   update-time precondition, re-reading when someone else moved the record first;
4. run the handler; mark sent / failed / dead, or release and re-raise, each write guarded by
   the update time of this owner's last write (the fencing token): a stale owner gets
   `LeaseLost` and records nothing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum, StrEnum
from typing import Any, NoReturn

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from dedup import logs
from dedup.cache import KeyTurns, SentKeys
from dedup.config import DedupConfig
from dedup.errors import (
    LeaseHeld,
    LeaseLost,
    PayloadMismatch,
    StoreUnavailable,
    TerminalError,
)
from dedup.keys import dedup_key, payload_hash
from dedup.record import Field, Mode, Record, State, error_text
from dedup.store import (
    SERVER_TIMESTAMP,
    Fields,
    RecordStore,
    Snapshot,
    failed_attempt,
    finished,
    lease_taken,
    new_record,
    released,
)

CLAIM_ROUNDS = 8
"""Re-reads allowed when another delivery keeps changing the record under a precondition."""

TRANSACTION_ROUNDS = 12
"""Transactions started (each retried by the client up to `TRANSACTION_ATTEMPTS`) before
contention is reported as `StoreUnavailable`."""

TRANSACTION_ATTEMPTS = 3
"""`max_attempts` of each Firestore transaction (commit retries on Aborted)."""

BACKOFF_BASE_SECONDS = 0.02
BACKOFF_CAP_SECONDS = 0.5


class OutcomeKind(StrEnum):
    """What a delivery did; the `outcome` field of its log line."""

    RAN = "ran"
    """The handler ran and its outcome was recorded (sent)."""
    DUPLICATE = "duplicate"
    """The record is final (sent, failed or dead): handler skipped, returned normally."""
    DUPLICATE_CACHED = "duplicate_cached"
    """Same, known from the instance's LRU: no round trip."""
    LEASE_HELD = "lease_held"
    """Another live delivery holds the lease: `LeaseHeld` raised (log only)."""
    RELEASED = "released"
    """The handler raised: lease released, error recorded, exception re-raised (log only)."""
    FAILED = "failed"
    """The handler raised `TerminalError`: recorded as failed, returned normally."""
    DEAD = "dead"
    """`max_attempts` reached: recorded as dead, returned normally."""
    TOO_OLD = "too_old"
    """The event is older than `max_event_age_seconds`: dropped, returned normally."""
    SELF_TRIGGER = "self_trigger"
    """The event is about a document of the dedup collection itself: ignored, no record."""
    LEASE_LOST = "lease_lost"
    """This delivery's lease was taken over before it finished: `LeaseLost` raised (log only)."""
    UNAVAILABLE = "unavailable"
    """Firestore failed: `StoreUnavailable` raised (log only)."""
    PAYLOAD_MISMATCH = "payload_mismatch"
    """Recorded fingerprint differs and the policy is "raise": `PayloadMismatch` raised."""


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


@dataclass(frozen=True)
class Delivery:
    """What a handler learns about its delivery; pass `key` downstream as an Idempotency-Key."""

    key: str
    """The record's document id: stable across every delivery of this event to this function."""
    event_id: str
    """The original event id."""
    suffix: str
    """The function's suffix."""
    attempt: int
    """1-based attempt number (crashed attempts count)."""
    path: str
    """The record's document path, `triggerEvents/<key>`."""
    client: firestore.Client
    """The deduplicator's Firestore client (one per instance): use it for the handler's own
    reads and writes rather than creating a client per event."""
    transaction: firestore.Transaction | None = None
    """Mode.TRANSACTION: read and write through it; its writes commit with the marker."""
    batch: firestore.WriteBatch | None = None
    """Mode.WRITE_ONLY: add writes to it; they commit with the marker's create."""


Handler = Callable[[Delivery], None]
"""The explicit form's handler: called with the delivery, returns nothing."""


# --- Named claim conditions ----------------------------------------------------------------


def record_absent(record: Record | None) -> bool:
    """No record: nobody has started this event for this function."""
    return record is None


def record_sent(record: Record) -> bool:
    """The effect is done and recorded: every other delivery is a duplicate."""
    return record.state is State.SENT


def record_finished(record: Record) -> bool:
    """Failed (terminal) or dead (poison): skipped like a duplicate, the state is reported."""
    return record.state in (State.FAILED, State.DEAD)


def lease_live_other_owner(record: Record, read_time: datetime) -> bool:
    """Another delivery holds a lease that has not expired on the database clock."""
    return record.lease_live(read_time)


def lease_expired(record: Record, read_time: datetime) -> bool:
    """A lease is held but expired on the database clock: its owner is presumed dead."""
    return record.has_lease and not record.lease_live(read_time)


def lease_released(record: Record) -> bool:
    """No lease: the last attempt failed and released it, so anyone may try again."""
    return not record.has_lease


def attempts_exhausted(record: Record, max_attempts: int) -> bool:
    """The record already used every allowed attempt: the event is poison."""
    return record.attempts >= max_attempts


class Claim(Enum):
    """What a delivery does after reading the record."""

    CREATE = "create"
    SKIP = "skip"
    WAIT = "wait"
    TAKE_OVER = "take_over"
    BURY = "bury"


def decide(record: Record | None, read_time: datetime, max_attempts: int) -> Claim:
    """The lease-mode decision for a record read at `read_time` (database clock only)."""
    if record is None or record_absent(record):
        return Claim.CREATE
    if record_sent(record) or record_finished(record):
        return Claim.SKIP
    if lease_live_other_owner(record, read_time):
        return Claim.WAIT
    if lease_expired(record, read_time) or lease_released(record):
        return Claim.BURY if attempts_exhausted(record, max_attempts) else Claim.TAKE_OVER
    raise AssertionError(f"unreachable claim state for {record!r}")  # pragma: no cover


# --- The deduplicator ---------------------------------------------------------------------


@dataclass
class _Run:
    """Mutable bookkeeping of one `run` call, for its single log line."""

    mode: Mode
    event_id: str
    suffix: str
    key: str
    path: str
    payload_hash: str | None
    started: float = field(default_factory=time.monotonic)
    attempt: int = 0
    mismatch: bool = False

    def delivery(
        self,
        client: firestore.Client,
        *,
        transaction: firestore.Transaction | None = None,
        batch: firestore.WriteBatch | None = None,
    ) -> Delivery:
        """What the handler is told about this run, at its current attempt."""
        return Delivery(
            key=self.key,
            event_id=self.event_id,
            suffix=self.suffix,
            attempt=self.attempt,
            path=self.path,
            client=client,
            transaction=transaction,
            batch=batch,
        )


class _HandlerFailed(Exception):
    """Carries a handler's exception out of a Firestore transaction."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


_SEVERITY = {
    OutcomeKind.RAN: logging.INFO,
    OutcomeKind.DUPLICATE: logging.INFO,
    OutcomeKind.DUPLICATE_CACHED: logging.INFO,
    OutcomeKind.SELF_TRIGGER: logging.INFO,
    OutcomeKind.LEASE_HELD: logging.WARNING,
    OutcomeKind.RELEASED: logging.WARNING,
    OutcomeKind.TOO_OLD: logging.WARNING,
    OutcomeKind.UNAVAILABLE: logging.WARNING,
    OutcomeKind.FAILED: logging.ERROR,
    OutcomeKind.DEAD: logging.ERROR,
    OutcomeKind.LEASE_LOST: logging.ERROR,
    OutcomeKind.PAYLOAD_MISMATCH: logging.ERROR,
}


class Deduplicator:
    """Runs handlers at most once per (event id, suffix), effectively once with retries.

    Thread-safe: one instance serves every request thread of a process. The Firestore client
    is created lazily, once, on the first delivery (constructing a Deduplicator touches no
    network), from `client`, else `client_factory()`, else `firestore.Client(project,
    database)` of the config.
    """

    def __init__(
        self,
        config: DedupConfig | None = None,
        *,
        client: firestore.Client | None = None,
        client_factory: Callable[[], firestore.Client] | None = None,
    ) -> None:
        """Use `config` (default: `DedupConfig.from_env()`)."""
        self.config = config if config is not None else DedupConfig.from_env()
        self._client = client
        self._client_factory = client_factory
        self._store: RecordStore | None = None
        self._lock = threading.Lock()
        self.sent_keys = SentKeys(self.config.cache_size)
        """The LRU of keys known sent (exposed for inspection)."""
        self._turns = KeyTurns()

    @property
    def store(self) -> RecordStore:
        """The record store, creating the Firestore client on first use."""
        if self._store is None:
            with self._lock:
                if self._store is None:
                    client = self._client
                    if client is None:
                        factory = self._client_factory or self._default_client
                        client = factory()
                    self._store = RecordStore(
                        client,
                        self.config.collection,
                        rpc_timeout_seconds=self.config.rpc_timeout_seconds,
                    )
        return self._store

    def _default_client(self) -> firestore.Client:
        return firestore.Client(project=self.config.project, database=self.config.database)

    def run(
        self,
        event_id: str | None,
        suffix: str,
        handler: Handler,
        *,
        mode: Mode = Mode.LEASE,
        payload: bytes | str | None = None,
        event_time: datetime | None = None,
        document_path: str | None = None,
    ) -> Outcome:
        """Run `handler` for this event unless its record says it already ran.

        Returns the outcome when the platform should stop retrying (ran, duplicate, failed,
        dead, too_old, self_trigger). Raises `LeaseHeld`, `LeaseLost`, `StoreUnavailable` or
        the handler's own exception when it should retry; `MissingEventId`/`InvalidSuffix`
        for a bad key; `PayloadMismatch` under that policy. `payload` (canonical bytes or
        text) is fingerprinted to detect a key reused for a different event;
        `document_path` enables the self-trigger guard.
        """
        mode = Mode(mode)
        key = dedup_key(event_id, suffix)
        assert event_id is not None  # dedup_key rejects a missing id
        fingerprint = None
        if payload is not None:
            raw = payload.encode("utf-8") if isinstance(payload, str) else payload
            fingerprint = payload_hash(raw)
        delivery = _Run(
            mode=mode,
            event_id=event_id,
            suffix=suffix,
            key=key,
            path=f"{self.config.collection}/{key}",
            payload_hash=fingerprint,
        )
        if document_path is not None and self._inside_collection(document_path):
            return self._finish(delivery, OutcomeKind.SELF_TRIGGER)
        if self._too_old(event_time):
            return self._finish(delivery, OutcomeKind.TOO_OLD)
        known, cached_hash = self.sent_keys.lookup(key)
        if known:
            self._check_payload(delivery, cached_hash)
            return self._finish(delivery, OutcomeKind.DUPLICATE_CACHED)
        try:
            if mode is Mode.LEASE:
                return self._run_lease(delivery, handler)
            if mode is Mode.TRANSACTION:
                with self._turns.turn(key):
                    return self._run_atomic(delivery, handler)
            if mode is Mode.WRITE_ONLY:
                return self._run_atomic(delivery, handler)
            raise ValueError(f"unknown mode {mode!r}; use one of {[m.value for m in Mode]}")
        except StoreUnavailable as exc:
            self._finish(delivery, OutcomeKind.UNAVAILABLE, error=str(exc))
            raise

    # --- Lease mode -----------------------------------------------------------------------

    def _run_lease(self, d: _Run, handler: Handler) -> Outcome:
        config, records = self.config, self.store
        owner = uuid.uuid4().hex
        try_create = True
        for _ in range(CLAIM_ROUNDS):
            if try_create:
                # Create first: the common case is a fresh event with no record, which this
                # settles in one round trip (exists=false precondition) without a read.
                token = records.create(
                    d.key,
                    new_record(
                        event_id=d.event_id,
                        suffix=d.suffix,
                        mode=Mode.LEASE,
                        state=State.IN_PROGRESS,
                        owner=owner,
                        lease_seconds=config.lease_seconds,
                        payload_hash=d.payload_hash,
                        expire_at=self._expire_at(),
                    ),
                )
                if token is not None:
                    d.attempt = 1
                    return self._run_owned(d, handler, token)
            snapshot = records.read(d.key)
            record = snapshot.record
            claim = decide(record, snapshot.read_time, config.max_attempts)
            try_create = claim is Claim.CREATE
            if record is None:  # vanished (TTL) between the create and the read
                continue
            d.attempt = record.attempts
            self._check_payload(d, record.payload_hash)
            if claim is Claim.SKIP:
                return self._skip(d, record)
            if claim is Claim.WAIT:
                self._raise_lease_held(d, record)
            if claim is Claim.BURY:
                if self._bury(d, record, snapshot):
                    return self._finish(d, OutcomeKind.DEAD, error=record.last_error)
                continue
            token = records.update_if_unchanged(
                d.key,
                lease_taken(
                    owner=owner,
                    lease_seconds=config.lease_seconds,
                    attempts=record.attempts + 1,
                    expire_at=self._expire_at(),
                ),
                _precondition(snapshot),
                action="take over the lease of",
            )
            if token is not None:
                d.attempt = record.attempts + 1
                return self._run_owned(d, handler, token)
        self._finish(d, OutcomeKind.LEASE_HELD, error="record kept changing")
        raise LeaseHeld(
            f"{d.path} changed {CLAIM_ROUNDS} times while this delivery tried to claim it; "
            "another delivery is working on it, the platform will retry"
        )

    def _run_owned(self, d: _Run, handler: Handler, token: datetime) -> Outcome:
        """Run the handler under our lease; every write is fenced by our last update time."""
        try:
            handler(d.delivery(self.store.client))
        except TerminalError as exc:
            error = error_text(exc)
            self._end_owned(d, token, finished(State.FAILED, **self._end(error)), "mark failed")
            return self._finish(d, OutcomeKind.FAILED, error=error)
        except Exception as exc:
            error = error_text(exc)
            if d.attempt >= self.config.max_attempts:
                self._end_owned(d, token, finished(State.DEAD, **self._end(error)), "mark dead")
                return self._finish(d, OutcomeKind.DEAD, error=error)
            self._end_owned(d, token, released(**self._end(error)), "release")
            self._finish(d, OutcomeKind.RELEASED, error=error)
            raise
        self._end_owned(d, token, finished(State.SENT, expire_at=self._expire_at()), "mark sent")
        self.sent_keys.add(d.key, d.payload_hash)
        return self._finish(d, OutcomeKind.RAN)

    def _end_owned(self, d: _Run, token: datetime, fields: Fields, action: str) -> None:
        """Write `fields` only if the record is still as our last write left it (we own it)."""
        if self.store.update_if_unchanged(d.key, fields, token, action=action) is None:
            self._finish(d, OutcomeKind.LEASE_LOST)
            raise LeaseLost(
                f"could not {action} {d.path}: this delivery's lease expired and another "
                "delivery took it over, so this outcome was not recorded; set lease_seconds "
                "(DEDUP_LEASE_SECONDS) above the function timeout"
            )

    def _bury(self, d: _Run, record: Record, snapshot: Snapshot) -> bool:
        """Mark a record with no attempts left as dead; False if it changed meanwhile."""
        fields = finished(State.DEAD, **self._end(record.last_error))
        done = self.store.update_if_unchanged(
            d.key, fields, _precondition(snapshot), action="mark dead"
        )
        return done is not None

    def _raise_lease_held(self, d: _Run, record: Record) -> NoReturn:
        expires = record.lease_expires_at
        self._finish(d, OutcomeKind.LEASE_HELD)
        raise LeaseHeld(
            f"{d.path} is leased by another delivery (attempt {record.attempts}) until "
            f"{expires.isoformat() if expires else 'unknown'}; the platform will retry"
        )

    # --- Transaction mode -----------------------------------------------------------------

    def _run_atomic(self, d: _Run, handler: Handler) -> Outcome:
        """Transaction and write-only modes: the handler's writes and the sent marker commit
        together or not at all; no lease.

        The marker is written blind, never read inside the transaction: a create with an
        exists=false precondition, or an update guarded by the update time of the record as
        last read. A read inside would take a lock on which concurrent deliveries of the event
        deadlock until the database aborts them. A failed precondition means another delivery
        wrote the marker meanwhile; a plain read then decides. Transaction mode reads first
        (a duplicate then costs that one read); write-only mode assumes the common case, no
        record, and settles a fresh event in its single commit.
        """
        records = self.store
        snapshot = records.read(d.key) if d.mode is Mode.TRANSACTION else None
        last: BaseException | None = None
        for round_ in range(TRANSACTION_ROUNDS):
            record = snapshot.record if snapshot else None
            if snapshot is not None and record is not None:
                d.attempt = record.attempts
                self._check_payload(d, record.payload_hash)
                if record.is_final:
                    return self._skip(d, record)
                if attempts_exhausted(record, self.config.max_attempts):
                    if self._bury(d, record, snapshot):
                        return self._finish(d, OutcomeKind.DEAD, error=record.last_error)
                    snapshot = records.read(d.key)
                    continue
            d.attempt = (record.attempts if record else 0) + 1
            guard = None if snapshot is None or record is None else _precondition(snapshot)
            try:
                committed = self._commit_atomic(d, handler, record, guard)
            except _HandlerFailed as failed:
                return self._record_failed_attempt(d, failed.error)
            except api_exceptions.Aborted as exc:  # the handler's own reads met contention
                last = exc
                _backoff(round_)
                snapshot = records.read(d.key)
                continue
            if committed:
                self.sent_keys.add(d.key, d.payload_hash)
                return self._finish(d, OutcomeKind.RAN)
            snapshot = records.read(d.key)  # created or changed by someone else: look
        raise self._unavailable(f"commit ({TRANSACTION_ROUNDS} rounds) on", d, last) from last

    def _commit_atomic(
        self, d: _Run, handler: Handler, record: Record | None, guard: datetime | None
    ) -> bool:
        """Run the handler into a batch or transaction with the marker; False if the marker's
        precondition failed (nothing applied). Raises `_HandlerFailed` for the handler's error,
        `Aborted` for contention, `StoreUnavailable` for anything else from Firestore."""
        client = self.store.client
        ref = self.store.ref(d.key)
        option = None if guard is None else client.write_option(last_update_time=guard)
        if d.mode is Mode.WRITE_ONLY:
            batch = client.batch()
            _run_handler(handler, d.delivery(client, batch=batch))
            self._write_sent_marker(batch, ref, d, record, option)
            return self.store.commit_batch(batch, d.key)

        def body(transaction: firestore.Transaction) -> None:
            _run_handler(handler, d.delivery(client, transaction=transaction))
            self._write_sent_marker(transaction, ref, d, record, option)

        try:
            firestore.transactional(body)(client.transaction(max_attempts=TRANSACTION_ATTEMPTS))
        except Exception as exc:
            # The client's retry wrapper and its rollback may wrap what happened: look inside.
            if (failed := _find_in_chain(exc, _HandlerFailed)) is not None:
                raise failed from None
            if any(_find_in_chain(exc, kind) for kind in _MARKER_PRECONDITION_FAILED):
                return False
            if (aborted := _find_in_chain(exc, api_exceptions.Aborted)) is not None:
                raise aborted from None
            raise self._unavailable("run the transaction on", d, exc) from exc
        return True

    def _write_sent_marker(
        self,
        writer: firestore.WriteBatch,
        ref: firestore.DocumentReference,
        d: _Run,
        record: Record | None,
        option: Any = None,
    ) -> None:
        """Add the sent marker to a transaction or batch: a create, or an update of `record`."""
        if record is None:
            writer.create(
                ref,
                new_record(
                    event_id=d.event_id,
                    suffix=d.suffix,
                    mode=d.mode,
                    state=State.SENT,
                    owner=None,
                    lease_seconds=0,
                    payload_hash=d.payload_hash,
                    expire_at=self._expire_at(),
                    attempts=d.attempt,
                ),
            )
            return
        fields = finished(State.SENT, expire_at=self._expire_at())
        fields[Field.ATTEMPTS] = d.attempt
        fields[Field.LAST_ATTEMPT_AT] = SERVER_TIMESTAMP
        writer.update(ref, fields, option=option)

    # --- Failed attempts outside a lease (transaction and write-only modes) ----------------

    def _record_failed_attempt(self, d: _Run, exc: Exception) -> Outcome:
        """Count a failed attempt whose writes were discarded; re-raise unless final."""
        error = error_text(exc)
        terminal = isinstance(exc, TerminalError)
        records = self.store
        for _ in range(CLAIM_ROUNDS):
            snapshot = records.read(d.key, action="record a failed attempt on")
            record = snapshot.record
            if record is not None and record.is_final:
                # Another delivery finished the event meanwhile; this failure changes nothing.
                d.attempt = record.attempts
                return self._skip(d, record)
            attempts = (record.attempts if record else 0) + 1
            state = State.IN_PROGRESS
            if terminal:
                state = State.FAILED
            elif attempts >= self.config.max_attempts:
                state = State.DEAD
            if record is None:
                written = records.create(
                    d.key,
                    new_record(
                        event_id=d.event_id,
                        suffix=d.suffix,
                        mode=d.mode,
                        state=state,
                        owner=None,
                        lease_seconds=0,
                        payload_hash=d.payload_hash,
                        expire_at=self._expire_at(),
                        attempts=attempts,
                        last_error=error,
                    ),
                    action="record a failed attempt on",
                )
            else:
                written = records.update_if_unchanged(
                    d.key,
                    failed_attempt(attempts=attempts, state=state, **self._end(error)),
                    _precondition(snapshot),
                    action="record a failed attempt on",
                )
            if written is None:
                continue
            d.attempt = attempts
            if state is State.IN_PROGRESS:
                self._finish(d, OutcomeKind.RELEASED, error=error)
                raise exc
            kind = OutcomeKind.FAILED if state is State.FAILED else OutcomeKind.DEAD
            return self._finish(d, kind, error=error)
        self._finish(d, OutcomeKind.RELEASED, error=error)
        raise exc

    # --- Shared helpers -------------------------------------------------------------------

    def _skip(self, d: _Run, record: Record) -> Outcome:
        if record_sent(record):
            self.sent_keys.add(d.key, record.payload_hash)
        return self._finish(d, OutcomeKind.DUPLICATE)

    def _check_payload(self, d: _Run, recorded: str | None) -> None:
        """Compare fingerprints; under policy "raise" a mismatch raises `PayloadMismatch`."""
        if recorded is None or d.payload_hash is None or recorded == d.payload_hash:
            return
        if self.config.on_payload_mismatch == "raise":
            self._finish(d, OutcomeKind.PAYLOAD_MISMATCH)
            raise PayloadMismatch(
                f"{d.path} was recorded for a payload with fingerprint {recorded[:12]}…, this "
                f"delivery's is {d.payload_hash[:12]}…: the event id was reused for a different "
                "event; check the event source, or set on_payload_mismatch='log'"
            )
        d.mismatch = True

    def _inside_collection(self, document_path: str) -> bool:
        path = document_path.strip("/")
        if "/documents/" in path:  # full resource name projects/p/databases/d/documents/...
            path = path.split("/documents/", 1)[1]
        collection = self.config.collection
        return path == collection or path.startswith(collection + "/")

    def _too_old(self, event_time: datetime | None) -> bool:
        """Judged on the instance clock: a skew of minutes is negligible next to the hours a
        maximum event age is usually set to, and there is no database read to take a time from."""
        max_age = self.config.max_event_age_seconds
        if max_age is None or event_time is None:
            return False
        return self.config.clock() - event_time > timedelta(seconds=max_age)

    def _expire_at(self) -> datetime:
        return self.config.clock() + timedelta(days=self.config.retention_days)

    def _end(self, error: str | None) -> dict[str, Any]:
        return {"error": error, "expire_at": self._expire_at()}

    def _unavailable(self, action: str, d: _Run, exc: BaseException | None) -> StoreUnavailable:
        return StoreUnavailable(
            f"could not {action} {d.path}: {exc}; the event will be retried "
            "(check that Firestore is reachable)"
        )

    def _finish(self, d: _Run, kind: OutcomeKind, *, error: str | None = None) -> Outcome:
        """Log the delivery's single line and build its `Outcome`."""
        ms = int((time.monotonic() - d.started) * 1000)
        level = _SEVERITY[kind]
        message = f"{kind.value}: {d.path} (attempt {d.attempt})"
        if d.mismatch:
            level = max(level, logging.ERROR)
            message += "; payload fingerprint differs from the recorded event's"
        if kind is OutcomeKind.DEAD:
            message += f"; gave up after {self.config.max_attempts} attempts, inspect the record"
        logs.log_delivery(
            level,
            message,
            event_id=d.event_id,
            suffix=d.suffix,
            key=d.key,
            outcome=kind.value,
            attempt=d.attempt,
            ms=ms,
            error=error,
            path=d.path,
        )
        return Outcome(kind=kind, key=d.key, attempt=d.attempt, ms=ms)


def _precondition(snapshot: Snapshot) -> datetime:
    if snapshot.update_time is None:  # pragma: no cover - only existing records are updated
        raise AssertionError("an existing record always has an update time")
    return snapshot.update_time


def _find_in_chain[E: BaseException](exc: BaseException, kind: type[E]) -> E | None:
    """The first `kind` among `exc`, its causes and contexts (a failed rollback may wrap it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


_MARKER_PRECONDITION_FAILED = (
    api_exceptions.AlreadyExists,
    api_exceptions.FailedPrecondition,
    api_exceptions.NotFound,
)
"""What a commit raises when the marker's create or guarded update finds the record changed."""


def _run_handler(handler: Handler, delivery: Delivery) -> None:
    """Call the handler, marking its own exceptions apart from Firestore's."""
    try:
        handler(delivery)
    except Exception as exc:
        raise _HandlerFailed(exc) from exc


def _backoff(round_: int) -> None:
    """Full-jitter exponential backoff, so contending transactions stop colliding."""
    time.sleep(random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**round_)))


_default_lock = threading.Lock()
_defaults: dict[DedupConfig | None, Deduplicator] = {}


def default_deduplicator(config: DedupConfig | None = None) -> Deduplicator:
    """The process's shared Deduplicator for `config` (None: from the environment).

    Created on first request without touching the network; later calls with an equal config
    return the same instance, so every decorated function shares one Firestore client.
    """
    with _default_lock:
        found = _defaults.get(config)
        if found is None:
            found = Deduplicator(config)
            _defaults[config] = found
        return found
