"""A handler's process dying at a durable step's boundary, and the delivery after it: how a user
tests that their step handler survives a crash (docs/steps.md, "Testing your steps").

    outcome = testing.deliver_after_crash(dedup, "order-1", "placeOrder", handler, step=2)

`crash_at_step` delivers once and dies, as a process would, at a boundary of the `step`-th step
the delivery runs (1-based; steps replayed from the record do not count): before it starts
(`Step.BEFORE_STEP`), after its call and before its record (`Step.AFTER_STEP_CALL`, the default:
the window a keyed step's idempotency key covers) or after its record
(`Step.AFTER_STEP_RECORD`). The death is a `SimulatedCrash`, a `BaseException` nothing of the
library handles: the lease is left held, as a killed process leaves it. `deliver_after_crash`
then waits for that lease to expire (`lease_seconds`; give the deduplicator a short one) and
delivers the event again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dedup.kernel.delivery import Outcome, Step
from dedup.kernel.front_door import Deduplicator

STEP_BOUNDARIES = (Step.BEFORE_STEP, Step.AFTER_STEP_CALL, Step.AFTER_STEP_RECORD)
"""Where a step's delivery may be made to die."""


class SimulatedCrash(BaseException):
    """The process dying at a step boundary (`crash_at_step`): nothing of the library catches
    it, so the delivery's lease stays held until it expires."""


def crash_at_step(
    deduplicator: Deduplicator,
    event_id: str,
    suffix: str,
    handler: Callable[..., Any],
    *,
    step: int,
    at: Step = Step.AFTER_STEP_CALL,
    **options: Any,
) -> None:
    """Deliver the event through `deduplicator.run` (with `options`) and die at `at` of the
    `step`-th step the delivery runs. `ValueError` for a boundary that is not a step's;
    `AssertionError` when the delivery ended without reaching it."""
    if at not in STEP_BOUNDARIES or step < 1:
        raise ValueError(f"at must be one of {[s.value for s in STEP_BOUNDARIES]}, step >= 1")
    started = [0]

    def die(reached: Step, key: str) -> None:
        if reached is Step.BEFORE_STEP:
            started[0] += 1
        if reached is at and started[0] == step:
            raise SimulatedCrash(f"died at {at.value} of step {step} of {key}")

    stop = deduplicator.on_step(die)
    try:
        deduplicator.run(event_id, suffix, handler, **options)
    except SimulatedCrash:
        return
    finally:
        stop()
    raise AssertionError(f"the delivery ended before {at.value} of its step {step}")


def deliver_after_crash(
    deduplicator: Deduplicator,
    event_id: str,
    suffix: str,
    handler: Callable[..., Any],
    *,
    step: int,
    at: Step = Step.AFTER_STEP_CALL,
    **options: Any,
) -> Outcome:
    """`crash_at_step`, then the delivery that takes over once the dead one's lease expired:
    its outcome (it raises what `deduplicator.run` raises)."""
    crash_at_step(deduplicator, event_id, suffix, handler, step=step, at=at, **options)
    time.sleep(deduplicator.config.lease_seconds + 0.5)
    return deduplicator.run(event_id, suffix, handler, **options)
