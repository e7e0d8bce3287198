"""Every transition of a dedup record as the fields of one write (schema: `kernel.record`), for
the flows and `dedup.cli` alike; a change of an existing record lands only if its update time is
still its **fence** (`fence_of` a read, or the writer's last write): `fenced_write`.

**Record ids** (`dedup_key`): `<event id>-<suffix>`. Suffixes hold no "-", so distinct
(event id, suffix) pairs give distinct keys. An event id that Firestore would refuse as part of
a document id (a "/", "." or "..", `__.*__`, over 1,500 bytes), that starts with "~" or that
holds anything outside printable ASCII (the key travels as an `Idempotency-Key` header) is
mapped to `"~" + readable prefix + "~" + sha256(id)`; unmapped ids never start with "~", so the
two never meet. The `"spread"` layout (DEDUP_KEY_LAYOUT) puts `sha256(id)[:4] + "."` in front,
to spread sequential ids over key ranges (docs/capacity.md); part of the collection's identity.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from google.cloud import firestore

from dedup.errors import InvalidSuffix, MissingEventId
from dedup.kernel.record import Field, Fields, Mode, State, storable_text
from dedup.platform.propagation import current_trace_id

if TYPE_CHECKING:
    from dedup.kernel.budget import Budget
    from dedup.kernel.flow_io import EventFacts, RecordIO
    from dedup.kernel.record import Conflict, Snapshot

MAX_KEY_BYTES = 1500
"""Firestore's limit on a document id, in bytes of UTF-8."""

MAPPED_PREFIX = "~"
"""First character of every mapped event id; reserved, so unmapped ids may not start with it."""

READABLE_PREFIX_CHARS = 40
"""How many leading characters of a mapped id are kept readable in its safe id."""

KeyLayout = Literal["plain", "spread"]
"""How a record key is laid out: `plain` (`<event id>-<suffix>`) or `spread` (hash prefix)."""

KEY_LAYOUTS: tuple[KeyLayout, ...] = ("plain", "spread")
"""Every key layout, the default first."""

SPREAD_PREFIX_CHARS = 4
"""Hex characters of the spread layout's prefix: 16**4 = 65,536 key ranges."""

SPREAD_SEPARATOR = "."
"""Between the spread layout's prefix and the plain key."""

SUFFIX_PATTERN = r"[A-Za-z0-9_]{1,100}"
"""What a suffix may be: it names one function and ends its keys, after their last "-" (a
pattern for `re.fullmatch`, compiled on first use)."""

_UNREADABLE = r"[^A-Za-z0-9_.-]"
_VALID_SUFFIXES: set[str] = set()
"""Suffixes `validate_suffix` passed (a process has a few: one per function), most kept."""
_MAX_VALID_SUFFIXES = 1024


def validate_suffix(suffix: str) -> str:
    """`suffix` unchanged if it is 1-100 characters of `[A-Za-z0-9_]`, else `InvalidSuffix`."""
    if type(suffix) is str and suffix in _VALID_SUFFIXES:
        return suffix
    if not isinstance(suffix, str) or not re.fullmatch(SUFFIX_PATTERN, suffix):
        raise InvalidSuffix(
            f"suffix {suffix!r} is invalid: use 1 to 100 characters of letters, digits and "
            "'_' (no '-': keys are <event id>-<suffix>), unique per function, e.g. "
            "trigger_once('send_welcome_email')"
        )
    if type(suffix) is str and len(_VALID_SUFFIXES) < _MAX_VALID_SUFFIXES:
        _VALID_SUFFIXES.add(suffix)
    return suffix


