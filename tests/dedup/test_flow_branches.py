"""The flows' rare branches, on the in-memory store: races and lost responses the conformance
matrix does not script (a record changed between a read and a write, a write of ours whose
response was lost, an expired transaction). No emulator: the store's fault plan injects them,
and a plan may change the record just before a commit to lose a race on purpose.

Invariant: whatever happens between a read and a write, a delivery never overwrites what
another wrote, recognises its own lost writes by its owner token, and ends in the state
`dedup.kernel.claims` decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions

from dedup import (
    BudgetSpent,
    DedupConfig,
    Deduplicator,
    Delivery,
    KeyCollision,
    LeaseHeld,
    Mode,
    OutcomeKind,
    Record,
    State,
)
from dedup.kernel.delivery import Step
from dedup.kernel.record import Field
from dedup.kernel.transitions import dedup_key, new_record
from tests.dedup.grpc_faults import Fault
from tests.memory_store import MemoryStore

SUFFIX = "s"
MAX_ATTEMPTS = 3
EVENT = "e1"
KEY = dedup_key(EVENT, SUFFIX)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries pause a millisecond at most (the branches, not the pauses, are under test)."""
    monkeypatch.setattr("dedup.kernel.store.BACKOFF_CAP_SECONDS", 0.001)


class Store(MemoryStore):
    """A memory store whose plan is set after construction (it may reach the store)."""

    def __init__(self) -> None:
        super().__init__("triggerEvents", rpc_timeout_seconds=1)
        self.faults: Callable[[str, int], Fault] = lambda method, n: Fault.PASS
        self.plan = lambda method, n: self.faults(method, n)

    @property
    def record(self) -> Record | None:
        return Record.from_snapshot(self.document(self.path(KEY)))

    def touch(self) -> None:
        """Another delivery rewrites the record as it is: its update time changes."""
        document = self.document(self.path(KEY))
        assert document.data is not None
        self.put(self.path(KEY), document.data)

    def seed(self, *, attempts: int = 1, started: datetime | None = None, mode: Mode) -> None:
        fields = new_record(
            event_id=EVENT,
            suffix=SUFFIX,
            mode=mode,
            state=State.IN_PROGRESS,
            owner="someone-else",
            leased=True,
            lease_seconds=60,
            payload_hash=None,
            expire_at=datetime.now(UTC) + timedelta(days=1),
            attempts=attempts,
        )
        fields[Field.LEASE_STARTED_AT] = started or datetime(2020, 1, 1, tzinfo=UTC)
        self.put(self.path(KEY), fields)


def on_commit(numbers: set[int] | None, then: Callable[[], Any], fault: Fault = Fault.PASS) -> Any:
    """A plan that calls `then` before the listed Commit calls (None: every one)."""

    def plan(method: str, n: int) -> Fault:
        if method == "Commit" and (numbers is None or n in numbers):
            then()
            return fault
        return Fault.PASS

    return plan


def commits(numbers: set[int], fault: Fault) -> Any:
    return lambda method, n: fault if method == "Commit" and n in numbers else Fault.PASS


def dedup(store: Store) -> Deduplicator:
    config = DedupConfig(
        max_attempts=MAX_ATTEMPTS, min_retry_seconds=0, lease_seconds=60, cache_size=0
    )
    return Deduplicator(config, records=store.instance())


def ok(delivery: Any) -> None:
    """A handler with nothing to write."""


# --- lease mode ------------------------------------------------------------------------------


def test_a_copy_that_knows_the_lease_is_live_writes_nothing() -> None:
    """A second copy on the instance that holds the lease answers LeaseHeld without a read or
    a write of its own."""
    store = Store()
    deduplicator = dedup(store)
    seen: list[type[BaseException]] = []

    def handler(delivery: Any) -> None:
        with pytest.raises(LeaseHeld) as held:
            deduplicator.run(EVENT, SUFFIX, ok)
        seen.append(held.type)

    assert deduplicator.run(EVENT, SUFFIX, handler).kind is OutcomeKind.RAN
    assert seen == [LeaseHeld]
    assert store.calls["Commit"] == 2  # the claim and "sent": nothing from the copy


