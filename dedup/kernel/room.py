"""What fits in a dedup record (one document, at most `MAX_DOCUMENT_BYTES`), measured as
Firestore measures a document: what a write adds (the handler's result, a step's value) is
measured against the record at its largest (`record_size`), so every later write still fits;
a result that would not fit is not stored (`storable_result`), a step's room is `steps_room`."""

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
"""The room a record keeps for `lastError` whatever it holds now: `error_text`'s longest at 4
bytes a character, and the sentence around it."""


def record_size(
    run: EventFacts,
    *,
    notes: Mapping[str, Any] | None = None,
    steps: Mapping[str, Any] | None = None,
) -> int:
    """The most the record of `run` may hold with these `notes` and `steps` and a null result,
    in bytes: every other field at its largest (`lastError` at `ERROR_ROOM_BYTES`)."""
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
"""`record_size` without notes, steps or `expireAt`, by the facts of the run it depends on."""


def storable_result(
    result: object,
    run: EventFacts | None = None,
    *,
    notes: Mapping[str, Any] | None = None,
    steps: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """What of a handler's return value is stored in the record: a mapping as a dict; None
    for None, a non-mapping, a mapping holding a value Firestore refuses, one over
    `MAX_RESULT_BYTES`, or one that would take the record of `run` (with `notes` and `steps`)
    past 1 MiB, each such refusal logged at WARNING naming the record. Never raises."""
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
