"""The flow of `delivery.step` (`run_step`): a durable step run and recorded under the
delivery's lease, by the rules of `dedup.kernel.steps` (docs/steps.md)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api_exceptions

from dedup.errors import BudgetSpent, LeaseLost, RecordRefused, TerminalError
from dedup.kernel.claims import written_by
from dedup.kernel.delivery import Step
from dedup.kernel.record import Field, OutcomeKind, State
from dedup.kernel.steps import DONE, STARTED, StepCall
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
"""Held around `StepLog.begin`: two threads over one delivery cannot both enter."""


async def run_step(
    lease: FencedLease, name: str, call: StepCall, *, transactional: bool, once: bool
) -> Any:
    """Step `name`'s recorded value, else `call`'s, recorded under `lease`; `once`: at most
    once. Raises what `call` raises, `LeaseLost` or `BudgetSpent` (`require_live`),
    `StepMismatch`, `StepInterrupted`, `StepTooLarge`, `RecordRefused` (`StepLog`)."""
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
        require_live(lease, name)
    if transactional:
        value = await _in_transaction(lease, name, call)
    else:
        value = await call(None)
        run.step(Step.AFTER_STEP_CALL)
        try:
            steps = lease.steps.with_entry(name, DONE, value, room=lease.steps_room())
            value = as_replayed(run, name, value)
        except TerminalError:
            if once:
                ended = lease.steps.with_entry(name, DONE, refused=True, room=lease.steps_room())
                await _record(lease, name, ended, f"record the end of step {name} of")
            raise
        await _record(lease, name, steps, f"record step {name} of")
    run.step(Step.AFTER_STEP_RECORD)
    return value


def unreadable_reference(value: Any, client: Any) -> str | None:
    """Why a read of the record through `client` could not give `value` back (a reference to
    another project or database than `client`'s), or None."""
    for ref in references(value):
        if document_name(client.document(ref.path)) != document_name(ref):
            return (
                f"a reference to {document_name(ref)}, a document outside the records' "
                "database, which a read of the record could not decode (store its path instead)"
            )
    return None


def readable_result(stored: dict[str, Any] | None, run: Run) -> dict[str, Any] | None:
    """The result `stored` with "sent", or None (WARNING) when it holds a reference no read of
    the record could decode."""
    if stored is None or (reason := unreadable_reference(stored, run.io.client)) is None:
        return stored
    logger.warning("%s: handler result not stored: it holds %s", run.path, reason)
    return None


def as_replayed(run: Run, name: str, value: Any) -> Any:
    """Step `name`'s `value` as a replay gets it back from the record (`as_stored`), type for
    type. Raises `RecordRefused` for a reference no read could decode, before any write."""
    client = run.io.client
    unreadable = unreadable_reference(value, client)
    if unreadable is not None:
        raise RecordRefused(
            f"step {name!r} returned {unreadable}; its value is not recorded and the event "
            "fails, since a retry would return the same"
        )
    return as_stored(value, lambda path: client.document(path))  # asked only for a reference


def require_live(lease: FencedLease, name: str) -> None:
    """Refuse to start step `name`, without an RPC: `LeaseLost` once the lease may have ended
    on the budget's clock (`Budget.lease_late`) or the delivery ended, `BudgetSpent` once its
    budget is spent. The refusal is kept as `Run.refused` (docs/steps.md, "When the lease is
    lost")."""
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
    if run.budget.left() <= 0:
        try:
            run.spent(f"start step {name!r} of")
        except BudgetSpent as spent:
            run.refused = spent
            raise


async def _record(lease: FencedLease, name: str, steps: dict[str, Any], action: str) -> None:
    """Write step `name`'s entry, renewing the lease unless the delivery has ended."""
    sent = lease.run.budget.now()
    fields = steps_recorded(name, steps[name])
    if lease.run.outcome is not None:
        del fields[Field.LEASE_STARTED_AT]
    await lease.write(fields, State.IN_PROGRESS, action, keeps_lease=True)
    lease.steps_landed(steps, sent, None)


async def _in_transaction(lease: FencedLease, name: str, call: StepCall) -> Any:
    """One fresh transaction more after an InvalidArgument (maybe expired), as the atomic
    modes do. The error is the transaction's own: a failed rollback's never replaces it
    (`dedup.platform.firestore_internals`)."""
    try:
        return await _transaction_once(lease, name, call)
    except api_exceptions.InvalidArgument:
        pass
    return await _transaction_once(lease, name, call)


async def _transaction_once(lease: FencedLease, name: str, call: StepCall) -> Any:
    """`call(transaction)` and the step's record, committed together; a failure is read back
    (`LeaseLost` if the lease is no longer ours)."""
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
