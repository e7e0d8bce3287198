"""The dedup record: one Firestore document per (event, function), its schema and its reader.

Document `<collection>/<key>` (collection `triggerEvents` by default, key from
`dedup.kernel.transitions.dedup_key`). Field names are camelCase and form a stable schema; tools
such as the CLI read records only through `Record.from_snapshot`.

==================  ===================  ===================================================
Field               Type                 Meaning
==================  ===================  ===================================================
eventId             string               The original event id (before any safe-id mapping).
suffix              string               The function's suffix.
state               string               "in_progress" | "sent" | "failed" | "dead" |
                                         "unknown".
sent                bool                 True once the effect is done (state "sent").
owner               string | null        Token (uuid4 hex) of the attempt that wrote the record
                                         last; with leaseStartedAt set, the lease's owner.
leaseStartedAt      timestamp | null     Server timestamp of the lease start; null = no lease.
leaseSeconds        int                  Lease length chosen by the owner.
attempts            int                  Attempts so far: lease mode counts every handler
                                         start (crashed ones too), the atomic modes every
                                         attempt that failed or committed.
firstAttemptAt      timestamp            Server timestamp of the first attempt.
lastAttemptAt       timestamp            Server timestamp of the latest attempt.
sentAt              timestamp | null     Server timestamp of the successful attempt.
expireAt            timestamp            Instance time + retention; point a TTL policy here.
lastError           string | null        Last handler error, <= 1000 chars, URL credentials
                                         and query strings removed.
payloadHash         string | null        sha256 hex of the event payload's canonical form.
mode                string               "lease" | "transaction" | "write_only".
subject             string | null        What the event is about: the document path of a
                                         Firestore event (`posts/p1`), `topics/<topic>/
                                         messages/<message id>` of a Pub/Sub one, the subject
                                         its kind gives for the others (`dedup.kinds`).
source              string | null        Where the event came from: its CloudEvent `source`
                                         (`//storage.googleapis.com/projects/_/buckets/b`),
                                         `jobs/<job>` for a scheduled run, else null.
result              map | null           What the handler returned (a map), stored with
                                         "sent" for duplicates to replay; null if it
                                         returned None or the map could not be stored
                                         (`dedup.kernel.room.storable_result`).
traceId             string | null        Trace id (32 hex digits) of the delivery that wrote
                                         the record first, when it ran inside a trace: a
                                         duplicate's or a replay's span names it
                                         (docs/observability.md).
reconciled          bool (absent)        True when "sent" was recorded because `reconcile`
                                         found the effect of an earlier attempt (the handler
                                         did not run again); absent otherwise.
notes               map (absent)         What handlers noted with `delivery.note(...)` before
                                         their effect (lease mode), for `reconcile`; absent
                                         when no handler noted anything.
steps               map (absent)         A lease-mode handler's durable steps by name
                                         (`delivery.step`): `{index, state, value, fn,
                                         args}`, state "done" or "started", `fn` and `args`
                                         the call's fingerprint (docs/steps.md); an
                                         at-most-once step whose value Firestore refused:
                                         `refused: true`, no value; absent when none.
ambiguous           bool (absent)        Lease mode, read while the lease is released: true
                                         when it was given back by a delivery that took
                                         over an expired lease and never started the
                                         handler, or by `dedup release`; the next delivery
                                         is then ambiguous, as after an expired lease. False
                                         after a handler's own release and `dedup revive`.
                                         On a dead record: true when an attempt may have
                                         produced the effect (buried after its last allowed
                                         attempt's lease expired): `dedup revive` refuses it
                                         without `--force`.
==================  ===================  ===================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

Fields = dict[str, Any]
"""The fields of one record write, by `Field` name (`dedup.kernel.transitions` builds them)."""

MAX_ERROR_CHARS = 1000
"""`lastError` is truncated to this many characters."""

MAX_TEXT_BYTES = 1_048_487
"""The longest string Firestore stores, in UTF-8 bytes (1 MiB - 89): `storable_text`'s cut."""


