"""What fits in a dedup record: the handler result stored with "sent" and the room a durable
step's write has, measured as Firestore measures a document (`dedup.platform.firestore_values`,
after https://firebase.google.com/docs/firestore/storage-size).

A record is one Firestore document, at most 1 MiB (`MAX_DOCUMENT_BYTES`). Whatever a write adds
(a step's value, the handler's result) is measured against the record at its largest
(`record_size`: every field it may hold, `lastError` at its longest), so that every later
write of the record still fits: "sent" with a result that would not fit is written with the
result null (`storable_result`, a WARNING naming the record), and a step whose value would not
fit is refused before its write (`steps_room`, which the lease hands to
`dedup.kernel.steps.StepLog.with_entry`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dedup.kernel.record import MAX_ERROR_CHARS, Field, State
from dedup.kernel.transitions import MAX_RESULT_BYTES, SERVER_TIMESTAMP, first_write
from dedup.platform.firestore_refusals import refusal
from dedup.platform.firestore_sizes import (
    MAX_DOCUMENT_BYTES,
    NULL_BYTES,
    document_size,
    string_size,
    value_size,
)

if TYPE_CHECKING:
    from dedup.kernel.flow_io import EventFacts

logger = logging.getLogger("dedup")

ERROR_ROOM_BYTES = 4 * MAX_ERROR_CHARS + 512
"""The room a record keeps for `lastError` whatever it holds now: `error_text`'s 1,000
characters at 4 bytes each (UTF-8) and the sentence around them, so that recording a failure
always fits after the steps and notes that fitted."""


def record_size(
    run: EventFacts,
    *,
    notes: Mapping[str, Any] | None = None,
    steps: Mapping[str, Any] | None = None,
) -> int:
    """The most the record of `run` may hold with these `notes` and `steps` and a null result, as
    Firestore measures a document (`dedup.platform.firestore_values.document_size`): every
    other field at its largest (`lastError` at `ERROR_ROOM_BYTES`, every timestamp set, a
    trace id, `reconciled`). Firestore stores at most `MAX_DOCUMENT_BYTES`."""
    facts = (run.path, run.event_id, run.suffix, run.mode, run.payload_hash, run.subject)
    key = (*facts, run.source)
    base = _BASE_SIZES.get(key)
    if base is None:  # a document's size is the sum of its fields': the others measured once
        fields = first_write(
            run, State.IN_PROGRESS, "0" * 32, lease_seconds=1, last_error="x" * ERROR_ROOM_BYTES
        )
        fields[Field.SENT_AT] = SERVER_TIMESTAMP
        fields[Field.TRACE_ID] = "0" * 32
        fields[Field.RESULT] = None
        fields[Field.RECONCILED] = True
        size = document_size(run.path, fields)
        if len(_BASE_SIZES) >= 256:
            _BASE_SIZES.clear()
        _BASE_SIZES[key] = size - value_size(fields[Field.EXPIRE_AT])
    else:
        size = base + value_size(run.expire_at())
    if notes:
        size += string_size(Field.NOTES) + value_size(dict(notes))
    if steps:
        size += string_size(Field.STEPS) + value_size(dict(steps))
    return size


_BASE_SIZES: dict[tuple[Any, ...], int] = {}
"""`record_size` of a record without notes nor steps, less its `expireAt`, by the facts of its
run it depends on (the record's path, event, suffix, mode, payload hash, subject, source)."""


def storable_result(
    result: object,
    run: EventFacts | None = None,
    *,
    notes: Mapping[str, Any] | None = None,
    steps: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """What of a handler's return value is stored in the record: a mapping as a dict; None
    when it returned None, something that is not a mapping, a mapping holding a value
    Firestore refuses (`dedup.platform.firestore_values.refusal`; a tuple or a set is stored,
    as a list), one over `MAX_RESULT_BYTES`, or one that would take the record of `run` (with
    `notes` and `steps`) past Firestore's 1 MiB document. Each refusal is logged at WARNING,
    naming the record. Never raises: the effect already happened, "sent" must be written."""
    if result is None:
        return None
    where = f"{run.path}: " if run is not None else ""
    if not isinstance(result, Mapping):
        logger.warning(
            "%shandler returned a %s, not a mapping: nothing stored with the record",
            where,
            type(result).__name__,
        )
        return None
    stored = dict(result)
    reason = refusal(stored, at=(Field.RESULT,), round_trip=False)
    if reason is not None:
        logger.warning(
            "%shandler result not stored: it holds %s; duplicates get no result", where, reason
        )
        return None
    size = value_size(stored)
    if size > MAX_RESULT_BYTES:
        logger.warning(
            "%shandler result of %d bytes (as Firestore counts them) not stored (limit %d): "
            "duplicates get no result",
            where,
            size,
            MAX_RESULT_BYTES,
        )
        return None
    if run is not None:  # the record with a null result, the null (1 byte) replaced by it
        total = record_size(run, notes=notes, steps=steps) - NULL_BYTES + size
        if total > MAX_DOCUMENT_BYTES:
            logger.warning(
                "%shandler result of %d bytes not stored: the record would hold %d bytes with "
                "it, over Firestore's %d (1 MiB); duplicates get no result",
                where,
                size,
                total,
                MAX_DOCUMENT_BYTES,
            )
            return None
    return stored


def steps_room(run: EventFacts, notes: Mapping[str, Any] | None) -> int:
    """The bytes the record of `run` has for its `steps` field, its name included: Firestore's
    1 MiB document less everything else it may hold (`record_size`, with `notes`)."""
    return MAX_DOCUMENT_BYTES - record_size(run, notes=notes) - string_size(Field.STEPS)
