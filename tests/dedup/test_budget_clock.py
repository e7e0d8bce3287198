"""A delivery's time is its `Budget`'s (`dedup.kernel.budget`), read on the clock it is given
(`DedupConfig.budget_clock`): on the Firestore emulator, a delivery whose clock the test drives
decides by that clock alone. The time its handler is told it has, whether it may still claim,
and whether its lease may still run a step all follow the driven clock, not the wall's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from dedup import BudgetSpent, Delivery, LeaseLost, OutcomeKind, Record, Step
from tests.dedup.conftest import MakeDedup

pytestmark = pytest.mark.needs_emulators

SUFFIX = "budgetClock"


class DrivenClock:
    """A clock (seconds) that stands still until the test moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_the_time_a_handler_is_told_it_has_is_the_driven_clocks(
    make_dedup: MakeDedup, read_record: Callable[[str], Record | None]
) -> None:
    """A handler's `delivery.time_left()` is its budget (30 s, less the 1 s margin) less what
    the driven clock moved, exactly, however long the handler really takes; the outcome is
    then recorded as sent."""
    clock = DrivenClock()
    dedup = make_dedup(function_timeout_seconds=30, lease_seconds=60, budget_clock=clock)
    told: list[float | None] = []

    def handler(delivery: Delivery) -> None:
        told.append(delivery.time_left())
        clock.advance(20)
        told.append(delivery.time_left())

    event_id = uuid.uuid4().hex
    outcome = dedup.run(event_id, SUFFIX, handler)
    assert outcome.kind is OutcomeKind.RAN
    assert told == [29.0, 9.0]
    record = read_record(outcome.key)
    assert record is not None
    assert record.state.value == "sent"


def test_a_claim_past_the_driven_clocks_budget_is_not_made(
    make_dedup: MakeDedup, read_record: Callable[[str], Record | None]
) -> None:
    """It is impossible for a delivery whose driven clock passed its budget before the claim
    to claim: it raises `BudgetSpent`, writes no record and never calls the handler, though on
    the wall's clock it has almost all of its 30 s left."""
    clock = DrivenClock()
    dedup = make_dedup(function_timeout_seconds=30, lease_seconds=60, budget_clock=clock)
    keys: list[str] = []

    def before_claim(step: Step, key: str) -> None:
        if step is Step.BEFORE_CLAIM:
            keys.append(key)
            clock.advance(29.5)  # past its end: 30 s less the 1 s margin

    dedup.on_step(before_claim)
    called: list[Delivery] = []
    with pytest.raises(BudgetSpent, match="spent before it could claim"):
        dedup.run(uuid.uuid4().hex, SUFFIX, called.append)
    assert called == []
    assert keys
    assert read_record(keys[0]) is None


def test_a_step_past_the_driven_clocks_lease_end_is_not_called(
    make_dedup: MakeDedup, read_record: Callable[[str], Record | None]
) -> None:
    """It is impossible for a plain step to start once the driven clock says the lease may
    have ended (60 s from the claim, less a 1 s margin): `LeaseLost`, the step's function not
    called, nothing recorded over the claim."""
    clock = DrivenClock()
    dedup = make_dedup(function_timeout_seconds=30, lease_seconds=60, budget_clock=clock)
    calls: list[str] = []

    def handler(delivery: Delivery) -> None:
        delivery.step("first", calls.append, "first")
        clock.advance(59.5)
        delivery.step("second", calls.append, "second")

    event_id = uuid.uuid4().hex
    with pytest.raises(LeaseLost, match="may have ended"):
        dedup.run(event_id, SUFFIX, handler)
    assert calls == ["first"]
    record = read_record(f"{event_id}-{SUFFIX}")
    assert record is not None
    assert record.state.value == "in_progress"
    assert list(record.steps or {}) == ["first"]