def dedup_key(event_id: str | None, suffix: str, layout: KeyLayout = "plain") -> str:
    """The record's document id for this event and function (the module docstring's rule).
    Raises `MissingEventId` for a missing or empty id, `InvalidSuffix` for a bad suffix and
    `ValueError` for an unknown layout."""
    if layout not in KEY_LAYOUTS:
        raise ValueError(f"key layout must be one of {KEY_LAYOUTS}; got {layout!r}")
    if type(suffix) is not str or suffix not in _VALID_SUFFIXES:  # else checked already
        validate_suffix(suffix)
    if event_id is None or event_id == "":
        raise MissingEventId(
            "the event has no id, so it cannot be deduplicated and the handler was not run: "
            "pass the CloudEvent id (or the Pub/Sub messageId) as event_id"
        )
    if not isinstance(event_id, str):
        raise TypeError(f"event_id must be a str; got {type(event_id).__name__}")
    if layout == "plain":
        safe = _mapped(event_id) if _needs_mapping(event_id, suffix) else event_id
        return f"{safe}-{suffix}"
    prefix = spread_prefix(event_id)
    # The prefix takes room from the 1,500 bytes: an id that only just fits plain is mapped.
    safe = _mapped(event_id) if _needs_mapping(event_id, suffix, len(prefix)) else event_id
    return f"{prefix}{safe}-{suffix}"


def spread_prefix(event_id: str) -> str:
    """The spread layout's prefix of `event_id`'s keys: 4 hex characters of its sha256, "."."""
    digest = hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:SPREAD_PREFIX_CHARS] + SPREAD_SEPARATOR


def safe_event_id(event_id: str, suffix: str) -> str:
    """`event_id` itself when the key built from it is a valid document id, else its mapping."""
    return _mapped(event_id) if _needs_mapping(event_id, suffix) else event_id


def storable_event_id(event_id: str) -> str:
    """`event_id` as the record and the log line hold it: its lone surrogates (which no UTF-8
    field carries) escaped as `\\ud800` text."""
    try:
        event_id.encode("utf-8")  # the common case, at C speed
    except UnicodeEncodeError:
        return storable_text(event_id)
    return event_id


def payload_hash(payload: bytes) -> str:
    """Fingerprint of a canonical payload rendering: sha256, hex."""
    return hashlib.sha256(payload).hexdigest()


def _needs_mapping(event_id: str, suffix: str, reserved_bytes: int = 0) -> bool:
    key = f"{event_id}-{suffix}"
    key_bytes = len(key.encode("utf-8", "surrogatepass")) + reserved_bytes
    return (
        # Not one or more of "!" to "~" (printable ASCII, no space), at C speed:
        event_id == ""
        or not (event_id.isascii() and event_id.isprintable())
        or " " in event_id
        or "/" in event_id
        or event_id in (".", "..")
        or event_id.startswith(MAPPED_PREFIX)
        # A name Firestore reserves, `__.*__` ("__", anything, newlines too, "__"):
        or (len(event_id) >= 4 and event_id.startswith("__") and event_id.endswith("__"))
        or (len(key) >= 4 and key.startswith("__") and key.endswith("__"))
        or key_bytes > MAX_KEY_BYTES
    )


def _mapped(event_id: str) -> str:
    readable = re.sub(_UNREADABLE, "_", event_id[:READABLE_PREFIX_CHARS])
    digest = hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{MAPPED_PREFIX}{readable}{MAPPED_PREFIX}{digest}"


SERVER_TIMESTAMP = firestore.SERVER_TIMESTAMP
"""Sentinel: the database's commit time, written by the server."""

MAX_RESULT_BYTES = 512 * 1024
"""A handler result larger than this, as Firestore measures it, is not stored, nor one that would
take the record past 1 MiB (`dedup.kernel.room.storable_result`); duplicates get None."""


