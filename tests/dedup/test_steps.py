"""Durable steps (`delivery.step`) on the in-memory store: what a later delivery of the same
event calls again, and what it never calls again. A crash is a `BaseException` nothing of the
library handles (the process dying, its lease left to expire); the store's clock expires it.
The emulator test with real SIGKILLs at every step boundary is test_steps_crash.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from dedup import (
    AsyncDeduplicator,
    AsyncDelivery,
    ConfigError,
    DedupConfig,
    Deduplicator,
    Delivery,
    Mode,
    OutcomeKind,
    Record,
    StepInterrupted,
    StepMismatch,
    testing,
)
from dedup.kernel.delivery import Step
from dedup.kernel.steps import MAX_STEP_BYTES
from dedup.kernel.transitions import dedup_key
from tests.dedup.grpc_faults import Fault, nth
from tests.dedup.support import standing_clock
from tests.matrix.kinds import Crash
from tests.memory_store import AsyncMemoryStore, MemoryStore

SUFFIX = "orders"
EVENT = "order-1"
KEY = dedup_key(EVENT, SUFFIX)
LEASE = 30


class World:
    """One store, a log of every call a step made (never deduplicated), and instances on it."""

    def __init__(self) -> None:
        self.store = MemoryStore("triggerEvents", rpc_timeout_seconds=1)
        self.calls: Counter[str] = Counter()
        self.keys: list[str] = []

    def instance(self, crash_at: tuple[Step, int] | None = None) -> Deduplicator:
        """A deduplicator whose process dies at the n-th time (1-based) it reaches a step."""
        config = DedupConfig(lease_seconds=LEASE, cache_size=0, min_retry_seconds=0)
        dedup = Deduplicator(config, records=self.store.instance())
        if crash_at is not None:
            seen: Counter[Step] = Counter()

            def die(step: Step, key: str) -> None:
                seen[step] += 1
                if (step, seen[step]) == crash_at:
                    raise Crash

            dedup.on_step(die)
        return dedup

    def record(self) -> Record:
        found = Record.from_snapshot(self.store.document(self.store.path(KEY)))
        assert found is not None
        return found

    def call(self, name: str, value: Any = None) -> Any:
        self.calls[name] += 1
        return value if value is not None else f"{name}-value"

    def three_steps(self, delivery: Delivery) -> dict[str, Any]:
        first = delivery.step("reserve", self.call, "reserve")
        self.keys.append(delivery.step_key("charge"))
        second = delivery.step("charge", self.call, "charge", {"charge": "ch_1"})
        third = delivery.step("receipt", self.call, "receipt")
        return {"first": first, "second": second, "third": third}

    def crash_then_redeliver(self, crash_at: tuple[Step, int], handler: Any) -> Any:
        with pytest.raises(Crash):
            self.instance(crash_at).run(EVENT, SUFFIX, handler)
        self.store.clock.advance(LEASE + 1)
        return self.instance().run(EVENT, SUFFIX, handler)


def test_a_recorded_step_is_not_called_again_after_a_crash() -> None:
    """A delivery that dies after its second step was recorded: the next delivery gets the
    recorded values of the first two without calling them, and calls the third."""
    world = World()
    outcome = world.crash_then_redeliver((Step.AFTER_STEP_RECORD, 2), world.three_steps)
    assert outcome.kind is OutcomeKind.RAN
    assert world.calls == Counter(reserve=1, charge=1, receipt=1)
    assert outcome.result == {
        "first": "reserve-value",
        "second": {"charge": "ch_1"},
        "third": "receipt-value",
    }
    steps = world.record().steps
    assert steps is not None
    assert [steps[n]["index"] for n in ("reserve", "charge", "receipt")] == [0, 1, 2]


def test_a_step_whose_record_was_lost_is_called_again_under_the_same_key() -> None:
    """A crash between a step's call and its record: the step runs again, with the same
    `step_key`, so an idempotent receiver applies it once; the steps before it do not."""
    world = World()
    world.crash_then_redeliver((Step.AFTER_STEP_CALL, 2), world.three_steps)
    assert world.calls == Counter(reserve=1, charge=2, receipt=1)
    assert world.keys == [f"{KEY}/charge", f"{KEY}/charge"]


def test_a_failed_handler_keeps_its_steps_for_the_retry() -> None:
    """The handler raises after its first step: the lease is given back, and the platform's
    retry does not call the recorded step again."""
    world = World()
    failures = [RuntimeError("the payment API answered 503")]

    def handler(delivery: Delivery) -> None:
        delivery.step("reserve", world.call, "reserve")
        if failures:
            raise failures.pop()
        delivery.step("charge", world.call, "charge")

    with pytest.raises(RuntimeError):
        world.instance().run(EVENT, SUFFIX, handler)
    assert world.instance().run(EVENT, SUFFIX, handler).kind is OutcomeKind.RAN
    assert world.calls == Counter(reserve=1, charge=1)


def test_an_at_most_once_step_interrupted_is_never_called_again() -> None:
    """`on_interrupted="skip"`: its start is recorded before the call; a delivery that finds a
    start without an end raises `StepInterrupted` instead of calling it, and the handler may
    carry on."""
    world = World()
    skipped: list[str] = []

    def handler(delivery: Delivery) -> None:
        delivery.step("reserve", world.call, "reserve")
        try:
            delivery.step("receipt", world.call, "receipt", on_interrupted="skip")
        except StepInterrupted:
            skipped.append(delivery.key)

    outcome = world.crash_then_redeliver((Step.AFTER_STEP_CALL, 2), handler)
    assert outcome.kind is OutcomeKind.RAN
    assert world.calls == Counter(reserve=1, receipt=1)
    assert skipped == [KEY]


def test_a_transactional_step_commits_with_its_record() -> None:
    """`transactional=True`: the step's writes and its record commit together, so a crash
    after the commit never applies the writes twice, and one before applies them once."""
    world = World()

    def reserve(transaction: Any, item: str) -> int:
        ref = world.store.client.collection("stock").document(item)
        before = transaction.get(ref)
        left = (before.to_dict() or {}).get("left", 10) - 1
        transaction.set(ref, {"left": left})
        return int(left)

    def handler(delivery: Delivery) -> None:
        delivery.step("reserve", reserve, "sku-1", transactional=True)
        delivery.step("receipt", world.call, "receipt")

    world.crash_then_redeliver((Step.AFTER_STEP_RECORD, 1), handler)
    stock = world.store.client.collection("stock").document("sku-1").get()
    assert stock.to_dict() == {"left": 9}
    assert world.calls == Counter(receipt=1)


@pytest.mark.parametrize(
    ("invalid", "outcome", "calls", "left"),
    [
        ({2}, OutcomeKind.RAN, 2, {"left": 9}),
        ({2, 3}, OutcomeKind.FAILED, 2, None),
    ],
)
def test_a_transactional_step_refused_as_invalid_is_tried_fresh_once(
    invalid: set[int], outcome: OutcomeKind, calls: int, left: dict[str, int] | None
) -> None:
    """A step's transaction refused as invalid with nothing committed (it expired: a long pause,
    a database restart) runs once more in a fresh transaction, as an atomic mode's commit does:
    its write commits once and the event is sent. Refused again, the data is taken as bad: the
    record is failed, nothing written. (Commit 1 is the claim, 2 and 3 the step's.)"""
    world = World()
    world.store = MemoryStore(
        "triggerEvents", rpc_timeout_seconds=1, plan=nth("Commit", invalid, Fault.INVALID)
    )
    tried = []

    def reserve(transaction: Any, item: str) -> int:
        tried.append(item)
        ref = world.store.client.collection("stock").document(item)
        before = transaction.get(ref)
        stock = (before.to_dict() or {}).get("left", 10) - 1
        transaction.set(ref, {"left": stock})
        return int(stock)

    def handler(delivery: Delivery) -> None:
        delivery.step("reserve", reserve, "sku-1", transactional=True)

    assert world.instance().run(EVENT, SUFFIX, handler).kind is outcome
    assert len(tried) == calls
    assert world.store.client.collection("stock").document("sku-1").get().to_dict() == left


def test_steps_called_out_of_their_recorded_order_are_refused() -> None:
    """The mismatch rule: the n-th step a delivery calls must be the n-th recorded one, and a
    name is called once per delivery."""
    world = World()
    order = ["reserve", "charge"]

    def handler(delivery: Delivery) -> None:
        for name in order:
            delivery.step(name, world.call, name)

    with pytest.raises(Crash):
        world.instance((Step.AFTER_STEP_RECORD, 2)).run(EVENT, SUFFIX, handler)
    world.store.clock.advance(LEASE + 1)
    order.reverse()
    with pytest.raises(StepMismatch, match="recorded as step 1"):
        world.instance().run(EVENT, SUFFIX, handler)

    def twice(delivery: Delivery) -> None:
        delivery.step("again", world.call, "again")
        delivery.step("again", world.call, "again")

    with pytest.raises(StepMismatch, match="twice"):
        world.instance().run("other", SUFFIX, twice)


def test_a_value_over_the_limit_is_refused_and_the_event_fails() -> None:
    """A step value over `MAX_STEP_BYTES` is not recorded, not truncated: `StepTooLarge`, a
    terminal error, so the event ends failed rather than retried into the same wall."""
    world = World()
    big = "x" * (MAX_STEP_BYTES + 1)

    def handler(delivery: Delivery) -> None:
        delivery.step("big", lambda: big)

    outcome = world.instance().run(EVENT, SUFFIX, handler)
    assert outcome.kind is OutcomeKind.FAILED
    assert "over 65536" in (world.record().last_error or "")
    assert world.record().steps is None


def test_steps_serve_lease_mode_only_and_names_are_checked() -> None:
    """Transaction and write-only modes commit the whole effect with the record: a step there
    is a `ConfigError`, and so is a name that cannot end a key; `step_key` is stable and
    different for each step."""
    world = World()
    for mode in (Mode.TRANSACTION, Mode.WRITE_ONLY):
        with pytest.raises(ConfigError, match="lease mode only"):
            world.instance().run(f"e-{mode.value}", SUFFIX, lambda d: d.step("a", print), mode=mode)
    keys: list[str] = []

    def handler(delivery: Delivery) -> None:
        keys.extend([delivery.step_key("a"), delivery.step_key("b"), delivery.step_key("a")])
        with pytest.raises(ConfigError):
            delivery.step_key("a/b")
        with pytest.raises(ConfigError):
            delivery.step("ok", print, on_interrupted="retry")

    world.instance().run(EVENT, SUFFIX, handler)
    assert keys == [f"{KEY}/a", f"{KEY}/b", f"{KEY}/a"]


def test_async_steps_replay_as_sync_ones() -> None:
    """`await delivery.step(...)` with an `async def` fn: the same record, the same replay."""
    world = World()
    config = DedupConfig(lease_seconds=LEASE, cache_size=0, min_retry_seconds=0)

    async def call(name: str) -> str:
        return str(world.call(name))

    async def handler(delivery: AsyncDelivery) -> None:
        await delivery.step("reserve", call, "reserve")
        await delivery.step("charge", call, "charge")

    async def deliver(crash: bool) -> Any:
        dedup = AsyncDeduplicator(config, records=AsyncMemoryStore(world.store))
        if crash:

            def die(step: Step, key: str) -> None:
                if step is Step.AFTER_STEP_RECORD:
                    raise Crash

            dedup.on_step(die)
        return await dedup.run(EVENT, SUFFIX, handler)

    with pytest.raises(Crash):
        asyncio.run(deliver(crash=True))
    world.store.clock.advance(LEASE + 1)
    assert asyncio.run(deliver(crash=False)).kind is OutcomeKind.RAN
    assert world.calls == Counter(reserve=1, charge=1)


def test_the_testing_helper_crashes_a_users_step_handler_and_delivers_again() -> None:
    """`dedup.testing.deliver_after_crash`: a user's handler dies between its second step's
    call and its record, and the next delivery calls that step again (same key) and the first
    one not at all; a boundary never reached is reported."""
    world = World()
    # The real 1 s lease is waited out by the helper; the deliveries' own clock stands still,
    # so a busy machine's pause between a claim and a step never makes them give it back.
    config = DedupConfig(lease_seconds=1, cache_size=0, budget_clock=standing_clock)
    dedup = Deduplicator(config, records=world.store)
    outcome = testing.deliver_after_crash(dedup, EVENT, SUFFIX, world.three_steps, step=2)
    assert outcome.kind is OutcomeKind.RAN
    assert world.calls == Counter(reserve=1, charge=2, receipt=1)
    with pytest.raises(AssertionError, match=r"ran to its end having run 3 step.*no step 4"):
        testing.crash_at_step(dedup, "other", SUFFIX, world.three_steps, step=4)
