"""Every transition of a dedup record, as the set of fields it writes (schema: `dedup.record`).

Defined once, used by the flows (`dedup.lease`, `dedup.atomic`) and by the operator command
line (`dedup.cli`), so a record means the same thing whoever wrote it. Each function returns
the fields of one write; preconditions are the caller's business (`dedup.store`).

`owner` is the token (uuid4 hex) of the attempt that wrote the transition. It is kept when the
lease ends (sent, failed, dead, unknown, released): the lease is `leaseStartedAt`, and the
owner says who wrote the record last, so an attempt can recognise its own write when the
response to it was lost, and a running owner whose lease an operator released can still
record its outcome.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.cloud import firestore

from dedup.propagation import current_trace_id
from dedup.record import Field, Fields, Mode, State

SERVER_TIMESTAMP = firestore.SERVER_TIMESTAMP
"""Sentinel: the database's commit time, written by the server."""

MAX_RESULT_BYTES = 512 * 1024
"""A handler result larger than this (as JSON) is not stored: a record is one document, at
most 1 MiB, and "sent" must always fit. The run still reports it; duplicates get None."""

logger = logging.getLogger("dedup")


def storable_result(result: object) -> dict[str, Any] | None:
    """What of a handler's return value is stored in the record: a mapping as a dict; None
    when it returned None, something that is not a mapping, or a mapping too large to store
    (both logged). Never raises: the effect already happened, "sent" must be written."""
    if result is None:
        return None
    if not isinstance(result, Mapping):
        logger.warning(
            "handler returned a %s, not a mapping: nothing stored with the record",
            type(result).__name__,
        )
        return None
    try:
        size = len(json.dumps(result, default=str).encode("utf-8"))
    except (TypeError, ValueError):
        size = MAX_RESULT_BYTES + 1
    if size > MAX_RESULT_BYTES:
        logger.warning(
            "handler result of %d bytes not stored (limit %d): duplicates get no result",
            size,
            MAX_RESULT_BYTES,
        )
        return None
    return dict(result)


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
    """Every field of a record written for the first time (an attempt starting now).

    `leased`: the attempt holds a lease from now (lease mode); atomic modes write no lease.
    `traceId` is the trace of the current span (the delivery's), None outside a trace.
    """
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


def lease_taken(*, owner: str, lease_seconds: int, attempts: int, expire_at: datetime) -> Fields:
    """A new attempt takes the lease of an existing record (lease mode)."""
    return {
        Field.STATE: State.IN_PROGRESS.value,
        Field.OWNER: owner,
        Field.LEASE_STARTED_AT: SERVER_TIMESTAMP,
        Field.LEASE_SECONDS: lease_seconds,
        Field.ATTEMPTS: attempts,
        Field.LAST_ATTEMPT_AT: SERVER_TIMESTAMP,
        Field.EXPIRE_AT: expire_at,
    }


def finished(
    state: State,
    *,
    owner: str | None,
    expire_at: datetime,
    error: str | None = None,
    result: dict[str, Any] | None = None,
    reconciled: bool = False,
) -> Fields:
    """The record ends in a final state (sent, failed, dead or unknown); the lease is dropped.
    A sent record keeps the handler's `result` (see `storable_result`); `reconciled`: "sent"
    because `reconcile` found an earlier attempt's effect (the field is written only then)."""
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
    fields[Field.ATTEMPTS] = attempts
    fields[Field.LAST_ATTEMPT_AT] = SERVER_TIMESTAMP
    return fields


def released(*, error: str, expire_at: datetime, attempts: int | None = None) -> Fields:
    """The owner gives its lease back after a failed attempt (state stays in_progress);
    `attempts`: the count to leave (an attempt whose handler never started hands its own
    back), None to keep the count."""
    fields: Fields = {
        Field.STATE: State.IN_PROGRESS.value,
        Field.LEASE_STARTED_AT: None,
        Field.LAST_ERROR: error,
        Field.EXPIRE_AT: expire_at,
    }
    if attempts is not None:
        fields[Field.ATTEMPTS] = attempts
    return fields


def operator_released() -> Fields:
    """`dedup release`: the lease is handed back; the next delivery runs the handler, even if
    the crashed attempt was the last allowed one (`dedup.claims`). Attempts and history kept."""
    return {Field.STATE: State.IN_PROGRESS.value, Field.LEASE_STARTED_AT: None}


def noted(notes: Mapping[str, Any]) -> Fields:
    """A lease owner records what it noted before its effect (`delivery.note`): the whole
    `notes` map, the earlier attempts' notes merged with its own."""
    return {Field.NOTES: dict(notes)}


def revived() -> Fields:
    """`dedup revive`: a failed, dead or unknown record becomes runnable again with a full
    attempt budget (attempts back to 0, `lastError` and `notes` kept). The next delivery finds
    a released lease, which is never ambiguous: it runs the handler.

    Attempts restart at 0 because a dead record has used `max_attempts` already: a revived
    event gets the full retry budget, as if it were new.
    """
    return {
        Field.STATE: State.IN_PROGRESS.value,
        Field.SENT: False,
        Field.LEASE_STARTED_AT: None,
        Field.ATTEMPTS: 0,
    }