def new_record(
    *,
    event_id: str,
    suffix: str,
    mode: Mode,
    state: State,
    owner: str | None,
    leased: bool,
    lease_seconds: int,
    payload_hash: str | None,
    expire_at: datetime,
    attempts: int = 1,
    last_error: str | None = None,
    subject: str | None = None,
    result: dict[str, Any] | None = None,
    source: str | None = None,
) -> Fields:
    """Every field of a record written for the first time (an attempt starting now); `leased`:
    a lease from now; `traceId`: the current span's trace, None outside one."""
    sent = state is State.SENT
    return {
        Field.EVENT_ID: event_id,
        Field.SUFFIX: suffix,
        Field.STATE: state.value,
        Field.SENT: sent,
        Field.OWNER: owner,
        Field.LEASE_STARTED_AT: SERVER_TIMESTAMP if leased else None,
        Field.LEASE_SECONDS: lease_seconds,
        Field.ATTEMPTS: attempts,
        Field.FIRST_ATTEMPT_AT: SERVER_TIMESTAMP,
        Field.LAST_ATTEMPT_AT: SERVER_TIMESTAMP,
        Field.SENT_AT: SERVER_TIMESTAMP if sent else None,
        Field.EXPIRE_AT: expire_at,
        Field.LAST_ERROR: last_error,
        Field.PAYLOAD_HASH: payload_hash,
        Field.MODE: mode.value,
        Field.SUBJECT: subject,
        Field.SOURCE: source,
        Field.RESULT: result,
        Field.TRACE_ID: current_trace_id(),
    }


def first_write(
    run: EventFacts,
    state: State,
    owner: str,
    *,
    lease_seconds: int = 0,
    attempts: int = 1,
    last_error: str | None = None,
    result: dict[str, Any] | None = None,
) -> Fields:
    """`new_record` for the event of `run`, written by `owner`: leased for `lease_seconds`
    from now when that is above 0 (lease mode's claim), else unleased (the atomic modes)."""
    return new_record(
        event_id=run.event_id,
        suffix=run.suffix,
        mode=run.mode,
        state=state,
        owner=owner,
        leased=lease_seconds > 0,
        lease_seconds=lease_seconds,
        payload_hash=run.payload_hash,
        expire_at=run.expire_at(),
        attempts=attempts,
        last_error=last_error,
        subject=run.subject,
        source=run.source,
        result=result,
    )


def lease_taken(*, owner: str, lease_seconds: int, attempts: int, expire_at: datetime) -> Fields:
    """A new attempt takes the lease of an existing record (lease mode)."""
    return counted(
        {
            Field.STATE: State.IN_PROGRESS.value,
            Field.OWNER: owner,
            Field.LEASE_STARTED_AT: SERVER_TIMESTAMP,
            Field.LEASE_SECONDS: lease_seconds,
            Field.EXPIRE_AT: expire_at,
        },
        attempts,
    )


def counted(fields: Fields, attempts: int) -> Fields:
    """`fields` with attempt `attempts` made now; attempt 1 (of a revived record too) starts
    `firstAttemptAt`, whence `min_retry_seconds` protects the event (`claims.AttemptLimit`)."""
    first = {Field.FIRST_ATTEMPT_AT: SERVER_TIMESTAMP} if attempts == 1 else {}
    return {**fields, Field.ATTEMPTS: attempts, Field.LAST_ATTEMPT_AT: SERVER_TIMESTAMP, **first}


def finished(
    state: State,
    *,
    owner: str | None,
    expire_at: datetime,
    error: str | None = None,
    result: dict[str, Any] | None = None,
    reconciled: bool = False,
) -> Fields:
    """The record ends in a final state (sent, failed, dead or unknown), its lease dropped; a
    sent record keeps `result`; `reconciled` (written only then): `reconcile` found the effect."""
    sent = state is State.SENT
    fields: Fields = {
        Field.STATE: state.value,
        Field.SENT: sent,
        Field.OWNER: owner,
        Field.LEASE_STARTED_AT: None,
        Field.EXPIRE_AT: expire_at,
        Field.LAST_ERROR: error,
    }
    if sent:
        fields[Field.SENT_AT] = SERVER_TIMESTAMP
        fields[Field.RESULT] = result
    if reconciled:
        fields[Field.RECONCILED] = True
    return fields


def attempt_finished(
    state: State,
    *,
    owner: str,
    attempts: int,
    expire_at: datetime,
    error: str | None = None,
    result: dict[str, Any] | None = None,
) -> Fields:
    """An attempt that ran outside any lease (atomic modes) ends: sent with its writes, or
    failed / dead / still in progress after its writes were discarded. Counts the attempt."""
    fields = finished(state, owner=owner, expire_at=expire_at, error=error, result=result)
    return counted(fields, attempts)


