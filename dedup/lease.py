"""Lease mode: claim a lease on the record, run the handler, record its outcome.

Per delivery:

1. copies of the key on this instance claim in turn; a copy that finds the lease known live
   (this instance's own delivery of the key holds it, or a read just showed another's) ->
   `LeaseHeld`, no round trip: fifty copies of an event cost one write per instance, not fifty;
2. create the record with an exists=false precondition (1 RPC, the common case: a fresh
   event is settled in one round trip without a read);
3. if it exists, read it and `decide` (`dedup.claims`) on the database's read time; take over
   with an update-time precondition, re-reading when someone else moved the record first;
4. run the handler, then record sent / failed / dead, or release and re-raise.

Every write after the claim is fenced by the update time of this owner's last write: a stale
owner gets `LeaseLost` and records nothing. Once the handler has returned, the delivery owns
the outcome: it keeps trying to record "sent" (retrying is safe, the write is fenced) until it
succeeds or its lease runs out; a write whose response was lost is recognised by the owner
token and counts as done. The one window left: the process dies, or Firestore stays
unreachable for the rest of the lease, after the effect and before "sent" is recorded. Such an
owner never releases its lease, so the next delivery after the lease takes over an expired
lease: an **ambiguous** delivery (`dedup.claims.takeover_ambiguous`). It asks `reconcile`
first, if there is one (True: record "sent" with `reconciled: true`, handler not run), then
follows `on_ambiguous`: "rerun" runs the handler again with the same `Delivery.key`, "skip"
records `unknown` and returns (at most once). A `reconcile` that raises leaves the lease to
expire: the next delivery after it is ambiguous again and asks again.

`delivery.note(...)` writes the record's `notes` under the lease, fenced like "sent"; a
handler that notes nothing writes nothing more.

The flow is written once, as coroutines over `Run.io` (`dedup.flow_io`): the sync front door
drives it without an event loop, the async one awaits it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dedup.claims import (
    RERUN,
    AfterAmbiguity,
    AfterConflict,
    AfterFailure,
    Claim,
    after_ambiguity,
    after_failure,
    after_fenced_conflict,
    decide,
    retry_age,
    takeover_ambiguous,
    written_by,
)
from dedup.delivery import NO_NOTES, Outcome, OutcomeKind, Step
from dedup.errors import ConfigError, LeaseHeld, LeaseLost, StoreUnavailable
from dedup.record import Fields, Mode, Record, State, error_text
from dedup.runs import Run, mark_dead, precondition
from dedup.store import Snapshot, backoff
from dedup.transitions import (
    finished,
    lease_taken,
    new_record,
    noted,
    released,
    storable_result,
)

if TYPE_CHECKING:
    from dedup.flow_io import Invoke

CLAIM_ROUNDS = 8
"""Re-reads allowed when other deliveries keep changing the record under a precondition."""


async def run_lease(run: Run, invoke: Invoke) -> Outcome:
    """Claim the lease of `run.key` and run the handler (`invoke`) under it (see the module
    docstring).

    Copies of the key on this instance claim one at a time (`FlowIO.turn`): the first writes,
    the others then know the lease is live (or just saw someone else's) and answer `LeaseHeld`
    without a write of their own. The handler runs outside that turn.
    """
    async with run.turn():
        claimed = await _claim(run)
    if isinstance(claimed, Outcome):
        return claimed
    return await _run_owned(run, invoke, *claimed)


async def _claim(run: Run) -> Outcome | tuple[str, datetime, float]:
    """Take the lease: (owner token, fencing token, when the claim was sent), or the outcome
    of a delivery that ends here (duplicate, dead). Raises `LeaseHeld` when it is taken."""
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
    sent_at = time.monotonic()  # when the latest claim write was sent: our lease starts later
    for _ in range(CLAIM_ROUNDS):
        run.require_time("claim")
        if try_create:
            ambiguous, notes = False, NO_NOTES
            sent_at = time.monotonic()
            fields = new_record(
                event_id=run.event_id,
                suffix=run.suffix,
                mode=Mode.LEASE,
                state=State.IN_PROGRESS,
                owner=owner,
                leased=True,
                lease_seconds=config.lease_seconds,
                payload_hash=run.payload_hash,
                expire_at=run.expire_at(),
                subject=run.subject,
                source=run.source,
            )
            created = await store.create(run.key, fields, budget=run.rpc_budget())
            if isinstance(created, datetime):
                run.attempt = 1
                return _owned(run, owner, created, sent_at)
        snapshot = await store.read(run.key, budget=run.rpc_budget())
        record = snapshot.record
        if record is not None and written_by(record, owner):
            # Our own claim or burial landed although its response was lost.
            run.attempt = record.attempts
            if record.state is State.DEAD:
                return run.finish(OutcomeKind.DEAD, error=record.last_error)
            run.ambiguous, run.notes = ambiguous, notes
            return _owned(run, owner, precondition(snapshot), sent_at)
        claim = decide(record, snapshot.read_time, config.attempt_limit)
        try_create = claim is Claim.CREATE
        if record is None:  # vanished (TTL) between the create and the read
            continue
        run.check_record(record)
        run.attempt = record.attempts
        run.retry_age = retry_age(record, snapshot.read_time)
        if claim is Claim.SKIP:
            return run.skip(record)
        if claim is Claim.WAIT:
            run.raise_lease_held(record, snapshot.read_time)
        if claim is Claim.MARK_DEAD:
            if run.reconcile is not None and takeover_ambiguous(record, snapshot.read_time):
                reconciled = await _reconcile_before_burial(run, record, snapshot, owner)
                if reconciled is not None:
                    return reconciled
            if await mark_dead(run, record, snapshot, owner):
                return run.finish(OutcomeKind.DEAD, error=record.last_error)
            continue
        ambiguous = takeover_ambiguous(record, snapshot.read_time)
        notes = record.notes or NO_NOTES
        sent_at = time.monotonic()
        taken = await store.update_if_unchanged(
            run.key,
            lease_taken(
                owner=owner,
                lease_seconds=config.lease_seconds,
                attempts=record.attempts + 1,
                expire_at=run.expire_at(),
            ),
            precondition(snapshot),
            action="take over the lease of",
            budget=run.rpc_budget(),
        )
        if isinstance(taken, datetime):
            run.attempt = record.attempts + 1
            run.ambiguous, run.notes = ambiguous, notes
            return _owned(run, owner, taken, sent_at)
    run.finish(OutcomeKind.LEASE_HELD, error="record kept changing")
    raise LeaseHeld(
        f"{run.path} changed {CLAIM_ROUNDS} times while this delivery tried to claim it; "
        "another delivery is working on it, the platform will retry"
    )


def _owned(run: Run, owner: str, token: datetime, sent_at: float) -> tuple[str, datetime, float]:
    """The lease is ours: tell this instance's other copies, before our turn ends."""
    run.live_leases.own(run.key, run.config.lease_seconds)
    return owner, token, sent_at


async def _run_owned(
    run: Run, invoke: Invoke, owner: str, token: datetime, sent_at: float
) -> Outcome:
    """Run the handler under our lease; record its outcome fenced by our last update time
    (`run.token`, which a `delivery.note` moves on)."""
    config = run.config
    lease_ends = sent_at + config.lease_seconds  # a lower bound of the lease's real end
    run.owner, run.token, run.lease_ends = owner, token, lease_ends
    run.note_writer = write_note
    try:
        if run.time_left() <= 0:
            return await _give_back_unstarted(run, owner)
        run.step(Step.AFTER_CLAIM)
        if run.ambiguous and (run.reconcile is not None or run.on_ambiguous != RERUN):
            settled = await _settle_ambiguity(run, owner)
            if settled is not None:
                return settled
        try:
            result = await invoke(None)
        except Exception as exc:
            if run.outcome is OutcomeKind.LEASE_LOST:  # a note found the lease taken over
                raise
            error = error_text(exc)
            after = after_failure(exc, run.attempt, config.attempt_limit, run.retry_age)
            if after is AfterFailure.RELEASED:
                fields = released(error=error, expire_at=run.expire_at())
                await _record(run, owner, run.token, fields, after.state, "release", None)
            else:
                fields = finished(after.state, owner=owner, expire_at=run.expire_at(), error=error)
                action = f"mark {after.state.value}"
                until = run.outcome_deadline()
                await _record(run, owner, run.token, fields, after.state, action, until)
            return run.failed(after, error, exc)
        run.step(Step.AFTER_EFFECT)
        stored = storable_result(result)
        fields = finished(State.SENT, owner=owner, expire_at=run.expire_at(), result=stored)
        until = run.outcome_deadline()
        await _record(run, owner, run.token, fields, State.SENT, "mark sent", until)
        run.step(Step.AFTER_MARK)
        return run.ran(result if isinstance(result, Mapping) else None)
    finally:
        run.live_leases.drop(run.key)


async def _give_back_unstarted(run: Run, owner: str) -> Outcome:
    """The claim took the whole time budget: give the lease back without starting the handler
    (the attempt it counted is handed back too), then raise `BudgetSpent`."""
    token = run.token
    assert token is not None
    error = "the time budget was spent claiming the lease; the handler did not start"
    fields = released(error=error, expire_at=run.expire_at(), attempts=run.attempt - 1)
    with contextlib.suppress(StoreUnavailable, LeaseLost):  # else the lease simply expires
        await _record(run, owner, token, fields, State.IN_PROGRESS, "release", None)
    run.spent("start the handler of")


async def _ask(run: Run) -> bool | None:
    """`reconcile`'s answer (None without one). One that raises is reported and re-raised:
    nothing is written, so the next delivery after this lease asks again."""
    if run.reconcile is None:
        return None
    try:
        return await run.reconcile()
    except Exception as exc:
        run.finish(
            OutcomeKind.UNAVAILABLE,
            error=f"reconcile raised {error_text(exc)}; the next delivery after this "
            "lease asks again",
        )
        raise


async def _settle_ambiguity(run: Run, owner: str) -> Outcome | None:
    """An ambiguous take-over (`dedup.claims.after_ambiguity`): ask `reconcile`, then record
    "sent" (reconciled) or `unknown` and return the outcome; None: run the handler."""
    verdict = await _ask(run)
    after = after_ambiguity(verdict, run.on_ambiguous)
    if after is AfterAmbiguity.RUN:
        return None
    token = run.token
    assert token is not None
    if after is AfterAmbiguity.RECONCILED:
        fields = finished(State.SENT, owner=owner, expire_at=run.expire_at(), reconciled=True)
        await _record(run, owner, token, fields, State.SENT, "mark sent", run.lease_ends)
        run.sent_keys.add(run.key, run.payload_hash)
        return run.finish(OutcomeKind.RECONCILED)
    fields = finished(State.UNKNOWN, owner=owner, expire_at=run.expire_at())
    await _record(run, owner, token, fields, State.UNKNOWN, "mark unknown", run.lease_ends)
    return run.finish(OutcomeKind.AMBIGUOUS)


async def _reconcile_before_burial(
    run: Run, record: Record, snapshot: Snapshot, owner: str
) -> Outcome | None:
    """The last allowed attempt's lease expired: before burying the event, ask `reconcile`
    whether that attempt produced the effect. True records "sent" (`reconciled: true`),
    guarded by the record as read; anything else returns None (mark it dead). A reconcile that
    raises writes nothing and is asked again by the next delivery."""
    run.notes = record.notes or NO_NOTES
    verdict = await _ask(run)
    if verdict is not True:
        return None
    fields = finished(State.SENT, owner=owner, expire_at=run.expire_at(), reconciled=True)
    written = await run.io.update_if_unchanged(
        run.key, fields, precondition(snapshot), action="mark sent", budget=run.outcome_budget()
    )
    if not isinstance(written, datetime):
        return None  # the record moved meanwhile: burying it re-reads and decides again
    run.sent_keys.add(run.key, run.payload_hash)
    return run.finish(OutcomeKind.RECONCILED)


async def write_note(run: Run, fields: dict[str, Any]) -> None:
    """`delivery.note(**fields)`: merge `fields` into the record's notes, fenced by the
    delivery's lease like "sent" (retried until the lease's end on store errors). Raises
    `LeaseLost` when another delivery took the lease over, `StoreUnavailable` when the store
    kept failing, `ConfigError` when the delivery holds no lease (yet)."""
    owner, token = run.owner, run.token
    if owner is None or token is None:
        raise ConfigError(f"{run.path}: delivery.note is for a handler holding the lease")
    notes = {**run.notes, **fields}
    run.token = await _record(
        run, owner, token, noted(notes), State.IN_PROGRESS, "note on", run.lease_ends, notes=True
    )
    run.notes = notes


async def _record(
    run: Run,
    owner: str,
    token: datetime,
    fields: Fields,
    state: State,
    action: str,
    until: float | None,
    *,
    notes: bool = False,
) -> datetime:
    """Write an owner's outcome (or notes), fenced by `token`, retrying transient errors until
    `until` (a monotonic time), and never past `Run.outcome_deadline`, which is also the
    default, each RPC bounded by what is left (`Run.outcome_budget`): the last write ends
    within the function's timeout. Returns the record's new update time.
    Raises `LeaseLost` if another delivery moved the record, `StoreUnavailable` if the store
    kept failing until the deadline. `notes`: the write keeps the lease, so a record still ours
    is written over rather than taken for this write (which it cannot be told from)."""
    store = run.io
    deadline = run.outcome_deadline() if until is None else min(until, run.outcome_deadline())
    round_ = refreshes = 0
    while True:
        try:
            result = await store.update_if_unchanged(
                run.key, fields, token, action=action, budget=run.outcome_budget(deadline)
            )
            if isinstance(result, datetime):
                return result
            # The precondition failed: our own earlier try may have landed (lost response),
            # an operator may have released our lease, or another delivery took it over.
            snapshot = await store.read(run.key, action=action, budget=run.outcome_budget(deadline))
        except StoreUnavailable:
            pause = backoff(round_)
            round_ += 1
            if time.monotonic() + pause >= deadline:
                raise
            await store.sleep(pause)
            continue
        after = after_fenced_conflict(snapshot.record, owner, state)
        if after is AfterConflict.RECORDED and notes:
            after = AfterConflict.REFRESH
        if after is AfterConflict.RECORDED:
            return precondition(snapshot)  # our write is there
        if after is AfterConflict.REFRESH and refreshes < CLAIM_ROUNDS:
            # Still ours (an operator released the lease, or edited the record by hand):
            # record the outcome over what is there now.
            token = precondition(snapshot)
            refreshes += 1
            continue
        run.finish(OutcomeKind.LEASE_LOST)
        raise LeaseLost(
            f"could not {action} {run.path}: this delivery's lease expired and another "
            "delivery took it over, so this outcome was not recorded; set lease_seconds "
            "(DEDUP_LEASE_SECONDS) above the function timeout"
        )
