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
import importlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from dedup.errors import (
    ConfigError,
    LeaseHeld,
    LeaseLost,
    PayloadMismatch,
    StepTooLarge,
    StoreUnavailable,
)
from dedup.http import callable as http_callable
from dedup.http import endpoint as http_endpoint
from dedup.http.replay import Settled, Settlement
from dedup.kernel import (
    ambiguity,
    atomic,
    lease,
    record,
    room,
    step_writes,
    steps,
    transitions,
)
from dedup.kernel.ambiguity import settle_ambiguity
from dedup.kernel.budget import FLOOR, Budget, TimeBudget
from dedup.kernel.claims import (
    AfterConflict,
    AfterFailure,
    Claim,
    after_failure,
    after_fenced_conflict,
    after_state,
    decide,
    retry_age,
    written_by,
)
from dedup.kernel.delivery import EventOptions, Outcome, OutcomeKind, Step
from dedup.kernel.record import (
    MAX_ERROR_CHARS,
    RERUN,
    STEP_NAME,
    Mode,
    Snapshot,
    State,
    error_text,
    scrub_urls,
)
from dedup.kernel.steps import DONE, MAX_STEP_BYTES, MAX_STEPS, MAX_STEPS_BYTES, REFUSED
from dedup.kernel.store import read_back
from dedup.kernel.transitions import (
    MAX_RESULT_BYTES,
    attempt_finished,
    fence_of,
    fenced_write,
    finished,
    first_write,
    released,
    steps_recorded,
)

