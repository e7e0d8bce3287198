"""The kernel's behaviour before the fixes of the holes in `sim.holes`, put back one hole at a
time (`taken_back`) so that a test can check that the simulator still finds each hole.

Each function below is the fixed kernel's function that now holds a hole's fix, with exactly
that fix taken out (the rest of it as the kernel has it now, so the other fixes stay in), with
its module's names imported here. Putting one back replaces the kernel's function in every
module that holds it by name (a copy reads the clock as `<module>.time`, the simulator's while
a run goes on). When a fix moves to another function, its take-back moves with it: until then
the hole's test fails, saying the simulator no longer finds it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any

from dedup.errors import ConfigError, LeaseLost, StepTooLarge, StoreUnavailable
from dedup.kernel import atomic, lease, room, step_writes, steps
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
from dedup.kernel.delivery import Outcome, OutcomeKind
from dedup.kernel.record import STEP_NAME, Snapshot, State, error_text
from dedup.kernel.steps import DONE, MAX_STEP_BYTES, MAX_STEPS, MAX_STEPS_BYTES, REFUSED
from dedup.kernel.store import backoff
from dedup.kernel.transitions import (
    MAX_RESULT_BYTES,
    attempt_finished,
    fence_of,
    fenced_write,
    first_write,
    released,
    steps_recorded,
)


async def give_back_unstarted(run: Any, lease_: Any) -> Outcome:
    """`dedup.kernel.lease._give_back_unstarted` without its fix: the lease given back after an
    ambiguous take-over is released as not ambiguous (`ambiguous` left False)."""
    error = "the time budget was spent claiming the lease; the handler did not start"
    expire_at, attempts = run.expire_at(), run.attempt - 1
    fields = released(error=error, expire_at=expire_at, attempts=attempts)
    with contextlib.suppress(StoreUnavailable, LeaseLost):  # else the lease simply expires
        await lease_.write(fields, State.IN_PROGRESS, "release")
    run.spent("start the handler of")
    raise AssertionError("unreachable: spent raises")


def _json_size(value: Any) -> int:
    return len(json.dumps(value, default=str, ensure_ascii=False).encode())


def storable_result(
    result: object,
    run: Any = None,
    *,
    notes: Mapping[str, Any] | None = None,
    steps: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """`dedup.kernel.room.storable_result` without its fix: a result measured as JSON only
    (`MAX_RESULT_BYTES`), never as Firestore measures the record, and not checked for values
    Firestore refuses."""
    if result is None or not isinstance(result, Mapping):
        return None
    try:
        size = len(json.dumps(result, default=str).encode("utf-8"))
    except (TypeError, ValueError):
        size = MAX_RESULT_BYTES + 1
    if size > MAX_RESULT_BYTES:
        return None
    return dict(result)


def check_name(name: object) -> None:
    """`dedup.kernel.steps.check_name` without its fix: a name Firestore reserves (`__.*__`) is
    allowed."""
    if not isinstance(name, str) or not re.fullmatch(STEP_NAME, name):
        raise ConfigError(f"step name {name!r} must be 1 to 100 of [A-Za-z0-9_.-]")


def with_entry(
    self: Any,
    name: str,
    state: str,
    value: Any = None,
    *,
    room: int | None = None,
    refused: bool = False,
) -> dict[str, Any]:
    """`dedup.kernel.steps.StepLog.with_entry` without its fix: a value is measured as JSON,
    never checked for what Firestore cannot store or would store as another type, and the
    record's room is not counted."""
    entry: dict[str, Any] = {"index": self.called.index(name), "state": state}
    entry.update(self.calls[name])
    if refused:
        entry[REFUSED] = True
    elif state == DONE:
        entry["value"] = value
        size = _json_size(value)
        if size > MAX_STEP_BYTES:
            raise StepTooLarge(f"step {name!r} returned {size} bytes, over {MAX_STEP_BYTES}")
    entries = {**self.recorded, name: entry}
    if len(entries) > MAX_STEPS:
        raise StepTooLarge(f"step {name!r} is step {len(entries)}, over {MAX_STEPS} steps")
    if (total := _json_size(entries)) > MAX_STEPS_BYTES:
        raise StepTooLarge(f"the steps with {name!r} hold {total} bytes, over {MAX_STEPS_BYTES}")
    return entries


