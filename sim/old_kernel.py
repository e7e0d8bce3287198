"""The kernel's behaviour before the fixes of the holes in `sim.holes`, put back one hole at a
time (`taken_back`) so that a test can check that the simulator still finds each hole.

Each function below is the fixed kernel's function that now holds a hole's fix, with exactly
that fix taken out (the rest of it as the kernel has it now, so the other fixes stay in), with
its module's names imported here. Putting one back replaces the kernel's function in every
module that holds it by name. When a fix moves to another function, its take-back moves with
it: until then the hole's test fails, saying the simulator no longer finds it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dedup.errors import LeaseLost, StoreUnavailable
from dedup.kernel import atomic, lease, step_writes, steps, transitions
from dedup.kernel.delivery import Outcome
from dedup.kernel.record import State
from dedup.kernel.transitions import MAX_RESULT_BYTES, released


async def give_back_unstarted(run: Any, lease_: Any) -> Outcome:
    """`dedup.kernel.lease._give_back_unstarted` without its fix: the lease given back after an
    ambiguous take-over is released as not ambiguous (`ambiguous` left False)."""
    error = "the time budget was spent claiming the lease; the handler did not start"
    expire_at, attempts = run.expire_at(), run.attempt - 1
    fields = released(error=error, expire_at=expire_at, attempts=attempts)
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


def require_live(lease_: Any, name: str) -> None:
    """`dedup.kernel.step_writes.require_live` without its fix: no check of the lease's end
    (`Lease.ends`) before a step's function is called; a step started after its delivery
    ended is still refused (another fix)."""
    run = lease_.run
    if run.outcome is not None:
        raise LeaseLost(f"{run.path}: step {name!r} was started after its delivery ended")


def same_call(*_: Any) -> None:
    """`dedup.kernel.steps._same_call` without its fix: a replay is never checked against the
    recorded step's fingerprint (function and arguments), only by name and place."""


PUT_BACK: dict[str, list[tuple[Any, str, Callable[..., Any]]]] = {
    "give-back erases ambiguity": [(lease, "_give_back_unstarted", give_back_unstarted)],
    "result fits JSON, not the document": [
        (transitions, "storable_result", storable_result),
        (lease, "storable_result", storable_result),
        (atomic, "storable_result", storable_result),
    ],
    "plain step after the lease": [(step_writes, "require_live", require_live)],
    "replay with other arguments": [(steps, "_same_call", same_call)],
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