def test_a_claim_whose_response_was_lost_is_recognised_as_ours() -> None:
    """The create landed but its answer was lost: the owner token in the record says it is
    ours, and the handler runs once."""
    store = Store()
    store.faults = commits({1}, Fault.LOSE_RESPONSE)
    assert dedup(store).run(EVENT, SUFFIX, ok).kind is OutcomeKind.RAN
    assert store.record is not None
    assert store.record.state is State.SENT


def test_a_burial_whose_response_was_lost_is_reported_dead() -> None:
    """Burying a crashed last attempt landed but its answer was lost: the delivery reads its
    own burial and reports dead."""
    store = Store()
    store.seed(attempts=MAX_ATTEMPTS, mode=Mode.LEASE)
    store.faults = commits({2}, Fault.LOSE_RESPONSE)  # 1: the create the record refuses
    assert dedup(store).run(EVENT, SUFFIX, ok).kind is OutcomeKind.DEAD
    assert store.record is not None
    assert store.record.state is State.DEAD


@pytest.mark.parametrize("mode", list(Mode))
def test_a_burial_that_loses_a_race_reads_again(mode: Mode) -> None:
    """The record changed between the read and the burial: the burial writes nothing, the
    delivery reads again and buries what it finds."""
    store = Store()
    store.seed(attempts=MAX_ATTEMPTS, mode=mode)
    burial = 2 if mode is Mode.LEASE else 1  # lease mode tries a create first
    store.faults = on_commit({burial}, store.touch)
    assert dedup(store).run(EVENT, SUFFIX, ok, mode=mode).kind is OutcomeKind.DEAD
    assert store.record is not None
    assert store.record.state is State.DEAD


def test_a_take_over_that_loses_a_race_reads_again() -> None:
    """The expired record changed between the read and the take-over: the delivery reads
    again and takes over what it finds, once."""
    store = Store()
    store.seed(mode=Mode.LEASE)
    store.faults = on_commit({2}, store.touch)  # 1: the create the record refuses
    outcome = dedup(store).run(EVENT, SUFFIX, ok)
    assert (outcome.kind, outcome.attempt) == (OutcomeKind.RAN, 2)


def test_a_record_that_keeps_changing_is_left_to_a_retry() -> None:
    """A record that changes before every write of the claim: after a bounded number of
    rounds the delivery gives up with LeaseHeld, having written nothing."""
    store = Store()
    store.seed(mode=Mode.LEASE)
    store.faults = on_commit(None, store.touch)
    with pytest.raises(LeaseHeld, match="changed"):
        dedup(store).run(EVENT, SUFFIX, ok)
    assert store.record is not None
    assert store.record.owner == "someone-else"


def test_a_record_that_vanishes_after_a_refused_create_is_created_again() -> None:
    """The create found a record, the read found none (expired by TTL meanwhile): the next
    round creates it."""
    store = Store()
    store.seed(mode=Mode.LEASE, started=datetime.now(UTC))
    path = store.path(KEY)

    def vanish() -> None:
        with store._lock:
            store._documents.pop(path, None)

    original = store.document
    calls = iter(range(1000))

    def document(wanted: str) -> Any:
        if wanted == path and next(calls) == 0:
            vanish()
        return original(wanted)

    store.document = document  # type: ignore[method-assign,assignment]
    assert dedup(store).run(EVENT, SUFFIX, ok).kind is OutcomeKind.RAN


def test_an_owner_whose_lease_an_operator_released_still_records_its_outcome() -> None:
    """`dedup release` during the run: the record is still the owner's (its token), so "sent"
    is written over what is there now."""
    store = Store()
    path = store.path(KEY)

    def release(delivery: Any) -> None:
        document = store.document(path)
        assert document.data is not None
        store.put(path, {**document.data, Field.LEASE_STARTED_AT: None})

    assert dedup(store).run(EVENT, SUFFIX, release).kind is OutcomeKind.RAN
    assert store.record is not None
    assert store.record.state is State.SENT