http_replay = importlib.import_module("dedup.http.replay")
"""The module (`dedup.http` exports a function of the same name)."""


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
    self: Any, fields: Any, state: State, action: str, *, keeps_lease: bool = False
) -> None:
    """`dedup.kernel.lease.Lease.write` while the read after a conflict reused the seconds left
    before the update."""
    run = self.run
    budget = run.budget.after_handler()
    fence = self.fence
    for _ in range(1 + lease.REFRESH_ROUNDS):
        left = max(FLOOR, budget.left())
        written = await fenced_write(
            run.io, run.key, fields, fence, action, budget, keep_trying=True
        )
        if isinstance(written, datetime):
            self.fence = written
            return
        stale = Budget.of_call(budget.rpc_timeout, left, budget.clock)
        snapshot = await read_back(run.io, run.key, stale, action=action, until_end=True)
        after = after_fenced_conflict(snapshot.record, self.owner, state)
        if after is AfterConflict.LANDED and not keeps_lease:
            self.fence = fence_of(snapshot)
            return
        if after is AfterConflict.LOST:
            break
        fence = fence_of(snapshot)
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

    sent = run.budget.now()
    try:
        value, entries = await run.io.run_transaction(
            run.key,
            fill,
            lease_.fence,
            attempts=step_writes.TRANSACTION_ATTEMPTS,
            budget=run.budget,
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
        budget = Budget.of_call(
            after_handler.rpc_timeout, after_handler.left(), after_handler.clock
        )
        snapshot = await read_back(store, run.key, budget, action="record a failed attempt on")
        record = snapshot.record
        if record is not None and written_by(record, token):
            run.counted(record.attempts)
            return run.failed(after_state(record.state), error, exc)
        if record is not None:
            run.check_record(record)
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
            written = await fenced_write(store, run.key, fields, fence_of(snapshot), action, budget)
        if isinstance(written, datetime):
            run.counted(attempts)
            return run.failed(after, error, exc)
    run.finish(OutcomeKind.RELEASED, error=error)
    raise exc


async def record_failed_attempt_unchecked(run: Any, exc: Exception, owner: str) -> Outcome:
    """`dedup.kernel.atomic._record_failed_attempt` without its fix: a record another delivery
    wrote meanwhile is answered (a final one skipped as a duplicate, its stored result) without
    comparing its payload fingerprint (`run.check_record`)."""
    error = error_text(exc)
    store, action = run.io, "record a failed attempt on"
    budget = run.budget.after_handler()
    for round_ in range(atomic.RECORD_ROUNDS):
        if round_ and budget.left() <= 0:
            break
        snapshot = await read_back(store, run.key, budget, action=action)
        record = snapshot.record
        if record is not None and written_by(record, owner):
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
        written: datetime | object
        if record is None:
            fields = first_write(run, after.state, owner, attempts=attempts, last_error=error)
            written = await store.create(run.key, fields, action=action, budget=budget)
        else:
            fields = attempt_finished(
                after.state, owner=owner, attempts=attempts, expire_at=run.expire_at(), error=error
            )
            written = await fenced_write(store, run.key, fields, fence_of(snapshot), action, budget)
        if isinstance(written, datetime):
            run.counted(attempts)
            return run.failed(after, error, exc)
    run.finish(OutcomeKind.RELEASED, error=error)
    raise exc


async def mark_dead_unmarked(
    io: Any,
    key: str,
    snapshot: Snapshot,
    owner: str,
    expire_at: datetime,
    budget: Budget,
) -> bool:
    """`dedup.kernel.transitions.mark_dead` without its fix: the record buried after its last
    allowed attempt's lease expired is not marked `ambiguous`, so `dedup revive` hands it back
    as a poison event whose effect never happened."""
    error = snapshot.record.last_error if snapshot.record is not None else None
    fields = finished(State.DEAD, owner=owner, expire_at=expire_at, error=error)
    written = await fenced_write(io, key, fields, fence_of(snapshot), "mark dead", budget)
    return isinstance(written, datetime)


def as_replayed(run: Any, name: str, value: Any) -> Any:
    """`dedup.kernel.step_writes.as_replayed` without its fix: the delivery that runs a step
    hands its handler the value its function returned, not the value as the record gives it
    back (a `GeoPoint(35, 139)` on the first run, `GeoPoint(35.0, 139.0)` on a replay)."""
    return value


def old_error_text(error: BaseException) -> str:
    """`dedup.kernel.record.error_text` without its fix: the type and message, URLs scrubbed,
    cut to its characters, never made storable (a lone surrogate stays, and Firestore refuses
    the write that carries it)."""
    text = scrub_urls(f"{type(error).__name__}: {error}")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def error_json(suffix: str, error: Any) -> str:
    """`dedup.http.callable._error_json` without its fix: the details as `json.dumps` writes
    them, not as firebase-functions sends them: a `Decimal` (a set, bytes) raises `TypeError`
    after the effect, which releases the key and runs the handler again."""
    wire: dict[str, Any] = {"code": error.code.value, "message": error.message}
    if error.details is not None:
        wire["details"] = error.details
    return json.dumps(wire, ensure_ascii=True, separators=(",", ":"))


async def run_owned(run: Any, invoke: Any, lease_: Any) -> Outcome:
    """`dedup.kernel.lease._run_owned` without its fix: after `reconcile` (or a step hook) the
    handler starts without a look at the lease's end or the budget on the instance's clock."""
    config, owner = run.config, lease_.owner
    try:
        if run.budget.left() <= 0:
            return await lease._give_back_unstarted(run, lease_)
        run.step(Step.AFTER_CLAIM)
        choice = run.ambiguity
        if lease_.ambiguous and choice is not None:
            settled = await settle_ambiguity(run, lease_, choice)
            if settled is not None:
                return settled
        try:
            result = await invoke(lease_)
            lease._refuse_swallowed(run)
        except Exception as exc:
            if run.outcome is OutcomeKind.LEASE_LOST:
                raise
            error = error_text(exc)
            after = after_failure(exc, run.attempt, config.attempt_limit, run.retry_age)
            if after is AfterFailure.RELEASED:
                fields = released(error=error, expire_at=run.expire_at())
                await lease_.write(fields, after.state, "release")
            else:
                fields = finished(after.state, owner=owner, expire_at=run.expire_at(), error=error)
                await lease_.write(fields, after.state, f"mark {after.state.value}")
            return run.failed(after, error, exc)
        run.step(Step.AFTER_EFFECT)
        steps_ = lease_.recorded_steps if lease_._steps is None else lease_._steps.recorded
        stored = None
        if result is not None:
            stored = room.storable_result(result, run, notes=lease_.notes, steps=steps_)
            stored = step_writes.readable_result(stored, run)
        await lease._mark_sent(run, lease_, stored)
        run.step(Step.AFTER_MARK)
        return run.ran(result if isinstance(result, Mapping) else None)
    finally:
        run.live_leases.drop(run.key)


def settle(
    runner: Any,
    event_id: str,
    suffix: str,
    handler: Callable[..., Any],
    *,
    mode: Mode,
    payload: bytes,
    wait_seconds: float,
    subject: str | None = None,
    reconcile: Any = None,
    on_ambiguous: str = RERUN,
    budget: TimeBudget | None = None,
    request: Budget | None = None,
    raised: list[Exception] | None = None,
) -> Settlement:
    """`dedup.http.replay.settle` without its fix: each wait round's delivery gets the
    function's whole budget, not what is left of the request's."""
    config = runner.config
    length = budget or config.time_budget()
    spent = request if request is not None else http_replay.request_budget(length, config)
    waits_until = spent.now() + wait_seconds
    raised = [] if raised is None else raised
    options = runner.checked(
        EventOptions(
            Mode(mode), payload, subject=subject, reconcile=reconcile,
            on_ambiguous=on_ambiguous, budget=budget,
        ),
        "settle",
        handler,
    )  # fmt: skip

    def watched(delivery: Any) -> Any:
        try:
            return handler(delivery)
        except Exception as exc:
            raised.append(exc)
            raise

    while True:
        if length.seconds - spent.elapsed() <= 0:
            return Settlement(Settled.UNAVAILABLE)
        try:
            outcome = runner.run_event(event_id, suffix, watched, options)
        except (LeaseHeld, LeaseLost):
            if spent.now() + http_replay.WAIT_POLL_SECONDS > min(waits_until, spent.ends):
                return Settlement(Settled.IN_PROGRESS)
            http_replay.time.sleep(http_replay.WAIT_POLL_SECONDS)
            continue
        except PayloadMismatch:
            return Settlement(Settled.MISMATCH)
        except StoreUnavailable:
            return Settlement(Settled.UNAVAILABLE)
        if outcome.kind is OutcomeKind.RAN:
            return Settlement(Settled.RAN, outcome.result)
        if outcome.kind is OutcomeKind.AMBIGUOUS:
            return Settlement(Settled.UNKNOWN)
        if outcome.kind is OutcomeKind.RECONCILED:
            return Settlement(Settled.COMPLETED, completed=True)
        if outcome.kind is OutcomeKind.FAILED:
            if raised:
                return Settlement(Settled.FAILED, error=error_text(raised[-1]))
            return http_replay._recorded(runner, event_id, suffix, spent, replayed=False)
        if outcome.result is None and outcome.kind in http_replay._READ_BACK:
            return http_replay._recorded(runner, event_id, suffix, spent, replayed=True)
        return Settlement(Settled.COMPLETED, outcome.result)


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
    "a step value read back as another type": [(step_writes, "as_replayed", as_replayed)],
    "an error text Firestore cannot store": [
        (module, "error_text", old_error_text)
        for module in (record, atomic, ambiguity, lease, http_replay)
    ],
    "callable details json.dumps cannot encode": [(http_callable, "_error_json", error_json)],
    "a slow reconcile starts the handler after the lease": [(lease, "_run_owned", run_owned)],
    "a waiting HTTP copy with a fresh budget": [
        (http_replay, "settle", settle),
        (http_callable, "settle", settle),
        (http_endpoint, "settle", settle),
    ],
    "a reused key answered another request's response": [
        (atomic, "_record_failed_attempt", record_failed_attempt_unchecked)
    ],
    "revive of a dead record whose effect happened": [
        (module, "mark_dead", mark_dead_unmarked) for module in (transitions, lease, atomic)
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