class State(StrEnum):
    """Lifecycle of a record; `sent`, `failed`, `dead` and `unknown` are final."""

    IN_PROGRESS = "in_progress"
    """A delivery holds (or held, then released) the lease; the effect is not done."""
    SENT = "sent"
    """The handler succeeded and its outcome was recorded: later deliveries are duplicates."""
    FAILED = "failed"
    """The handler raised `TerminalError`: not retried."""
    DEAD = "dead"
    """`max_attempts` was reached: a poison event, not retried."""
    UNKNOWN = "unknown"
    """Lease mode, `on_ambiguous="skip"`: an earlier attempt may have produced the effect and
    nothing could tell; not run again (at most once) until `dedup revive`."""


class Mode(StrEnum):
    """How a handler's effect is made exactly once."""

    LEASE = "lease"
    """Any effect (HTTP, email...): a lease guards the run, a sent flag records the outcome.
    An effect whose process dies mid-way is retried with the same `Delivery.key`. Every
    handler start counts as an attempt, crashed ones included."""
    TRANSACTION = "transaction"
    """The effect is Firestore reads and writes: they commit with the marker in one
    transaction; no lease. The handler may be called again if the transaction retries.
    Attempts that fail with an exception are counted; one whose process dies is not (nothing
    of it committed): bound such events with `max_event_age_seconds`."""
    WRITE_ONLY = "write_only"
    """The effect is Firestore writes needing no reads: they commit in one batch with the
    marker's create, one round trip. The handler may be called again if the batch is rebuilt
    (a redelivery builds it once blind before reading the record). Attempts are counted as in
    transaction mode."""


FINAL_STATES = frozenset({State.SENT, State.FAILED, State.DEAD, State.UNKNOWN})
GIVEN_UP = frozenset({State.FAILED, State.DEAD, State.UNKNOWN})
"""The final states other than sent: the event is given up on until `dedup revive`."""


class Field:
    """Field names of the record document (the schema table above)."""

    EVENT_ID = "eventId"
    SUFFIX = "suffix"
    STATE = "state"
    SENT = "sent"
    OWNER = "owner"
    LEASE_STARTED_AT = "leaseStartedAt"
    LEASE_SECONDS = "leaseSeconds"
    ATTEMPTS = "attempts"
    FIRST_ATTEMPT_AT = "firstAttemptAt"
    LAST_ATTEMPT_AT = "lastAttemptAt"
    SENT_AT = "sentAt"
    EXPIRE_AT = "expireAt"
    LAST_ERROR = "lastError"
    PAYLOAD_HASH = "payloadHash"
    MODE = "mode"
    SUBJECT = "subject"
    SOURCE = "source"
    RESULT = "result"
    TRACE_ID = "traceId"
    RECONCILED = "reconciled"
    NOTES = "notes"
    STEPS = "steps"
    AMBIGUOUS = "ambiguous"