def test_a_claim_that_took_the_whole_budget_gives_the_lease_back_unstarted() -> None:
    """The claim's write answered only after the time budget (a 1 s function timeout) ended:
    the handler does not start, the lease and the attempt it counted are given back, and the
    delivery answers `BudgetSpent`, retryable; the next delivery runs it as attempt 1."""
    store = Store()
    store.faults = on_commit({1}, lambda: time.sleep(1.0))
    config = DedupConfig(function_timeout_seconds=1, lease_seconds=60, cache_size=0)
    called: list[int] = []
    with pytest.raises(BudgetSpent, match="handler"):
        Deduplicator(config, records=store).run(EVENT, SUFFIX, lambda d: called.append(d.attempt))
    assert called == []
    record = store.record
    assert record is not None
    assert (record.state, record.has_lease, record.attempts) == (State.IN_PROGRESS, False, 0)
    store.faults = lambda method, n: Fault.PASS
    assert dedup(store).run(EVENT, SUFFIX, lambda d: called.append(d.attempt)).attempt == 1
    assert called == [1]


# --- transaction and write-only modes --------------------------------------------------------

ATOMIC = [Mode.TRANSACTION, Mode.WRITE_ONLY]


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_commit_refused_as_invalid_once_is_tried_fresh(mode: Mode) -> None:
    """An expired transaction is refused as InvalidArgument: one fresh attempt commits."""
    store = Store()
    store.faults = commits({1}, Fault.INVALID)
    assert dedup(store).run(EVENT, SUFFIX, ok, mode=mode).kind is OutcomeKind.RAN


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_commit_refused_as_invalid_twice_is_final(mode: Mode) -> None:
    """Refused as invalid again after a fresh attempt: the data is bad, the record is failed."""
    store = Store()
    store.faults = commits({1, 2}, Fault.INVALID)
    assert dedup(store).run(EVENT, SUFFIX, ok, mode=mode).kind is OutcomeKind.FAILED
    assert store.record is not None
    assert store.record.state is State.FAILED


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_handler_refused_as_invalid_is_tried_once_more_then_failed(mode: Mode) -> None:
    """The handler's own InvalidArgument gets one fresh attempt, then the record is failed."""
    store = Store()
    calls: list[int] = []

    def invalid(delivery: Any) -> None:
        calls.append(1)
        raise api_exceptions.InvalidArgument("a value is too large")

    assert dedup(store).run(EVENT, SUFFIX, invalid, mode=mode).kind is OutcomeKind.FAILED
    assert len(calls) == 2


@pytest.mark.parametrize("mode", ATOMIC)
def test_an_unknown_commit_error_is_raised_as_it_is(mode: Mode) -> None:
    """A commit that fails with something that is neither Firestore's nor the handler's is
    not interpreted: it propagates."""
    store = Store()

    def broken(writes: Any) -> Any:
        raise RuntimeError("the store's own bug")

    store.commit = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="own bug"):
        dedup(store).run(EVENT, SUFFIX, ok, mode=mode)


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_failed_attempt_whose_record_write_was_lost_is_recognised(mode: Mode) -> None:
    """Recording a failed attempt landed but its answer was lost: the delivery finds its own
    token and reports the attempt once."""
    store = Store()
    store.faults = commits({1}, Fault.LOSE_RESPONSE)

    def failing(delivery: Any) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        dedup(store).run(EVENT, SUFFIX, failing, mode=mode)
    assert store.record is not None
    assert (store.record.state, store.record.attempts) == (State.IN_PROGRESS, 1)


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_failed_attempt_after_another_delivery_finished_is_a_duplicate(mode: Mode) -> None:
    """Another instance completed the event while this attempt failed: nothing is counted,
    the delivery is a duplicate."""
    store = Store()

    def failing(delivery: Any) -> None:
        assert dedup(store).run(EVENT, SUFFIX, ok, mode=mode).kind is OutcomeKind.RAN
        raise RuntimeError("boom")

    assert dedup(store).run(EVENT, SUFFIX, failing, mode=mode).kind is OutcomeKind.DUPLICATE
    assert store.record is not None
    assert store.record.state is State.SENT


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_failed_attempt_under_another_live_lease_is_not_counted(mode: Mode) -> None:
    """A lease-mode delivery of the key took a live lease meanwhile (a deploy changing the
    mode): the failed attempt is not written over it; the error goes back to the platform."""
    store = Store()

    def failing(delivery: Any) -> None:
        store.seed(mode=Mode.LEASE, started=datetime.now(UTC))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        dedup(store).run(EVENT, SUFFIX, failing, mode=mode)
    assert store.record is not None
    assert store.record.owner == "someone-else"


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_failed_attempt_on_a_record_that_keeps_changing_is_left_to_a_retry(
    mode: Mode,
) -> None:
    """A record that changes before every write of the failed attempt: after a bounded
    number of rounds the error goes back to the platform, nothing counted."""
    store = Store()
    store.seed(mode=mode, started=None)
    path = store.path(KEY)
    document = store.document(path)
    assert document.data is not None
    store.put(path, {**document.data, Field.LEASE_STARTED_AT: None})  # released: runnable
    store.faults = on_commit(None, store.touch)

    def failing(delivery: Any) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        dedup(store).run(EVENT, SUFFIX, failing, mode=mode)
    assert store.record is not None
    assert store.record.attempts == 1


