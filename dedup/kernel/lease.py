"""Lease mode (`run_lease`): the claim (a create, else a read, `claims.decide` and a take-over
fenced by that read), the `Lease` it makes (the record's only writer after the claim), and the
handler's run with its outcome. docs/guarantees.md says what each case answers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dedup.errors import LeaseHeld, LeaseLost, RecordRefused, StoreUnavailable
from dedup.kernel.ambiguity import reconcile_before_burial, settle_ambiguity
from dedup.kernel.claims import (
    AfterConflict,
    AfterFailure,
    Claim,
    after_failure,
    after_fenced_conflict,
    decide,
    takeover_ambiguous,
    written_by,
)
from dedup.kernel.delivery import NO_NOTES, Outcome, OutcomeKind, Step
from dedup.kernel.give_back import give_back_unstarted as _give_back_unstarted
from dedup.kernel.record import Conflict, Field, Fields, State, error_text
from dedup.kernel.room import steps_room, storable_result
from dedup.kernel.run import Run
from dedup.kernel.step_writes import readable_result, run_step, unreadable_reference
from dedup.kernel.steps import StepLog, at_most_once, step_call, warn_if_anonymous
from dedup.kernel.store import read_back
from dedup.kernel.store_errors import unanswered
from dedup.kernel.transitions import (
    fence_of,
    fenced_write,
    finished,
    first_write,
    lease_taken,
    mark_dead,
    noted,
    released,
)
from dedup.platform.firestore_refusals import refusal

if TYPE_CHECKING:
    from dedup.kernel.flow_io import Invoke

logger = logging.getLogger("dedup")

CLAIM_ROUNDS = 8
"""Re-reads allowed when other deliveries keep changing the record under a precondition."""

REFRESH_ROUNDS = 8
"""Times an owner writes over a record still its own but changed under it (an operator's
release or edit) before it counts the lease lost."""


@dataclass
class Lease:
    """One delivery's lease, from its claim to its outcome: the record's only writer, each
    write fenced by `fence`, which it moves on."""

    run: Run
    owner: str
    """This delivery's owner token, written on the record with the claim."""
    fence: datetime
    """The update time of this lease's last write: what its next write is fenced by."""
    ambiguous: bool = False
    """The claim took over an expired lease (`dedup.kernel.claims.takeover_ambiguous`)."""
    notes: Mapping[str, Any] = NO_NOTES
    """What was noted for the event so far (the record's `notes`, then this delivery's)."""
    recorded_steps: Mapping[str, Any] | None = None
    """The durable steps the record held when this lease was claimed (`dedup.kernel.steps`)."""
    _steps: StepLog | None = field(default=None, repr=False)

    @property
    def steps(self) -> StepLog:
        """This delivery's steps: the record's, then its own (made at its first step)."""
        if self._steps is None:
            self._steps = StepLog(self.recorded_steps)
        return self._steps

    def time_left(self) -> float:
        """Seconds left of the delivery's time budget."""
        return self.run.budget.left()

    def steps_room(self) -> int:
        """The bytes the record has for its `steps` (`dedup.kernel.room.steps_room`)."""
        return steps_room(self.run, self.notes)

    def steps_landed(self, steps: Mapping[str, Any], sent: float, fence: datetime | None) -> None:
        """A write of `steps` sent at `sent` (`Budget.now`) committed, renewing the lease from
        `sent`; `fence`: a step transaction's new fence (None after `write`)."""
        if fence is not None:
            self.fence = fence
        self.steps.landed(steps)
        self.run.budget.lease_from(sent, self.run.config.lease_seconds)

    def run_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        transactional: bool,
        on_interrupted: str | None,
        awaited: bool,
    ) -> Coroutine[Any, Any, Any]:
        """`delivery.step(name, fn, *args, **kwargs)` under this lease (`step_writes.run_step`)."""
        once = at_most_once(transactional, on_interrupted)
        warn_if_anonymous(name, fn)
        call = step_call(fn, args, kwargs, transactional, awaited)
        return run_step(self, name, call, transactional=transactional, once=once)

    async def note(self, fields: dict[str, Any]) -> None:
        """`delivery.note(**fields)`: merge `fields` into the record's notes (`write`).
        Raises `RecordRefused` for notes Firestore would refuse, else as `write`."""
        notes = {**self.notes, **fields}
        reason = refusal(notes, at=(Field.NOTES,), round_trip=False) or unreadable_reference(
            fields, self.run.io.client
        )
        if reason is not None:
            raise RecordRefused(
                f"could not note on {self.run.path}: the notes hold {reason}; nothing was "
                "written, and a retry would be refused the same way"
            )
        await self.write(noted(notes), State.IN_PROGRESS, "note on", keeps_lease=True)
        self.notes = notes

    async def write(
        self, fields: Fields, state: State, action: str, *, keeps_lease: bool = False
    ) -> None:
        """Write `fields` fenced by `fence` (which moves on), every Firestore error but a refused
        value retried within `Budget.after_handler`. Raises `LeaseLost` if another delivery
        moved the record, `RecordRefused` for a refused value, `StoreUnavailable` if the store
        kept failing. `keeps_lease`: a note or a step, not an
        outcome (a record still ours is written over)."""
        run = self.run
        budget = run.budget.after_handler()
        fence = self.fence
        for _ in range(1 + REFRESH_ROUNDS):
            written = await fenced_write(
                run.io, run.key, fields, fence, action, budget, keep_trying=True
            )
            if isinstance(written, datetime):
                self.fence = written
                return
            snapshot = await read_back(run.io, run.key, budget, action=action, until_end=True)
            after = after_fenced_conflict(snapshot.record, self.owner, state)
            if after is AfterConflict.LANDED and not keeps_lease:
                self.fence = fence_of(snapshot)  # our write is there
                return
            if after is AfterConflict.LOST:
                break
            # Still ours (released or edited by an operator, or a note): write over it.
            fence = fence_of(snapshot)
        run.finish(OutcomeKind.LEASE_LOST)
        raise LeaseLost(
            f"could not {action} {run.path}: this delivery's lease expired and another "
            "delivery took it over, so this outcome was not recorded; set lease_seconds "
            "(DEDUP_LEASE_SECONDS) above the function timeout"
        )


