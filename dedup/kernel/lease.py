"""Lease mode: claim a lease on the record, run the handler, record its outcome.

Owns the claim (`_claim`: a create with exists=false, else a read, `dedup.kernel.claims.decide`
and a take-over fenced by that read; a claim write that went unanswered is read back until the
delivery learns whether it landed), the `Lease` a claim makes (the record's only writer after
the claim), and the handler's run with its outcome (sent, failed, dead, or the lease given
back: `dedup.kernel.give_back` before the handler starts). An expired lease's next delivery
is `dedup.kernel.ambiguity`'s; docs/guarantees.md says what each case answers. Written once,
as coroutines over `Run.io`.
"""

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


@dataclass
class Lease:
    """One delivery's lease, from its claim to its outcome: the record's only writer. Each write
    is fenced by `fence` and moves it on; one that finds the record moved raises `LeaseLost`."""

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
        """A write of `steps`, sent at `sent` (`Budget.now`), committed: the lease runs
        `lease_seconds` from `sent`; `fence`: the new fence of a step's transaction (None after
        `write`)."""
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
        """`delivery.note(**fields)`: merge `fields` into the record's notes, fenced like
        "sent" (retried until the lease's end on store errors). Raises `LeaseLost` when another
        delivery took the lease over, `StoreUnavailable` when the store kept failing."""
        notes = {**self.notes, **fields}
        reason = refusal(notes, at=(Field.NOTES,), round_trip=False) or unreadable_reference(
            fields, self.run.io.client
        )
        if reason is not None:  # checked as Firestore would, before the write: none is sent
            raise RecordRefused(
                f"could not note on {self.run.path}: the notes hold {reason}; nothing was "
                "written, and a retry would be refused the same way"
            )
        await self.write(noted(notes), State.IN_PROGRESS, "note on", notes=True)
        self.notes = notes

    async def write(
        self, fields: Fields, state: State, action: str, *, notes: bool = False
    ) -> None:
        """Write `fields` fenced by `fence` (which moves on; `fenced_write`) within the budget
        of the writes after the handler (`Budget.after_handler`: never past the lease's end),
        the store retrying every error in that time (the effect may have happened). Raises
        `LeaseLost` if another delivery moved the record, `StoreUnavailable` if the store kept
        failing. `notes`: the write keeps the lease (a record still ours is written over)."""
        run = self.run
        budget = run.budget.after_handler()
        fence = self.fence
        for _ in range(1 + CLAIM_ROUNDS):
            written = await fenced_write(
                run.io, run.key, fields, fence, action, budget, keep_trying=True
            )
            if isinstance(written, datetime):
                self.fence = written
                return
            # The fence failed: our own earlier try may have landed unanswered, an operator
            # may have released our lease, or another delivery took it over.
            snapshot = await read_back(run.io, run.key, budget, action=action, until_end=True)
            after = after_fenced_conflict(snapshot.record, self.owner, state)
            if after is AfterConflict.LANDED and not notes:
                self.fence = fence_of(snapshot)  # our write is there
                return
            if after is AfterConflict.LOST:
                break
            # Still ours (an operator released the lease, or edited the record by hand; or
            # a note, which keeps the lease): write over what is there now.
            fence = fence_of(snapshot)
        run.finish(OutcomeKind.LEASE_LOST)
        raise LeaseLost(
            f"could not {action} {run.path}: this delivery's lease expired and another "
            "delivery took it over, so this outcome was not recorded; set lease_seconds "
            "(DEDUP_LEASE_SECONDS) above the function timeout"
        )


async def run_lease(run: Run, invoke: Invoke) -> Outcome:
    """Claim the lease of `run.key` and run the handler (`invoke`) under it. Copies of the key
    on this instance claim one at a time (`FlowIO.turn`): the first writes, the others then
    know the lease is live (or just saw someone else's) and answer `LeaseHeld` without a round
    trip. The handler runs outside that turn."""
    async with run.turn():
        claimed = await _claim(run)
    if isinstance(claimed, Outcome):
        return claimed
    return await _run_owned(run, invoke, claimed)


async def _claim(run: Run) -> Outcome | Lease:
    """Take the lease, or return the outcome of a delivery that ends here (duplicate, dead).
    Raises `LeaseHeld` when it is taken."""
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
    sent_at = run.budget.now()  # when the latest claim write was sent: our lease starts later
    failed: Conflict | StoreUnavailable | None = None  # how the latest claim write failed
    for _ in range(CLAIM_ROUNDS):
        pending = _unanswered(failed)
        if not pending:  # else it learns whether it holds a lease, whatever the time
            run.require_time("claim")
        if try_create:
            ambiguous, notes, steps = False, NO_NOTES, None
            sent_at = run.budget.now()
            fields = first_write(run, State.IN_PROGRESS, owner, lease_seconds=config.lease_seconds)
            created = await _claimed(
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
        taken = await _claimed(
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


async def _claimed[W](write: Awaitable[W]) -> W | StoreUnavailable:
    """A claim write's result, or its error if it went `unanswered` (it may have landed)."""
    try:
        return await write
    except StoreUnavailable as exc:
        if not unanswered(exc):
            raise
        return exc


_UNSTARTED = ": the handler never started, the next delivery is ambiguous"


def _unanswered(failed: Conflict | StoreUnavailable | None) -> bool:
    """A claim write that failed so may have landed unanswered: read back until the budget
    ends, the delivery learns whether it holds the lease (run, or give back)."""
    return isinstance(failed, StoreUnavailable) or (failed is not None and failed.unanswered)


def _owned(lease: Lease, sent: float) -> Lease:
    """The lease, taken by the claim write sent at `sent`, is ours: it runs `lease_seconds` from
    then (`Budget.lease_from`); tell this instance's other copies, before our turn ends."""
    run = lease.run
    run.budget.lease_from(sent, run.config.lease_seconds)
    run.live_leases.own(run.key, run.config.lease_seconds)
    return lease


async def _run_owned(run: Run, invoke: Invoke, lease: Lease) -> Outcome:
    """Run the handler under `lease`; record its outcome fenced by the lease's last write."""
    config, owner = run.config, lease.owner
    try:
        if run.budget.left() <= 0:
            return await _give_back_unstarted(run, lease)
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
        run.step(Step.AFTER_EFFECT)
        steps = lease.recorded_steps if lease._steps is None else lease._steps.recorded
        notes = lease.notes
        stored = None
        if result is not None:
            stored = storable_result(result, run, notes=notes, steps=steps)
            stored = readable_result(stored, run)
        await _mark_sent(run, lease, stored)
        run.step(Step.AFTER_MARK)
        return run.ran(result if isinstance(result, Mapping) else None)
    finally:
        run.live_leases.drop(run.key)


def _refuse_swallowed(run: Run) -> None:
    """The handler returned normally: raise what refused one of its steps (`Run.refused`), or
    `LeaseLost` if a note or step found the lease lost, had the handler caught it. "sent" is
    never recorded over a step that never ran or a lease that may be another delivery's."""
    if run.refused is not None:
        raise run.refused
    if run.outcome is OutcomeKind.LEASE_LOST:
        raise LeaseLost(
            f"{run.path}: the handler returned after this delivery lost its lease (a note or a "
            'step raised LeaseLost, which the handler caught), so "sent" is not recorded; let '
            "LeaseLost propagate"
        )


async def _mark_sent(run: Run, lease: Lease, stored: dict[str, Any] | None) -> None:
    """Record "sent" with the handler's `stored` result; refused with it (`RecordRefused`), again
    without it, as a result too large is (WARNING): the effect happened, "sent" must fit."""
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