def require_live(lease_: Any, name: str) -> None:
    """`dedup.kernel.step_writes.require_live` without its fix: no check of the lease's end
    (`Budget.lease_left`) before a step's function is called; a step started after its delivery
    ended is still refused (another fix)."""
    run = lease_.run
    if run.outcome is not None:
        raise LeaseLost(f"{run.path}: step {name!r} was started after its delivery ended")


def same_call(*_: Any) -> None:
    """`dedup.kernel.steps._same_call` without its fix: a replay is never checked against the
    recorded step's fingerprint (function and arguments), only by name and place."""


async def lease_write(
    self: Any, fields: Any, state: State, action: str, *, notes: bool = False
) -> None:
    """`dedup.kernel.lease.Lease.write` while the read after a conflict reused the bound taken
    before the update."""
    run, store = self.run, self.run.io
    budget = run.budget.after_handler()
    fence, round_, refreshes = self.fence, 0, 0
    while True:
        try:
            left = budget.call()
            written = await fenced_write(
                store, run.key, fields, fence, action, partial(float, left), read_back=True
            )
        except StoreUnavailable:
            pause = backoff(round_)
            round_ += 1
            if not budget.affords(pause):
                raise
            await store.sleep(pause)
            continue
        if isinstance(written, datetime):
            self.fence = written
            return
        assert isinstance(written, Snapshot)
        snapshot = written
        after = after_fenced_conflict(snapshot.record, self.owner, state)
        if after is AfterConflict.RECORDED and notes:
            after = AfterConflict.REFRESH
        if after is AfterConflict.RECORDED:
            self.fence = fence_of(snapshot)
            return
        if after is AfterConflict.REFRESH and refreshes < lease.CLAIM_ROUNDS:
            fence = fence_of(snapshot)
            refreshes += 1
            continue
        run.finish(OutcomeKind.LEASE_LOST)
        raise LeaseLost(f"could not {action} {run.path}: the lease was taken over")


async def transaction_once(lease_: Any, name: str, call: Any) -> Any:
    """`dedup.kernel.step_writes._transaction_once` without its fix: the check read after a
    failed transaction has no `budget=` (the whole RPC timeout)."""
    run = lease_.run
    writers: list[Any] = []

    async def fill(transaction: Any) -> tuple[Any, Any]:
        writers.append(transaction)
        value = await call(transaction)
        entries = lease_.steps.with_entry(name, DONE, value, room=lease_.steps_room())
        return (value, entries), steps_recorded(name, entries[name])

    sent, left = run.budget.now(), run.budget.call()
    try:
        value, entries = await run.io.run_transaction(
            run.key, fill, lease_.fence, attempts=step_writes.TRANSACTION_ATTEMPTS, budget=left
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
        fence = fence_of(snapshot)
        value, entries = entry.get("value"), recorded
    else:
        fence = writers[-1].commit_time
    lease_.steps_landed(entries, sent, fence)
    return value


async def record_failed_attempt(run: Any, exc: Exception, token: str) -> Outcome:
    """`dedup.kernel.atomic._record_failed_attempt` while its write reused the bound taken
    before its read."""
    error = error_text(exc)
    store, after_handler = run.io, run.budget.after_handler()
    for round_ in range(atomic.RECORD_ROUNDS):
        if round_ and after_handler.left() <= 0:
            break
        budget = after_handler.call()
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
            written = await fenced_write(
                store, run.key, fields, fence_of(snapshot), action, partial(float, budget)
            )
        if isinstance(written, datetime):
            run.counted(attempts)
            return run.failed(after, error, exc)
    run.finish(OutcomeKind.RELEASED, error=error)
    raise exc


PUT_BACK: dict[str, list[tuple[Any, str, Callable[..., Any]]]] = {
    "give-back erases ambiguity": [(lease, "_give_back_unstarted", give_back_unstarted)],
    "result fits JSON, not the document": [
        (room, "storable_result", storable_result),
        (lease, "storable_result", storable_result),
        (atomic, "storable_result", storable_result),
    ],
    "plain step after the lease": [(step_writes, "require_live", require_live)],
    "replay with other arguments": [(steps, "_same_call", same_call)],
    "step values Firestore cannot keep": [
        (steps, "check_name", check_name),
        (steps.StepLog, "with_entry", with_entry),
    ],
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
