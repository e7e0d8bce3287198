"""The kernel's behaviour before the fixes of the holes in `sim.holes`, kept verbatim so that a
test can put one back (`taken_back`) and check that the simulator still finds its hole.

Each function below is a copy of the kernel's as it was while its hole was open (the code of
`dedup.kernel` at the time the simulator was written), with its module's names imported here.
Putting one back replaces the kernel's function in every module that holds it by name (a copy
reads the clock as `<module>.time`, the simulator's while a run goes on). When a
fix moves the behaviour elsewhere, its copy here moves with it: the hole's test then fails,
saying the simulator no longer finds it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from dedup.errors import LeaseLost, StepInterrupted, StepMismatch, StoreUnavailable
from dedup.kernel import atomic, lease, step_writes, steps, transitions
from dedup.kernel.claims import (
    AfterConflict,
    Claim,
    after_failure,
    after_fenced_conflict,
    after_state,
    decide,
    retry_age,
    written_by,
)
from dedup.kernel.delivery import Outcome, OutcomeKind, Step
from dedup.kernel.record import State, error_text
from dedup.kernel.steps import DONE, STARTED, check_name
from dedup.kernel.store import backoff
from dedup.kernel.transitions import (
    MAX_RESULT_BYTES,
    attempt_finished,
    first_write,
    precondition,
    released,
    steps_recorded,
)


async def give_back_unstarted(run: Any, lease_: Any) -> Outcome:
    """`dedup.kernel.lease._give_back_unstarted` while the give-back erased an ambiguity."""
    error = "the time budget was spent claiming the lease; the handler did not start"
    fields = released(error=error, expire_at=run.expire_at(), attempts=run.attempt - 1)
    with contextlib.suppress(StoreUnavailable, LeaseLost):  # else the lease simply expires
        await lease_.write(fields, State.IN_PROGRESS, "release", None)
    run.spent("start the handler of")
    raise AssertionError("unreachable: spent raises")


def storable_result(result: object) -> dict[str, Any] | None:
    """`dedup.kernel.transitions.storable_result` while it measured a result as JSON only."""
    if result is None:
        return None
    if not isinstance(result, Mapping):
        return None
    try:
        size = len(json.dumps(result, default=str).encode("utf-8"))
    except (TypeError, ValueError):
        size = MAX_RESULT_BYTES + 1
    if size > MAX_RESULT_BYTES:
        return None
    return dict(result)


async def run_step(lease_: Any, name: str, call: Any, *, transactional: bool, once: bool) -> Any:
    """`dedup.kernel.step_writes.run_step` while a plain step's function was called with no
    check of the lease's end."""
    run = lease_.run
    done, value = lease_.steps.replay(name, run.path)
    if done:
        return value
    run.step(Step.BEFORE_STEP)
    if once:
        record = step_writes._record
        await record(lease_, name, lease_.steps.with_entry(name, STARTED), f"start step {name} of")
    if transactional:
        value = await step_writes._in_transaction(lease_, name, call)
    else:
        value = await call(None)
        run.step(Step.AFTER_STEP_CALL)
        entry = lease_.steps.with_entry(name, DONE, value)
        await step_writes._record(lease_, name, entry, f"record step {name} of")
    run.step(Step.AFTER_STEP_RECORD)
    return value


def replay(self: Any, name: str, path: str, *_: Any, **__: Any) -> tuple[bool, Any]:
    """`dedup.kernel.steps.StepLog.replay` while a replay matched a step by name and place
    only (extra arguments a later version passes, a fingerprint, are ignored)."""
    check_name(name)
    index = len(self.called)
    if name in self.called:
        raise StepMismatch(f"{path}: step {name!r} is called twice by one delivery")
    self.called.append(name)
    entry = self.recorded.get(name)
    if entry is None:
        other = next((n for n, e in self.recorded.items() if e.get("index") == index), None)
        if other is not None:
            raise StepMismatch(f"{path}: step {index} was recorded as {other!r}")
        return False, None
    if entry.get("index") != index:
        raise StepMismatch(f"{path}: step {name!r} was recorded as step {entry.get('index')}")
    if entry.get("state") == DONE:
        return True, entry.get("value")
    raise StepInterrupted(f"{path}: step {name!r} started without recording its end")


async def lease_write(
    self: Any,
    fields: Any,
    state: State,
    action: str,
    until: float | None,
    *,
    notes: bool = False,
) -> None:
    """`dedup.kernel.lease.Lease.write` while the read after a conflict reused the bound taken
    before the update."""
    run, store = self.run, self.run.io
    latest = run.outcome_deadline(self.ends)
    deadline = latest if until is None else min(until, latest)
    token, round_, refreshes = self.token, 0, 0
    while True:
        try:
            budget = run.outcome_budget(deadline)
            result = await store.update_if_unchanged(
                run.key, fields, token, action=action, budget=budget
            )
            if isinstance(result, datetime):
                self.token = result
                return
            snapshot = await store.read(run.key, action=action, budget=budget)
        except StoreUnavailable:
            pause = backoff(round_)
            round_ += 1
            if lease.time.monotonic() + pause >= deadline:
                raise
            await store.sleep(pause)
            continue
        after = after_fenced_conflict(snapshot.record, self.owner, state)
        if after is AfterConflict.RECORDED and notes:
            after = AfterConflict.REFRESH
        if after is AfterConflict.RECORDED:
            self.token = precondition(snapshot)
            return
        if after is AfterConflict.REFRESH and refreshes < lease.CLAIM_ROUNDS:
            token = precondition(snapshot)
            refreshes += 1
            continue
        run.finish(OutcomeKind.LEASE_LOST)
        raise LeaseLost(f"could not {action} {run.path}: the lease was taken over")