async def run_lease(run: Run, invoke: Invoke) -> Outcome:
    """Claim the lease of `run.key` (one claim per key at a time on the instance) and run the
    handler (`invoke`) under it; the delivery's `Outcome`. Raises `LeaseHeld` when another
    delivery holds the lease."""
    async with run.turn():
        claimed = await _claim(run)
    if isinstance(claimed, Outcome):
        return claimed
    return await _run_owned(run, invoke, claimed)


async def _claim(run: Run) -> Outcome | Lease:
    config, store = run.config, run.io
    if run.live_leases.live(run.key):
        run.finish(OutcomeKind.LEASE_HELD)
        raise LeaseHeld(
            f"{run.path} is leased by a delivery this instance knows to be live; "
            "the platform will retry"
        )
    owner = uuid.uuid4().hex
    try_create = True
    ambiguous = False  # the latest claim write took over an expired lease
    notes = NO_NOTES  # what the record it took over had noted
    steps: Mapping[str, Any] | None = None  # and the steps it had recorded
    sent_at = 0.0  # when the latest claim write was sent (set before each): our lease starts later
    failed: Conflict | StoreUnavailable | None = None  # how the latest claim write failed
    for _ in range(CLAIM_ROUNDS):
        pending = failed is not None and _unanswered(failed)
        if not pending:  # else it learns whether it holds a lease, whatever the time
            run.require_time("claim")
        if try_create:
            ambiguous, notes, steps = False, NO_NOTES, None
            sent_at = run.budget.now()
            fields = first_write(run, State.IN_PROGRESS, owner, lease_seconds=config.lease_seconds)
            created = await _or_unanswered(
                store.create(run.key, fields, budget=run.budget.for_call(one_rpc=True))
            )
            if isinstance(created, datetime):
                run.counted(1)
                return _owned(Lease(run, owner, created), sent_at)
            failed = created
            pending = _unanswered(failed)
        snapshot = await read_back(store, run.key, run.budget, until_end=pending, then=_UNSTARTED)
        record = snapshot.record
        if record is not None and written_by(record, owner):
            # Our own claim or burial landed unanswered.
            run.counted(record.attempts)
            if record.state is State.DEAD:
                return run.finish(OutcomeKind.DEAD, error=record.last_error)
            return _owned(Lease(run, owner, fence_of(snapshot), ambiguous, notes, steps), sent_at)
        if isinstance(failed, StoreUnavailable):
            raise failed  # it did not land: the store fails writes, the platform retries
        failed = None
        claim = decide(record, snapshot.read_time, config.attempt_limit)
        try_create = claim is Claim.CREATE
        if record is None:  # vanished (TTL) between the create and the read
            continue
        run.saw(record, snapshot.read_time)
        if claim is Claim.SKIP:
            return run.skip(record)
        if claim is Claim.WAIT:
            run.raise_lease_held(record, snapshot.read_time)
        if claim is Claim.MARK_DEAD:
            choice = run.ambiguity
            asks = choice is not None and choice.reconcile is not None
            if asks and takeover_ambiguous(record, snapshot.read_time):
                reconciled = await reconcile_before_burial(run, record, snapshot, owner)
                if reconciled is not None:
                    return reconciled
            budget = run.budget.after_handler()
            if await mark_dead(run.io, run.key, snapshot, owner, run.expire_at(), budget):
                return run.finish(OutcomeKind.DEAD, error=record.last_error)
            continue
        ambiguous = takeover_ambiguous(record, snapshot.read_time)
        notes, steps = record.notes or NO_NOTES, record.steps
        sent_at = run.budget.now()
        fields = lease_taken(
            owner=owner,
            lease_seconds=config.lease_seconds,
            attempts=record.attempts + 1,
            expire_at=run.expire_at(),
        )
        action, budget = "take over the lease of", run.budget.for_call(one_rpc=True)
        taken = await _or_unanswered(
            fenced_write(store, run.key, fields, fence_of(snapshot), action, budget)
        )
        if isinstance(taken, datetime):
            run.counted(record.attempts + 1)
            return _owned(Lease(run, owner, taken, ambiguous, notes, steps), sent_at)
        failed = taken
    run.finish(OutcomeKind.LEASE_HELD, error="record kept changing")
    raise LeaseHeld(
        f"{run.path} changed {CLAIM_ROUNDS} times while this delivery tried to claim it; "
        "another delivery is working on it, the platform will retry"
    )


