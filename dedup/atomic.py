"""Transaction and write-only modes: the handler's writes and the sent marker commit together
or not at all; no lease is taken.

The marker is written blind, never read inside the transaction: a create with an exists=false
precondition, or an update guarded by the update time of the record as last read. A read
inside would take a lock on which concurrent deliveries of the event deadlock until the
database aborts them. Transaction mode reads the record first, outside (a duplicate then costs
that one read); write-only mode assumes the common case, no record, and settles a fresh event
in its single commit.

When a commit fails, a plain read tells what happened (the marker carries this attempt's owner
token):

* it carries this attempt's token: the commit landed, its response was lost -> ran;
* it changed since this attempt read it: another delivery wrote the marker -> decide again;
* unchanged, and the commit was rejected (AlreadyExists, NotFound, FailedPrecondition,
  InvalidArgument): the handler's own writes were refused -> a failed attempt, counted. An
  InvalidArgument is tried once more with a fresh transaction first (an expired transaction
  is refused with it too); refused again, it is final (failed): no retry can cure bad data;
* unchanged, after Aborted or a transient error: contention or an outage -> back off, again.

A record under another delivery's live lease (a lease-mode delivery of the same key, during a
deploy that changes the function's mode) is waited for, never written over. Attempts are
counted when they fail with an exception; an attempt whose process dies leaves nothing behind
(its writes never commit), so it is not counted and `max_attempts` cannot stop an event that
kills the process in these modes: set `max_event_age_seconds` for that.

The flow is written once, as coroutines over `Run.io` (`dedup.flow_io`); opening and committing
the transaction or batch is the one step each `FlowIO` does its own way (`FlowIO.commit`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from dedup.claims import Claim, decide, written_by
from dedup.databases import require_one_database
from dedup.delivery import HandlerResult, Outcome, OutcomeKind, Step
from dedup.flow_io import Invoke
from dedup.record import Mode, Record, State, error_text
from dedup.runs import Run, bury, is_terminal, precondition
from dedup.store import CommitFailure, Snapshot, backoff, commit_failure
from dedup.transitions import attempt_finished, new_record, storable_result

TRANSACTION_ROUNDS = 12
"""Commits tried (each transaction retried by the client up to `TRANSACTION_ATTEMPTS`) before
contention or an outage is reported as `StoreUnavailable`."""

TRANSACTION_ATTEMPTS = 3
"""`max_attempts` of each Firestore transaction (commit retries on Aborted)."""

RECORD_ROUNDS = 8
"""Re-reads allowed while recording a failed attempt on a record others keep changing."""


class _HandlerFailed(Exception):
    """Carries a handler's exception out of a Firestore transaction."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


async def run_atomic(run: Run, invoke: Invoke) -> Outcome:
    """Run the handler (`invoke`) into a transaction (or batch) that commits with the sent
    marker."""
    store = run.io
    snapshot = await store.read(run.key) if run.mode is Mode.TRANSACTION else None
    last: BaseException | None = None
    retried_invalid = False  # an expired transaction is refused as InvalidArgument too
    for round_ in range(TRANSACTION_ROUNDS):
        record = snapshot.record if snapshot is not None else None
        guard: datetime | None = None
        if snapshot is not None and record is not None:
            run.check_record(record)
            run.attempt = record.attempts
            claim = decide(record, snapshot.read_time, run.config.max_attempts)
            if claim is Claim.SKIP:
                return run.skip(record)
            if claim is Claim.WAIT:
                run.raise_lease_held(record, snapshot.read_time)
            if claim is Claim.BURY:
                if await bury(run, record, snapshot, uuid.uuid4().hex):
                    return run.finish(OutcomeKind.DEAD, error=record.last_error)
                snapshot = await store.read(run.key)
                continue
            guard = precondition(snapshot)
        run.attempt = (record.attempts if record is not None else 0) + 1
        token = uuid.uuid4().hex
        run.step(Step.AFTER_CLAIM)
        try:
            result = await _commit(run, invoke, record, guard, token)
        except Exception as exc:
            failure = _failure_in_chain(exc)
            if failure is None:
                raise
            kind, cause = failure
            if isinstance(cause, _HandlerFailed):
                if _invalid(cause.error) and not retried_invalid:
                    retried_invalid = True  # maybe the transaction expired: once more, fresh
                    snapshot = await store.read(run.key)
                    continue
                return await _record_failed_attempt(run, cause.error, token)
            last = cause
            if kind is CommitFailure.OTHER:
                action = "commit the writes and the marker of"
                raise store.unavailable(action, run.key, cause) from cause
            snapshot = await store.read(run.key)
            if written_by(snapshot.record, token):
                # The commit landed; its response was lost. The handler's result is stored.
                return _committed(run, snapshot.record.result if snapshot.record else None)
            if kind is CommitFailure.REJECTED and not _marker_moved(guard, snapshot):
                if _invalid(cause) and not retried_invalid:
                    retried_invalid = True  # maybe the transaction expired: once more, fresh
                    continue
                return await _record_failed_attempt(run, cause, token)  # the handler's writes
            if kind is not CommitFailure.REJECTED:
                await store.sleep(backoff(round_))
            continue  # contention or an outage, or another delivery wrote the marker: again
        return _committed(run, result)
    raise store.unavailable(
        f"commit ({TRANSACTION_ROUNDS} rounds) the writes and the marker of", run.key, last
    ) from last