def test_a_transaction_commit_over_a_record_whose_response_was_lost_is_ours() -> None:
    """A transaction-mode retry of a released record commits, the answer is lost: the marker
    carries the attempt's token, so it ran, once."""
    store = Store()
    store.seed(mode=Mode.TRANSACTION)
    path = store.path(KEY)
    document = store.document(path)
    assert document.data is not None
    store.put(path, {**document.data, Field.LEASE_STARTED_AT: None})  # released
    store.faults = commits({1}, Fault.LOSE_RESPONSE)
    outcome = dedup(store).run(EVENT, SUFFIX, ok, mode=Mode.TRANSACTION)
    assert (outcome.kind, outcome.attempt) == (OutcomeKind.RAN, 2)


def test_contention_on_the_handlers_reads_is_retried_not_counted() -> None:
    """The handler's transactional read is aborted (contention): the transaction is run
    again, and no attempt is counted."""
    store = Store()
    calls: list[int] = []

    def contended(delivery: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise api_exceptions.Aborted("lock timeout on the handler's read")

    outcome = dedup(store).run(EVENT, SUFFIX, contended, mode=Mode.TRANSACTION)
    assert (outcome.kind, outcome.attempt, len(calls)) == (OutcomeKind.RAN, 1, 2)


@pytest.mark.parametrize("mode", list(Mode))
def test_a_record_of_another_event_at_the_key_is_refused(mode: Mode) -> None:
    """A record written for another event at this key is never taken for this one's."""
    store = Store()
    store.put(store.path(KEY), {Field.EVENT_ID: "other", Field.SUFFIX: SUFFIX, Field.STATE: "sent"})
    with pytest.raises(KeyCollision):
        dedup(store).run(EVENT, SUFFIX, ok, mode=mode)


def test_every_step_is_reported_to_the_hook() -> None:
    """The step hook sees every point a delivery passes, in order (crash tests stop a process
    at one), a durable step's three included."""
    store = Store()
    deduplicator = dedup(store)
    steps: list[str] = []
    deduplicator.on_step(lambda step, key: steps.append(step.value))

    def one_step(delivery: Delivery) -> None:
        delivery.step("one", lambda: 1)

    deduplicator.run(EVENT, SUFFIX, one_step)
    assert steps == [
        Step.BEFORE_CLAIM,
        Step.AFTER_CLAIM,
        Step.BEFORE_STEP,
        Step.AFTER_STEP_CALL,
        Step.AFTER_STEP_RECORD,
        Step.AFTER_EFFECT,
        Step.AFTER_MARK,
    ]
    assert set(steps) == set(Step)