async def transaction_once(lease_: Any, name: str, call: Any) -> Any:
    """`dedup.kernel.step_writes._transaction_once` while its check read had no `budget=`."""
    run = lease_.run
    writers: list[Any] = []

    async def fill(transaction: Any) -> tuple[Any, Any]:
        writers.append(transaction)
        value = await call(transaction)
        entries = lease_.steps.with_entry(name, DONE, value)
        return (value, entries), steps_recorded(name, entries[name])

    sent = step_writes.time.monotonic()
    try:
        value, entries = await run.io.run_transaction(
            run.key,
            fill,
            lease_.token,
            attempts=step_writes.TRANSACTION_ATTEMPTS,
            budget=run.rpc_budget(),
        )
    except Exception:
        snapshot = await run.io.read(run.key, action=f"check step {name} of")
        record = snapshot.record
        if not written_by(record, lease_.owner):
            run.finish(OutcomeKind.LEASE_LOST)
            raise LeaseLost(f"{run.path}: the lease was taken over during step {name!r}") from None
        recorded = dict(record.steps or {}) if record is not None else {}
        entry = recorded.get(name)
        if entry is None or entry.get("state") != DONE:
            raise
        token = precondition(snapshot)
        value, entries = entry.get("value"), recorded
    else:
        token = writers[-1].commit_time
    lease_.steps_landed(entries, sent, token)
    return value


async def record_failed_attempt(run: Any, exc: Exception, token: str) -> Outcome:
    """`dedup.kernel.atomic._record_failed_attempt` while its write reused the bound taken
    before its read."""
    error = error_text(exc)
    store = run.io
    for round_ in range(atomic.RECORD_ROUNDS):
        if round_ and atomic.time.monotonic() >= run.outcome_deadline():
            break
        budget = run.outcome_budget()
        snapshot = await store.read(run.key, action="record a failed attempt on", budget=budget)
        record = snapshot.record
        if record is not None and written_by(record, token):
            run.counted(record.attempts)
            return run.failed(after_state(record.state), error, exc)
        if record is not None:
            claim = decide(record, snapshot.read_time, run.config.attempt_limit)
            if claim is Claim.SKIP:
                return run.skip(record)
            if claim is Claim.WAIT:
                break
        attempts = (record.attempts if record is not None else 0) + 1
        age = retry_age(record, snapshot.read_time)
        after = after_failure(exc, attempts, run.config.attempt_limit, age)
        action = "record a failed attempt on"
        written: datetime | object
        if record is None:
            fields = first_write(run, after.state, token, attempts=attempts, last_error=error)
            written = await store.create(run.key, fields, action=action, budget=budget)
        else:
            fields = attempt_finished(
                after.state, owner=token, attempts=attempts, expire_at=run.expire_at(), error=error
            )
            written = await store.update_if_unchanged(
                run.key, fields, precondition(snapshot), action=action, budget=budget
            )
        if isinstance(written, datetime):
            run.counted(attempts)
            return run.failed(after, error, exc)
    run.finish(OutcomeKind.RELEASED, error=error)
    raise exc


PUT_BACK: dict[str, list[tuple[Any, str, Callable[..., Any]]]] = {
    "give-back erases ambiguity": [(lease, "_give_back_unstarted", give_back_unstarted)],
    "result fits JSON, not the document": [
        (transitions, "storable_result", storable_result),
        (lease, "storable_result", storable_result),
        (atomic, "storable_result", storable_result),
    ],
    "plain step after the lease": [
        (step_writes, "run_step", run_step),
        (lease, "run_step", run_step),
    ],
    "replay with other arguments": [(steps.StepLog, "replay", replay)],
    "step check read past the budget": [(step_writes, "_transaction_once", transaction_once)],
    "stale deadline past the budget": [
        (lease.Lease, "write", lease_write),
        (atomic, "_record_failed_attempt", record_failed_attempt),
    ],
}
"""Per hole (`sim.holes.HOLES` by name), what putting its old behaviour back replaces."""


@contextmanager
def taken_back(hole: str) -> Iterator[None]:
    """The kernel with the fix of `hole` taken back, inside this block (no change for a hole
    with nothing listed in `PUT_BACK`)."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in PUT_BACK.get(hole, [])]
    for owner, name, old in PUT_BACK.get(hole, []):
        setattr(owner, name, old)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
