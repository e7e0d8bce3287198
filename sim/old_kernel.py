"""The kernel's behaviour before the fixes of the holes in `sim.holes`, kept verbatim so that a
test can put one back (`taken_back`) and check that the simulator still finds its hole.

Each function below is a copy of the kernel's as it was while its hole was open (the code of
`dedup.kernel` at the time the simulator was written), with its module's names imported here.
Putting one back replaces the kernel's function in every module that holds it by name. When a
fix moves the behaviour elsewhere, its copy here moves with it: the hole's test then fails,
saying the simulator no longer finds it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dedup.errors import LeaseLost, StepInterrupted, StepMismatch, StoreUnavailable
from dedup.kernel import atomic, lease, step_writes, steps, transitions
from dedup.kernel.delivery import Outcome, Step
from dedup.kernel.record import State
from dedup.kernel.steps import DONE, STARTED, check_name
from dedup.kernel.transitions import MAX_RESULT_BYTES, released


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
        await record(lease_, lease_.steps.with_entry(name, STARTED), f"start step {name} of")
    if transactional:
        value = await step_writes._in_transaction(lease_, name, call)
    else:
        value = await call(None)
        run.step(Step.AFTER_STEP_CALL)
        entry = lease_.steps.with_entry(name, DONE, value)
        await step_writes._record(lease_, entry, f"record step {name} of")
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