def released(
    *, error: str, expire_at: datetime, attempts: int | None = None, ambiguous: bool = False
) -> Fields:
    """The owner gives its lease back after a failed attempt (in_progress); `attempts`: the
    count to leave (an unstarted attempt hands its own back), None to keep it; `ambiguous`: it
    took over an expired lease, never started the handler (`claims.release_ambiguous`)."""
    fields: Fields = {
        Field.STATE: State.IN_PROGRESS.value,
        Field.LEASE_STARTED_AT: None,
        Field.LAST_ERROR: error,
        Field.EXPIRE_AT: expire_at,
        Field.AMBIGUOUS: ambiguous,
    }
    if attempts is not None:
        fields[Field.ATTEMPTS] = attempts
    return fields


def operator_released() -> Fields:
    """`dedup release`: the lease handed back as if it expired now (the next delivery is
    ambiguous, even after the last allowed attempt: `kernel.claims`); attempts, history kept."""
    fields = {Field.STATE: State.IN_PROGRESS.value, Field.LEASE_STARTED_AT: None}
    return {**fields, Field.AMBIGUOUS: True}


def noted(notes: Mapping[str, Any]) -> Fields:
    """A lease owner records what it noted before its effect (`delivery.note`): the whole
    `notes` map, the earlier attempts' notes merged with its own."""
    return {Field.NOTES: dict(notes)}


def steps_recorded(name: str, entry: Mapping[str, Any]) -> Fields:
    """A lease owner records step `name` (`delivery.step`): its `entry` alone, by field path
    (quoted), and a renewed lease (`leaseStartedAt` now, on the database's clock)."""
    return {f"{Field.STEPS}.`{name}`": dict(entry), Field.LEASE_STARTED_AT: SERVER_TIMESTAMP}


def revived() -> Fields:
    """`dedup revive`: a failed, dead or unknown record runs again as if new (`lastError`, `notes`
    kept): attempts 0, `firstAttemptAt` now (and at attempt 1, `counted`), so `max_attempts` and
    `min_retry_seconds` protect it anew; released with `ambiguous: false`: the handler runs."""
    return {
        Field.STATE: State.IN_PROGRESS.value,
        Field.SENT: False,
        Field.LEASE_STARTED_AT: None,
        Field.ATTEMPTS: 0,
        Field.AMBIGUOUS: False,
        Field.FIRST_ATTEMPT_AT: SERVER_TIMESTAMP,
    }


async def mark_dead(
    io: RecordIO,
    key: str,
    snapshot: Snapshot,
    owner: str,
    expire_at: datetime,
    budget: Budget,
) -> bool:
    """Mark the record `snapshot` showed, whose last allowed attempt crashed, dead and
    `ambiguous` (docs/operations.md, "A poison event"), fenced by that read within `budget`;
    False if it changed."""
    error = snapshot.record.last_error if snapshot.record is not None else None
    fields = finished(State.DEAD, owner=owner, expire_at=expire_at, error=error)
    fields[Field.AMBIGUOUS] = True
    written = await fenced_write(io, key, fields, fence_of(snapshot), "mark dead", budget)
    return isinstance(written, datetime)


def fence_of(snapshot: Snapshot) -> datetime:
    """The fence of a change of what `snapshot` showed (an existing record): its update time."""
    if snapshot.update_time is None:  # pragma: no cover - only existing records are updated
        raise AssertionError("an existing record always has an update time")
    return snapshot.update_time


async def fenced_write(
    io: RecordIO,
    key: str,
    fields: Fields,
    fence: datetime,
    action: str,
    budget: Budget,
    *,
    keep_trying: bool = False,
) -> datetime | Conflict:
    """Every fenced write: update the record with `fields` only if its update time is still
    `fence`, within `budget`. Returns the new fence when it landed, else its `Conflict`.
    `keep_trying`: every error is retried within `budget` (`RecordIO.update_if_unchanged`)."""
    return await io.update_if_unchanged(
        key, fields, fence, action=action, budget=budget, keep_trying=keep_trying
    )
