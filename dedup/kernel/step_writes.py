"""How a durable step is run and recorded under a delivery's lease (`dedup.kernel.lease.Lease`): the
flow of `delivery.step`, whose rules (names, order, limits) are `dedup.kernel.steps`'. docs/steps.md
says what each kind of step guarantees."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from dedup.errors import BudgetSpent, LeaseLost, RecordRefused, TerminalError
from dedup.kernel.claims import written_by
from dedup.kernel.delivery import Step
from dedup.kernel.record import Field, OutcomeKind, State
from dedup.kernel.steps import DONE, STARTED, StepCall
from dedup.kernel.store_errors import CommitFailed, commit_failure
from dedup.kernel.transitions import fence_of, steps_recorded
from dedup.platform.firestore_internals import document_name
from dedup.platform.firestore_values import as_stored, references

if TYPE_CHECKING:
    from dedup.kernel.flow_io import FencedLease
    from dedup.kernel.run import Run

logger = logging.getLogger("dedup")

TRANSACTION_ATTEMPTS = 5
"""Tries of a transactional step's transaction on contention (Aborted)."""


_ENTERING = threading.Lock()
"""Held while a step checks that no other step of its delivery is running and marks itself
running (`StepLog.begin`): two threads over one delivery cannot both enter."""


async def run_step(
    lease: FencedLease, name: str, call: StepCall, *, transactional: bool, once: bool
) -> Any:
    """Run step `name` of the delivery holding `lease` (see the module docstring): its recorded
    value, else `call`'s, recorded. `once`: at most once. Raises what `call` raises, `LeaseLost`
    when the lease is no longer ours or may have ended (`require_live`), `StepMismatch` (a step
    of this delivery is running already: nothing called, nothing written), `StepInterrupted`,
    `StepTooLarge`, `RecordRefused` (a name or value Firestore refuses: checked before it is
    written; an at-most-once step's end is recorded, without the value, before the error)."""
    with _ENTERING:
        steps = lease.steps
        steps.begin(name, lease.run.path)
    try:
        return await _run_one(lease, name, call, transactional=transactional, once=once)
    finally:
        steps.end()


async def _run_one(
    lease: FencedLease, name: str, call: StepCall, *, transactional: bool, once: bool
) -> Any:
    run = lease.run
    done, value = lease.steps.replay(name, run.path, call.fingerprint())
    if done:
        return value
    run.step(Step.BEFORE_STEP)
    require_live(lease, name)
    if once:
        started = lease.steps.with_entry(name, STARTED, room=lease.steps_room())
        await _record(lease, name, started, f"start step {name} of")
        require_live(lease, name)  # the start renewed the lease, unless it took the lease's time
    if transactional:
        value = await _in_transaction(lease, name, call)
    else:
        value = await call(None)
        run.step(Step.AFTER_STEP_CALL)
        try:
            steps = lease.steps.with_entry(name, DONE, value, room=lease.steps_room())
            value = as_replayed(run, name, value)
        except TerminalError:  # refused, or too large: its end, then the error (once)
            if once:
                ended = lease.steps.with_entry(name, DONE, refused=True, room=lease.steps_room())
                await _record(lease, name, ended, f"record the end of step {name} of")
            raise
        await _record(lease, name, steps, f"record step {name} of")
    run.step(Step.AFTER_STEP_RECORD)
    return value


def unreadable_reference(value: Any, client: Any) -> str | None:
    """Why a read of the record through `client` could not give `value` back, or None: a
    document reference in it to another project or database than `client`'s (the client's
    decoder raises for it, so every later read of the record would fail). Checked before each
    write of a user's value: a step's, a note's, a handler's result (`readable_result`)."""
    for ref in references(value):
        if document_name(client.document(ref.path)) != document_name(ref):
            return (
                f"a reference to {document_name(ref)}, a document outside the records' "
                "database, which a read of the record could not decode (store its path instead)"
            )
    return None


def readable_result(stored: dict[str, Any] | None, run: Run) -> dict[str, Any] | None:
    """The result `stored` with "sent" (`dedup.kernel.room.storable_result`), or None when it
    holds a reference no read of the record could decode (WARNING naming the record), as a
    result Firestore refuses is: the effect happened, "sent" must be written and readable."""
    if stored is None or (reason := unreadable_reference(stored, run.io.client)) is None:
        return stored
    logger.warning("%s: handler result not stored: it holds %s", run.path, reason)
    return None


def as_replayed(run: Run, name: str, value: Any) -> Any:
    """Step `name`'s `value` (one the record takes) as a later delivery's replay gets it back
    from the record (`as_stored`: a `GeoPoint(35, 139)` as `GeoPoint(35.0, 139.0)`, a
    timestamp in UTC, a tuple as a list), so that the delivery that ran the step hands its
    handler the same value, type for type, as every replay will. Raises `RecordRefused` for a
    document reference no read of the record could decode (`unreadable_reference`: another
    project or database), before anything is written."""
    client = run.io.client
    unreadable = unreadable_reference(value, client)
    if unreadable is not None:
        raise RecordRefused(
            f"step {name!r} returned {unreadable}; its value is not recorded and the event "
            "fails, since a retry would return the same"
        )
    return as_stored(value, lambda path: client.document(path))  # asked only for a reference