async def _or_unanswered[W](write: Awaitable[W]) -> W | StoreUnavailable:
    try:
        return await write
    except StoreUnavailable as exc:
        if not unanswered(exc):
            raise
        return exc


_UNSTARTED = ": the handler never started, the next delivery is ambiguous"


def _unanswered(failed: Conflict | StoreUnavailable | None) -> bool:
    return isinstance(failed, StoreUnavailable) or (failed is not None and failed.unanswered)


def _owned(lease: Lease, sent: float) -> Lease:
    run = lease.run
    run.budget.lease_from(sent, run.config.lease_seconds)
    run.live_leases.own(run.key, run.config.lease_seconds)
    return lease


async def _run_owned(run: Run, invoke: Invoke, lease: Lease) -> Outcome:
    config, owner = run.config, lease.owner
    try:
        if run.budget.left() <= 0:
            return await _give_back_unstarted(run, lease)
        if run.step_hooks:
            run.step(Step.AFTER_CLAIM)
        choice = run.ambiguity
        if lease.ambiguous and choice is not None:  # the function chose (`chooses_ambiguity`)
            settled = await settle_ambiguity(run, lease, choice)
            if settled is not None:
                return settled
        late = run.budget.lease_late(config.lease_seconds) >= 0
        if late or run.budget.left() <= 0:  # reconcile or a step hook took the time
            return await _give_back_unstarted(run, lease, "reconcile or a step hook")
        try:
            result = await invoke(lease)
            if run.refused is not None or run.outcome is OutcomeKind.LEASE_LOST:
                _refuse_swallowed(run)
        except Exception as exc:
            if run.outcome is OutcomeKind.LEASE_LOST:  # a note found the lease taken over
                raise
            error = error_text(exc)
            after = after_failure(exc, run.attempt, config.attempt_limit, run.retry_age)
            if after is AfterFailure.RELEASED:
                fields = released(error=error, expire_at=run.expire_at())
                await lease.write(fields, after.state, "release")
            else:
                fields = finished(after.state, owner=owner, expire_at=run.expire_at(), error=error)
                await lease.write(fields, after.state, f"mark {after.state.value}")
            return run.failed(after, error, exc)
        if run.step_hooks:
            run.step(Step.AFTER_EFFECT)
        steps = lease.recorded_steps if lease._steps is None else lease._steps.recorded
        notes = lease.notes
        stored = None
        if result is not None:
            stored = storable_result(result, run, notes=notes, steps=steps)
            stored = readable_result(stored, run)
        await _mark_sent(run, lease, stored)
        if run.step_hooks:
            run.step(Step.AFTER_MARK)
        return run.ran(result if isinstance(result, Mapping) else None)
    finally:
        run.live_leases.drop(run.key)


def _refuse_swallowed(run: Run) -> None:
    """Raise a refusal the handler caught and swallowed: "sent" is not recorded over it."""
    if run.refused is not None:
        raise run.refused
    if run.outcome is OutcomeKind.LEASE_LOST:
        raise LeaseLost(
            f"{run.path}: the handler returned after this delivery lost its lease (a note or a "
            'step raised LeaseLost, which the handler caught), so "sent" is not recorded; let '
            "LeaseLost propagate"
        )


async def _mark_sent(run: Run, lease: Lease, stored: dict[str, Any] | None) -> None:
    fields = finished(State.SENT, owner=lease.owner, expire_at=run.expire_at(), result=stored)
    try:
        await lease.write(fields, State.SENT, "mark sent")
    except RecordRefused as exc:
        if stored is None:
            raise
        logger.warning(
            "%s: handler result not stored (%s); duplicates get no result", run.path, exc
        )
        fields[Field.RESULT] = None
        await lease.write(fields, State.SENT, "mark sent")