class SnapshotLike(Protocol):
    """The parts of a Firestore `DocumentSnapshot` that `Record.from_snapshot` reads."""

    @property
    def id(self) -> str: ...

    @property
    def exists(self) -> bool: ...

    def to_dict(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Record:
    """An immutable view of one dedup record, as read from Firestore."""

    key: str
    """The document id."""
    event_id: str
    suffix: str
    state: State
    sent: bool
    owner: str | None
    lease_started_at: datetime | None
    lease_seconds: int
    attempts: int
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    sent_at: datetime | None
    expire_at: datetime | None
    last_error: str | None
    payload_hash: str | None
    mode: Mode
    subject: str | None = None
    """The document path the event was about, when known (Firestore events)."""
    result: dict[str, Any] | None = None
    """What the handler returned when it ran, stored with "sent" (None if nothing)."""
    trace_id: str | None = None
    """Trace id of the delivery that wrote the record first (None outside a trace)."""
    reconciled: bool = False
    """"sent" was recorded by `reconcile`, not by the handler running (lease mode)."""
    notes: dict[str, Any] | None = None
    """What handlers noted before their effect (`delivery.note`), None when nothing."""
    source: str | None = None
    """Where the event came from (its CloudEvent `source`), when known."""
    steps: dict[str, Any] | None = None
    """Lease mode: the handler's durable steps by name (docs/steps.md), None when none."""
    ambiguous: bool = False
    """The `ambiguous` field (the schema table above)."""

    @classmethod
    def from_snapshot(cls, snapshot: SnapshotLike) -> Record | None:
        """The record in `snapshot`, or None if the document does not exist; a missing field
        (an older or hand-written record) gets a neutral default."""
        if not snapshot.exists:
            return None
        data = snapshot.to_dict() or {}
        return cls(
            key=snapshot.id,
            event_id=str(data.get(Field.EVENT_ID, "")),
            suffix=str(data.get(Field.SUFFIX, "")),
            state=State(data.get(Field.STATE, State.IN_PROGRESS)),
            sent=bool(data.get(Field.SENT, False)),
            owner=data.get(Field.OWNER),
            lease_started_at=data.get(Field.LEASE_STARTED_AT),
            lease_seconds=int(data.get(Field.LEASE_SECONDS, 0)),
            attempts=int(data.get(Field.ATTEMPTS, 0)),
            first_attempt_at=data.get(Field.FIRST_ATTEMPT_AT),
            last_attempt_at=data.get(Field.LAST_ATTEMPT_AT),
            sent_at=data.get(Field.SENT_AT),
            expire_at=data.get(Field.EXPIRE_AT),
            last_error=data.get(Field.LAST_ERROR),
            payload_hash=data.get(Field.PAYLOAD_HASH),
            mode=Mode(data.get(Field.MODE, Mode.LEASE)),
            subject=data.get(Field.SUBJECT),
            result=data.get(Field.RESULT),
            trace_id=data.get(Field.TRACE_ID),
            reconciled=bool(data.get(Field.RECONCILED, False)),
            notes=data.get(Field.NOTES),
            source=data.get(Field.SOURCE),
            steps=data.get(Field.STEPS),
            ambiguous=bool(data.get(Field.AMBIGUOUS, False)),
        )

    @property
    def is_sent(self) -> bool:
        """True when the effect is done and recorded."""
        return self.state is State.SENT

    @property
    def is_final(self) -> bool:
        """True for `sent`, `failed`, `dead` and `unknown`: no delivery will run the handler
        again (until an operator revives the record)."""
        return self.state in FINAL_STATES

    @property
    def has_lease(self) -> bool:
        """True when an owner holds a lease (live or expired); False once released."""
        return self.owner is not None and self.lease_started_at is not None

    @property
    def lease_expires_at(self) -> datetime | None:
        """`leaseStartedAt + leaseSeconds` (database clock), or None when there is no lease."""
        if not self.has_lease or self.lease_started_at is None:
            return None
        return self.lease_started_at + timedelta(seconds=self.lease_seconds)

    def lease_live(self, at: datetime) -> bool:
        """True when a lease is held and has not expired at `at` (a database read time)."""
        expires = self.lease_expires_at
        return expires is not None and at < expires


_URL_USERINFO_QUERY = re.compile(  # tried once per run of scheme characters: linear time
    r"(?<![A-Za-z0-9+.-])(?P<pre>[0-9+.-]*)(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"
    r"(?:[^/\s@]*@)?(?P<rest>[^\s?#]*)(?:[?#]\S*)?"
)


def scrub_urls(text: str) -> str:
    """`text` with every URL's credentials, query and fragment removed, in time linear in its
    length: `https://user:pw@host/p?token=1` becomes `https://host/p` (operators read them)."""
    return _URL_USERINFO_QUERY.sub(lambda m: m["pre"] + m["scheme"] + m["rest"], text)


def storable_text(
    text: str, *, max_bytes: int = MAX_TEXT_BYTES, max_chars: int | None = None
) -> str:
    """`text` as a string Firestore stores as it is: each lone surrogate escaped as the text
    `\\ud800`, then cut to at most `max_chars` characters and `max_bytes` UTF-8 bytes, a cut
    marked by a final "…" within both limits. Never raises for a `str` (a subclass is read as
    its plain text); the result is an exact `str`."""
    plain = str.__str__(text)
    try:
        encoded = plain.encode("utf-8")
    except UnicodeEncodeError:
        plain = plain.encode("utf-8", "backslashreplace").decode("utf-8")
        encoded = plain.encode("utf-8")
    if max_chars is not None and len(plain) > max_chars:
        plain = plain[: max(0, max_chars - 1)] + "…"
        encoded = plain.encode("utf-8")
    if len(encoded) > max_bytes:
        kept = encoded[: max(0, max_bytes - len("…".encode()))].decode("utf-8", "ignore")
        plain = kept + "…"
    return plain


def error_text(error: BaseException) -> str:
    """`lastError` for an exception, whatever it holds: type and message, URLs scrubbed, made
    storable and cut to `MAX_ERROR_CHARS` (`storable_text`). Never raises."""
    try:
        message = str(error)
    except Exception as unreadable:
        message = f"<its message could not be read: str() raised {type(unreadable).__name__}>"
    text = scrub_urls(f"{str.__str__(type(error).__name__)}: {str.__str__(message)}")
    return storable_text(text, max_chars=MAX_ERROR_CHARS)


RERUN = "rerun"
"""`on_ambiguous="rerun"` (the default): an ambiguous delivery runs the handler again, with the
same `Delivery.key` (exactly once only if the receiver honours it)."""
SKIP_AMBIGUOUS = "skip"
"""`on_ambiguous="skip"`: an ambiguous delivery that nothing reconciled ends the record as
`unknown` and is acknowledged (at most once)."""
ON_AMBIGUOUS = (RERUN, SKIP_AMBIGUOUS)
"""The values of `on_ambiguous`."""


STEP_NAME = r"[A-Za-z0-9_.-]{1,100}"
"""A durable step's name, a key of the record's `steps`: 1 to 100 of `[A-Za-z0-9_.-]` (it ends
the step's idempotency key, `<key>/<name>`); a pattern for `re.fullmatch`."""


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
    """The handler raised `TerminalError` (or Firestore refused its data as invalid): recorded
    as failed, returned normally."""
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
    AMBIGUOUS = "ambiguous"
    """Lease mode, `on_ambiguous="skip"`: the handler did not run, the record is `unknown`
    (`State.UNKNOWN`), returned normally."""
    RECONCILED = "reconciled"
    """Lease mode: `reconcile` found that an earlier attempt produced the effect; recorded as
    sent (`reconciled: true`) without running the handler, returned normally."""


GIVING_UP = frozenset({OutcomeKind.FAILED, OutcomeKind.DEAD, OutcomeKind.AMBIGUOUS})
"""The outcomes that record the event failed, dead or unknown (`GIVEN_UP`): `Outcome.gave_up`."""


class Snapshot(NamedTuple):
    """A record as read, with the database times that make decisions clock-safe."""

    record: Record | None
    """The record, or None if absent."""
    read_time: datetime
    """When the database served the read (database clock): leases are judged against it."""
    update_time: datetime | None
    """The document's last update time: the precondition for changing what was read."""


class Conflict(NamedTuple):
    """A conditional write found the record not as expected; this try wrote nothing."""

    unanswered: bool
    """An earlier try of the same call may have landed unanswered (a transient error): read
    the record back (`kernel.store.read_back`) and look for your own owner token."""
