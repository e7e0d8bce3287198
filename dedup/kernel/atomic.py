"""Transaction and write-only modes (`run_transaction`, `run_write_only`): the handler's writes
and the sent marker commit together or not at all, no lease taken; a failed commit is read back
and decided by `claims.after_commit_failure`. docs/architecture.md, "The atomic modes", says why
the marker is written blind and what counts as an attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as api_exceptions

from dedup.errors import BudgetSpent
from dedup.kernel.budget import Budget
from dedup.kernel.claims import (
    AfterCommit,
    Claim,
    after_commit_failure,
    after_failure,
    after_state,
    decide,
    retry_age,
    written_by,
)
from dedup.kernel.delivery import HandlerResult, Outcome, OutcomeKind, Step
from dedup.kernel.flow_io import Fill, FlowIO, Invoke
from dedup.kernel.record import Fields, Record, Snapshot, State, error_text
from dedup.kernel.room import storable_result
from dedup.kernel.run import Run
from dedup.kernel.step_writes import readable_result
from dedup.kernel.store import backoff, read_back
from dedup.kernel.store_errors import CommitFailed, chained, commit_failure
from dedup.kernel.transitions import (
    attempt_finished,
    fence_of,
    fenced_write,
    first_write,
    mark_dead,
)

TRANSACTION_ROUNDS = 12
"""Commits tried (each transaction retried by the client up to `TRANSACTION_ATTEMPTS`) before
contention or an outage is reported as `StoreUnavailable`."""

TRANSACTION_ATTEMPTS = 3
"""`max_attempts` of each Firestore transaction (commit retries on Aborted)."""

CONTENDED = "/contended"
"""The instance-wide turn (`Run.turn`) a delivery takes for its next tries once a commit of
its was aborted for contention (why: docs/configuration.md). No record key holds `/`."""

RECORD_ROUNDS = 8
"""Re-reads allowed while recording a failed attempt on a record others keep changing."""


class _HandlerFailed(Exception):
    """Carries a handler's exception out of a Firestore transaction."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


Commit = Callable[[FlowIO, str, Fill, datetime | None, Budget], Coroutine[Any, Any, Any]]
"""How an atomic flow commits: `await commit(io, key, fill, fence, budget)`."""


async def run_transaction(run: Run, invoke: Invoke) -> Outcome:
    """Transaction mode: read the record, then run the handler (`invoke`) into a transaction
    that commits with the sent marker. One commit per key at a time on this instance."""
    async with run.turn():
        run.require_time("read")
        first = await run.io.read(run.key, budget=run.budget.for_call(one_rpc=True))
        return await _run_atomic(run, invoke, first, _in_transaction)


async def run_write_only(run: Run, invoke: Invoke) -> Outcome:
    """Write-only mode: assume no record (the common case) and run the handler (`invoke`) into
    a batch that commits with the marker's create, in one round trip for a fresh event."""
    async with run.turn():
        return await _run_atomic(run, invoke, None, _in_batch)


async def _in_transaction(
    io: FlowIO, key: str, fill: Fill, fence: datetime | None, budget: Budget
) -> Any:
    return await io.run_transaction(key, fill, fence, attempts=TRANSACTION_ATTEMPTS, budget=budget)


async def _in_batch(
    io: FlowIO, key: str, fill: Fill, fence: datetime | None, budget: Budget
) -> Any:
    return await io.commit_batch(key, fill, fence, budget=budget)


async def _run_atomic(
    run: Run, invoke: Invoke, snapshot: Snapshot | None, commit: Commit
) -> Outcome:
    store = run.io
    last: BaseException | None = None
    retried_invalid = False  # an expired transaction is refused as InvalidArgument too
    contended = False  # a commit was aborted for contention: the next tries take CONTENDED
    for round_ in range(TRANSACTION_ROUNDS):
        record = snapshot.record if snapshot is not None else None
        fence: datetime | None = None
        if snapshot is not None and record is not None:
            run.check_record(record)
            run.counted(record.attempts)
            claim = decide(record, snapshot.read_time, run.config.attempt_limit)
            if claim is Claim.SKIP:
                return run.skip(record)
            if claim is Claim.WAIT:
                run.raise_lease_held(record, snapshot.read_time)
            if claim is Claim.MARK_DEAD:
                budget, burier = run.budget.after_handler(), uuid.uuid4().hex
                if await mark_dead(run.io, run.key, snapshot, burier, run.expire_at(), budget):
                    return run.finish(OutcomeKind.DEAD, error=record.last_error)
                snapshot = await store.read(run.key, budget=run.budget.for_call(one_rpc=True))
                continue
            fence = fence_of(snapshot)
        run.counted((record.attempts if record is not None else 0) + 1)
        run.require_time("commit the writes and the marker of", last)
        owner = uuid.uuid4().hex
        run.step(Step.AFTER_CLAIM)
        try:
            if contended:
                async with run.turn(CONTENDED):
                    result = await _commit(run, invoke, commit, record, fence, owner)
            else:
                result = await _commit(run, invoke, commit, record, fence, owner)
        except Exception as exc:
            failure = None if isinstance(exc, BudgetSpent) else _failure_in_chain(exc)
            if failure is None:
                raise
            failed, cause = failure
            ours = moved = False
            if isinstance(cause, _HandlerFailed):
                cause = cause.error  # the handler's own error: nothing was committed
                stale = True  # the snapshot this attempt read
            else:
                last, stale = cause, False
                if failed is not CommitFailed.OTHER:  # did it land unanswered?
                    snapshot = await read_back(store, run.key, run.budget)
                    ours = written_by(snapshot.record, owner)
                    moved = _marker_moved(fence, snapshot)
            after = after_commit_failure(
                failed, ours=ours, marker_moved=moved, retried_invalid=retried_invalid
            )
            if after is AfterCommit.LANDED:
                assert snapshot is not None
                return _committed(run, snapshot.record.result if snapshot.record else None)
            if after is AfterCommit.GIVE_UP:
                action = "commit the writes and the marker of"
                raise store.unavailable(action, run.key, cause) from cause
            if after is AfterCommit.FRESH_TRY:
                retried_invalid = True  # maybe the transaction expired: once more, fresh
                if stale:
                    snapshot = await store.read(run.key, budget=run.budget.for_call(one_rpc=True))
                continue
            if after is AfterCommit.REFUSED:
                return await _record_failed_attempt(run, cause, owner)  # the handler's writes
            if after is AfterCommit.BACK_OFF:
                contended = contended or failed is CommitFailed.CONTENTION
                await store.sleep(run.budget.pause(backoff(round_)))
            continue  # contention or an outage, or another delivery wrote the marker: again
        return _committed(run, result)
    raise store.unavailable(
        f"commit ({TRANSACTION_ROUNDS} rounds) the writes and the marker of", run.key, last
    ) from last