def require_live(lease: FencedLease, name: str) -> None:
    """Refuse (`LeaseLost`, the step's function not called) to start step `name` once the
    lease may have ended: `Budget.lease_left` (from the send time of the write that last renewed
    it, `lease_seconds`, on the budget's clock) less a margin (`Budget.lease_late`). No RPC: a
    delivery that stalled past its lease (a pause, a slow call before the step) stops here
    whether or not another delivery took the lease over meanwhile. Once the delivery's time
    budget is spent (the function's timeout is near), `BudgetSpent`. Either refusal is kept as
    `Run.refused`: a handler that catches it and returns is not recorded "sent"
    (`dedup.kernel.lease`). A step started after its delivery ended (from a thread or task the
    handler did not wait for) is refused too."""
    run = lease.run
    if run.outcome is not None:
        raise LeaseLost(
            f"{run.path}: step {name!r} was started after its delivery ended "
            f"({run.outcome.value}), so it was not called; await each step in the handler"
        )
    late = run.budget.lease_late(run.config.lease_seconds)
    if late >= 0:
        run.finish(OutcomeKind.LEASE_LOST)
        run.refused = LeaseLost(
            f"{run.path}: this delivery's lease may have ended {late:.1f} s before step "
            f"{name!r} (by this instance's clock), so the step was not called: another delivery "
            "may hold the lease; keep each step and the code between two steps well within "
            "lease_seconds (DEDUP_LEASE_SECONDS)"
        )
        raise run.refused
    if run.budget.left() <= 0:  # the function's timeout is near: no step starts now
        try:
            run.spent(f"start step {name!r} of")
        except BudgetSpent as spent:
            run.refused = spent
            raise


async def _record(lease: FencedLease, name: str, steps: dict[str, Any], action: str) -> None:
    """Write step `name`'s entry of `steps` (and no other), fenced by the lease, which the
    write renews; unless the delivery ended while the step ran (a step the handler did not
    wait for): its entry is recorded, and the lease the end gave back or closed stays so."""
    sent = lease.run.budget.now()
    fields = steps_recorded(name, steps[name])
    if lease.run.outcome is not None:
        del fields[Field.LEASE_STARTED_AT]
    await lease.write(fields, State.IN_PROGRESS, action, notes=True)
    lease.steps_landed(steps, sent, None)


async def _in_transaction(lease: FencedLease, name: str, call: StepCall) -> Any:
    """`call(transaction)` and the step's record in one transaction guarded by the lease's last
    write: both commit or neither. A commit whose answer was lost is recognised by reading. A
    transaction refused as invalid with nothing committed (one that expired: a long pause, a
    database restart) runs once more in a fresh transaction, as the atomic modes' commits do
    (`kernel.claims.after_commit_failure`); refused again, the error is the handler's."""
    try:
        return await _transaction_once(lease, name, call)
    except Exception as exc:
        failure = commit_failure(exc)
        if failure is None or failure[0] is not CommitFailed.INVALID:
            raise
    return await _transaction_once(lease, name, call)


async def _transaction_once(lease: FencedLease, name: str, call: StepCall) -> Any:
    """One transaction of `_in_transaction`: the step's value, or what it raised once the
    record showed nothing of it committed (`LeaseLost` when the lease is no longer ours)."""
    run = lease.run
    writers: list[Any] = []

    async def fill(transaction: Any) -> tuple[Any, Any]:
        writers.append(transaction)
        value = await call(transaction)
        steps = lease.steps.with_entry(name, DONE, value, room=lease.steps_room())
        value = as_replayed(run, name, value)
        return (value, steps), steps_recorded(name, steps[name])

    sent = run.budget.now()
    try:
        value, steps = await run.io.run_transaction(
            run.key, fill, lease.fence, attempts=TRANSACTION_ATTEMPTS, budget=run.budget
        )
    except Exception:
        # Did it land unanswered? Bounded by what is left of the budget after the transaction.
        action, left = f"check step {name} of", run.budget.after_handler()
        snapshot = await run.io.read(run.key, action=action, budget=left)
        record = snapshot.record
        if not written_by(record, lease.owner):
            run.finish(OutcomeKind.LEASE_LOST)
            raise LeaseLost(f"{run.path}: the lease was taken over during step {name!r}") from None
        recorded = dict(record.steps or {}) if record is not None else {}
        entry = recorded.get(name)
        if entry is None or entry.get("state") != DONE:
            raise  # nothing committed: the step runs again on the next try
        fence = fence_of(snapshot)  # it committed; its answer was lost
        value, steps = entry.get("value"), recorded
    else:
        fence = writers[-1].commit_time
    lease.steps_landed(steps, sent, fence)
    return value