def _invalid(error: BaseException) -> bool:
    """Firestore refused something as invalid: the handler's data, or an expired transaction
    ("Transaction is invalid or expired" after a long pause): terminal only if a fresh
    attempt is refused again."""
    return isinstance(error, api_exceptions.InvalidArgument)


def _committed(run: Run, result: HandlerResult) -> Outcome:
    run.step(Step.AFTER_MARK)
    return run.ran(result)


def _marker_moved(guard: datetime | None, snapshot: Snapshot) -> bool:
    """The record changed since the attempt read it (or appeared, when it assumed none)."""
    if guard is None:
        return snapshot.record is not None
    return snapshot.update_time != guard


async def _commit(
    run: Run, invoke: Invoke, record: Record | None, guard: datetime | None, token: str
) -> HandlerResult:
    """Run the handler into a batch or transaction with the marker and commit it; returns
    what the handler returned. Raises `_HandlerFailed` for the handler's error, the Google
    API error of a failed commit."""
    ref = run.io.ref(run.key)
    option = None if guard is None else firestore.Client.write_option(last_update_time=guard)

    async def fill(writer: Any) -> HandlerResult:
        result = await _call_handler(invoke, writer)
        _write_marker(run, writer, ref, record, option, token, result)
        run.step(Step.AFTER_EFFECT)
        return result

    return await run.io.commit(run, fill)


async def _call_handler(invoke: Invoke, writer: Any) -> HandlerResult:
    """Call the handler and return its result; its exceptions are marked apart from
    Firestore's, except contention on its own transactional reads (Aborted), which is retried
    and never counted."""
    try:
        result = await invoke(writer)
    except api_exceptions.Aborted:
        raise
    except Exception as exc:
        raise _HandlerFailed(exc) from exc
    return result if isinstance(result, Mapping) else None


def _write_marker(
    run: Run,
    writer: Any,
    ref: Any,
    record: Record | None,
    option: Any,
    token: str,
    result: HandlerResult,
) -> None:
    """Add the sent marker (with the handler's result) to a transaction or batch (sync or
    async: their create and update only buffer): a create, or an update of `record`."""
    require_one_database(writer, ref, run.mode.value)  # the handler's writes, same database
    if record is None:
        fields = new_record(
            event_id=run.event_id,
            suffix=run.suffix,
            mode=run.mode,
            state=State.SENT,
            owner=token,
            leased=False,
            lease_seconds=0,
            payload_hash=run.payload_hash,
            expire_at=run.expire_at(),
            attempts=run.attempt,
            subject=run.subject,
            result=storable_result(result),
        )
        writer.create(ref, fields)
        return
    fields = attempt_finished(
        State.SENT,
        owner=token,
        attempts=run.attempt,
        expire_at=run.expire_at(),
        result=storable_result(result),
    )
    writer.update(ref, fields, option=option)


def _failure_in_chain(exc: BaseException) -> tuple[CommitFailure, Exception] | None:
    """The first Google API error (classified) or `_HandlerFailed` among `exc`, its causes and
    contexts: the client's retry wrapper and a failed rollback wrap what happened."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, _HandlerFailed):
            return CommitFailure.REJECTED, current
        kind = commit_failure(current)
        if kind is not None and isinstance(current, Exception):
            return kind, current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


async def _record_failed_attempt(run: Run, exc: Exception, token: str) -> Outcome:
    """Count an attempt whose writes were discarded; re-raise `exc` unless it was final."""
    error = error_text(exc)
    terminal = is_terminal(exc)
    store = run.io
    for _ in range(RECORD_ROUNDS):
        snapshot = await store.read(run.key, action="record a failed attempt on")
        record = snapshot.record
        if record is not None and written_by(record, token):
            run.attempt = record.attempts  # our earlier try landed; its response was lost
            return _report_failed_attempt(run, record.state, error, exc)
        if record is not None:
            claim = decide(record, snapshot.read_time, run.config.max_attempts)
            if claim is Claim.SKIP:
                return run.skip(record)  # another delivery finished the event meanwhile
            if claim is Claim.WAIT:
                break  # someone else's live lease: not ours to count on
        attempts = (record.attempts if record is not None else 0) + 1
        state = State.IN_PROGRESS
        if terminal:
            state = State.FAILED
        elif attempts >= run.config.max_attempts:
            state = State.DEAD
        action = "record a failed attempt on"
        written: datetime | object
        if record is None:
            fields = new_record(
                event_id=run.event_id,
                suffix=run.suffix,
                mode=run.mode,
                state=state,
                owner=token,
                leased=False,
                lease_seconds=0,
                payload_hash=run.payload_hash,
                expire_at=run.expire_at(),
                attempts=attempts,
                last_error=error,
                subject=run.subject,
            )
            written = await store.create(run.key, fields, action=action)
        else:
            fields = attempt_finished(
                state, owner=token, attempts=attempts, expire_at=run.expire_at(), error=error
            )
            written = await store.update_if_unchanged(
                run.key, fields, precondition(snapshot), action=action
            )
        if isinstance(written, datetime):
            run.attempt = attempts
            return _report_failed_attempt(run, state, error, exc)
    run.finish(OutcomeKind.RELEASED, error=error)
    raise exc


def _report_failed_attempt(run: Run, state: State, error: str, exc: Exception) -> Outcome:
    if state is State.FAILED:
        return run.finish(OutcomeKind.FAILED, error=error)
    if state is State.DEAD:
        return run.finish(OutcomeKind.DEAD, error=error)
    run.finish(OutcomeKind.RELEASED, error=error)
    raise exc