def _committed(run: Run, result: HandlerResult) -> Outcome:
    run.step(Step.AFTER_MARK)
    return run.ran(result)


def _marker_moved(fence: datetime | None, snapshot: Snapshot) -> bool:
    if fence is None:
        return snapshot.record is not None
    return snapshot.update_time != fence


async def _commit(
    run: Run,
    invoke: Invoke,
    commit: Commit,
    record: Record | None,
    fence: datetime | None,
    owner: str,
) -> HandlerResult:

    async def fill(writer: Any) -> tuple[HandlerResult, Fields]:
        if not run.budget.affords_try():  # BudgetSpent: nothing is committed
            run.spent("run the handler of")
        result = await _call_handler(invoke, writer)
        run.step(Step.AFTER_EFFECT)
        return result, _marker(run, record, owner, result)

    result: HandlerResult = await commit(run.io, run.key, fill, fence, run.budget)
    return result


async def _call_handler(invoke: Invoke, writer: Any) -> HandlerResult:
    """The handler's result; its errors wrapped in `_HandlerFailed`, except Aborted (contention
    on its transactional reads: retried, never counted)."""
    try:
        result = await invoke(writer)
    except api_exceptions.Aborted:
        raise
    except Exception as exc:
        raise _HandlerFailed(exc) from exc
    return result if isinstance(result, Mapping) else None


def _marker(run: Run, record: Record | None, owner: str, result: HandlerResult) -> Fields:
    if record is None:
        return first_write(
            run,
            State.SENT,
            owner,
            attempts=run.attempt,
            result=readable_result(storable_result(result, run), run),
        )
    return attempt_finished(
        State.SENT,
        owner=owner,
        attempts=run.attempt,
        expire_at=run.expire_at(),
        result=readable_result(storable_result(result, run), run),
    )


def _failure_in_chain(exc: BaseException) -> tuple[CommitFailed, Exception] | None:
    """The handler's own error (a `_HandlerFailed` in the chain), else the commit's."""
    for error in chained(exc):
        if isinstance(error, _HandlerFailed):
            invalid = isinstance(error.error, api_exceptions.InvalidArgument)
            return (CommitFailed.INVALID if invalid else CommitFailed.REFUSED), error
    return commit_failure(exc)


async def _record_failed_attempt(run: Run, exc: Exception, owner: str) -> Outcome:
    """Count an attempt whose writes were discarded; re-raise `exc` unless it was final."""
    error = error_text(exc)
    store, action = run.io, "record a failed attempt on"
    budget = run.budget.after_handler()
    for round_ in range(RECORD_ROUNDS):
        if round_ and budget.left() <= 0:
            break  # out of time: the attempt goes uncounted, as when the process dies
        snapshot = await read_back(store, run.key, budget, action=action)
        record = snapshot.record
        if record is not None and written_by(record, owner):
            run.counted(record.attempts)  # our earlier try landed; its response was lost
            return run.failed(after_state(record.state), error, exc)
        if record is not None:
            run.check_record(record)  # maybe another payload under the same key
            claim = decide(record, snapshot.read_time, run.config.attempt_limit)
            if claim is Claim.SKIP:
                return run.skip(record)  # another delivery finished the event meanwhile
            if claim is Claim.WAIT:
                break  # someone else's live lease: not ours to count on
        attempts = (record.attempts if record is not None else 0) + 1
        age = retry_age(record, snapshot.read_time)
        after = after_failure(exc, attempts, run.config.attempt_limit, age)
        state = after.state
        written: datetime | object
        if record is None:
            fields = first_write(run, state, owner, attempts=attempts, last_error=error)
            written = await store.create(run.key, fields, action=action, budget=budget)
        else:
            fields = attempt_finished(
                state, owner=owner, attempts=attempts, expire_at=run.expire_at(), error=error
            )
            written = await fenced_write(store, run.key, fields, fence_of(snapshot), action, budget)
        if isinstance(written, datetime):
            run.counted(attempts)
            return run.failed(after, error, exc)
    run.finish(OutcomeKind.RELEASED, error=error)
    raise exc
